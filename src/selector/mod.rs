//! Label and field selectors: parse, validate (with the apiserver's messages), match.

pub mod field;
pub mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;
