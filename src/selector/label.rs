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
    /// Sorted by key, as the Go parser does. Private: `required` is derived from them.
    requirements: Vec<Requirement>,
    /// The [`LabelDigest`] bits an object's labels must have to match (see there).
    required: u64,
}

/// A 64-bit digest of a label set, kept in every cached object's header: for each label,
/// one bit for its key and one for its `key=value` pair. A selector's requirements that
/// need a key (`key`, `key in (a,b)`) or a key with one value (`key=v`, `key in (v)`) name
/// bits the digest must have; an object whose digest lacks one cannot match, and is passed
/// over without reading its labels. Scanning a large snapshot for a selector that matches
/// little (KEP-2340's case) then costs a load and a mask per object instead of a walk
/// through its labels. A set bit proves nothing (another label may share it): the full
/// match still decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LabelDigest(pub u64);

impl LabelDigest {
    pub fn of<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            labels
                .into_iter()
                .fold(0, |d, (k, v)| d | key_bit(k) | pair_bit(k, v)),
        )
    }

    /// Whether an object with this digest may match `selector`.
    pub fn may_match(self, selector: &LabelSelector) -> bool {
        self.0 & selector.required == selector.required
    }
}

fn bit(h: u64) -> u64 {
    1 << (h % 64)
}

fn key_bit(key: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // DefaultHasher::new() has fixed keys: the same bits in every process and run.
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    bit(h.finish())
}

fn pair_bit(key: &str, value: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    0xffu8.hash(&mut h);
    value.hash(&mut h);
    bit(h.finish())
}

fn required_bits(requirements: &[Requirement]) -> u64 {
    requirements
        .iter()
        .map(|r| match (r.op, r.values.as_slice()) {
            (Op::Equals | Op::DoubleEquals | Op::In, [v]) => pair_bit(&r.key, v),
            (Op::In | Op::Exists | Op::GreaterThan | Op::LessThan, _) => key_bit(&r.key),
            (Op::NotIn | Op::NotEquals | Op::DoesNotExist | Op::Equals | Op::DoubleEquals, _) => 0,
        })
        .fold(0, |a, b| a | b)
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
        let required = required_bits(&requirements);
        Ok(Self {
            requirements,
            required,
        })
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
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
    #[test]
    fn the_digest_never_rules_out_an_object_that_matches() {
        // Every selector shape against every label set drawn from a small alphabet: where
        // the selector matches, the digest must let the object through.
        let keys = ["app", "tier", "env", "k8s.io/name", "n"];
        let values = ["web", "db", "1", "5", ""];
        let selectors: Vec<LabelSelector> = [
            "",
            "app=web",
            "app==db",
            "app!=web",
            "app in (web)",
            "app in (web,db)",
            "app notin (web)",
            "app",
            "!app",
            "n>3",
            "n<3",
            "app=web,tier=db",
            "app in (web),env",
            "k8s.io/name=1",
            "tier=",
            "app=nothing",
        ]
        .iter()
        .map(|s| LabelSelector::parse(s).unwrap())
        .collect();
        let mut sets = Vec::new();
        for mask in 0..(1u32 << keys.len()) {
            for shift in 0..values.len() {
                let set: Vec<(&str, &str)> = keys
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(i, k)| (*k, values[(i + shift) % values.len()]))
                    .collect();
                sets.push(set);
            }
        }
        let mut ruled_out = 0;
        for set in &sets {
            let digest = LabelDigest::of(set.iter().copied());
            for sel in &selectors {
                let matches =
                    sel.matches_fn(|k| set.iter().find(|(x, _)| *x == k).map(|(_, v)| *v));
                if matches {
                    assert!(digest.may_match(sel), "{set:?} matches {sel:?}");
                } else if !digest.may_match(sel) {
                    ruled_out += 1;
                }
            }
        }
        // And it does rule objects out: most of those that cannot match an equality.
        assert!(ruled_out > sets.len(), "only {ruled_out} ruled out");
        let nothing = LabelSelector::parse("app=nothing").unwrap();
        let excluded = sets
            .iter()
            .filter(|set| !LabelDigest::of(set.iter().copied()).may_match(&nothing))
            .count();
        assert!(
            excluded * 10 >= sets.len() * 8,
            "{excluded} of {}",
            sets.len()
        );
        // Selectors that need nothing in particular require no bits.
        for s in ["", "!app", "app!=web", "app notin (web)"] {
            assert!(
                LabelDigest(0).may_match(&LabelSelector::parse(s).unwrap()),
                "{s}"
            );
        }
    }
}
