//! Go's `strconv.ParseUint(s, 10, 64)`, the parse kube-apiserver applies to every
//! resourceVersion: a leaf, so that the object model (which reads an object's
//! resourceVersion) and the request (which reads the query's) share it without one
//! importing the other.

/// Why `strconv.ParseUint` refused a string (its `NumError.Err` text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UintError {
    #[error("invalid syntax")]
    Syntax,
    #[error("value out of range")]
    Range,
}

/// `strconv.ParseUint(s, 10, 64)`: ASCII digits only. Rust's `u64::from_str` also takes a
/// leading `+`, which Go refuses: `resourceVersion=+5` is the apiserver's 400, and was
/// served from the cache before this (found by tests/bad_input_properties.rs).
pub fn parse_uint(s: &str) -> Result<u64, UintError> {
    if s.starts_with('+') {
        return Err(UintError::Syntax);
    }
    s.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => UintError::Range,
        _ => UintError::Syntax,
    })
}
