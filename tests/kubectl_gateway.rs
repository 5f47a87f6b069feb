//! kubectl 1.37 through the gateway, with the simulator as upstream (issue 3, "What must
//! be shown" 1 and 4).
//!
//! The steps live in tests/support/kubectl_scenarios.rs and run unchanged in
//! tests/kubectl_sim.rs directly against the simulator, so both paths are held to the same behaviour.

mod support;

kubectl_tests!(support::Env::gateway());
