//! Field selectors, a port of apimachinery `pkg/fields/selector.go` (`ParseSelector`:
//! `=`, `==`, `!=`, backslash escapes) with its error texts. Which labels a type supports
//! is the caller's business (see `sim::list::check_field_labels`).

use serde_json::Value;

/// One term: `field=value` (`==` too) or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub field: String,
    pub equals: bool,
    pub value: String,
}

/// A parsed field selector. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Sorted by their source text, as `parseSelector` sorts the parts.
    pub terms: Vec<Term>,
}

/// Splits on commas not escaped by a backslash (`splitTerms`).
fn split_terms(s: &str) -> Vec<String> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    terms.push(cur);
    terms
}

/// `splitTerm`: the first operator by position, trying `!=`, `==`, `=` at each index.
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

/// `UnescapeValue`.
fn unescape(s: &str) -> Result<String, String> {
    if !s.contains(['\\', '=', ',']) {
        return Ok(s.to_string());
    }
    let mut out = String::new();
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    ))
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {c}"
                ))
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

impl FieldSelector {
    /// `fields.ParseSelector`. The error text is kube-apiserver's 400 message.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut terms = Vec::new();
        for part in &parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let value = unescape(rhs)?;
            terms.push(Term {
                field: lhs.to_string(),
                equals: op != "!=",
                value,
            });
        }
        Ok(Self { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value an `=`/`==` term requires for `field`, if any (e.g. metadata.name).
    pub fn requires_exact(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.equals)
            .map(|t| t.value.as_str())
    }

    /// Matches using `value_of(field)` to read each field's selectable value.
    pub fn matches_with(&self, value_of: impl Fn(&str) -> String) -> bool {
        self.terms
            .iter()
            .all(|t| (value_of(&t.field) == t.value) == t.equals)
    }
}

/// The string value of a dot-separated JSON path, formatted like the apiserver's field
/// sets (strings as-is, booleans as "true"/"false", missing as "").
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_terms_and_errors() {
        let s = FieldSelector::parse("status.phase!=Running,metadata.name==a\\,b").unwrap();
        assert_eq!(s.terms.len(), 2);
        assert_eq!(s.terms[0].field, "metadata.name");
        assert_eq!(s.terms[0].value, "a,b");
        assert!(!s.terms[1].equals);
        assert_eq!(
            FieldSelector::parse("foo").unwrap_err(),
            "invalid selector: 'foo'; can't understand 'foo'"
        );
        assert_eq!(
            FieldSelector::parse("a=b=c").unwrap_err(),
            "invalid field selector: unescaped character in value: ="
        );
        assert!(FieldSelector::parse("").unwrap().is_empty());
    }
}
