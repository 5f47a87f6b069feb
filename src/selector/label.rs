//! Label selectors, a port of apimachinery `pkg/labels/selector.go` (lexer, parser,
//! `NewRequirement` validation, `Matches`) so that error texts match kube-apiserver's
//! 400 answers byte for byte (`unable to parse requirement: ...`, `found '...', expected: ...`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::validation::{go_quote, is_qualified_name, is_valid_label_value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement: key, operator, values (sorted, deduplicated, like Go's sets.String).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
    pub values: Vec<String>,
}

/// A parsed label selector. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Sorted by key, as the Go parser does.
    pub requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn string_to_token(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Go strings are bytes; selectors are ASCII in practice. Non-UTF-8 splits are rebuilt
/// lossily only for messages.
fn lex(s: &str) -> Vec<(Tok, String)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        // Go's lexer treats a NUL byte as end of input.
        if pos >= b.len() || b[pos] == 0 {
            out.push((Tok::End, String::new()));
            return out;
        }
        if is_special(b[pos]) {
            let start = pos;
            let mut last: Option<(Tok, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                let cand = &s[start..=pos];
                if let Some(t) = string_to_token(cand) {
                    last = Some((t, pos + 1));
                } else if last.is_some() {
                    break;
                }
                pos += 1;
            }
            match last {
                Some((t, end)) => {
                    out.push((t, s[start..end].to_string()));
                    pos = end;
                }
                None => {
                    let buf = String::from_utf8_lossy(&b[start..pos]).into_owned();
                    out.push((Tok::Error, format!("error expected: keyword found '{buf}'")));
                }
            }
        } else {
            let start = pos;
            while pos < b.len() && b[pos] != 0 && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let word = String::from_utf8_lossy(&b[start..pos]).into_owned();
            let t = match string_to_token(&word) {
                Some(t) => t,
                None => Tok::Identifier,
            };
            out.push((t, word));
        }
    }
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn adjust(t: Tok, ctx: Ctx) -> Tok {
        if ctx == Ctx::Values && matches!(t, Tok::In | Tok::NotIn) {
            Tok::Identifier
        } else {
            t
        }
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        let (t, l) = &self.items[self.pos.min(self.items.len() - 1)];
        (Self::adjust(*t, ctx), l.clone())
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let r = self.lookahead(ctx);
        if self.pos < self.items.len() - 1 {
            self.pos += 1;
        }
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Op::Exists | Op::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values.into_iter().collect())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Op>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Op::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = is_qualified_name(&lit);
        if !errs.is_empty() {
            // field.Invalid(nil path, ...): a nil *field.Path prints as "<nil>".
            return Err(format!(
                "<nil>: Invalid value: {}: {}",
                go_quote(&lit),
                errs.join("; ")
            ));
        }
        let (t, _) = self.lookahead(Ctx::Values);
        if (t == Tok::End || t == Tok::Comma) && op != Some(Op::DoesNotExist) {
            op = Some(Op::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Op, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Op::In,
            Tok::Equals => Op::Equals,
            Tok::DoubleEquals => Op::DoubleEquals,
            Tok::GreaterThan => Op::GreaterThan,
            Tok::LessThan => Op::LessThan,
            Tok::NotIn => Op::NotIn,
            Tok::NotEquals => Op::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut s = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    s.insert(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        s.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        s.insert(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::End || tok == Tok::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// `NewRequirement`: value validation (the key was validated by the parser already).
fn new_requirement(key: String, op: Op, values: Vec<String>) -> Result<Requirement, String> {
    let mut errs: Vec<String> = Vec::new();
    let key_errs = is_qualified_name(&key);
    if !key_errs.is_empty() {
        errs.push(format!(
            "key: Invalid value: {}: {}",
            go_quote(&key),
            key_errs.join("; ")
        ));
    }
    let vals_go = format!(
        "[]string{{{}}}",
        values
            .iter()
            .map(|v| go_quote(v))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match op {
        Op::In | Op::NotIn if values.is_empty() => errs.push(format!(
            "values: Invalid value: {vals_go}: for 'in', 'notin' operators, values set can't be empty"
        )),
        Op::Equals | Op::DoubleEquals | Op::NotEquals if values.len() != 1 => errs.push(format!(
            "values: Invalid value: {vals_go}: exact-match compatibility requires one single value"
        )),
        Op::GreaterThan | Op::LessThan => {
            if values.len() != 1 {
                errs.push(format!(
                    "values: Invalid value: {vals_go}: for 'Gt', 'Lt' operators, exactly one value is required"
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    errs.push(format!(
                        "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                        go_quote(v)
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, v) in values.iter().enumerate() {
        let verrs = is_valid_label_value(v);
        if !verrs.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {}: {}",
                go_quote(v),
                verrs.join("; ")
            ));
        }
    }
    match errs.len() {
        0 => Ok(Requirement { key, op, values }),
        1 => Err(errs.remove(0)),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

impl LabelSelector {
    /// `labels.Parse`. The error text is what kube-apiserver puts in its 400 message.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut p = Parser {
            items: lex(s),
            pos: 0,
        };
        let mut requirements = p.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches a label map (`metadata.labels`).
    pub fn matches_labels(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.matches_fn(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Matches labels read through `get` (the cache keeps labels outside any JSON tree).
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| {
            let v = get(&r.key);
            let has = |x: &str| r.values.iter().any(|y| y == x);
            match r.op {
                Op::In | Op::Equals | Op::DoubleEquals => v.is_some_and(has),
                Op::NotIn | Op::NotEquals => v.is_none_or(|x| !has(x)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::GreaterThan | Op::LessThan => {
                    let Some(lv) = v.and_then(|x| x.parse::<i64>().ok()) else {
                        return false;
                    };
                    let Some(rv) = r.values.first().and_then(|x| x.parse::<i64>().ok()) else {
                        return false;
                    };
                    (r.op == Op::GreaterThan && lv > rv) || (r.op == Op::LessThan && lv < rv)
                }
            }
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        self.matches_labels(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(s: &str) -> String {
        LabelSelector::parse(s).unwrap_err()
    }

    #[test]
    fn parses_and_matches() {
        let obj = json!({"metadata":{"labels":{"app":"web","tier":"1"}}});
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing!=x", true),
            ("tier>0", true),
            ("tier<1", false),
            ("app=web, tier in (1)", true),
            ("x in (in)", false),
        ] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&obj), want, "{sel}");
        }
    }

    #[test]
    fn errors_match_apimachinery() {
        assert_eq!(err("app=web,"), "found '', expected: identifier after ','");
        assert_eq!(
            err("app=(x)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            err("app in x"),
            "unable to parse requirement: found 'x' expected: '('"
        );
        assert_eq!(
            err("=x"),
            "found '=', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            err("app x"),
            "unable to parse requirement: found 'x', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert!(err("a/b/c=x").starts_with("unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of"));
        assert!(err("app=a b").starts_with("found 'b', expected: ',' or 'end of string'"));
        assert_eq!(
            err("app=-x"),
            "unable to parse requirement: values[0][app]: Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert_eq!(
            err("a>x"),
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
    }
}
