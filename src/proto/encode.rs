//! JSON → protobuf, byte for byte what Go's generated `Marshal` writes for the struct
//! `encoding/json` would decode the JSON into (k8s.io/api `generated.pb.go`, gogo
//! `MarshalToSizedBuffer`):
//! - fields in ascending field number, map entries sorted by key;
//! - value (non-pointer) scalars and structs always written, also when zero or absent
//!   from the JSON; pointers only when non-nil; `[]byte` only when non-nil; repeated
//!   fields and maps only their elements;
//! - negative int32/int64 as 10-byte varints (`uint64(v)`); repeated scalars unpacked
//!   (proto2);
//! - the special types as their hand-written marshallers (special.rs).
//!
//! A JSON field the schema does not know is an error (`ProtoError::UnknownField`), never
//! dropped: the caller forwards such objects' requests upstream instead.

use base64::Engine as _;

use super::json::{Doc, Json, Val, MAX_DEPTH};
use super::schema::{message, Card, Field, Kind, Message, MessageType, Special};
use super::special;
use super::wire::{
    begin_len, end_len, put_bytes, put_tag, put_varint, WT_FIXED64, WT_LEN, WT_VARINT,
};
use super::ProtoError;

/// Encode the JSON of one object (or any message of the table) as the message's
/// protobuf bytes — not enveloped (see `envelope`). `apiVersion`/`kind` at the top level
/// of a kind are accepted and not part of the message (they go into the envelope).
///
/// The result is allocated at its exact size (callers keep it for the object's life);
/// the message is written into the thread's scratch buffer first, because the encoder
/// needs room for the JSON's length up front (a ~2 KiB allocation per event otherwise,
/// which in the gateway came with glibc heap growth and page faults: docs/protobuf.md).
pub fn encode(ty: MessageType, json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    with_scratch(ty, json, <[u8]>::to_vec)
}

/// Encode `json` into the thread's scratch buffer and hand the message to `f`
/// (`envelope::encode_watch_frame` writes its frame straight from it).
pub(super) fn with_scratch<T>(
    ty: MessageType,
    json: &[u8],
    f: impl FnOnce(&[u8]) -> T,
) -> Result<T, ProtoError> {
    let doc = Doc::parse(json)?;
    let mut out = SCRATCH.take();
    out.clear();
    out.reserve(json.len());
    let result = encode_value(&mut out, ty, &doc, &doc.root).map(|()| f(&out));
    if out.capacity() <= SCRATCH_MAX {
        SCRATCH.set(out);
    }
    result
}

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A larger scratch buffer (a ~256 KiB object) is dropped after use rather than kept.
const SCRATCH_MAX: usize = 256 * 1024;

/// Encode `v` (a value of `d`) as a message of type `ty`.
pub(crate) fn encode_value(
    out: &mut Vec<u8>,
    ty: MessageType,
    d: &Doc<'_>,
    v: &Json<'_>,
) -> Result<(), ProtoError> {
    if !matches!(v.v, Val::Obj(_)) {
        return Err(mismatch(ty.def(), "(top level)", "object", v));
    }
    msg_body(out, d, ty.0, Some(v), 0)
}

fn mismatch(m: &Message, field: &str, expected: &'static str, got: &Json<'_>) -> ProtoError {
    ProtoError::TypeMismatch {
        message: m.name,
        field: field.to_string(),
        expected,
        found: got.type_name(),
    }
}

const NO_FIELDS: usize = 64;

/// The body of message `mi` from `v` (`None`/`null`: the zero value).
fn msg_body(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    mi: u16,
    v: Option<&Json<'_>>,
    depth: usize,
) -> Result<(), ProtoError> {
    if depth > MAX_DEPTH {
        return Err(ProtoError::TooDeep);
    }
    let m = message(mi);
    if m.special != Special::None {
        return special_body(out, d, m, v, depth);
    }
    match v.map(|j| &j.v) {
        None | Some(Val::Null) => fields(out, d, m, &[], depth, true),
        Some(Val::Obj(k)) => fields(out, d, m, d.kids(*k), depth, true),
        Some(_) => Err(mismatch(m, "(value)", "object", v.expect("some"))),
    }
}

/// Is `key` a JSON field of `m`, directly or through an inline embedded struct?
fn known_key(m: &Message, key: &str) -> bool {
    m.fields.iter().any(|f| {
        if f.inline {
            matches!(f.kind, Kind::Msg(c) if known_key(message(c), key))
        } else {
            f.json == key
        }
    }) || (m.type_meta && (key == "apiVersion" || key == "kind"))
}

fn fields(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    m: &Message,
    members: &[Json<'_>],
    depth: usize,
    check_keys: bool,
) -> Result<(), ProtoError> {
    if m.fields.len() > NO_FIELDS {
        return Err(ProtoError::InvalidValue(format!(
            "{} has too many fields",
            m.name
        )));
    }
    let mut slots: [Option<&Json<'_>>; NO_FIELDS] = [None; NO_FIELDS];
    // Go writes a struct's fields in declaration order, the order of `m.fields`: the
    // search starts after the previous member's field, so that it finds Go's JSON's next
    // key at its first comparison (any order is still accepted).
    let n = m.fields.len();
    let mut next = 0;
    for val in members {
        let key = val.key.as_ref();
        let is_key = |&i: &usize| {
            let f = &m.fields[i];
            !f.inline && f.json == key
        };
        match (next..n).chain(0..next).find(is_key) {
            // A repeated key: the last one wins, as in encoding/json.
            Some(i) => {
                slots[i] = Some(val);
                next = i + 1;
            }
            None if !check_keys || known_key(m, key) => {}
            None => {
                return Err(ProtoError::UnknownField {
                    message: m.name,
                    field: key.to_string(),
                })
            }
        }
    }
    for &i in m.by_num {
        let f = &m.fields[i as usize];
        if f.inline {
            let Kind::Msg(c) = f.kind else {
                unreachable!("inline fields are messages")
            };
            put_tag(out, f.num, WT_LEN);
            let pos = begin_len(out);
            fields(out, d, message(c), members, depth + 1, false)?;
            end_len(out, pos);
            continue;
        }
        field(out, d, m, f, slots[i as usize], depth)?;
    }
    Ok(())
}

fn field(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    m: &Message,
    f: &Field,
    v: Option<&Json<'_>>,
    depth: usize,
) -> Result<(), ProtoError> {
    let v = v.filter(|j| !matches!(j.v, Val::Null));
    match f.card {
        Card::Single => match v {
            Some(v) => single(out, d, m, f, v, depth),
            None if f.ptr => Ok(()),
            None => zero(out, d, f, depth),
        },
        Card::Repeated => match v.map(|j| &j.v) {
            None => Ok(()),
            Some(Val::Arr(items)) => {
                for it in d.kids(*items) {
                    if matches!(it.v, Val::Null) {
                        zero(out, d, f, depth)?;
                    } else {
                        single(out, d, m, f, it, depth)?;
                    }
                }
                Ok(())
            }
            Some(_) => Err(mismatch(m, f.json, "array", v.expect("some"))),
        },
        Card::Map => match v.map(|j| &j.v) {
            None => Ok(()),
            Some(Val::Obj(k)) => map(out, d, m, f, d.kids(*k), depth),
            Some(_) => Err(mismatch(m, f.json, "object", v.expect("some"))),
        },
    }
}

fn map(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    m: &Message,
    f: &Field,
    members: &[Json<'_>],
    depth: usize,
) -> Result<(), ProtoError> {
    // Go sorts the keys (sortkeys.Strings); a repeated JSON key keeps its last value.
    // encoding/json writes maps sorted already: their members are the entries as they are.
    if members.windows(2).all(|w| w[0].key < w[1].key) {
        for val in members {
            map_entry(out, d, m, f, &val.key, val, depth)?;
        }
        return Ok(());
    }
    let mut entries: Vec<(&str, &Json<'_>)> = members.iter().map(|v| (v.key.as_ref(), v)).collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let mut i = 0;
    while i < entries.len() {
        let mut j = i;
        while j + 1 < entries.len() && entries[j + 1].0 == entries[i].0 {
            j += 1;
        }
        let (key, val) = entries[j];
        i = j + 1;
        map_entry(out, d, m, f, key, val, depth)?;
    }
    Ok(())
}

/// One `{1: key, 2: value}` entry of map field `f`.
fn map_entry(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    m: &Message,
    f: &Field,
    key: &str,
    val: &Json<'_>,
    depth: usize,
) -> Result<(), ProtoError> {
    put_tag(out, f.num, WT_LEN);
    let pos = begin_len(out);
    put_bytes(out, 1, key.as_bytes());
    let null = matches!(val.v, Val::Null);
    match f.kind {
        // A nil []byte value is not written (`if v != nil`).
        Kind::Bytes if null => {}
        Kind::Bytes => put_bytes(out, 2, &bytes_of(m, f, val)?),
        Kind::Str if null => put_bytes(out, 2, b""),
        Kind::Str => put_bytes(out, 2, str_of(m, f, val)?.as_bytes()),
        Kind::Msg(c) => {
            put_tag(out, 2, WT_LEN);
            let p = begin_len(out);
            msg_body(out, d, c, (!null).then_some(val), depth + 1)?;
            end_len(out, p);
        }
        _ => {
            return Err(ProtoError::InvalidValue(format!(
                "{}.{}: unsupported map value",
                m.name, f.json
            )))
        }
    }
    end_len(out, pos);
    Ok(())
}

fn str_of<'j>(m: &Message, f: &Field, v: &'j Json<'_>) -> Result<&'j str, ProtoError> {
    match &v.v {
        Val::Str(s) => Ok(s),
        _ => Err(mismatch(m, f.json, "string", v)),
    }
}

fn bytes_of(m: &Message, f: &Field, v: &Json<'_>) -> Result<Vec<u8>, ProtoError> {
    let s = str_of(m, f, v)?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| ProtoError::InvalidValue(format!("{}.{}: base64: {e}", m.name, f.json)))
}

fn int_of<T: std::str::FromStr>(m: &Message, f: &Field, v: &Json<'_>) -> Result<T, ProtoError> {
    match v.v {
        // Go's decoder accepts only integer literals that fit (`strconv.ParseInt`).
        Val::Num(n) => n.parse::<T>().map_err(|_| {
            ProtoError::InvalidValue(format!(
                "{}.{}: {n} is not a valid {}",
                m.name,
                f.json,
                std::any::type_name::<T>()
            ))
        }),
        _ => Err(mismatch(m, f.json, "number", v)),
    }
}

/// One value (a single field, or one element of a repeated field) with its tag.
fn single(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    m: &Message,
    f: &Field,
    v: &Json<'_>,
    depth: usize,
) -> Result<(), ProtoError> {
    match f.kind {
        Kind::Str => put_bytes(out, f.num, str_of(m, f, v)?.as_bytes()),
        Kind::Bytes => put_bytes(out, f.num, &bytes_of(m, f, v)?),
        Kind::I32 => {
            let n: i32 = int_of(m, f, v)?;
            put_tag(out, f.num, WT_VARINT);
            put_varint(out, n as i64 as u64);
        }
        Kind::I64 => {
            let n: i64 = int_of(m, f, v)?;
            put_tag(out, f.num, WT_VARINT);
            put_varint(out, n as u64);
        }
        Kind::Bool => match v.v {
            Val::Bool(b) => {
                put_tag(out, f.num, WT_VARINT);
                out.push(b as u8);
            }
            _ => return Err(mismatch(m, f.json, "bool", v)),
        },
        Kind::F64 => match v.v {
            Val::Num(n) => {
                let x: f64 = n
                    .parse()
                    .map_err(|_| ProtoError::InvalidValue(format!("{}.{}: {n}", m.name, f.json)))?;
                put_tag(out, f.num, WT_FIXED64);
                out.extend_from_slice(&x.to_bits().to_le_bytes());
            }
            _ => return Err(mismatch(m, f.json, "number", v)),
        },
        Kind::Msg(c) => {
            put_tag(out, f.num, WT_LEN);
            let pos = begin_len(out);
            msg_body(out, d, c, Some(v), depth + 1)?;
            end_len(out, pos);
        }
    }
    Ok(())
}

/// The zero value of a value (non-pointer) field, which Go writes anyway.
fn zero(out: &mut Vec<u8>, d: &Doc<'_>, f: &Field, depth: usize) -> Result<(), ProtoError> {
    match f.kind {
        // `[]byte` fields are written only when non-nil, even as values.
        Kind::Bytes => {}
        Kind::Str => put_bytes(out, f.num, b""),
        Kind::I32 | Kind::I64 | Kind::Bool => {
            put_tag(out, f.num, WT_VARINT);
            out.push(0);
        }
        Kind::F64 => {
            put_tag(out, f.num, WT_FIXED64);
            out.extend_from_slice(&[0; 8]);
        }
        Kind::Msg(c) => {
            put_tag(out, f.num, WT_LEN);
            let pos = begin_len(out);
            msg_body(out, d, c, None, depth + 1)?;
            end_len(out, pos);
        }
    }
    Ok(())
}

fn sub_message(m: &Message, num: u32) -> u16 {
    match m.field_by_num(num).map(|(_, f)| f.kind) {
        Some(Kind::Msg(c)) => c,
        _ => unreachable!("{} field {num} is a message (generated schema)", m.name),
    }
}

fn special_body(
    out: &mut Vec<u8>,
    d: &Doc<'_>,
    m: &Message,
    v: Option<&Json<'_>>,
    depth: usize,
) -> Result<(), ProtoError> {
    let v = v.filter(|j| !matches!(j.v, Val::Null));
    let wrong = |expected, v: &Json<'_>| mismatch(m, "(value)", expected, v);
    match m.special {
        Special::None => unreachable!("caller checks"),
        Special::Time | Special::MicroTime => {
            if let Some(v) = v {
                let Val::Str(s) = &v.v else {
                    return Err(wrong("string", v));
                };
                let (secs, nanos) = special::parse_time(s)?;
                // A zero time.Time (0001-01-01T00:00:00Z) marshals to nothing.
                if (secs, nanos) != (-62135596800, 0) {
                    // time_proto.go `ProtoTime` leaves Nanos out ("our JSON only handled
                    // seconds"): metav1.Time always writes nanos 0; MicroTime keeps them.
                    let nanos = if m.special == Special::Time { 0 } else { nanos };
                    put_tag(out, 1, WT_VARINT);
                    put_varint(out, secs as u64);
                    put_tag(out, 2, WT_VARINT);
                    put_varint(out, nanos as i64 as u64);
                }
            }
        }
        Special::Duration => {
            let d = match v {
                None => 0,
                Some(v) => match &v.v {
                    Val::Str(s) => special::parse_duration(s)?,
                    _ => return Err(wrong("string", v)),
                },
            };
            put_tag(out, 1, WT_VARINT);
            put_varint(out, d as u64);
        }
        Special::Quantity => {
            // quantity_proto.go writes String(); the apiserver's JSON holds the same
            // canonical string, so it is copied (a JSON number is taken as written).
            let s: &str = match v.map(|v| (v, &v.v)) {
                None => "0",
                Some((_, Val::Str(s))) => s,
                Some((_, Val::Num(n))) => n,
                Some((v, _)) => return Err(wrong("string", v)),
            };
            put_bytes(out, 1, s.as_bytes());
        }
        Special::IntOrString => {
            let (ty, int, s): (u64, i32, &str) = match v.map(|v| (v, &v.v)) {
                None => (0, 0, ""),
                Some((_, Val::Str(s))) => (1, 0, s),
                Some((_, Val::Num(n))) => (
                    0,
                    n.parse().map_err(|_| {
                        ProtoError::InvalidValue(format!("IntOrString {n} is not an int32"))
                    })?,
                    "",
                ),
                Some((v, _)) => return Err(wrong("number or string", v)),
            };
            put_tag(out, 1, WT_VARINT);
            put_varint(out, ty);
            put_tag(out, 2, WT_VARINT);
            put_varint(out, int as i64 as u64);
            put_bytes(out, 3, s.as_bytes());
        }
        Special::RawExtension | Special::FieldsV1 | Special::RawJson => {
            if let Some(v) = v {
                put_bytes(out, 1, v.raw);
            }
        }
        Special::StringList => {
            if let Some(v) = v {
                let Val::Arr(items) = &v.v else {
                    return Err(wrong("array", v));
                };
                for it in d.kids(*items) {
                    match &it.v {
                        Val::Str(s) => put_bytes(out, 1, s.as_bytes()),
                        Val::Null => put_bytes(out, 1, b""),
                        _ => return Err(wrong("string", it)),
                    }
                }
            }
        }
        Special::SchemaOrArray | Special::SchemaOrStringArray => {
            // marshal.go: '{' fills Schema (field 1), '[' fills the list (field 2).
            let list_of_strings = m.special == Special::SchemaOrStringArray;
            match v.map(|v| &v.v) {
                Some(Val::Obj(_)) => {
                    put_tag(out, 1, WT_LEN);
                    let p = begin_len(out);
                    msg_body(out, d, sub_message(m, 1), v, depth + 1)?;
                    end_len(out, p);
                }
                Some(Val::Arr(items)) => {
                    for it in d.kids(*items) {
                        if list_of_strings {
                            let Val::Str(s) = &it.v else {
                                return Err(wrong("string", it));
                            };
                            put_bytes(out, 2, s.as_bytes());
                        } else {
                            put_tag(out, 2, WT_LEN);
                            let p = begin_len(out);
                            msg_body(out, d, sub_message(m, 2), Some(it), depth + 1)?;
                            end_len(out, p);
                        }
                    }
                }
                None => {}
                Some(_) => return Err(wrong("object or array", v.expect("some"))),
            }
        }
        Special::SchemaOrBool => {
            // marshal.go: a schema means Allows=true plus the schema.
            let (allows, schema) = match v.map(|v| &v.v) {
                None => (false, None),
                Some(Val::Bool(b)) => (*b, None),
                Some(Val::Obj(_)) => (true, v),
                Some(_) => return Err(wrong("bool or object", v.expect("some"))),
            };
            put_tag(out, 1, WT_VARINT);
            out.push(allows as u8);
            if let Some(s) = schema {
                put_tag(out, 2, WT_LEN);
                let p = begin_len(out);
                msg_body(out, d, sub_message(m, 2), Some(s), depth + 1)?;
                end_len(out, p);
            }
        }
    }
    Ok(())
}
