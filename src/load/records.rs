//! A watch body's frames as whole events. A frame usually holds whole events: they are
//! read where they are, and only a partial one at a frame's end is copied, for the next
//! frame to complete. (Copying every frame into one buffer, which each split then left
//! without capacity, cost the load tool a `memmove` and a fresh allocation per event.)

use bytes::{Buf, BytesMut};

use crate::proto::split_frame;

/// How a stream's events are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// JSON: one event per line (empty lines skipped).
    Lines,
    /// Protobuf: each event behind a 4-byte big-endian length, at most this long.
    LengthPrefixed { max: usize },
}

/// The most bytes a partial event may hold: a line that has not ended by then is not an
/// event the writer made (its objects are a few KiB), so the stream is out of step.
pub const MAX_PARTIAL: usize = 16 << 20;

/// A length prefix beyond the framing's maximum, or a line longer than [`MAX_PARTIAL`]:
/// the stream is out of step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("watch frame exceeds the largest event expected")]
pub struct OutOfStep;

/// The bytes of an event begun in one frame and not yet ended.
#[derive(Debug, Default)]
pub struct Records {
    partial: BytesMut,
}

impl Records {
    /// Calls `each` with every event that `data` completes, in order.
    pub fn feed(
        &mut self,
        framing: Framing,
        data: &[u8],
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), OutOfStep> {
        let from_frame = self.partial.is_empty();
        if !from_frame {
            self.partial.extend_from_slice(data);
        }
        let src: &[u8] = if from_frame { data } else { &self.partial };
        let mut used = 0;
        while let Some((record, len)) = next(framing, &src[used..])? {
            used += len;
            // An empty line separates nothing; an empty protobuf event is the caller's
            // to reject.
            if !(record.is_empty() && framing == Framing::Lines) {
                each(record);
            }
        }
        let left = if from_frame {
            data.len()
        } else {
            self.partial.len()
        } - used;
        if left > MAX_PARTIAL {
            self.partial.clear();
            return Err(OutOfStep);
        }
        if from_frame {
            self.partial.extend_from_slice(&data[used..]);
        } else if used == self.partial.len() {
            // Keeps the capacity for the next partial event.
            self.partial.clear();
        } else {
            self.partial.advance(used);
        }
        Ok(())
    }
}

/// The event at the start of `src` and how many bytes it spans with its delimiter, or
/// `None` when `src` holds no whole event.
fn next(framing: Framing, src: &[u8]) -> Result<Option<(&[u8], usize)>, OutOfStep> {
    match framing {
        Framing::Lines => Ok(memchr::memchr(b'\n', src).map(|nl| (&src[..nl], nl + 1))),
        Framing::LengthPrefixed { max } => Ok(split_frame(src, max)
            .map_err(|_| OutOfStep)?
            .map(|(frame, _)| (frame, 4 + frame.len()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(framing: Framing, frames: &[&[u8]]) -> (Vec<Vec<u8>>, usize) {
        let mut r = Records::default();
        let mut out = Vec::new();
        for f in frames {
            r.feed(framing, f, |e| out.push(e.to_vec())).unwrap();
        }
        (out, r.partial.len())
    }

    #[test]
    fn whole_lines_are_read_in_place_and_a_partial_one_waits_for_its_end() {
        let (out, left) = feed_all(Framing::Lines, &[b"a1\n\nb22\nc3", b"3", b"3\nd\n"]);
        assert_eq!(out, [&b"a1"[..], b"b22", b"c333", b"d"]);
        assert_eq!(left, 0);
        let (out, left) = feed_all(Framing::Lines, &[b"x\ny", b"yy"]);
        assert_eq!(out, [b"x"]);
        assert_eq!(left, 3);
    }

    #[test]
    fn a_partial_line_followed_by_whole_ones_keeps_their_order() {
        let (out, left) = feed_all(Framing::Lines, &[b"ab", b"c\nd\ne\nf"]);
        assert_eq!(out, [&b"abc"[..], b"d", b"e"]);
        assert_eq!(left, 1);
    }

    fn prefixed(events: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for e in events {
            v.extend_from_slice(&(e.len() as u32).to_be_bytes());
            v.extend_from_slice(e);
        }
        v
    }

    #[test]
    fn length_prefixed_events_split_anywhere_arrive_whole() {
        let framing = Framing::LengthPrefixed { max: 64 };
        let wire = prefixed(&[b"one", b"", b"three", b"four"]);
        for cut in 0..wire.len() {
            for cut2 in cut..wire.len() {
                let (out, left) =
                    feed_all(framing, &[&wire[..cut], &wire[cut..cut2], &wire[cut2..]]);
                assert_eq!(
                    out,
                    [&b"one"[..], b"", b"three", b"four"],
                    "cuts {cut} {cut2}"
                );
                assert_eq!(left, 0);
            }
        }
    }

    #[test]
    fn a_line_that_never_ends_is_out_of_step_before_it_outgrows_the_bound() {
        let mut r = Records::default();
        let chunk = vec![b'x'; MAX_PARTIAL / 4];
        let mut fed = Ok(());
        for _ in 0..5 {
            fed = r.feed(Framing::Lines, &chunk, |_| panic!("no line ended"));
            if fed.is_err() {
                break;
            }
        }
        assert_eq!(fed, Err(OutOfStep));
        assert!(r.partial.capacity() <= 2 * MAX_PARTIAL);
    }

    #[test]
    fn a_length_beyond_the_maximum_is_out_of_step() {
        let mut r = Records::default();
        let wire = prefixed(&[&[0u8; 65]]);
        assert_eq!(
            r.feed(Framing::LengthPrefixed { max: 64 }, &wire, |_| {}),
            Err(OutOfStep)
        );
    }
}
