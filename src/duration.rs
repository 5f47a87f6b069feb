//! Durations the way Go flags spell them (`30s`, `500ms`, `2m`, `1h`, or bare seconds):
//! the gateway's duration flags and a request's `?timeout=`. A leaf, so that the request
//! parser need not reach into the configuration for it. And deadlines that cannot
//! overflow ([`deadline_after`]), for every timer a client or a flag sets.

use std::time::Duration;

use tokio::time::Instant;

/// A duration flag (or `?timeout=`) that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("invalid duration unit in {0:?} (use ms, s, m or h)")]
    Unit(String),
}

/// Durations the way Go flags spell them: `30s`, `500ms`, `2m`, `1h`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let invalid = || DurationError::Invalid(s.to_string());
    let value: f64 = num.parse().map_err(|_| invalid())?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(DurationError::Unit(s.to_string())),
    };
    // `try_`: a duration past what `Duration` holds is an error, not a panic.
    Duration::try_from_secs_f64(secs).map_err(|_| invalid())
}

/// Where a deadline that the clock cannot hold is put instead: tokio's own "far future".
const FAR_FUTURE: Duration = Duration::from_secs(86400 * 365 * 30);

/// `now + d`, which cannot panic: `Instant + Duration` panics on overflow, and `d` comes
/// from a client (`timeoutSeconds` of up to about 292 years, see
/// `ListOptions::watch_timeout`) or a flag. A deadline the clock cannot hold is never
/// reached anyway.
pub fn deadline_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}
