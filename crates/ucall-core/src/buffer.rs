// SPDX-License-Identifier: Apache-2.0
//! The connection's output buffer: one growable byte area plus the list of ranges in it
//! that are to be sent, in order, with one vectored write.
//!
//! Ranges let a reply's HTTP head be written *after* its body (once the body's length is
//! known) into room reserved before the body, without moving the body.
//!
//! A range may also be a *hole*: the place of a reply that a procedure completes later
//! (see [`crate::Deferred`]). Nothing after a hole is sent until it is filled, so replies
//! leave in request order whatever order they complete in.

use std::io::IoSlice;
use std::ops::Range;

#[derive(Debug, Clone)]
struct Segment {
    range: Range<usize>,
    /// `Some(id)` while this is an unfilled hole.
    hole: Option<u64>,
}

/// Bytes waiting to be sent on one connection.
#[derive(Default, Debug)]
pub struct OutBuf {
    data: Vec<u8>,
    segments: Vec<Segment>,
    /// Index of the first segment not yet fully sent.
    first: usize,
    /// Segments before this index are never extended by a later commit.
    barrier: usize,
}

impl OutBuf {
    /// An empty buffer.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The byte area to append to; appended bytes are sent only once [`OutBuf::commit`]ted.
    pub fn data(&mut self) -> &mut Vec<u8> {
        &mut self.data
    }

    /// Queue `range` of the byte area for sending, after everything queued before.
    pub fn commit(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        let can_extend = self.segments.len() > self.first.max(self.barrier);
        match self.segments.last_mut() {
            Some(last) if can_extend && last.hole.is_none() && last.range.end == range.start => {
                last.range.end = range.end;
            }
            _ => self.segments.push(Segment { range, hole: None }),
        }
    }

    /// Append `bytes` and queue them.
    pub fn push(&mut self, bytes: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        self.commit(start..self.data.len());
    }

    /// Queue a hole named `id`: the bytes queued after it wait until [`OutBuf::fill`].
    pub fn push_hole(&mut self, id: u64) {
        let at = self.data.len();
        self.segments.push(Segment {
            range: at..at,
            hole: Some(id),
        });
    }

    /// Fill hole `id` with what `write` queues (through `commit`/`push`). Returns `false`
    /// (and queues nothing) when there is no such hole.
    pub fn fill(&mut self, id: u64, write: impl FnOnce(&mut OutBuf)) -> bool {
        let Some(index) = self.segments.iter().position(|s| s.hole == Some(id)) else {
            return false;
        };
        let before = self.segments.len();
        let barrier = std::mem::replace(&mut self.barrier, before);
        write(self);
        self.barrier = barrier;
        let written: Vec<Segment> = self.segments.drain(before..).collect();
        self.segments.splice(index..=index, written);
        true
    }

    /// Bytes queued and not yet sent (holes count nothing).
    #[must_use]
    pub fn pending(&self) -> usize {
        self.segments[self.first..].iter().map(|s| s.range.len()).sum()
    }

    /// Whether nothing is queued, not even a hole.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.first == self.segments.len()
    }

    /// Whether bytes can be sent now (some are queued before the first hole).
    #[must_use]
    pub fn has_sendable(&self) -> bool {
        self.segments.get(self.first).is_some_and(|s| s.hole.is_none())
    }

    /// Fill `slices` with the queued bytes up to the first hole; returns how many were filled.
    pub fn io_slices<'s>(&'s self, slices: &mut [IoSlice<'s>]) -> usize {
        let mut n = 0;
        for (slot, segment) in slices.iter_mut().zip(&self.segments[self.first..]) {
            if segment.hole.is_some() {
                break;
            }
            *slot = IoSlice::new(&self.data[segment.range.clone()]);
            n += 1;
        }
        n
    }

    /// Mark `sent` bytes as written to the socket; the area is reused once all is sent.
    pub fn advance(&mut self, mut sent: usize) {
        while sent > 0 && self.first < self.segments.len() {
            let segment = &mut self.segments[self.first];
            if segment.hole.is_some() {
                break;
            }
            let take = sent.min(segment.range.len());
            segment.range.start += take;
            sent -= take;
            if segment.range.is_empty() && segment.hole.is_none() {
                self.first += 1;
            }
        }
        if self.is_empty() {
            self.clear();
        }
    }

    /// Drop everything queued; the memory is kept for reuse.
    pub fn clear(&mut self) {
        self.data.clear();
        self.segments.clear();
        self.first = 0;
        self.barrier = 0;
    }

    /// Release memory held beyond `keep` bytes (after a large reply), once all is sent.
    pub fn shrink(&mut self, keep: usize) {
        if self.is_empty() && self.data.capacity() > keep {
            self.data = Vec::with_capacity(keep);
            self.segments = Vec::new();
        }
    }

    /// Everything queued up to the first hole, concatenated (for tests and diagnostics).
    #[must_use]
    pub fn to_vec(&self) -> Vec<u8> {
        self.segments[self.first..]
            .iter()
            .take_while(|s| s.hole.is_none())
            .flat_map(|s| self.data[s.range.clone()].iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_segments_in_order_and_reuses_memory() {
        let mut out = OutBuf::new();
        out.push(b"ab");
        out.data().extend_from_slice(b"__cd");
        out.commit(4..6);
        out.push(b"ef");
        assert_eq!(out.to_vec(), b"abcdef");
        assert_eq!(out.pending(), 6);
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(out.io_slices(&mut slices), 2);
        out.advance(3);
        assert_eq!(out.to_vec(), b"def");
        out.advance(3);
        assert!(out.is_empty());
        assert!(out.data().is_empty());
    }

    #[test]
    fn holes_hold_back_what_follows_until_filled() {
        let mut out = OutBuf::new();
        out.push(b"1;");
        out.push_hole(7);
        out.push(b"3;");
        out.push_hole(8);
        assert_eq!(out.to_vec(), b"1;");
        out.advance(2);
        assert!(!out.has_sendable() && !out.is_empty());
        assert!(out.fill(8, |o| o.push(b"4;")));
        assert_eq!(out.to_vec(), b"");
        assert!(out.fill(7, |o| o.push(b"2;")));
        assert!(!out.fill(7, |o| o.push(b"again")));
        assert_eq!(out.to_vec(), b"2;3;4;");
        out.advance(6);
        assert!(out.is_empty());
    }
}
