//! STUB owned by sim-api: object generators, seeding and churn.
//! Contract: `seed(&sim)` runs synchronously inside `start()` (before the listener
//! serves); `spawn_churn(sim)` starts a background task if `cfg.churn_per_sec > 0` and
//! must stop when `sim.shutdown` flips.

use std::sync::Arc;

use crate::sim::Sim;

pub fn seed(_sim: &Arc<Sim>) {}

pub fn spawn_churn(_sim: Arc<Sim>) {}
