//! protobuf → JSON, as Go's generated `Unmarshal` followed by `encoding/json`'s
//! `Marshal` of the struct would produce it: Go struct field order, `omitempty`, pointer
//! fields `null` when nil and without `omitempty`, nil slices and maps `null`, map keys
//! sorted, the special types' `MarshalJSON` (special.rs), HTML-safe string escaping.
//!
//! Like Go's generated code, fields with unknown numbers are skipped (after their wire
//! format is checked); a known field with the wrong wire type, truncated or overlong
//! data, or nesting deeper than `json::MAX_DEPTH` is an error.

use base64::Engine as _;

use super::json::{write_compact, write_go_string, MAX_DEPTH};
use super::schema::{message, Card, Field, Kind, Message, MessageType, Special};
use super::special;
use super::wire::{Reader, WireValue, WT_FIXED64, WT_LEN, WT_VARINT};
use super::ProtoError;

/// Decode a message's protobuf bytes (not enveloped) to JSON. With `type_meta`
/// (`(apiVersion, kind)`), the object starts with `"kind"` and `"apiVersion"` as Go's
/// embedded `metav1.TypeMeta` writes them.
pub fn decode(
    ty: MessageType,
    bytes: &[u8],
    type_meta: Option<(&str, &str)>,
) -> Result<Vec<u8>, ProtoError> {
    let mut out = Vec::with_capacity(bytes.len() * 2 + 16);
    message_json(&mut out, ty.0, Some(bytes), 0, type_meta)?;
    Ok(out)
}

struct Slots<'a> {
    values: Vec<Vec<WireValue<'a>>>,
}

fn collect<'a>(m: &Message, bytes: &'a [u8]) -> Result<Slots<'a>, ProtoError> {
    let mut values = vec![Vec::new(); m.fields.len()];
    let mut r = Reader::new(bytes);
    while let Some((num, v)) = r.field()? {
        let Some((i, f)) = m.field_by_num(num) else {
            continue;
        };
        let ok = match f.kind {
            Kind::Str | Kind::Bytes | Kind::Msg(_) => v.wire_type() == WT_LEN,
            Kind::F64 => {
                v.wire_type() == WT_FIXED64 || (f.card == Card::Repeated && v.wire_type() == WT_LEN)
            }
            _ => {
                v.wire_type() == WT_VARINT || (f.card == Card::Repeated && v.wire_type() == WT_LEN)
            }
        } || (f.card == Card::Map && v.wire_type() == WT_LEN);
        if !ok {
            return Err(ProtoError::WrongWireType {
                message: m.name,
                field: f.json,
                wire_type: v.wire_type(),
            });
        }
        values[i].push(v);
    }
    Ok(Slots { values })
}

/// A message field that occurs several times is merged (protobuf semantics, and what
/// Go's `Unmarshal` into an existing struct does): its bytes are concatenated.
fn merged<'a>(vals: &[WireValue<'a>], scratch: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    match vals {
        [] => None,
        [WireValue::Len(b)] => Some(b),
        many => {
            for v in many {
                if let WireValue::Len(b) = v {
                    scratch.extend_from_slice(b);
                }
            }
            Some(scratch.as_slice())
        }
    }
}

fn message_json(
    out: &mut Vec<u8>,
    mi: u16,
    bytes: Option<&[u8]>,
    depth: usize,
    type_meta: Option<(&str, &str)>,
) -> Result<(), ProtoError> {
    if depth > MAX_DEPTH {
        return Err(ProtoError::TooDeep);
    }
    let m = message(mi);
    if m.special != Special::None {
        return special_json(out, m, bytes.unwrap_or(&[]), depth);
    }
    out.push(b'{');
    let mut first = true;
    if let Some((api_version, kind)) = type_meta {
        // metav1.TypeMeta: Kind then APIVersion, both omitempty.
        for (k, v) in [("kind", kind), ("apiVersion", api_version)] {
            if !v.is_empty() {
                key(out, &mut first, k);
                write_go_string(out, v.as_bytes());
            }
        }
    }
    fields_json(out, m, bytes.unwrap_or(&[]), depth, &mut first)?;
    out.push(b'}');
    Ok(())
}

fn key(out: &mut Vec<u8>, first: &mut bool, k: &str) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    write_go_string(out, k.as_bytes());
    out.push(b':');
}

fn fields_json(
    out: &mut Vec<u8>,
    m: &Message,
    bytes: &[u8],
    depth: usize,
    first: &mut bool,
) -> Result<(), ProtoError> {
    let slots = collect(m, bytes)?;
    for (i, f) in m.fields.iter().enumerate() {
        let vals = &slots.values[i];
        if f.inline {
            let Kind::Msg(c) = f.kind else {
                unreachable!("inline fields are messages")
            };
            let mut scratch = Vec::new();
            let b = merged(vals, &mut scratch).unwrap_or(&[]);
            fields_json(out, message(c), b, depth + 1, first)?;
            continue;
        }
        match f.card {
            Card::Single => single_field(out, m, f, vals, depth, first)?,
            Card::Repeated => repeated_field(out, m, f, vals, depth, first)?,
            Card::Map => map_field(out, m, f, vals, depth, first)?,
        }
    }
    Ok(())
}

fn null_or_skip(out: &mut Vec<u8>, f: &Field, first: &mut bool) {
    if !f.omitempty {
        key(out, first, f.json);
        out.extend_from_slice(b"null");
    }
}

fn single_field(
    out: &mut Vec<u8>,
    m: &Message,
    f: &Field,
    vals: &[WireValue<'_>],
    depth: usize,
    first: &mut bool,
) -> Result<(), ProtoError> {
    if let Kind::Msg(c) = f.kind {
        let mut scratch = Vec::new();
        let b = merged(vals, &mut scratch);
        if b.is_none() && f.ptr {
            null_or_skip(out, f, first);
            return Ok(());
        }
        // `omitzero` (only on metav1.Time fields): left out when Time.IsZero.
        if f.omitzero {
            let cm = message(c);
            let tb = b.unwrap_or(&[]);
            debug_assert!(matches!(cm.special, Special::Time | Special::MicroTime));
            if time_parts(cm, tb, &collect(cm, tb)?).is_none() {
                return Ok(());
            }
        }
        // Struct values are never omitted by encoding/json under `omitempty`.
        key(out, first, f.json);
        return message_json(out, c, b, depth + 1, None);
    }
    let last = vals.last().copied();
    if f.kind == Kind::Bytes {
        // A []byte is nil when absent; omitempty drops it when empty.
        match last {
            None => null_or_skip(out, f, first),
            Some(WireValue::Len(b)) if b.is_empty() && f.omitempty => {}
            Some(v) => {
                key(out, first, f.json);
                scalar(out, m, f, v)?;
            }
        }
        return Ok(());
    }
    match last {
        None if f.ptr => null_or_skip(out, f, first),
        None if f.omitempty => {}
        None => {
            key(out, first, f.json);
            zero_scalar(out, f.kind);
        }
        Some(v) => {
            if !f.ptr && f.omitempty && is_zero(f.kind, v) {
                return Ok(());
            }
            key(out, first, f.json);
            scalar(out, m, f, v)?;
        }
    }
    Ok(())
}

fn is_zero(kind: Kind, v: WireValue<'_>) -> bool {
    match (kind, v) {
        (Kind::I32, WireValue::Varint(x)) => x as i32 == 0,
        (_, WireValue::Varint(x)) => x == 0,
        (_, WireValue::Fixed64(x)) => f64::from_bits(x) == 0.0,
        (_, WireValue::Len(b)) => b.is_empty(),
        (_, WireValue::Fixed32(x)) => x == 0,
    }
}

fn zero_scalar(out: &mut Vec<u8>, kind: Kind) {
    out.extend_from_slice(match kind {
        Kind::Str => b"\"\"",
        Kind::Bool => b"false",
        _ => b"0",
    });
}

fn scalar(out: &mut Vec<u8>, m: &Message, f: &Field, v: WireValue<'_>) -> Result<(), ProtoError> {
    use std::io::Write as _;
    match (f.kind, v) {
        (Kind::Str, WireValue::Len(b)) => write_go_string(out, b),
        (Kind::Bytes, WireValue::Len(b)) => {
            out.push(b'"');
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(b)
                    .as_bytes(),
            );
            out.push(b'"');
        }
        (Kind::I32, WireValue::Varint(x)) => write!(out, "{}", x as i32).expect("vec"),
        (Kind::I64, WireValue::Varint(x)) => write!(out, "{}", x as i64).expect("vec"),
        (Kind::Bool, WireValue::Varint(x)) => {
            out.extend_from_slice(if x != 0 { b"true" } else { b"false" })
        }
        (Kind::F64, WireValue::Fixed64(x)) => {
            out.extend_from_slice(special::format_float(f64::from_bits(x))?.as_bytes())
        }
        (_, v) => {
            return Err(ProtoError::WrongWireType {
                message: m.name,
                field: f.json,
                wire_type: v.wire_type(),
            })
        }
    }
    Ok(())
}

fn repeated_field(
    out: &mut Vec<u8>,
    m: &Message,
    f: &Field,
    vals: &[WireValue<'_>],
    depth: usize,
    first: &mut bool,
) -> Result<(), ProtoError> {
    // Scalars may arrive packed (one length-delimited run) or one per tag.
    let mut elems: Vec<WireValue<'_>> = Vec::with_capacity(vals.len());
    for &v in vals {
        match (f.kind, v) {
            (Kind::Str | Kind::Bytes | Kind::Msg(_), _) => elems.push(v),
            (Kind::F64, WireValue::Len(b)) => {
                if b.len() % 8 != 0 {
                    return Err(ProtoError::Truncated);
                }
                for c in b.chunks_exact(8) {
                    elems.push(WireValue::Fixed64(u64::from_le_bytes(
                        c.try_into().expect("8"),
                    )));
                }
            }
            (_, WireValue::Len(b)) => {
                let mut r = Reader::new(b);
                while !r.is_empty() {
                    elems.push(WireValue::Varint(r.varint()?));
                }
            }
            _ => elems.push(v),
        }
    }
    if elems.is_empty() {
        null_or_skip(out, f, first);
        return Ok(());
    }
    key(out, first, f.json);
    out.push(b'[');
    for (i, v) in elems.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match (f.kind, v) {
            (Kind::Msg(c), WireValue::Len(b)) => message_json(out, c, Some(b), depth + 1, None)?,
            _ => scalar(out, m, f, *v)?,
        }
    }
    out.push(b']');
    Ok(())
}

fn map_field(
    out: &mut Vec<u8>,
    m: &Message,
    f: &Field,
    vals: &[WireValue<'_>],
    depth: usize,
    first: &mut bool,
) -> Result<(), ProtoError> {
    let mut entries: Vec<(&[u8], Option<WireValue<'_>>)> = Vec::with_capacity(vals.len());
    for v in vals {
        let WireValue::Len(b) = v else {
            return Err(ProtoError::WrongWireType {
                message: m.name,
                field: f.json,
                wire_type: v.wire_type(),
            });
        };
        let mut r = Reader::new(b);
        let (mut k, mut val): (&[u8], Option<WireValue<'_>>) = (b"", None);
        while let Some((num, ev)) = r.field()? {
            match (num, ev) {
                (1, WireValue::Len(kb)) => k = kb,
                (2, ev) => val = Some(ev),
                (1, _) => {
                    return Err(ProtoError::WrongWireType {
                        message: m.name,
                        field: f.json,
                        wire_type: ev.wire_type(),
                    })
                }
                _ => {}
            }
        }
        entries.push((k, val));
    }
    if entries.is_empty() {
        null_or_skip(out, f, first);
        return Ok(());
    }
    // A key seen twice keeps its last value (Go assigns into the map); output sorted.
    entries.reverse();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    key(out, first, f.json);
    out.push(b'{');
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_go_string(out, k);
        out.push(b':');
        match (f.kind, v) {
            (Kind::Msg(c), None) => message_json(out, c, None, depth + 1, None)?,
            (Kind::Msg(c), Some(WireValue::Len(b))) => {
                message_json(out, c, Some(b), depth + 1, None)?
            }
            (Kind::Bytes, None) => out.extend_from_slice(b"null"),
            (Kind::Str, None) => out.extend_from_slice(b"\"\""),
            (_, Some(v)) => scalar(out, m, f, *v)?,
            (_, None) => zero_scalar(out, f.kind),
        }
    }
    out.push(b'}');
    Ok(())
}

fn sub_message(m: &Message, num: u32) -> u16 {
    match m.field_by_num(num).map(|(_, f)| f.kind) {
        Some(Kind::Msg(c)) => c,
        _ => unreachable!("{} field {num} is a message (generated schema)", m.name),
    }
}

/// The last value of field `num` as bytes / varint.
fn last_len<'a>(slots: &Slots<'a>, m: &Message, num: u32) -> Option<&'a [u8]> {
    let (i, _) = m.field_by_num(num)?;
    match slots.values[i].last() {
        Some(WireValue::Len(b)) => Some(b),
        _ => None,
    }
}

fn last_varint(slots: &Slots<'_>, m: &Message, num: u32) -> Option<u64> {
    let (i, _) = m.field_by_num(num)?;
    match slots.values[i].last() {
        Some(WireValue::Varint(x)) => Some(*x),
        _ => None,
    }
}

fn all_len<'a>(slots: &Slots<'a>, m: &Message, num: u32) -> Vec<&'a [u8]> {
    let Some((i, _)) = m.field_by_num(num) else {
        return Vec::new();
    };
    slots.values[i]
        .iter()
        .filter_map(|v| {
            if let WireValue::Len(b) = v {
                Some(*b)
            } else {
                None
            }
        })
        .collect()
}

/// Seconds and nanoseconds of a `metav1.Time` / `MicroTime` message, `None` for Go's zero
/// time: time_proto.go's `Unmarshal` makes `time.Time{}` of empty bytes, else
/// `time.Unix(p.Seconds, 0)` (Time drops nanos) or `time.Unix(p.Seconds, p.Nanos)`
/// (micro_time_proto.go); `IsZero` is true for 0001-01-01T00:00:00Z either way.
fn time_parts(m: &Message, bytes: &[u8], slots: &Slots<'_>) -> Option<(i64, i32)> {
    const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;
    let secs = last_varint(slots, m, 1).map(|x| x as i64);
    let nanos = if m.special == Special::Time {
        0
    } else {
        last_varint(slots, m, 2).unwrap_or(0) as i32
    };
    match secs {
        _ if bytes.is_empty() => None,
        Some(GO_ZERO_TIME_UNIX) if nanos == 0 => None,
        s => Some((s.unwrap_or(0), nanos)),
    }
}

fn special_json(
    out: &mut Vec<u8>,
    m: &Message,
    bytes: &[u8],
    depth: usize,
) -> Result<(), ProtoError> {
    let slots = collect(m, bytes)?;
    match m.special {
        Special::None => unreachable!("caller checks"),
        Special::Time | Special::MicroTime => match time_parts(m, bytes, &slots) {
            // The zero time's MarshalJSON is `null`.
            None => out.extend_from_slice(b"null"),
            Some((secs, nanos)) => {
                let s = if m.special == Special::Time {
                    special::format_time(secs, 0)?
                } else {
                    special::format_micro_time(secs, nanos)?
                };
                write_go_string(out, s.as_bytes());
            }
        },
        Special::Duration => {
            let d = last_varint(&slots, m, 1).unwrap_or(0) as i64;
            write_go_string(out, special::format_duration(d).as_bytes());
        }
        Special::Quantity => match last_len(&slots, m, 1) {
            None => out.extend_from_slice(b"\"0\""),
            // Go's Unmarshal parses the string (ParseQuantity): empty is an error.
            Some([]) => return Err(ProtoError::InvalidValue("empty quantity".into())),
            Some(s) => write_go_string(out, s),
        },
        Special::IntOrString => match last_varint(&slots, m, 1).unwrap_or(0) {
            0 => {
                let v = last_varint(&slots, m, 2).unwrap_or(0) as i32;
                out.extend_from_slice(v.to_string().as_bytes());
            }
            1 => write_go_string(out, last_len(&slots, m, 3).unwrap_or(b"")),
            t => {
                return Err(ProtoError::InvalidValue(format!(
                    "impossible IntOrString.Type {t}"
                )))
            }
        },
        Special::RawExtension | Special::FieldsV1 => match last_len(&slots, m, 1) {
            None => out.extend_from_slice(b"null"),
            Some(raw) => write_compact(out, raw)?,
        },
        Special::RawJson => match last_len(&slots, m, 1) {
            None | Some([]) => out.extend_from_slice(b"null"),
            Some(raw) => write_compact(out, raw)?,
        },
        Special::StringList => {
            let items = all_len(&slots, m, 1);
            if items.is_empty() {
                out.extend_from_slice(b"null");
            } else {
                out.push(b'[');
                for (i, s) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_go_string(out, s);
                }
                out.push(b']');
            }
        }
        Special::SchemaOrArray | Special::SchemaOrStringArray => {
            let list = all_len(&slots, m, 2);
            if !list.is_empty() {
                out.push(b'[');
                for (i, b) in list.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    if m.special == Special::SchemaOrStringArray {
                        write_go_string(out, b);
                    } else {
                        message_json(out, sub_message(m, 2), Some(b), depth + 1, None)?;
                    }
                }
                out.push(b']');
            } else if let Some(b) = last_len(&slots, m, 1) {
                message_json(out, sub_message(m, 1), Some(b), depth + 1, None)?;
            } else {
                out.extend_from_slice(b"null");
            }
        }
        Special::SchemaOrBool => {
            if let Some(b) = last_len(&slots, m, 2) {
                message_json(out, sub_message(m, 2), Some(b), depth + 1, None)?;
            } else if last_varint(&slots, m, 1).unwrap_or(0) != 0 {
                out.extend_from_slice(b"true");
            } else {
                out.extend_from_slice(b"false");
            }
        }
    }
    Ok(())
}
