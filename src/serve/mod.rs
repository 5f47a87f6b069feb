//! Serving reads from the cache and the fan-out: the routing decision (`route`: the
//! parsed request and the registry's knowledge of its resource to read, watch or forward
//! with a reason) and the two handlers it dispatches to (`read`: gets and lists;
//! `watch`: watches). Above `cache` and `watch`, below the tower stack (`stack::route`).

pub mod read;
pub mod route;
pub mod watch;
