//! JSON as Go's `encoding/json` writes it, where its bytes differ from serde_json's.
//!
//! - Strings: `<`, `>` and `&` are escaped as `\u003c`, `\u003e`, `\u0026`, and U+2028 /
//!   U+2029 as `\u2028` / `\u2029` (`json.Marshal`'s default HTML escaping).
//! - `json.Marshal` of a `map[string]interface{}` sorts the keys (unstructured content is
//!   such maps all the way down).
//! - `json.MarshalIndent(v, "", "  ")` has serde_json's pretty layout (two spaces,
//!   `"key": value`, `{}` and `[]` for empty containers) and no trailing newline.
//! - float64: decimal notation for 1e-6 ≤ |f| < 1e21, an integral value without a
//!   fraction (`3`, not `3.0`), else an exponent with a sign (`1e+21`, `1e-7`).
//!
//! Used where watchgate writes bytes kube-apiserver writes through `encoding/json` and
//! clients or differential tests compare them: the raw-JSON 406 Status
//! (`responsewriters.WriteRawJSON`) and JSONPath cells that print maps and lists.

use serde_json::Value;

/// Applies Go's HTML escaping to serialized JSON. Only string contents can hold these
/// characters, so a byte-level pass over valid JSON is exact.
pub fn escape_html(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'<' => out.extend_from_slice(b"\\u003c"),
            b'>' => out.extend_from_slice(b"\\u003e"),
            b'&' => out.extend_from_slice(b"\\u0026"),
            // U+2028 and U+2029 are E2 80 A8 / E2 80 A9 in UTF-8.
            0xE2 if json.get(i + 1) == Some(&0x80)
                && matches!(json.get(i + 2), Some(0xA8 | 0xA9)) =>
            {
                out.extend_from_slice(if json[i + 2] == 0xA8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// `json.MarshalIndent(v, "", "  ")`: keys in the value's order (a Go struct's field order
/// is the caller's to keep), no trailing newline.
pub fn marshal_indent(v: &Value) -> Vec<u8> {
    escape_html(&serde_json::to_vec_pretty(v).unwrap_or_default())
}

/// `json.Marshal` of unstructured content: compact, map keys sorted at every level.
pub fn marshal_sorted(v: &Value) -> String {
    let mut out = String::new();
    write_sorted(&mut out, v);
    String::from_utf8(escape_html(out.as_bytes())).unwrap_or(out)
}

fn write_sorted(out: &mut String, v: &Value) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_sorted(out, &m[k]);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_sorted(out, x);
            }
            out.push(']');
        }
        Value::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) => out.push_str(&float(f)),
            None => out.push_str(&n.to_string()),
        },
        other => out.push_str(&other.to_string()),
    }
}

/// A float64 as `encoding/json` writes it (`floatEncoder`: 'f' format between 1e-6 and
/// 1e21, else 'e' with the exponent's leading zero dropped for negative exponents).
pub fn float(f: f64) -> String {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        // Rust's Display is the shortest round-trip decimal without an exponent, like
        // strconv.FormatFloat(f, 'f', -1, 64).
        return format!("{f}");
    }
    // `{:e}` is the shortest mantissa: `1e21`, `1.5e-7`; Go writes `1e+21`, `1.5e-07`,
    // then cleans `e-07` to `e-7`.
    let s = format!("{f:e}");
    match s.split_once('e') {
        Some((m, e)) if e.starts_with('-') => format!("{m}e{e}"),
        Some((m, e)) => format!("{m}e+{e}"),
        None => s,
    }
}

/// `fmt.Sprint(f)` of a float64: `%v` is `strconv.FormatFloat(f, 'g', -1, 64)`, which
/// takes the shortest digits and switches to an exponent (at least two digits, with a
/// sign) when the decimal exponent is < -4 or ≥ 6: `123456`, `1e+06`, `1e-05`.
pub fn sprint_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return format!("{f}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn html_characters_and_line_separators_are_escaped() {
        let v = json!({"m": "a<b>&c\u{2028}d\u{2029}"});
        assert_eq!(
            String::from_utf8(escape_html(&serde_json::to_vec(&v).unwrap())).unwrap(),
            r#"{"m":"a\u003cb\u003e\u0026c\u2028d\u2029"}"#
        );
    }

    #[test]
    fn maps_are_sorted_like_go_maps() {
        let v = json!({"b": 1, "a": {"d": [1.5, 2.0, "x"], "c": null}});
        assert_eq!(
            marshal_sorted(&v),
            r#"{"a":{"c":null,"d":[1.5,2,"x"]},"b":1}"#
        );
    }

    #[test]
    fn floats_as_encoding_json_writes_them() {
        assert_eq!(float(3.0), "3");
        assert_eq!(float(0.1), "0.1");
        assert_eq!(float(1e20), "100000000000000000000");
        assert_eq!(float(1e21), "1e+21");
        assert_eq!(float(1.5e-7), "1.5e-7");
        assert_eq!(float(-2.5), "-2.5");
    }

    #[test]
    fn floats_as_fmt_sprint_writes_them() {
        assert_eq!(sprint_float(3.0), "3");
        assert_eq!(sprint_float(1.5), "1.5");
        assert_eq!(sprint_float(1e6), "1e+06");
        assert_eq!(sprint_float(123456.0), "123456");
        assert_eq!(sprint_float(0.0001), "0.0001");
        assert_eq!(sprint_float(0.00001), "1e-05");
    }
}
