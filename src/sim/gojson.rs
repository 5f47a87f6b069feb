//! Go `encoding/json` syntax error texts.
//!
//! The apiserver's decode errors embed the message of Go's JSON scanner
//! (`encoding/json/scanner.go`): `invalid character 'x' looking for beginning of value`,
//! `unexpected end of JSON input`, … Clients and our differential tests compare these
//! texts, so instead of serde_json's wording we run a tiny port of Go's scanner state
//! machine over the body when serde_json rejects it.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ctx {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

/// Go's `quoteChar`.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        b'\n' => "'\\n'".to_string(),
        b'\r' => "'\\r'".to_string(),
        b'\t' => "'\\t'".to_string(),
        c if c < 0x20 || c == 0x7f => format!("'\\x{c:02x}'"),
        c if c >= 0x80 => "'\\ufffd'".to_string(),
        c => format!("'{}'", c as char),
    }
}

fn err(c: u8, context: &str) -> String {
    format!("invalid character {} {}", quote_char(c), context)
}

const EOF: &str = "unexpected end of JSON input";

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// The error Go's `json.Unmarshal` (its `checkValid` pass) reports for `data`, or None
/// when `data` is syntactically valid JSON.
pub fn syntax_error(data: &[u8]) -> Option<String> {
    let mut stack: Vec<Ctx> = Vec::new();
    let mut i = 0usize;
    let n = data.len();
    // Each loop iteration parses one value, then the punctuation after it.
    'value: loop {
        // stateBeginValue (skipping space).
        while i < n && is_space(data[i]) {
            i += 1;
        }
        if i >= n {
            return Some(EOF.into());
        }
        let c = data[i];
        i += 1;
        match c {
            b'{' => {
                // stateBeginStringOrEmpty
                while i < n && is_space(data[i]) {
                    i += 1;
                }
                if i >= n {
                    return Some(EOF.into());
                }
                if data[i] == b'}' {
                    i += 1;
                } else if data[i] == b'"' {
                    i += 1;
                    stack.push(Ctx::ObjectKey);
                    if let Some(e) = scan_string(data, &mut i) {
                        return Some(e);
                    }
                    // After the key: stateEndValue in ObjectKey → expect ':'.
                    match after_key(data, &mut i, &mut stack) {
                        Ok(()) => continue 'value,
                        Err(e) => return Some(e),
                    }
                } else {
                    return Some(err(data[i], "looking for beginning of object key string"));
                }
            }
            b'[' => {
                while i < n && is_space(data[i]) {
                    i += 1;
                }
                if i >= n {
                    return Some(EOF.into());
                }
                if data[i] == b']' {
                    i += 1;
                } else {
                    stack.push(Ctx::ArrayValue);
                    continue 'value;
                }
            }
            b'"' => {
                if let Some(e) = scan_string(data, &mut i) {
                    return Some(e);
                }
            }
            b'-' | b'0'..=b'9' => {
                if let Some(e) = scan_number(data, &mut i, c) {
                    return Some(e);
                }
            }
            b't' => {
                if let Some(e) = scan_literal(data, &mut i, "true") {
                    return Some(e);
                }
            }
            b'f' => {
                if let Some(e) = scan_literal(data, &mut i, "false") {
                    return Some(e);
                }
            }
            b'n' => {
                if let Some(e) = scan_literal(data, &mut i, "null") {
                    return Some(e);
                }
            }
            other => return Some(err(other, "looking for beginning of value")),
        }
        // stateEndValue: the value is complete; look at what follows.
        loop {
            while i < n && is_space(data[i]) {
                i += 1;
            }
            match stack.last().copied() {
                None => {
                    return if i < n {
                        Some(err(data[i], "after top-level value"))
                    } else {
                        None
                    };
                }
                Some(ctx) => {
                    if i >= n {
                        return Some(EOF.into());
                    }
                    let c = data[i];
                    i += 1;
                    match (ctx, c) {
                        (Ctx::ObjectValue, b',') => {
                            while i < n && is_space(data[i]) {
                                i += 1;
                            }
                            if i >= n {
                                return Some(EOF.into());
                            }
                            if data[i] != b'"' {
                                return Some(err(
                                    data[i],
                                    "looking for beginning of object key string",
                                ));
                            }
                            i += 1;
                            *stack.last_mut().expect("in object") = Ctx::ObjectKey;
                            if let Some(e) = scan_string(data, &mut i) {
                                return Some(e);
                            }
                            match after_key(data, &mut i, &mut stack) {
                                Ok(()) => continue 'value,
                                Err(e) => return Some(e),
                            }
                        }
                        (Ctx::ObjectValue, b'}') => {
                            stack.pop();
                        }
                        (Ctx::ObjectValue, c) => {
                            return Some(err(c, "after object key:value pair"))
                        }
                        (Ctx::ArrayValue, b',') => continue 'value,
                        (Ctx::ArrayValue, b']') => {
                            stack.pop();
                        }
                        (Ctx::ArrayValue, c) => return Some(err(c, "after array element")),
                        (Ctx::ObjectKey, c) => return Some(err(c, "after object key")),
                    }
                }
            }
        }
    }
}

/// After an object key: expect ':' then a value (the caller continues with the value).
fn after_key(data: &[u8], i: &mut usize, stack: &mut [Ctx]) -> Result<(), String> {
    let n = data.len();
    while *i < n && is_space(data[*i]) {
        *i += 1;
    }
    if *i >= n {
        return Err(EOF.into());
    }
    if data[*i] != b':' {
        return Err(err(data[*i], "after object key"));
    }
    *i += 1;
    if let Some(last) = stack.last_mut() {
        *last = Ctx::ObjectValue;
    }
    Ok(())
}

/// Scans the rest of a string after its opening quote.
fn scan_string(data: &[u8], i: &mut usize) -> Option<String> {
    let n = data.len();
    while *i < n {
        let c = data[*i];
        *i += 1;
        match c {
            b'"' => return None,
            b'\\' => {
                if *i >= n {
                    return Some(EOF.into());
                }
                let e = data[*i];
                *i += 1;
                match e {
                    b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {}
                    b'u' => {
                        for _ in 0..4 {
                            if *i >= n {
                                return Some(EOF.into());
                            }
                            let h = data[*i];
                            *i += 1;
                            if !h.is_ascii_hexdigit() {
                                return Some(err(h, "in \\u hexadecimal character escape"));
                            }
                        }
                    }
                    other => return Some(err(other, "in string escape code")),
                }
            }
            c if c < 0x20 => return Some(err(c, "in string literal")),
            _ => {}
        }
    }
    Some(EOF.into())
}

fn scan_number(data: &[u8], i: &mut usize, first: u8) -> Option<String> {
    let n = data.len();
    let peek = |i: usize| if i < n { Some(data[i]) } else { None };
    if first == b'-' {
        match peek(*i) {
            None => return Some(EOF.into()),
            Some(b'0'..=b'9') => {
                let d = data[*i];
                *i += 1;
                if d != b'0' {
                    while matches!(peek(*i), Some(b'0'..=b'9')) {
                        *i += 1;
                    }
                }
            }
            Some(c) => return Some(err(c, "in numeric literal")),
        }
    } else if first != b'0' {
        while matches!(peek(*i), Some(b'0'..=b'9')) {
            *i += 1;
        }
    }
    if peek(*i) == Some(b'.') {
        *i += 1;
        match peek(*i) {
            None => return Some(EOF.into()),
            Some(b'0'..=b'9') => {
                while matches!(peek(*i), Some(b'0'..=b'9')) {
                    *i += 1;
                }
            }
            Some(c) => return Some(err(c, "after decimal point in numeric literal")),
        }
    }
    if matches!(peek(*i), Some(b'e' | b'E')) {
        *i += 1;
        if matches!(peek(*i), Some(b'+' | b'-')) {
            *i += 1;
        }
        match peek(*i) {
            None => return Some(EOF.into()),
            Some(b'0'..=b'9') => {
                while matches!(peek(*i), Some(b'0'..=b'9')) {
                    *i += 1;
                }
            }
            Some(c) => return Some(err(c, "in exponent of numeric literal")),
        }
    }
    None
}

fn scan_literal(data: &[u8], i: &mut usize, lit: &str) -> Option<String> {
    for expected in lit.bytes().skip(1) {
        if *i >= data.len() {
            return Some(EOF.into());
        }
        let c = data[*i];
        *i += 1;
        if c != expected {
            return Some(err(
                c,
                &format!("in literal {lit} (expecting '{}')", expected as char),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::syntax_error;

    #[test]
    fn go_messages() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{}", None),
            (" [1, 2.5e3, \"a\\u00e9\", true, null, {\"a\":{}}] ", None),
            ("", Some("unexpected end of JSON input")),
            ("{", Some("unexpected end of JSON input")),
            (
                "{not json",
                Some("invalid character 'n' looking for beginning of object key string"),
            ),
            (
                "not json",
                Some("invalid character 'o' in literal null (expecting 'u')"),
            ),
            (
                "hello",
                Some("invalid character 'h' looking for beginning of value"),
            ),
            ("{\"a\" 1}", Some("invalid character '1' after object key")),
            (
                "{\"a\":1 \"b\":2}",
                Some("invalid character '\"' after object key:value pair"),
            ),
            ("[1 2]", Some("invalid character '2' after array element")),
            ("{} x", Some("invalid character 'x' after top-level value")),
            (
                "{\"a\":-x}",
                Some("invalid character 'x' in numeric literal"),
            ),
            (
                "{\"a\":1.}",
                Some("invalid character '}' after decimal point in numeric literal"),
            ),
            (
                "{\"a\":01}",
                Some("invalid character '1' after object key:value pair"),
            ),
            (
                "[\"\\q\"]",
                Some("invalid character 'q' in string escape code"),
            ),
            (
                "{\"a\":1,}",
                Some("invalid character '}' looking for beginning of object key string"),
            ),
            (
                "[1,]",
                Some("invalid character ']' looking for beginning of value"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(syntax_error(input.as_bytes()).as_deref(), *want, "{input}");
        }
    }
}
