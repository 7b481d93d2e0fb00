// SPDX-License-Identifier: Apache-2.0
//! The connection's output buffer: one growable byte area plus the list of ranges in it
//! that are to be sent, in order, with one vectored write.
//!
//! Ranges let a reply's HTTP head be written *after* its body (once the body's length is
//! known) into room reserved before the body, without moving the body.
//!
//! A segment may also own its bytes: a large result handed over with [`OutBuf::attach`]
//! is sent from its own buffer, in its place among the ranges, instead of being copied
//! into the byte area.
//!
//! A range may also be a *hole*: the place of a reply that a procedure completes later
//! (see [`crate::Deferred`]). Nothing after a hole is sent until it is filled, so replies
//! leave in request order whatever order they complete in.

use std::io::IoSlice;
use std::ops::Range;
use std::sync::{Mutex, PoisonError};

/// Dead bytes in the byte area from which [`OutBuf::release_sent`] moves the live ones
/// together.
const RELEASE_MIN: usize = 64 << 10;

#[derive(Debug, Clone)]
struct Segment {
    /// Bytes of the byte area, or of the attached buffer `own` when set.
    range: Range<usize>,
    /// `Some(id)` while this is an unfilled hole.
    hole: Option<u64>,
    /// An attached buffer (see [`OutBuf::attach`]): its index in `OutBuf::buffers`. An
    /// index, not the buffer, so that segments need no drop and clearing them is free.
    own: Option<usize>,
}

/// An attached buffer: a reply's own (kept for reuse once sent), or shared bytes whose
/// owner is released once sent (a reply attachment: a `Vec`, a numpy array).
#[derive(Debug)]
enum Attached {
    Own(Vec<u8>),
    Shared(bytes::Bytes),
}

impl Default for Attached {
    fn default() -> Self {
        Attached::Own(Vec::new())
    }
}

impl Attached {
    fn as_slice(&self) -> &[u8] {
        match self {
            Attached::Own(bytes) => bytes,
            Attached::Shared(bytes) => bytes,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

impl Segment {
    fn bytes<'s>(&self, data: &'s [u8], buffers: &'s [Attached]) -> &'s [u8] {
        match self.own {
            Some(index) => &buffers[index].as_slice()[self.range.clone()],
            None => &data[self.range.clone()],
        }
    }
}

/// Bytes waiting to be sent on one connection.
#[derive(Default, Debug)]
pub struct OutBuf {
    data: Vec<u8>,
    segments: Vec<Segment>,
    /// Index of the first segment not yet fully sent.
    first: usize,
    /// Bytes queued and not yet sent: kept as segments change, because it is asked
    /// before every message and a pipelined burst queues thousands of segments.
    queued: usize,
    /// Where [`OutBuf::fill`] looks for a hole first: just after the one it filled last.
    /// Replies mostly complete in request order, and a pipelined burst holds a thousand
    /// holes: searching from the first unsent segment made each fill cost them all.
    next_hole_at: usize,
    /// Segments before this index are never extended by a later commit.
    barrier: usize,
    /// Attached buffers, queued or sent. Held, like the byte area, until
    /// [`OutBuf::shrink`] finds everything sent: a zero-copy send may still read them
    /// after its result.
    buffers: Vec<Attached>,
    /// Attachments not yet queued, as (offset in the byte area, index in `buffers`):
    /// each is sent before the byte area's byte at its offset, once a commit covers it.
    attached: Vec<(usize, usize)>,
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

    /// Queue `range` of the byte area for sending, after everything queued before, with
    /// the buffers attached at offsets within it (ends included) in their places.
    pub fn commit(&mut self, range: Range<usize>) {
        if self.attached.is_empty() {
            self.queue(range);
        } else {
            self.commit_attached(range);
        }
    }

    /// Queue `range` of the byte area, extending the last segment when it ends there.
    fn queue(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.queued += range.len();
        let can_extend = self.segments.len() > self.first.max(self.barrier);
        match self.segments.last_mut() {
            Some(last) if can_extend && last.hole.is_none() && last.own.is_none() && last.range.end == range.start => {
                last.range.end = range.end;
            }
            _ => self.segments.push(Segment {
                range,
                hole: None,
                own: None,
            }),
        }
    }

    #[cold]
    fn commit_attached(&mut self, range: Range<usize>) {
        let mut from = range.start;
        for (at, index) in std::mem::take(&mut self.attached) {
            if at < range.start || at > range.end {
                self.attached.push((at, index));
                continue;
            }
            self.queue(from..at);
            from = at;
            self.queued += self.buffers[index].len();
            self.segments.push(Segment {
                range: 0..self.buffers[index].len(),
                hole: None,
                own: Some(index),
            });
        }
        self.queue(from..range.end);
    }

    /// Send `bytes` at the current end of the byte area, without copying them: they go
    /// out in that place once a commit covers it (so the writer that attaches must also
    /// commit). For large results; small ones are cheaper copied.
    pub fn attach(&mut self, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            self.attached.push((self.data.len(), self.buffers.len()));
            self.buffers.push(Attached::Own(bytes));
        }
    }

    /// [`OutBuf::attach`] for shared bytes (a reply's attachment, docs/wire.md): sent from
    /// their owner's memory, which is released once they are sent.
    pub fn attach_shared(&mut self, bytes: bytes::Bytes) {
        if !bytes.is_empty() {
            self.attached.push((self.data.len(), self.buffers.len()));
            self.buffers.push(Attached::Shared(bytes));
        }
    }

    /// Bytes attached at offsets from `from` on and not yet committed: they count in the
    /// length of a message written since `from`.
    #[must_use]
    pub fn attached_since(&self, from: usize) -> usize {
        self.attached
            .iter()
            .filter(|(at, _)| *at >= from)
            .map(|&(_, index)| self.buffers[index].len())
            .sum()
    }

    /// Cut the byte area back to `len` bytes, dropping what was attached from there on
    /// (at `len` too: it belonged to what is cut). Their buffers wait for the next shrink.
    pub fn truncate(&mut self, len: usize) {
        self.data.truncate(len);
        self.attached.retain(|&(at, _)| at < len);
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
            own: None,
        });
    }

    /// Fill hole `id` with what `write` queues (through `commit`/`push`). Returns `false`
    /// (and queues nothing) when there is no such hole.
    pub fn fill(&mut self, id: u64, write: impl FnOnce(&mut OutBuf)) -> bool {
        self.write_at_hole(id, true, write)
    }

    /// Queue what `write` queues just before hole `id`, which stays open: a streamed
    /// reply's items go out ahead of its final reply, and after every reply before it.
    /// Returns `false` (and queues nothing) when there is no such hole.
    pub fn fill_before(&mut self, id: u64, write: impl FnOnce(&mut OutBuf)) -> bool {
        self.write_at_hole(id, false, write)
    }

    fn write_at_hole(&mut self, id: u64, close: bool, write: impl FnOnce(&mut OutBuf)) -> bool {
        // Holes are never behind `first`.
        let hint = self.next_hole_at.clamp(self.first, self.segments.len());
        let is_it = |s: &Segment| s.hole == Some(id);
        let found = match self.segments[hint..].iter().position(is_it) {
            Some(at) => Some(hint + at),
            None => self.segments[self.first..hint]
                .iter()
                .position(is_it)
                .map(|at| self.first + at),
        };
        let Some(index) = found else {
            return false;
        };
        let before = self.segments.len();
        let barrier = std::mem::replace(&mut self.barrier, before);
        write(self);
        self.barrier = barrier;
        let written: Vec<Segment> = self.segments.drain(before..).collect();
        self.next_hole_at = index + written.len();
        // Filling replaces the hole; writing before it keeps the hole after the bytes.
        let replaced = if close { index..index + 1 } else { index..index };
        self.segments.splice(replaced, written);
        true
    }

    /// Bytes queued and not yet sent (holes count nothing).
    #[must_use]
    pub fn pending(&self) -> usize {
        self.queued
    }

    /// Whether it holds any memory (an idle connection's buffers can be given back).
    #[must_use]
    pub fn holds_memory(&self) -> bool {
        self.data.capacity() > 0
            || self.segments.capacity() > 0
            || self.buffers.capacity() > 0
            || self.attached.capacity() > 0
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
            *slot = IoSlice::new(segment.bytes(&self.data, &self.buffers));
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
            self.queued -= take;
            sent -= take;
            if segment.range.is_empty() && segment.hole.is_none() {
                self.first += 1;
            }
        }
        if self.is_empty() {
            self.clear();
        }
    }

    /// While a hole keeps the buffer from emptying (a streamed reply under way), give back
    /// what was sent before the first unsent segment: the byte area's bytes that no
    /// queued segment uses are cut away (what is left moves down) and sent attached
    /// buffers are released, so that a long stream holds only what waits to be sent, not
    /// every item it sent. Engines call it where the kernel reads none of the sent bytes
    /// any more (as for [`OutBuf::shrink`]).
    pub fn release_sent(&mut self) {
        if self.first == 0 || self.is_empty() {
            return;
        }
        self.release_sent_now(RELEASE_MIN);
    }

    /// [`OutBuf::release_sent`], moving the live bytes down once `move_from` sent bytes
    /// lie before them.
    #[cold]
    fn release_sent_now(&mut self, move_from: usize) {
        let mut released = false;
        for segment in self.segments.drain(..self.first) {
            if let Some(index) = segment.own {
                released = true;
                if let Attached::Own(buffer) = std::mem::take(&mut self.buffers[index]) {
                    keep(buffer);
                }
            }
        }
        self.next_hole_at = self.next_hole_at.saturating_sub(self.first);
        self.barrier = self.barrier.saturating_sub(self.first);
        self.first = 0;
        // Moving the byte area's live bytes together costs their length: done once the
        // dead bytes are many, so a stream of small items moves little. At most `queued`
        // bytes are live, so most sends (a pipeline's replies around deferred ones) are
        // told apart without walking the segments. Not while an attachment waits for its
        // commit (its offset names a place in the area).
        if self.attached.is_empty() && self.data.len().saturating_sub(self.queued) >= move_from.max(1) {
            // In the order of their places, each range moves down to where the last ended.
            let mut order: Vec<usize> = (0..self.segments.len())
                .filter(|&i| self.segments[i].own.is_none())
                .collect();
            order.sort_by_key(|&i| self.segments[i].range.start);
            let mut end = 0;
            for i in order {
                let range = self.segments[i].range.clone();
                self.data.copy_within(range.clone(), end);
                self.segments[i].range = end..end + range.len();
                end += range.len();
            }
            self.data.truncate(end);
        }
        if !released {
            return;
        }
        let first_buffer = (self.segments.iter().filter_map(|s| s.own))
            .chain(self.attached.iter().map(|&(_, index)| index))
            .min()
            .unwrap_or(self.buffers.len());
        if first_buffer > 0 {
            self.buffers.drain(..first_buffer);
            for segment in &mut self.segments {
                if let Some(index) = segment.own.as_mut() {
                    *index -= first_buffer;
                }
            }
            for (_, index) in &mut self.attached {
                *index -= first_buffer;
            }
        }
    }

    /// Drop everything queued; the memory is kept for reuse (attached buffers until
    /// [`OutBuf::shrink`]).
    pub fn clear(&mut self) {
        self.data.clear();
        self.segments.clear();
        self.attached.clear();
        self.first = 0;
        self.queued = 0;
        self.next_hole_at = 0;
        self.barrier = 0;
    }

    /// Drop whatever is queued (its connection is closed) and give the large areas back to
    /// the kept buffers: [`OutBuf::clear`], then [`OutBuf::shrink`] to nothing. Engines
    /// call it only once the kernel reads none of it any more.
    pub fn release(&mut self) {
        self.clear();
        self.shrink(0);
        // What is left is small vectors nobody keeps: an idle connection holds none.
        *self = Self::default();
    }

    /// Release memory held beyond `kept` bytes (after a large reply), once all is sent:
    /// the large area, and attached buffers, are kept for the next large message (see
    /// [`keep`]). Engines call it only once the kernel reads none of it any more.
    pub fn shrink(&mut self, kept: usize) {
        if !self.is_empty() {
            return;
        }
        if !self.buffers.is_empty() && self.attached.is_empty() {
            for buffer in self.buffers.drain(..) {
                if let Attached::Own(buffer) = buffer {
                    keep(buffer);
                }
            }
        }
        if self.data.capacity() > kept {
            keep(std::mem::replace(&mut self.data, Vec::with_capacity(kept)));
            self.segments = Vec::new();
        }
    }

    /// Before a large request is answered: when nothing is queued, take a kept buffer of
    /// at least `expected` bytes for the reply, so that a large reply is written into
    /// memory already in place rather than into fresh pages grown step by step.
    pub fn prepare(&mut self, expected: usize) {
        if self.is_empty() && self.data.capacity() < expected {
            if let Some(spare) = take_kept(expected) {
                keep(std::mem::replace(&mut self.data, spare));
            }
        }
    }

    /// Move what can be sent now (everything before the first hole) to the end of `to`:
    /// bytes of the byte area are copied, attached buffers handed over.
    pub fn move_sendable(&mut self, to: &mut OutBuf) {
        while let Some(segment) = self.segments.get(self.first) {
            if segment.hole.is_some() {
                break;
            }
            let moved = segment.range.len();
            match segment.own {
                Some(index) => {
                    to.queued += segment.range.len();
                    to.segments.push(Segment {
                        range: segment.range.clone(),
                        hole: None,
                        own: Some(to.buffers.len()),
                    });
                    to.buffers.push(std::mem::take(&mut self.buffers[index]));
                }
                None => to.push(&self.data[segment.range.clone()]),
            }
            self.queued -= moved;
            self.first += 1;
        }
        if self.is_empty() {
            self.clear();
        }
    }

    /// Everything queued up to the first hole, concatenated (for tests and diagnostics).
    #[must_use]
    pub fn to_vec(&self) -> Vec<u8> {
        self.segments[self.first..]
            .iter()
            .take_while(|s| s.hole.is_none())
            .flat_map(|s| s.bytes(&self.data, &self.buffers).iter().copied())
            .collect()
    }
}

/// Large buffers the process keeps for its next large messages.
///
/// A connection gives its buffers back once a large request or reply is done (an idle
/// connection holds no large buffer), and the allocator would then hand the pages back to
/// the kernel: the next 1.6 MB request took over a thousand page faults to fill fresh
/// memory, a fifth of its time (perf). Buffers kept here are reused instead.
///
/// One pool for the process, not one per thread: buffers cross threads (a Python call's
/// params are copied on the worker and freed on the thread that ran the call), and pools
/// per thread grew with the thread count, to 190 MB for a Python server whose slow calls
/// had started 40 threads. At most [`Spares::KEPT`] buffers of at most
/// [`Spares::LARGEST`] bytes are kept: 32 MiB at the very most, and only after messages
/// that large. The lock is taken only for buffers of a quarter MiB or more, whose copy
/// costs far more. See [`keep`], [`take_kept`] and [`reserve`].
#[derive(Default, Debug)]
pub struct Spares {
    kept: Vec<Vec<u8>>,
}

static SPARES: Mutex<Spares> = Mutex::new(Spares { kept: Vec::new() });

fn spares<T>(f: impl FnOnce(&mut Spares) -> T) -> T {
    f(&mut SPARES.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Keep `buffer` for reuse when it is worth it (see [`Spares::worth_keeping`]); the lock
/// is taken only then.
pub fn keep(buffer: Vec<u8>) {
    if Spares::worth_keeping(buffer.capacity()) {
        spares(|s| s.give(buffer));
    }
}

/// A kept buffer with room for `at_least` bytes (see [`Spares::take`]); `None` for sizes
/// of [`Spares::SMALLEST`] / 2 or less, which the allocator serves well.
#[must_use]
pub fn take_kept(at_least: usize) -> Option<Vec<u8>> {
    if at_least <= Spares::SMALLEST / 2 {
        return None;
    }
    spares(|s| s.take(at_least))
}

/// A kept buffer with room for `at_least` bytes, else a new one; a large new one gets
/// the room [`Spares::capacity_for`] gives, so that it serves again once kept.
#[must_use]
pub fn take_or_allocate(at_least: usize) -> Vec<u8> {
    take_kept(at_least).unwrap_or_else(|| Vec::with_capacity(Spares::capacity_for(at_least)))
}

/// Make room for `additional` more bytes in `buffer`: once it grows past
/// [`Spares::SMALLEST`] / 2, by moving it into a kept buffer when one is large enough
/// (the old one is kept in its place), else by growing it (to at least twice its size,
/// and with the room [`Spares::capacity_for`] gives).
pub fn reserve(buffer: &mut Vec<u8>, additional: usize) {
    let needed = buffer.len() + additional;
    if needed <= buffer.capacity() {
        return;
    }
    match take_kept(needed) {
        Some(mut spare) => {
            spare.extend_from_slice(buffer);
            keep(std::mem::replace(buffer, spare));
        }
        None => {
            let capacity = Spares::capacity_for(needed).max(2 * buffer.capacity());
            buffer.reserve_exact(capacity - buffer.len());
        }
    }
}

impl Spares {
    /// Buffers smaller than this are not worth keeping: allocating them is cheap.
    pub const SMALLEST: usize = 256 << 10;
    /// Buffers larger than this go back to the allocator.
    pub const LARGEST: usize = 8 << 20;
    /// Most buffers kept: a large request's input and reply, and in Python its params and
    /// result. More only filled up with buffers of passing bursts.
    pub const KEPT: usize = 4;

    /// The capacity to allocate for `at_least` bytes. Above [`Spares::SMALLEST`] / 2, a
    /// sixteenth more, in whole 64 KiB: the buffers of one large message (its input, its
    /// params, its reply) differ in length by an envelope, and allocated to the byte, a
    /// kept one was a few bytes short for the next role (a 2,140,855-byte params copy for
    /// the 2,140,905 bytes of the next reply), so each large message allocated afresh.
    #[must_use]
    pub const fn capacity_for(at_least: usize) -> usize {
        if at_least <= Self::SMALLEST / 2 {
            return at_least;
        }
        (at_least + at_least / 16).next_multiple_of(64 << 10)
    }

    /// Whether a buffer of `capacity` bytes is kept: from [`Spares::SMALLEST`] to
    /// [`Spares::LARGEST`].
    #[must_use]
    pub const fn worth_keeping(capacity: usize) -> bool {
        capacity >= Self::SMALLEST && capacity <= Self::LARGEST
    }

    /// Keep `buffer` (emptied) for reuse when it is worth it; otherwise free it.
    pub fn give(&mut self, mut buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if !Self::worth_keeping(capacity) {
            return;
        }
        buffer.clear();
        if self.kept.len() < Self::KEPT {
            self.kept.push(buffer);
        } else if let Some(smallest) = self.kept.iter_mut().min_by_key(|b| b.capacity()) {
            if smallest.capacity() < capacity {
                *smallest = buffer;
            }
        }
    }

    /// The smallest kept buffer with room for `at_least` bytes, if any.
    pub fn take(&mut self, at_least: usize) -> Option<Vec<u8>> {
        let index = (0..self.kept.len())
            .filter(|&i| self.kept[i].capacity() >= at_least)
            .min_by_key(|&i| self.kept[i].capacity())?;
        Some(self.kept.swap_remove(index))
    }

    /// Bytes held by the kept buffers.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.kept.iter().map(Vec::capacity).sum()
    }
}

#[cfg(test)]
mod tests;
