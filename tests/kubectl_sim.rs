//! kubectl 1.37 against the simulator directly (issue 2, "What must be shown" 3).
//!
//! The steps live in tests/support/kubectl_scenarios.rs and run unchanged in
//! tests/kubectl_gateway.rs through the gateway, so both paths are held to the same behaviour.

mod support;

kubectl_tests!(support::Env::sim());
