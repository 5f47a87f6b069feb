//! Label and field selectors: parse, validate (with the apiserver's messages), match.
//! Independent of the simulator so the gateway cache can reuse them.

pub mod field;
pub mod label;
pub mod validation;

pub use field::FieldSelector;
pub use label::LabelSelector;
