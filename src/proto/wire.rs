//! Protobuf wire primitives: varints, tags, length prefixes (written by back-patching),
//! and a bounds-checked reader. Nothing here panics on malformed input.

use super::ProtoError;

pub(crate) const WT_VARINT: u8 = 0;
pub(crate) const WT_FIXED64: u8 = 1;
pub(crate) const WT_LEN: u8 = 2;
pub(crate) const WT_FIXED32: u8 = 5;

pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_tag(out: &mut Vec<u8>, num: u32, wire_type: u8) {
    put_varint(out, ((num as u64) << 3) | wire_type as u64);
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, num: u32, bytes: &[u8]) {
    put_tag(out, num, WT_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Start a length-delimited value: reserve one byte for its length. Nearly all nested
/// messages are shorter than 128 bytes, so `end_len` rarely moves anything.
pub(crate) fn begin_len(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len() - 1
}

/// Finish what `begin_len` started: write the length varint, widening it in place.
pub(crate) fn end_len(out: &mut Vec<u8>, pos: usize) {
    let len = out.len() - pos - 1;
    if len < 0x80 {
        out[pos] = len as u8;
        return;
    }
    let n = varint_len(len as u64);
    let extra = n - 1;
    let end = out.len();
    out.resize(end + extra, 0);
    out.copy_within(pos + 1..end, pos + 1 + extra);
    let mut v = len as u64;
    for b in &mut out[pos..pos + n] {
        *b = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
    }
    out[pos + n - 1] &= 0x7f;
}

/// One field read from the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WireValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'a [u8]),
}

impl WireValue<'_> {
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            WireValue::Varint(_) => WT_VARINT,
            WireValue::Fixed64(_) => WT_FIXED64,
            WireValue::Fixed32(_) => WT_FIXED32,
            WireValue::Len(_) => WT_LEN,
        }
    }
}

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or(ProtoError::Truncated)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(ProtoError::VarintOverflow);
            }
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(ProtoError::VarintOverflow)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self.pos.checked_add(n).ok_or(ProtoError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(ProtoError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// The next `(field number, value)`, or `None` at the end of the buffer.
    pub(crate) fn field(&mut self) -> Result<Option<(u32, WireValue<'a>)>, ProtoError> {
        if self.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let num = key >> 3;
        if num == 0 || num > (u32::MAX >> 3) as u64 {
            return Err(ProtoError::InvalidFieldNumber(num));
        }
        let value = match (key & 7) as u8 {
            WT_VARINT => WireValue::Varint(self.varint()?),
            WT_FIXED64 => {
                let b = self.take(8)?;
                WireValue::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            WT_LEN => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| ProtoError::Truncated)?;
                WireValue::Len(self.take(n)?)
            }
            WT_FIXED32 => {
                let b = self.take(4)?;
                WireValue::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            wt => return Err(ProtoError::UnsupportedWireType(wt)),
        };
        Ok(Some((num as u32, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_negative_int32_takes_ten_bytes() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX,
            (-1i32) as i64 as u64,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(Reader::new(&out).varint().unwrap(), v);
        }
        let mut out = Vec::new();
        put_varint(&mut out, (-1i32) as i64 as u64);
        assert_eq!(out.len(), 10, "Go writes uint64(int32(-1))");
    }

    #[test]
    fn backpatched_lengths_widen() {
        for n in [0usize, 1, 127, 128, 16383, 16384, 70000] {
            let mut out = vec![0xaa];
            let pos = begin_len(&mut out);
            out.extend(std::iter::repeat_n(7u8, n));
            end_len(&mut out, pos);
            let mut expect = vec![0xaa];
            put_varint(&mut expect, n as u64);
            expect.extend(std::iter::repeat_n(7u8, n));
            assert_eq!(out, expect, "{n}");
        }
    }

    #[test]
    fn reader_rejects_garbage() {
        assert!(Reader::new(&[0x0a, 0x05, 1]).field().is_err(), "truncated");
        assert!(Reader::new(&[0x0b]).field().is_err(), "group wire type");
        assert!(Reader::new(&[0x00, 0x00]).field().is_err(), "field 0");
        assert!(
            Reader::new(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
                .field()
                .is_err(),
            "11-byte varint"
        );
        assert!(
            Reader::new(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02])
                .field()
                .is_err(),
            "varint over 64 bits"
        );
        assert!(
            Reader::new(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f])
                .field()
                .is_err(),
            "huge length"
        );
    }
}
