//! Time and duration formatting shared by the printers: apimachinery's
//! `duration.HumanDuration` and the printers' `translateTimestampSince` (`metav1.Time`
//! itself is `crate::timestamp`).

use jiff::Timestamp;

pub use crate::timestamp::{format_time, parse_time};

/// Whole seconds from `then` to `now`, truncated toward zero like `int(d.Seconds())`.
pub fn seconds_between(then: Timestamp, now: Timestamp) -> i64 {
    now.duration_since(then).as_secs()
}

/// `translateTimestampSince` / `ConvertToHumanReadableDateType`: `<unknown>` for a missing
/// (zero) timestamp, else the human duration since it.
pub fn since(ts: &str, now: Timestamp) -> String {
    match parse_time(ts) {
        Some(t) => human_duration(seconds_between(t, now)),
        None => "<unknown>".into(),
    }
}

/// `duration.HumanDuration` from k8s.io/apimachinery, for a duration in whole seconds.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_apimachinery() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
        assert_eq!(human_duration(-1), "0s");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn rfc3339_is_parsed_as_go_parses_it() {
        let t = parse_time("2024-05-01T10:00:00Z").unwrap();
        assert_eq!(format_time(t), "2024-05-01T10:00:00Z");
        let t = parse_time("2024-05-01T12:00:00.25+02:00").unwrap();
        assert_eq!(format_time(t), "2024-05-01T10:00:00Z");
        for bad in [
            "",
            "null",
            "2024-05-01",
            "2024-05-01 10:00:00Z",
            "2024-05-01t10:00:00z",
            "2024-05-01T10:00:00",
        ] {
            assert!(parse_time(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn durations_truncate_toward_zero() {
        let then = parse_time("2024-05-01T10:00:00Z").unwrap();
        let now = parse_time("2024-05-01T10:00:01.9Z").unwrap();
        assert_eq!(seconds_between(then, now), 1);
        assert_eq!(seconds_between(now, then), -1);
        assert_eq!(since("2024-05-01T10:00:00Z", now), "1s");
        assert_eq!(since("", now), "<unknown>");
    }
}
