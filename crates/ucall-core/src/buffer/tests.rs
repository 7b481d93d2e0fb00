// SPDX-License-Identifier: Apache-2.0
//! Tests of the output buffer: segments, attachments, commits, releases and reuse.

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
fn writing_before_a_hole_keeps_it_open() {
    let mut out = OutBuf::new();
    out.push(b"a");
    out.push_hole(7);
    out.push(b"z");
    assert!(out.fill_before(7, |out| out.push(b"1")));
    assert!(out.fill_before(7, |out| out.push(b"2")));
    assert_eq!(
        out.to_vec(),
        b"a12",
        "items leave, the hole still holds what follows it"
    );
    assert!(!out.fill_before(8, |out| out.push(b"x")), "no such hole");
    assert!(out.fill(7, |out| out.push(b"!")));
    assert_eq!(out.to_vec(), b"a12!z");
    assert_eq!(out.pending(), 5);
}

/// `pending` is a running count: after any mix of operations it must equal the bytes
/// the segments still hold, counted one by one.
#[test]
fn the_pending_count_follows_every_operation() {
    fn counted(out: &OutBuf) -> usize {
        out.segments[out.first..].iter().map(|s| s.range.len()).sum()
    }
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % below).unwrap()
    };
    let (mut out, mut other) = (OutBuf::new(), OutBuf::new());
    let mut holes = Vec::new();
    for step in 0..20_000_u64 {
        match next(7) {
            0 => out.push(&vec![b'x'; next(50)]),
            1 => {
                // A head written after its body, into room reserved before it.
                let start = out.data().len();
                out.data().extend_from_slice(&[b'_'; 16]);
                out.data().extend_from_slice(&vec![b'b'; next(40)]);
                let end = out.data().len();
                out.commit(start + 4..start + 16);
                out.commit(start + 16..end);
            }
            2 => {
                out.push_hole(step);
                holes.push(step);
            }
            3 if !holes.is_empty() => {
                let id = holes.remove(next(holes.len() as u64));
                let size = next(30);
                assert!(out.fill(id, |o| o.push(&vec![b'f'; size])));
            }
            4 => {
                let start = out.data().len();
                out.data().push(b'<');
                out.attach(vec![b'a'; next(100) + 1]);
                out.data().push(b'>');
                out.commit(start..start + 2);
            }
            5 => {
                let sendable = out.to_vec().len();
                out.advance(next(sendable as u64 + 1));
                // What is still queued is the same after the sent part is let go.
                let queued = out.to_vec();
                if out.first > 0 && !out.is_empty() {
                    out.release_sent_now(next(64));
                }
                assert_eq!(out.to_vec(), queued, "after step {step}");
            }
            _ => {
                out.move_sendable(&mut other);
                other.advance(next(other.pending() as u64 + 1));
                assert_eq!(other.pending(), counted(&other));
            }
        }
        assert_eq!(out.pending(), counted(&out), "after step {step}");
    }
}

/// A streamed reply's items go out ahead of its hole for as long as it lasts: once
/// sent, neither their bytes nor their attachments are held.
#[test]
fn a_long_stream_holds_only_what_waits_to_be_sent() {
    struct Counted(Arc<AtomicUsize>, Vec<u8>);
    impl AsRef<[u8]> for Counted {
        fn as_ref(&self) -> &[u8] {
            &self.1
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut out = OutBuf::new();
    out.push(b"before;");
    out.push_hole(1);
    out.push(b"after;");
    let mut sent = Vec::new();
    for i in 0..2_000_u32 {
        assert!(out.fill_before(1, |out| {
            let start = out.data().len();
            out.data().extend_from_slice(format!("item {i} ").as_bytes());
            out.data().extend_from_slice(&[b'.'; 1000]);
            out.attach_shared(bytes::Bytes::from_owner(Counted(
                Arc::clone(&dropped),
                vec![b'a'; 5000],
            )));
            out.data().push(b';');
            let end = out.data().len();
            out.commit(start..end);
        }));
        let queued = out.to_vec();
        out.advance(queued.len());
        sent.extend(queued);
        out.release_sent();
        assert!(
            out.data.len() < RELEASE_MIN + 2_000,
            "item {i}: {} bytes held",
            out.data.len()
        );
        assert!(out.buffers.len() <= 1, "item {i}: {} buffers held", out.buffers.len());
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 2_000, "every sent attachment released");
    assert!(out.fill(1, |out| out.push(b"end;")));
    sent.extend(out.to_vec());
    let text = String::from_utf8(sent).unwrap();
    assert!(text.starts_with("before;item 0 ..."), "{}", &text[..40]);
    assert!(text.ends_with(&format!("{};end;after;", "a".repeat(5000))));
    assert_eq!(text.matches("item ").count(), 2_000);
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

#[test]
fn attached_buffers_go_out_in_their_place_without_a_copy() {
    let mut out = OutBuf::new();
    out.push(b"a;");
    let start = out.data().len();
    out.data().extend_from_slice(b"<");
    let big = b"BIG".to_vec();
    let at = big.as_ptr();
    out.attach(big);
    out.data().extend_from_slice(b">");
    out.attach(b"2".to_vec());
    assert_eq!(out.attached_since(start), 4);
    assert_eq!(out.to_vec(), b"a;", "nothing attached is sent before its commit");
    let end = out.data().len();
    out.commit(start..end);
    out.push(b";z");
    assert_eq!(out.attached_since(0), 0);
    assert_eq!(out.to_vec(), b"a;<BIG>2;z");
    assert_eq!(out.pending(), 10);
    let mut slices = [IoSlice::new(&[]); 8];
    let count = out.io_slices(&mut slices);
    assert!(
        slices[..count].iter().any(|s| s.as_ptr() == at),
        "sent from its own buffer"
    );
    out.advance(4); // part of the attached buffer
    assert_eq!(out.to_vec(), b"IG>2;z");
    out.advance(6);
    assert!(out.is_empty());
}

#[test]
fn sendable_bytes_move_ahead_of_a_hole_and_attached_buffers_move_whole() {
    let mut out = OutBuf::new();
    out.push(b"head;");
    out.attach(vec![b'x'; 3]);
    out.commit(5..5);
    out.push_hole(1);
    out.push(b"after");
    let mut sending = OutBuf::new();
    out.move_sendable(&mut sending);
    assert_eq!(sending.to_vec(), b"head;xxx");
    assert!(!out.has_sendable() && !out.is_empty(), "the hole and what follows stay");
    assert!(out.fill(1, |o| o.push(b"hole;")));
    out.move_sendable(&mut sending);
    assert_eq!(sending.to_vec(), b"head;xxxhole;after");
    assert!(out.is_empty());
    // Sent attached buffers are held until shrink, as the byte area is.
    sending.advance(18);
    assert!(sending.is_empty());
    assert_eq!(sending.buffers.len(), 1);
    sending.shrink(0);
    assert!(sending.buffers.is_empty());
}

#[test]
fn truncating_drops_what_was_attached_after_the_cut() {
    let mut out = OutBuf::new();
    out.data().extend_from_slice(b"ke");
    out.attach(b"early".to_vec());
    out.data().extend_from_slice(b"ep");
    out.attach(b"at-the-cut".to_vec());
    out.data().extend_from_slice(b"drop");
    out.attach(b"late".to_vec());
    out.truncate(4);
    assert_eq!(out.attached_since(0), 5);
    out.commit(0..4);
    assert_eq!(out.to_vec(), b"keearlyep");
}

#[test]
fn spares_keep_large_buffers_and_reuse_the_smallest_that_fits() {
    let mut spares = Spares::default();
    spares.give(Vec::with_capacity(1024)); // too small to keep
    spares.give(Vec::with_capacity(Spares::LARGEST + 1)); // too large to keep
    assert_eq!(spares.held(), 0);
    spares.give(vec![7; 1 << 20]);
    spares.give(Vec::with_capacity(4 << 20));
    assert!(spares.take(8 << 20).is_none());
    let taken = spares.take(600 << 10).expect("a kept buffer fits");
    assert!(taken.capacity() >= 1 << 20 && taken.capacity() < 4 << 20);
    assert!(taken.is_empty(), "kept buffers are handed out empty");
    for _ in 0..2 * Spares::KEPT {
        spares.give(Vec::with_capacity(2 << 20));
    }
    assert!(spares.held() <= Spares::KEPT * (4 << 20));
}

/// The tests that keep and take buffers of the process's pool, one at a time: a
/// buffer one keeps is large enough for what another takes.
static POOL_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_large_buffer_allocated_for_one_role_fits_the_next() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Sizes no other test of this binary keeps: the pool is the process's.
    let params = (3 << 20) + 1000;
    let copy = take_or_allocate(params);
    assert!(
        copy.capacity() >= params + params / 16,
        "room beyond the bytes asked for"
    );
    keep(copy);
    let mut reply = Vec::new();
    reserve(&mut reply, params + 50); // the reply: the params' length and an envelope
    assert!(
        reply.capacity() >= params + params / 16,
        "the kept copy was taken, not a fresh buffer"
    );
    assert_eq!(Spares::capacity_for(100), 100, "small sizes are allocated as asked");
    // Larger than any kept buffer, so as to take none from another test.
    let mut growing = vec![0; Spares::LARGEST + 1];
    reserve(&mut growing, 1);
    assert!(
        growing.capacity() >= 2 * (Spares::LARGEST + 1),
        "growth stays geometric"
    );
}

#[test]
fn growing_past_the_threshold_moves_into_a_kept_buffer() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Sizes no other test of this binary keeps: the pool is the process's.
    let size = (5 << 20) + 4096;
    keep(Vec::with_capacity(size));
    let mut input = b"partial request".to_vec();
    reserve(&mut input, 1 << 10); // small: grown by the allocator
    assert!(input.capacity() < Spares::SMALLEST);
    reserve(&mut input, (5 << 20) - 64);
    assert_eq!(input.capacity(), size, "the kept buffer was taken");
    assert_eq!(input, b"partial request");
    assert!(take_kept(1024).is_none(), "small sizes are the allocator's");
}

#[test]
fn a_large_reply_is_written_into_a_kept_buffer_and_kept_again() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let size = (7 << 20) + 4096;
    let mut out = OutBuf::new();
    keep(Vec::with_capacity(size));
    out.prepare((7 << 20) - 64);
    assert_eq!(out.data().capacity(), size);
    out.push(b"reply");
    out.advance(5);
    out.shrink(64 << 10);
    assert!(out.data().capacity() < 1 << 20);
    let kept = take_kept(7 << 20).expect("the reply's area was kept");
    assert_eq!(kept.capacity(), size);
}
