//! The watch cache: per resource type, one upstream list+watch feeding an in-memory store
//! from which RV="0" and NotOlderThan reads are answered. See docs/cache.md.

pub mod budget;
pub mod consistency;
pub mod demand;
pub mod discovery;
pub mod events;
pub mod export;
pub mod forward;
pub mod fresh;
pub mod identity;
pub mod list_page;
pub mod read_at;
pub mod reflector;
pub mod registry;
pub mod snapshots;
pub mod store;
pub mod token_form;
pub mod warm;
pub mod writes;

#[cfg(test)]
mod fanout_tests;
