//! `metav1.Time` in JSON: RFC 3339 parsed as Go's `time.Parse` does and written in UTC
//! whole seconds. A leaf: the printers (`table`) and `PartialObjectMetadata`
//! (`partial_metadata`, which the printers embed) both need it.

use jiff::Timestamp;

/// `time.Parse(time.RFC3339, s)`: `YYYY-MM-DDTHH:MM:SS`, an optional fraction, then `Z`
/// or `±hh:mm` (Go accepts the fraction although the layout has none). Anything else —
/// lower-case `t`/`z`, a space, a missing zone — is an error, as in Go.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return None;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let zone_ok = match &b[i..] {
        [b'Z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    };
    if !zone_ok {
        return None;
    }
    s.parse::<Timestamp>().ok()
}

/// `metav1.Time` as JSON: RFC 3339 in UTC, whole seconds.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
