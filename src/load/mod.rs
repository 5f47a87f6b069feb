//! `watchgate load`: a load generator for any apiserver-compatible URL (issue 7).
//!
//! A run: create the writer's pool of pods; connect the watchers (all of them, before the
//! clock starts); apply writes at a fixed rate for `--duration`, each stamped with its
//! wall-clock time; let every watcher receive the last write (the drain); check every
//! watcher's stream against the writer's log; report. Any gap, duplicate or reordering
//! fails the run (non-zero exit): a fast number from a wrong stream is worthless.
//!
//! Modules: [`args`] (flags), [`plan`] (scenarios → watcher groups and list workers),
//! [`target`] (HTTP/1.1, HTTP/2, kubeconfig), [`pool`] and [`writer`] (the churn),
//! [`watcher`] + [`records`] + [`scan`] + [`checker`] (streams), [`lister`] (lists), [`stats`],
//! [`probe`] (the target's CPU and RSS), [`report`] and [`plot`] (output), [`harness`] (what
//! every scenario's run shares); [`run`] (the watch and list scenarios; it dispatches the
//! others), [`soak`] (the
//! fault soak) and [`herds`] (issue 26's cold herd, quiet large resource and gateway
//! restart), which start their own simulators and gateway ([`cluster`], [`track`]).

pub mod args;
pub mod checker;
pub mod cluster;
pub mod encoding;
pub mod harness;
pub mod herds;
pub mod lister;
pub mod plan;
pub mod plot;
pub mod pool;
pub mod probe;
pub mod proto_scan;
pub mod records;
pub mod report;
pub mod run;
pub mod scan;
pub mod soak;
pub mod stats;
pub mod target;
pub mod track;
pub mod watcher;
pub mod writer;

pub use args::{parse, LoadArgs, Scenario, SoakArgs};
pub use plan::Plan;
pub use report::Summary;
pub use run::{execute, run};
