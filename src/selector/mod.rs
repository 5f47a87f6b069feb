//! Label and field selectors: parse, validate (with the apiserver's messages), match.
