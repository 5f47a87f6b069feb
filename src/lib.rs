//! watchgate: a caching reverse proxy and watch fan-out gateway for the Kubernetes API.
//!
//! Clients talk to watchgate as to kube-apiserver. Every request is parsed into a typed
//! request (`request::Parsed`), then
//! answered from a per-resource cache (gets and lists, at every resourceVersion semantics
//! the cache can prove, consistent reads included), streamed from the cache's watch history
//! (watches: one upstream watch per resource however many clients), or forwarded upstream
//! unchanged. See docs/architecture.md. The modules, grouped bottom-up as the data flows
//! (wire formats, then the watch fan-out, the cache, the serving stack, the server). The
//! imports follow the groups: `tests/structure.rs` forbids import cycles between folders
//! and new ones between files.
//!
//! **Wire formats and the object model**
//! - [`apipath`]: how kube-apiserver reads a request path, before any handler sees it.
//! - [`request`]: path, query and headers → a typed API request.
//! - [`status`]: `metav1.Status`, the one place errors become API responses.
//! - [`error_response`]: how kube-apiserver writes an error Status (JSON or protobuf).
//! - [`negotiate`]: Accept-header negotiation: which encoding and which conversion.
//! - [`selector`]: label and field selectors: parse, validate, match.
//! - [`model`]: the object model: a cached object (the upstream's bytes and the fields read
//!   once), a snapshot of a resource at one resourceVersion, a resource type.
//! - [`codec`]: JSON framing of lists and watch events from cached bytes; continue tokens.
//! - [`proto`]: JSON ↔ protobuf for the built-in kinds, byte-exact with kube-apiserver.
//! - [`table`]: `meta.k8s.io` Tables rendered from objects' JSON.
//! - [`partial_metadata`]: PartialObjectMetadata(List) from objects' JSON.
//! - [`bookmark`]: the object of a BOOKMARK watch event.
//! - [`body`]: the one request and response body type.
//! - [`duration`]: durations as Go flags spell them (flags, `?timeout=`).
//! - [`strconv`]: Go's `strconv.ParseUint`, the parse of every resourceVersion.
//! - [`timestamp`]: `metav1.Time`, parsed and written as the apiserver does.
//! - [`upgrade`]: taking a connection over after `101 Switching Protocols` (exec,
//!   attach, port-forward), delivered by the server, taken by the proxy and the simulator.
//! - [`drain`]: two-phase graceful shutdown, held by every task that must finish.
//! - [`lane`]: the express lane: a watch's producer writing to its idle connection.
//! - [`listen`]: binding a listener with kube-apiserver's accept queue (herds).
//!
//! **Watch**
//! - [`watch`]: the fan-out: per-resource event history, dispatch to bounded queues,
//!   slow watchers catching up from the history, bookmarks.
//!
//! **Cache**
//! - [`cache`]: per-resource caches fed by one upstream list+watch (reflector, store,
//!   snapshots, freshness proofs, read-your-writes, budgets, consistency checks).
//! - [`serve`]: the routing decision (read, watch or forward, with the reason) and the
//!   handlers that answer gets, lists and watches from the caches.
//!
//! **The serving stack**
//! - [`upstream`]: the apiserver client: kubeconfig or in-cluster, TLS, auth, its own
//!   connection pool over one or several apiservers.
//! - [`proxy`]: forwarding: streamed bodies, hop-by-hop headers, upgrades.
//! - [`auth`]: client authentication, authorization and per-user limits.
//! - [`metrics`]: every Prometheus metric: names, labels, help, scrape-time refresh.
//! - [`stack`]: the request path as a tower stack (parse, ids, metrics, auth, route).
//!
//! **Server**
//! - [`server`]: accept loop, HTTP/1.1 and HTTP/2 serving, TLS, admin listener, drain.
//! - [`config`]: typed, validated flags of `watchgate serve`.
//! - [`logging`]: log format and klog-style verbosity.
//!
//! **The simulator, the load kit and the tools**
//! - [`sim`]: the simulated apiserver (`watchgate sim`) the demo, tests and benches use.
//! - [`load`]: `watchgate load`: load scenarios with every watch stream checked.
//! - [`demo`]: `watchgate demo`: a seeded simulator with the gateway in front of it.

pub mod apipath;
pub mod auth;
pub mod body;
pub mod bookmark;
pub mod cache;
pub mod codec;
pub mod config;
pub mod demo;
pub mod drain;
pub mod duration;
pub mod error_response;
pub mod lane;
pub mod listen;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod negotiate;
pub mod partial_metadata;
pub mod proto;
pub mod proxy;
pub mod request;
pub mod selector;
pub mod serve;
pub mod server;
pub mod sim;
pub mod stack;
pub mod status;
pub mod strconv;
pub mod table;
pub mod timestamp;
pub mod upgrade;
pub mod upstream;
pub mod watch;
