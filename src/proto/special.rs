//! The Kubernetes types whose Go code marshals them by hand, both directions.
//!
//! Sources (k8s.io/apimachinery unless noted):
//! - `metav1.Time` — pkg/apis/meta/v1/time_proto.go: the zero time marshals to an
//!   empty message, any other to `Timestamp{seconds, nanos: 0}` (`ProtoTime` leaves the
//!   nanoseconds out on purpose; both Timestamp fields are Go values, always written),
//!   and `Unmarshal` ignores nanos; JSON (time.go) is RFC 3339 in UTC without
//!   fraction, `null` when zero.
//! - `metav1.MicroTime` — micro_time_proto.go / micro_time.go: the same message, JSON
//!   `2006-01-02T15:04:05.000000Z07:00` in UTC.
//! - `metav1.Duration` — duration.go: `{1: int64 nanoseconds}`, JSON Go's
//!   `time.Duration.String()` / `time.ParseDuration`.
//! - `resource.Quantity` — pkg/api/resource/quantity_proto.go: `{1: String()}`, always
//!   written; JSON the same string (quantity.go `MarshalJSON`).
//! - `intstr.IntOrString` — pkg/util/intstr/intstr.go + generated.pb.go: `{1: type,
//!   2: intVal, 3: strVal}`, all three always written; JSON a number or a string.
//! - `runtime.RawExtension` — pkg/runtime/types.go, extension.go: `{1: raw}` when raw
//!   is non-nil; JSON the raw bytes (`null` when nil).
//! - `metav1.FieldsV1` — pkg/apis/meta/v1/types.go, helper.go: `{1: Raw}`, JSON the raw
//!   bytes.
//! - apiextensions `JSON`, `JSONSchemaPropsOrArray`, `JSONSchemaPropsOrBool`,
//!   `JSONSchemaPropsOrStringArray` — k8s.io/apiextensions-apiserver
//!   pkg/apis/apiextensions/v1/marshal.go and types_jsonschema.go.
//! - `metav1.Verbs` (`[]string` as `{1: repeated string}`) — pkg/apis/meta/v1/types.go.

use super::ProtoError;

/// Parse an RFC 3339 timestamp (what `metav1.Time`/`MicroTime` accept) into Unix
/// seconds and nanoseconds.
pub(crate) fn parse_time(s: &str) -> Result<(i64, i32), ProtoError> {
    let ts: jiff::Timestamp = s
        .parse()
        .map_err(|e| ProtoError::InvalidValue(format!("time {s:?}: {e}")))?;
    Ok((ts.as_second(), ts.subsec_nanosecond()))
}

fn civil(secs: i64, nanos: i32) -> Result<jiff::civil::DateTime, ProtoError> {
    let ts = jiff::Timestamp::new(secs, nanos)
        .map_err(|e| ProtoError::InvalidValue(format!("time {secs}s {nanos}ns: {e}")))?;
    let dt = ts.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    if dt.year() < 0 {
        return Err(ProtoError::InvalidValue(format!(
            "time {secs}s: year out of range"
        )));
    }
    Ok(dt)
}

/// `t.UTC().Format(time.RFC3339)` — whole seconds (Go's layout has no fraction).
pub(crate) fn format_time(secs: i64, nanos: i32) -> Result<String, ProtoError> {
    let d = civil(secs, nanos)?;
    Ok(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        d.year(),
        d.month(),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    ))
}

/// `t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")` (metav1.RFC3339Micro).
pub(crate) fn format_micro_time(secs: i64, nanos: i32) -> Result<String, ProtoError> {
    let d = civil(secs, nanos)?;
    Ok(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        d.year(),
        d.month(),
        d.day(),
        d.hour(),
        d.minute(),
        d.second(),
        d.subsec_nanosecond() / 1000
    ))
}

/// Go's `time.ParseDuration`.
pub(crate) fn parse_duration(s: &str) -> Result<i64, ProtoError> {
    let bad = || ProtoError::InvalidValue(format!("duration {s:?}"));
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int_part = &rest[..int_end];
        rest = &rest[int_end..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let fe = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            frac_part = &r[..fe];
            rest = &r[fe..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        let unit_end = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_end] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_end..];
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| bad())?
        };
        total += int.checked_mul(unit).ok_or_else(bad)?;
        if !frac_part.is_empty() {
            let digits = &frac_part[..frac_part.len().min(20)];
            let f: u128 = digits.parse().map_err(|_| bad())?;
            total += f * unit / 10u128.pow(digits.len() as u32);
        }
        if total > (i64::MAX as u128) + u128::from(neg) {
            return Err(bad());
        }
    }
    Ok(if neg {
        (total as i128).wrapping_neg() as i64
    } else {
        total as i64
    })
}

/// Go's `time.Duration.String()`.
pub(crate) fn format_duration(d: i64) -> String {
    if d == 0 {
        return "0s".into();
    }
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    let frac = |u: u64, prec: u32| -> (String, u64) {
        let p = 10u64.pow(prec);
        let f = u % p;
        if f == 0 {
            return (String::new(), u / p);
        }
        let s = format!("{:0width$}", f, width = prec as usize);
        (format!(".{}", s.trim_end_matches('0')), u / p)
    };
    let mut s = String::new();
    if u < 1_000_000_000 {
        let (unit, prec) = if u < 1_000 {
            ("ns", 0)
        } else if u < 1_000_000 {
            ("µs", 3)
        } else {
            ("ms", 6)
        };
        let (f, whole) = frac(u, prec);
        s.push_str(&format!("{whole}{f}{unit}"));
    } else {
        let (f, secs) = frac(u, 9);
        u = secs;
        let sec_part = format!("{}{f}s", u % 60);
        u /= 60;
        if u > 0 {
            let min_part = format!("{}m", u % 60);
            u /= 60;
            if u > 0 {
                s.push_str(&format!("{u}h"));
            }
            s.push_str(&min_part);
        }
        s.push_str(&sec_part);
    }
    if neg {
        s.insert(0, '-');
    }
    s
}

/// Go's `encoding/json` float64 formatting (`strconv.AppendFloat(b, f, 'f' or 'e', -1,
/// 64)` with the exponent cleaned up). NaN and infinities are errors, as in Go.
pub(crate) fn format_float(f: f64) -> Result<String, ProtoError> {
    if !f.is_finite() {
        return Err(ProtoError::InvalidValue(format!(
            "unsupported float value {f}"
        )));
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is the shortest round-trip mantissa: "1e21", "1.5e-7".
        let s = format!("{f:e}");
        let (mant, exp) = s.split_once('e').expect("exponent");
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        // strconv writes two-digit exponents ("1e-07", "1e+21"); encoding/json cleans
        // "e-0X" to "e-X". Exponents here are >= 21 or <= -7, so this matches.
        return Ok(format!("{mant}e{sign}{}", digits.trim_start_matches('0')));
    }
    Ok(format!("{f}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("2024-05-06T07:08:09Z").unwrap(), (1714979289, 0));
        assert_eq!(format_time(1714979289, 0).unwrap(), "2024-05-06T07:08:09Z");
        assert_eq!(format_time(0, 0).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_time("2024-05-06T09:08:09.123456+02:00").unwrap(),
            (1714979289, 123456000)
        );
        assert_eq!(
            format_micro_time(1714979289, 123456789).unwrap(),
            "2024-05-06T07:08:09.123456Z"
        );
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn durations_like_go() {
        for (d, s) in [
            (0i64, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_000_000, "1ms"),
            (1_500_000_000, "1.5s"),
            (3_600_000_000_000, "1h0m0s"),
            (5_400_000_000_000 + 1, "1h30m0.000000001s"),
            (-90_000_000_000, "-1m30s"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(parse_duration(s).unwrap(), d, "{s}");
        }
        assert_eq!(parse_duration("1h2m").unwrap(), 3_720_000_000_000);
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn floats_like_go() {
        assert_eq!(format_float(1.0).unwrap(), "1");
        assert_eq!(format_float(0.5).unwrap(), "0.5");
        assert_eq!(format_float(1e21).unwrap(), "1e+21");
        assert_eq!(format_float(1.5e-7).unwrap(), "1.5e-7");
        assert_eq!(format_float(123456789.0).unwrap(), "123456789");
        assert!(format_float(f64::NAN).is_err());
    }
}
