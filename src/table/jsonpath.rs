//! Kubernetes JSONPath (`k8s.io/client-go/util/jsonpath`), as the CRD table convertor uses
//! it: parse `{<column jsonPath>}`, find results with missing keys allowed, print the first.
//!
//! Hand-written rather than taken from a JSONPath crate: the crates (serde_json_path,
//! jsonpath-rust, jsonpath_lib) implement RFC 9535 or Goessner's JSONPath, and the cells
//! depend on client-go's own dialect and quirks: the `{…}` template syntax, `['key']`
//! re-parsed as dotted fields, `[?(@.x=="y")]` filters that also walk maps, comparisons
//! that ignore mismatched types (a JSON integer never equals a literal `3`, because the
//! literal is a float64 and the value an int64, yet `!=` then holds), slices that fail on
//! out-of-range indices, map wildcards in sorted key order, and `..` that yields only
//! containers. This is a port of `parser.go` and `jsonpath.go` (FindResults and
//! PrintResults); `range`/`end` are parsed but not evaluated (an error, so the cell is
//! empty), as no column can use them meaningfully.

use std::borrow::Cow;

use serde_json::Value;

use crate::codec::go_json;

/// A parse or evaluation error (its text follows client-go's where one exists).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    List(Vec<Node>),
    Text(String),
    Field(String),
    Array([Param; 3]),
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
    Identifier(String),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    root: Vec<Node>,
}

/// One result: a value of the document, or a literal of the template (Go `string`,
/// `int`, `float64`, `bool`).
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    Json(&'a Value),
    Str(Cow<'a, str>),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl JsonPath {
    /// `jsonpath.Parse`.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut p = Parser::new(text);
        let mut root = Vec::new();
        p.parse_text(&mut root)?;
        Ok(Self { root })
    }

    /// `FindResults` with `AllowMissingKeys(true)`: one result list per top-level node.
    pub fn find_results<'a>(&'a self, data: &'a Value) -> Result<Vec<Vec<Found<'a>>>, Error> {
        let cur = vec![Found::Json(data)];
        let mut out = Vec::new();
        for node in &self.root {
            match walk(&cur, node) {
                Ok(r) => out.push(r),
                Err((_, e)) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// `PrintResults` of one value: maps and lists as Go's `json.Marshal`, anything else as
/// `fmt.Fprint` (a JSON null is `<no value>`, text/template's `printableValue`).
pub fn print(v: &Found<'_>) -> String {
    match v {
        Found::Json(Value::Null) => "<no value>".into(),
        Found::Json(Value::String(s)) => s.clone(),
        Found::Json(Value::Bool(b)) => b.to_string(),
        Found::Json(Value::Number(n)) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => match n.as_u64() {
                Some(u) => u.to_string(),
                None => go_json::sprint_float(n.as_f64().unwrap_or(0.0)),
            },
        },
        Found::Json(v @ (Value::Array(_) | Value::Object(_))) => go_json::marshal_sorted(v),
        Found::Str(s) => s.to_string(),
        Found::Int(i) => i.to_string(),
        Found::Float(f) => go_json::sprint_float(*f),
        Found::Bool(b) => b.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Parser (parser.go)

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
}

const EOF: Option<char> = None;

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Self {
            input,
            pos: 0,
            start: 0,
            width: 0,
        }
    }

    fn consume_text(&mut self) -> &'a str {
        let v = &self.input[self.start..self.pos];
        self.start = self.pos;
        v
    }

    fn next(&mut self) -> Option<char> {
        match self.input[self.pos..].chars().next() {
            None => {
                self.width = 0;
                EOF
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                Some(c)
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        let r = self.next();
        self.backup();
        r
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn parse_text(&mut self, root: &mut Vec<Node>) -> Result<(), Error> {
        loop {
            if self.rest().starts_with('{') {
                if self.pos > self.start {
                    root.push(Node::Text(self.consume_text().to_string()));
                }
                // parseLeftDelim
                self.pos += 1;
                self.consume_text();
                let mut action = Vec::new();
                self.parse_inside_action(&mut action)?;
                root.push(Node::List(action));
                // parseRightDelim went back to parseText on the root.
                continue;
            }
            if self.next().is_none() {
                break;
            }
        }
        if self.pos > self.start {
            root.push(Node::Text(self.consume_text().to_string()));
        }
        Ok(())
    }

    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        loop {
            if self.rest().starts_with('}') {
                self.pos += 1;
                self.consume_text();
                return Ok(());
            }
            if self.rest().starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if self.rest().starts_with("..") {
                self.parse_recursive(cur)?;
                continue;
            }
            match self.next() {
                None | Some('\r' | '\n') => return err("unclosed action"),
                Some(' ') => {
                    self.consume_text();
                }
                Some('@' | '$') => {
                    self.consume_text();
                }
                Some('[') => self.parse_array(cur)?,
                Some(q @ ('"' | '\'')) => self.parse_quote(cur, q)?,
                Some('.') => self.parse_field(cur)?,
                Some(c) if c == '+' || c == '-' || c.is_ascii_digit() => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                Some(c) if is_alphanumeric(c) => {
                    self.backup();
                    self.parse_identifier(cur)?;
                }
                Some(c) => {
                    return err(format!(
                        "unrecognized character in action: U+{:04X} {c:?}",
                        c as u32
                    ))
                }
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        loop {
            let r = self.next();
            if is_terminator(r) {
                if r.is_some() {
                    self.backup();
                }
                break;
            }
        }
        let value = self.consume_text();
        cur.push(match value {
            "true" => Node::Bool(true),
            "false" => Node::Bool(false),
            other => Node::Identifier(other.to_string()),
        });
        Ok(())
    }

    fn parse_recursive(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        if matches!(cur.last(), Some(Node::Recursive)) {
            return err("invalid multiple recursive descent");
        }
        self.pos += 2;
        self.consume_text();
        cur.push(Node::Recursive);
        if self.peek().is_some_and(is_alphanumeric) {
            return self.parse_field(cur);
        }
        Ok(())
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        loop {
            match self.next() {
                Some(c) if c == '.' || c.is_ascii_digit() => {}
                Some(_) => {
                    self.backup();
                    break;
                }
                None => break,
            }
        }
        let value = self.consume_text();
        // strconv.Atoi accepts a leading '+'; so does Rust's parse.
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Node::Int(i));
            return Ok(());
        }
        match value.parse::<f64>() {
            Ok(f) if !value.is_empty() => {
                cur.push(Node::Float(f));
                Ok(())
            }
            _ => err(format!("cannot parse number {value}")),
        }
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated array"),
                Some(']') => break,
                Some(_) => {}
            }
        }
        let text = self.consume_text();
        let mut text = &text[1..text.len() - 1];
        if text == "*" {
            text = ":";
        }
        // union operator
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_action(&format!("[{}]", part.trim_matches(' ')))?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }
        // dict key: `'key'` is re-parsed as `.key` (so dots in it separate fields).
        if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
            let key = &text[1..text.len() - 1];
            if !key.contains('\'') {
                cur.extend(parse_action(&format!(".{key}"))?);
                return Ok(());
            }
        }
        // slice operator: ^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$
        let groups =
            slice_groups(text).ok_or_else(|| Error(format!("invalid array index {text}")))?;
        let mut params = [Param::default(); 3];
        for i in 0..3 {
            let g = groups[i];
            if !g.is_empty() {
                let v = if i > 0 { &g[1..] } else { g };
                if i > 0 && v.is_empty() {
                    params[i].known = false;
                } else {
                    params[i].known = true;
                    params[i].value = v
                        .parse::<i64>()
                        .map_err(|_| Error(format!("array index {v} is not a number")))?;
                }
            } else if i == 1 {
                params[i] = Param {
                    known: true,
                    value: params[0].value + 1,
                    derived: true,
                };
            }
        }
        cur.push(Node::Array(params));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        self.pos += 3;
        self.consume_text();
        let (mut begin, mut end) = (false, false);
        let mut pair = '\0';
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated filter"),
                Some(r @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = r;
                        continue;
                    }
                    if self.input.as_bytes()[self.pos - 2] != b'\\' && r == pair {
                        end = true;
                    }
                }
                Some(')') if begin == end => break,
                Some(_) => {}
            }
        }
        if self.next() != Some(']') {
            return err("unclosed array expect ]");
        }
        let text = self.consume_text();
        let text = &text[..text.len() - 2];
        match split_filter(text) {
            None => cur.push(Node::Filter {
                left: parse_action(text)?,
                right: Vec::new(),
                op: "exists".into(),
            }),
            Some((l, op, r)) => cur.push(Node::Filter {
                left: parse_action(l)?,
                right: parse_action(r)?,
                op: op.to_string(),
            }),
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), Error> {
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated quoted string"),
                Some(c) if c == end && self.input.as_bytes()[self.pos - 2] != b'\\' => break,
                Some(_) => {}
            }
        }
        let value = self.consume_text();
        let s = unquote_extend(value)
            .map_err(|e| Error(format!("unquote string {value} error {e}")))?;
        cur.push(Node::Text(s));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        self.consume_text();
        // advance: until the next unescaped terminator.
        loop {
            match self.next() {
                Some('\\') => {
                    self.next();
                }
                r if is_terminator(r) => {
                    if r.is_some() {
                        self.backup();
                    }
                    break;
                }
                _ => {}
            }
        }
        let value = self.consume_text();
        cur.push(if value == "*" {
            Node::Wildcard
        } else {
            Node::Field(value.replace('\\', ""))
        });
        Ok(())
    }
}

/// `parseAction`: the nodes of `{text}`'s first action.
fn parse_action(text: &str) -> Result<Vec<Node>, Error> {
    let p = JsonPath::parse(&format!("{{{text}}}"))?;
    match p.root.into_iter().next() {
        Some(Node::List(nodes)) => Ok(nodes),
        _ => err("invalid action"),
    }
}

/// The three groups of `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`, empty when absent.
fn slice_groups(text: &str) -> Option<[&str; 3]> {
    fn number(s: &str) -> usize {
        let b = s.as_bytes();
        let mut i = usize::from(b.first() == Some(&b'-'));
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    }
    let mut out = [""; 3];
    let first = number(text);
    out[0] = &text[..first];
    let mut rest = &text[first..];
    for slot in out.iter_mut().skip(1) {
        if let Some(after) = rest.strip_prefix(':') {
            let n = 1 + number(after);
            *slot = &rest[..n];
            rest = &rest[n..];
        }
    }
    rest.is_empty().then_some(out)
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$` over a filter's text.
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let i = text.find(is_op)?;
    if i == 0 {
        return None;
    }
    let op_len = text[i..]
        .find(|c: char| !is_op(c))
        .unwrap_or(text.len() - i);
    let right = &text[i + op_len..];
    if right.is_empty() || right.contains('\n') {
        return None;
    }
    Some((&text[..i], &text[i..i + op_len], right))
}

fn is_terminator(r: Option<char>) -> bool {
    match r {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// `UnquoteExtend`: `strconv.Unquote` that also takes single-quoted strings.
fn unquote_extend(s: &str) -> Result<String, &'static str> {
    const SYNTAX: &str = "invalid syntax";
    let b = s.as_bytes();
    if b.len() < 2 || b[0] != b[b.len() - 1] || !matches!(b[0], b'"' | b'\'') {
        return Err(SYNTAX);
    }
    let quote = b[0] as char;
    let inner = &s[1..s.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote {
            return Err(SYNTAX);
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().ok_or(SYNTAX)?;
        let hex = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize| {
            let mut v = 0u32;
            for _ in 0..n {
                v = v * 16 + chars.next().and_then(|c| c.to_digit(16)).ok_or(SYNTAX)?;
            }
            Ok::<u32, &'static str>(v)
        };
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' => out.push(char::from_u32(hex(&mut chars, 2)?).ok_or(SYNTAX)?),
            'u' => out.push(char::from_u32(hex(&mut chars, 4)?).ok_or(SYNTAX)?),
            'U' => out.push(char::from_u32(hex(&mut chars, 8)?).ok_or(SYNTAX)?),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    v = v * 8 + chars.next().and_then(|c| c.to_digit(8)).ok_or(SYNTAX)?;
                }
                if v > 255 {
                    return Err(SYNTAX);
                }
                out.push(char::from_u32(v).ok_or(SYNTAX)?);
            }
            _ => return Err(SYNTAX),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Evaluation (jsonpath.go). An error carries the values the Go function returned with it,
// which a filter keeps using when missing keys are allowed.

type Walk<'a> = Result<Vec<Found<'a>>, (Vec<Found<'a>>, Error)>;

fn walk<'a>(input: &[Found<'a>], node: &'a Node) -> Walk<'a> {
    match node {
        Node::List(nodes) => eval_list(input, nodes),
        Node::Text(t) => Ok(vec![Found::Str(Cow::Borrowed(t))]),
        Node::Field(name) => Ok(eval_field(input, name)),
        Node::Array(params) => eval_array(input, params),
        Node::Filter { left, right, op } => eval_filter(input, left, right, op),
        Node::Int(i) => Ok(vec![Found::Int(*i); input.len()]),
        Node::Float(f) => Ok(vec![Found::Float(*f); input.len()]),
        Node::Bool(b) => Ok(vec![Found::Bool(*b); input.len()]),
        Node::Wildcard => Ok(input.iter().flat_map(children).collect()),
        Node::Recursive => Ok(eval_recursive(input)),
        Node::Union(lists) => {
            let mut out = Vec::new();
            for list in lists {
                match eval_list(input, list) {
                    Ok(r) => out.extend(r),
                    Err((_, e)) => return Err((input.to_vec(), e)),
                }
            }
            Ok(out)
        }
        Node::Identifier(name) => {
            let msg = match name.as_str() {
                "range" | "end" => format!("{name} is not supported in a column"),
                other => format!("unrecognized identifier {other}"),
            };
            Err((input.to_vec(), Error(msg)))
        }
    }
}

fn eval_list<'a>(input: &[Found<'a>], nodes: &'a [Node]) -> Walk<'a> {
    let mut cur = input.to_vec();
    for n in nodes {
        cur = walk(&cur, n)?;
    }
    Ok(cur)
}

/// `template.Indirect` + nil check: a JSON null is skipped.
fn json_of<'a>(v: &Found<'a>) -> Option<&'a Value> {
    match v {
        Found::Json(Value::Null) => None,
        Found::Json(j) => Some(j),
        _ => None,
    }
}

fn eval_field<'a>(input: &[Found<'a>], name: &str) -> Vec<Found<'a>> {
    // Maps only (unstructured content has no structs); a missing key is no result, and
    // with AllowMissingKeys no error.
    input
        .iter()
        .filter_map(json_of)
        .filter_map(|v| v.as_object()?.get(name))
        .map(Found::Json)
        .collect()
}

fn eval_array<'a>(input: &[Found<'a>], params: &[Param; 3]) -> Walk<'a> {
    let mut result = Vec::new();
    for v in input {
        if matches!(v, Found::Json(Value::Null)) {
            continue;
        }
        let Some(Value::Array(a)) = json_of(v) else {
            let ty = match v {
                Found::Json(Value::Object(_)) => "map[string]interface {}",
                Found::Json(Value::String(_)) | Found::Str(_) => "string",
                Found::Json(Value::Bool(_)) | Found::Bool(_) => "bool",
                Found::Json(Value::Number(n)) if n.is_f64() => "float64",
                Found::Json(_) => "int64",
                Found::Int(_) => "int",
                Found::Float(_) => "float64",
            };
            return Err((input.to_vec(), Error(format!("{ty} is not array or slice"))));
        };
        let len = a.len() as i64;
        let mut p = *params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            return Ok(result);
        }
        if p[0].value >= len || p[0].value < 0 {
            let e = format!(
                "array index out of bounds: index {}, length {len}",
                p[0].value
            );
            return Err((input.to_vec(), Error(e)));
        }
        if p[1].value > len || p[1].value < 0 {
            let e = format!(
                "array index out of bounds: index {}, length {len}",
                p[1].value - 1
            );
            return Err((input.to_vec(), Error(e)));
        }
        if p[0].value > p[1].value {
            let e = format!(
                "starting index {} is greater than ending index {}",
                p[0].value, p[1].value
            );
            return Err((input.to_vec(), Error(e)));
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return Err((input.to_vec(), Error("step must be > 0".into())));
            }
            p[2].value as usize
        } else {
            1
        };
        let slice = &a[p[0].value as usize..p[1].value as usize];
        result.extend(slice.iter().step_by(step).map(Found::Json));
    }
    Ok(result)
}

/// `iterHelper`: a list's items in order, a map's values in sorted key order.
fn children<'a>(v: &Found<'a>) -> Vec<Found<'a>> {
    match json_of(v) {
        Some(Value::Array(a)) => a.iter().map(Found::Json).collect(),
        Some(Value::Object(m)) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            keys.into_iter().map(|k| Found::Json(&m[k])).collect()
        }
        _ => Vec::new(),
    }
}

fn eval_recursive<'a>(input: &[Found<'a>]) -> Vec<Found<'a>> {
    let mut result = Vec::new();
    for v in input {
        let kids = children(v);
        if !kids.is_empty() {
            result.push(v.clone());
            result.extend(eval_recursive(&kids));
        }
    }
    result
}

fn eval_filter<'a>(input: &[Found<'a>], left: &'a [Node], right: &'a [Node], op: &str) -> Walk<'a> {
    let mut results = Vec::new();
    for v in input {
        let iterable = matches!(json_of(v), Some(Value::Array(_) | Value::Object(_)));
        let items = if iterable {
            children(v)
        } else {
            vec![v.clone()]
        };
        for item in items {
            let temp = [item.clone()];
            // Missing keys are allowed: an error is ignored and its values kept.
            let lefts = eval_list(&temp, left).unwrap_or_else(|(vals, _)| vals);
            let rights = match eval_list(&temp, right) {
                Ok(r) => r,
                Err((_, e)) => return Err((input.to_vec(), e)),
            };
            let one_at_a_time = || {
                (
                    input.to_vec(),
                    Error("can only compare one element at a time".into()),
                )
            };
            match (lefts.len(), op) {
                (0, _) => continue,
                (n, _) if n > 1 => return Err(one_at_a_time()),
                (_, "exists") => {
                    results.push(item);
                    continue;
                }
                _ => {}
            }
            match rights.len() {
                0 => continue,
                1 => {}
                _ => return Err(one_at_a_time()),
            }
            match eval_operator(op, &lefts[0], &rights[0]) {
                Ok(true) => results.push(item),
                Ok(false) => {}
                Err(e) => return Err((results, e)),
            }
        }
    }
    Ok(results)
}

/// A comparable value, as text/template's `basicKind` sees it.
#[derive(Debug, Clone, PartialEq)]
enum Basic<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

#[derive(Debug, PartialEq)]
enum CmpErr {
    /// "invalid type for comparison"
    BadType,
    /// "incompatible types for comparison"
    Incompatible,
}

fn basic<'a>(v: &'a Found<'a>) -> Result<Basic<'a>, CmpErr> {
    Ok(match v {
        Found::Json(Value::Bool(b)) | Found::Bool(b) => Basic::Bool(*b),
        Found::Json(Value::String(s)) => Basic::Str(s),
        Found::Str(s) => Basic::Str(s),
        // Unstructured integers are int64; floats float64.
        Found::Json(Value::Number(n)) => match n.as_i64() {
            Some(i) if !n.is_f64() => Basic::Int(i),
            _ => Basic::Float(n.as_f64().unwrap_or(0.0)),
        },
        // evalOperator turns a literal Go `int` into a float64 first.
        Found::Int(i) => Basic::Float(*i as f64),
        Found::Float(f) => Basic::Float(*f),
        Found::Json(_) => return Err(CmpErr::BadType),
    })
}

fn equal(a: &Found<'_>, b: &Found<'_>) -> (bool, Option<CmpErr>) {
    let (a, b) = match (basic(a), basic(b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (false, Some(e)),
    };
    if std::mem::discriminant(&a) != std::mem::discriminant(&b) {
        return (false, Some(CmpErr::Incompatible));
    }
    (a == b, None)
}

fn less(a: &Found<'_>, b: &Found<'_>) -> (bool, Option<CmpErr>) {
    let (a, b) = match (basic(a), basic(b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (false, Some(e)),
    };
    match (a, b) {
        (Basic::Int(x), Basic::Int(y)) => (x < y, None),
        (Basic::Float(x), Basic::Float(y)) => (x < y, None),
        (Basic::Str(x), Basic::Str(y)) => (x < y, None),
        (Basic::Bool(_), Basic::Bool(_)) => (false, Some(CmpErr::BadType)),
        _ => (false, Some(CmpErr::Incompatible)),
    }
}

/// `evalOperator`: the template comparison, with type errors ignored (the function's own
/// result then stands: `!=` of mismatched types is true, everything else false).
fn eval_operator(op: &str, l: &Found<'_>, r: &Found<'_>) -> Result<bool, Error> {
    let (pass, _ignored) = match op {
        "==" => equal(l, r),
        "!=" => {
            let (eq, e) = equal(l, r);
            (!eq, e)
        }
        "<" => less(l, r),
        "<=" => match less(l, r) {
            (true, e) => (true, e),
            (false, Some(e)) => (false, Some(e)),
            (false, None) => equal(l, r),
        },
        ">" => match less(l, r) {
            (_, Some(e)) => (false, Some(e)),
            (true, None) => (false, None),
            (false, None) => match equal(l, r) {
                (_, Some(e)) => (false, Some(e)),
                (eq, None) => (!eq, None),
            },
        },
        ">=" => match less(l, r) {
            (_, Some(e)) => (false, Some(e)),
            (lt, None) => (!lt, None),
        },
        other => return err(format!("unrecognized filter operator {other}")),
    };
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the CRD convertor prints: the first result of the first result list.
    fn first(path: &str, data: &Value) -> Option<String> {
        let p = JsonPath::parse(&format!("{{{path}}}")).expect(path);
        let r = p.find_results(data).ok()?;
        r.first()?.first().map(print)
    }

    fn obj() -> Value {
        json!({
            "metadata": {"name": "w", "labels": {"app.kubernetes.io/name": "x", "b": "2", "a": "1"}},
            "spec": {"size": 3, "ratio": 1.5, "on": true, "items": ["a", "b", "c"], "nil": null,
                     "nested": {"z": 1, "y": [2]}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "count": 3},
                {"type": "Synced", "status": "False", "count": 1.5}
            ]}
        })
    }

    #[test]
    fn fields_indices_and_slices() {
        let o = obj();
        assert_eq!(first(".metadata.name", &o).as_deref(), Some("w"));
        assert_eq!(first(".spec.size", &o).as_deref(), Some("3"));
        assert_eq!(first(".spec.ratio", &o).as_deref(), Some("1.5"));
        assert_eq!(first(".spec.on", &o).as_deref(), Some("true"));
        assert_eq!(first(".spec.items[0]", &o).as_deref(), Some("a"));
        assert_eq!(first(".spec.items[-1]", &o).as_deref(), Some("c"));
        assert_eq!(first(".spec.items[1:]", &o).as_deref(), Some("b"));
        assert_eq!(first(".spec.items[*]", &o).as_deref(), Some("a"));
        assert_eq!(first(".spec.items[0,2]", &o).as_deref(), Some("a"));
        // Out of range is an error (the cell is empty), not a missing value.
        assert_eq!(first(".spec.items[5]", &o), None);
        assert!(JsonPath::parse("{.spec.items[5]}")
            .unwrap()
            .find_results(&o)
            .is_err());
        // Missing keys: no result, no error.
        let p = JsonPath::parse("{.spec.missing.deeper}").unwrap();
        assert_eq!(p.find_results(&o).unwrap(), vec![vec![]]);
        // A JSON null prints as text/template's "<no value>".
        assert_eq!(first(".spec.nil", &o).as_deref(), Some("<no value>"));
    }

    #[test]
    fn maps_and_lists_print_as_go_json() {
        let o = obj();
        assert_eq!(
            first(".spec.items", &o).as_deref(),
            Some(r#"["a","b","c"]"#)
        );
        assert_eq!(
            first(".spec.nested", &o).as_deref(),
            Some(r#"{"y":[2],"z":1}"#)
        );
        // A map wildcard walks the values in sorted key order.
        assert_eq!(first(".metadata.labels.*", &o).as_deref(), Some("1"));
    }

    #[test]
    fn filters_compare_like_client_go() {
        let o = obj();
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Ready")].status"#, &o).as_deref(),
            Some("True")
        );
        assert_eq!(
            first(".status.conditions[?(@.type=='Synced')].status", &o).as_deref(),
            Some("False")
        );
        assert_eq!(
            first(r#".status.conditions[?(@.type!="Ready")].type"#, &o).as_deref(),
            Some("Synced")
        );
        // An int64 never equals the float64 literal 3; a float compares.
        assert_eq!(first(".status.conditions[?(@.count==3)].type", &o), None);
        assert_eq!(
            first(".status.conditions[?(@.count==1.5)].type", &o).as_deref(),
            Some("Synced")
        );
        // …and `!=` of mismatched types holds.
        assert_eq!(
            first(".status.conditions[?(@.count!=3)].type", &o).as_deref(),
            Some("Ready")
        );
        // Existence.
        assert_eq!(
            first(".status.conditions[?(@.count)].type", &o).as_deref(),
            Some("Ready")
        );
        assert_eq!(first(".status.conditions[?(@.nope)].type", &o), None);
    }

    #[test]
    fn dict_keys_quotes_and_escapes() {
        let o = json!({"a": {"b.c": "dotted", "b": {"c": "nested"}}, "k": {"x y": 1}});
        // ['b.c'] is re-parsed as .b.c.
        assert_eq!(first(".a['b.c']", &o).as_deref(), Some("nested"));
        // An escaped dot stays in the field name.
        assert_eq!(first(r".a.b\.c", &o).as_deref(), Some("dotted"));
        // Recursive descent yields containers only.
        assert_eq!(first("..c", &o).as_deref(), Some("nested"));
        // A quoted literal is printed as is.
        assert_eq!(first(r#""lit""#, &o).as_deref(), Some("lit"));
    }

    #[test]
    fn parse_errors() {
        for bad in [
            "{.a[}",
            "{.a",
            "{.a[x]}",
            "{.a[?(@.b==\"c\"}",
            "{.a....b}",
            "{#}",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
        assert!(JsonPath::parse("{.a}{.b}").is_ok());
    }
}
