// SPDX-License-Identifier: Apache-2.0
//! The connection's output buffer: one growable byte area plus the list of ranges in it
//! that are to be sent, in order, with one vectored write.
//!
//! Ranges let a reply's HTTP head be written *after* its body (once the body's length is
//! known) into room reserved before the body, without moving the body.

use std::io::IoSlice;
use std::ops::Range;

/// Bytes waiting to be sent on one connection.
#[derive(Default, Debug)]
pub struct OutBuf {
    data: Vec<u8>,
    segments: Vec<Range<usize>>,
    /// Index of the first segment not yet fully sent.
    first: usize,
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
        let has_unsent = self.segments.len() > self.first;
        match self.segments.last_mut() {
            Some(last) if has_unsent && last.end == range.start => last.end = range.end,
            _ => self.segments.push(range),
        }
    }

    /// Append `bytes` and queue them.
    pub fn push(&mut self, bytes: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        self.commit(start..self.data.len());
    }

    /// Bytes queued and not yet sent.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.segments[self.first..].iter().map(ExactSizeIterator::len).sum()
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.first == self.segments.len()
    }

    /// Fill `slices` with the queued bytes, in order; returns how many were filled.
    pub fn io_slices<'s>(&'s self, slices: &mut [IoSlice<'s>]) -> usize {
        let mut n = 0;
        for (slot, range) in slices.iter_mut().zip(&self.segments[self.first..]) {
            *slot = IoSlice::new(&self.data[range.clone()]);
            n += 1;
        }
        n
    }

    /// Mark `sent` bytes as written to the socket; the area is reused once all is sent.
    pub fn advance(&mut self, mut sent: usize) {
        while sent > 0 && self.first < self.segments.len() {
            let segment = &mut self.segments[self.first];
            let take = sent.min(segment.len());
            segment.start += take;
            sent -= take;
            if segment.start == segment.end {
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
    }

    /// Release memory held beyond `keep` bytes (after a large reply), once all is sent.
    pub fn shrink(&mut self, keep: usize) {
        if self.is_empty() && self.data.capacity() > keep {
            self.data = Vec::with_capacity(keep);
            self.segments = Vec::new();
        }
    }

    /// Everything queued, concatenated (for tests and diagnostics).
    #[must_use]
    pub fn to_vec(&self) -> Vec<u8> {
        self.segments[self.first..]
            .iter()
            .flat_map(|r| self.data[r.clone()].iter().copied())
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
}
