//! watchgate: a caching reverse proxy and watch fan-out gateway for the Kubernetes API.
//!
//! The crate is laid out after the boxes of the architecture (see docs/architecture.md):
//! requests enter through [`server`], are parsed once by [`request`], and either go
//! upstream through [`proxy`] or (later) are served from the cache. [`sim`] is the
//! simulated apiserver used by the demo, the tests and the benches. [`negotiate`],
//! [`table`] and [`partial_metadata`] are shared by both: how an answer is negotiated and
//! rendered (Tables, PartialObjectMetadata) the way kube-apiserver does it.

pub mod apipath;
pub mod auth;
pub mod body;
pub mod bookmark;
pub mod cache;
pub mod codec;
pub mod config;
pub mod demo;
pub mod error_response;
pub mod lane;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod negotiate;
pub mod partial_metadata;
pub mod proto;
pub mod proxy;
pub mod request;
pub mod selector;
pub mod server;
pub mod sim;
pub mod stack;
pub mod status;
pub mod table;
pub mod upstream;
pub mod watch;
