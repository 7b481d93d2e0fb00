// SPDX-License-Identifier: Apache-2.0
//! A connection's input lent in place to the calls it carries.
//!
//! While a connection's buffered input is fed to its session, a handler (or a batch queue)
//! called by a binary message in it may keep bytes of it, an attachment say, as [`Bytes`]
//! that view them where they lie: [`keep`]. When the feed ends, a connection whose lent bytes are still held hands its
//! whole input buffer over to them (moved, so nothing moves in memory) and takes a new
//! one with only what is left to read; the buffer is given back to the kept buffers
//! ([`crate::buffer::keep`]) once the last holder lets go. Without a holder left, the
//! input stays the connection's, untouched. Bytes fed from anywhere else (the worker's
//! read buffer, a session's own) are copied. A call run later, from a copy of its params
//! in shared [`Bytes`], lends that copy the same way ([`shared`]).

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

/// The input buffer of one feed, once its connection has handed it over.
#[derive(Default)]
struct Lent(OnceLock<Vec<u8>>);

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(input) = self.0.take() {
            crate::buffer::keep(input);
        }
    }
}

/// Bytes of a lent input: they stay where they are for as long as `_lent` is held.
struct Held {
    /// Holds the buffer (read through `data`).
    _lent: Arc<Lent>,
    data: *const u8,
    len: usize,
}

// SAFETY: the bytes are only read, and do not change or move while `_lent` is held: until
// the feed ends they are the connection's input, borrowed by the feed and not written;
// then either `_lent` holds that buffer (moved, not copied) or no `Held` is left.
unsafe impl Send for Held {}
// SAFETY: as for `Send`: shared reads of memory that does not change or move.
unsafe impl Sync for Held {}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `data` points at `len` bytes kept alive and unchanged (see above).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

/// Where the bytes lent on this thread come from.
enum Source {
    /// The input of the connection being fed, and what was kept of it so far.
    Input(Option<Arc<Lent>>),
    /// Shared bytes a call's params were copied into to wait ([`shared`]).
    Shared(Bytes),
}

/// The bytes lent on this thread now: their address range and where they come from.
struct Lending {
    start: usize,
    end: usize,
    source: Source,
}

/// Bytes fewer than this are copied even where they could be lent: copying them costs
/// less than handing a buffer over, and a small view kept for long would hold a whole
/// receive buffer (up to megabytes) alive.
pub const LEND_FROM: usize = 4096;

thread_local! {
    static LENDING: RefCell<Option<Lending>> = const { RefCell::new(None) };
}

/// `bytes` kept beyond the current call: a view of them in place when they lie in the
/// input of the connection being fed on this thread (or in the bytes [`shared`] lends)
/// and are at least [`LEND_FROM`] long, else a copy.
#[must_use]
pub fn keep(bytes: &[u8]) -> Bytes {
    let start = bytes.as_ptr() as usize;
    let found = LENDING.with(|lending| {
        let mut lending = lending.borrow_mut();
        let lending = lending.as_mut()?;
        if bytes.len() < LEND_FROM || start < lending.start || start + bytes.len() > lending.end {
            return None;
        }
        Some(match &mut lending.source {
            Source::Shared(owner) => owner.slice_ref(bytes),
            Source::Input(lent) => Bytes::from_owner(Held {
                _lent: Arc::clone(lent.get_or_insert_with(Arc::default)),
                data: bytes.as_ptr(),
                len: bytes.len(),
            }),
        })
    });
    found.unwrap_or_else(|| Bytes::copy_from_slice(bytes))
}

/// Run `f` with `owner`'s bytes lent: [`keep`] of bytes inside them shares them.
pub fn shared<T>(owner: Option<&Bytes>, f: impl FnOnce() -> T) -> T {
    let Some(owner) = owner else { return f() };
    let start = owner.as_ptr() as usize;
    let _lending = Feed::lend(Lending {
        start,
        end: start + owner.len(),
        source: Source::Shared(owner.clone()),
    });
    f()
}

/// The input of the connection being fed, offered to the calls of the binary messages in
/// it, and what they kept of it. The plain JSON path does none of the lending: it costs
/// a store when a feed starts and a branch when it ends ([`Offer::open`],
/// [`Offer::close`]); only a message whose attachment section lies in the input lends
/// it while its calls run ([`Offer::lend`]).
#[derive(Default)]
pub(crate) struct Offer {
    start: usize,
    end: usize,
    /// Shared by the messages of one feed: its holders take the whole input buffer.
    lent: Option<Arc<Lent>>,
    /// While a message's calls run: lending them the input.
    lending: Option<Feed>,
}

impl Offer {
    /// `input` is being fed: attachments inside it may be lent in place.
    pub(crate) fn open(&mut self, input: &[u8]) {
        self.start = input.as_ptr() as usize;
        self.end = self.start + input.len();
    }

    /// Lend the offered input to the calls of a message whose attachment section is
    /// `section`, until [`Offer::take_back`]: when the section lies in the input and
    /// holds enough bytes to lend any (else they are copied). Returns whether it lends.
    #[cold]
    pub(crate) fn lend(&mut self, section: &[u8]) -> bool {
        let start = section.as_ptr() as usize;
        if section.len() < LEND_FROM || start < self.start || start + section.len() > self.end {
            return false;
        }
        self.lending = Some(Feed::lend(Lending {
            start: self.start,
            end: self.end,
            source: Source::Input(self.lent.take()),
        }));
        true
    }

    /// The message's calls have run: what they kept of the input stays with the feed.
    pub(crate) fn take_back(&mut self) {
        self.lent = LENDING.with(|lending| match lending.borrow_mut().as_mut().map(|l| &mut l.source) {
            Some(Source::Input(lent)) => lent.take(),
            _ => None,
        });
        // Lending ends: what was lent before (nothing, in a connection's feed) again.
        self.lending = None;
    }

    /// The feed has ended, having consumed the first `consumed` bytes of `input`: drain
    /// them, or when bytes of `input` are still held, hand the buffer to their holders and
    /// leave `input` a new buffer with the rest.
    pub(crate) fn close(&mut self, input: &mut Vec<u8>, consumed: usize) {
        self.start = 0;
        self.end = 0;
        match self.lent.take() {
            Some(lent) if Arc::strong_count(&lent) > 1 => {
                let rest = &input[consumed..];
                let mut fresh = if rest.is_empty() {
                    Vec::new()
                } else {
                    crate::buffer::take_or_allocate(rest.len())
                };
                fresh.extend_from_slice(rest);
                let whole = std::mem::replace(input, fresh);
                // Set once: each feed makes its own `Lent`.
                let _ = lent.0.set(whole);
            }
            _ => {
                input.drain(..consumed);
            }
        }
    }
}

/// One message's calls lent the input ([`Offer::lend`]), or one run of [`shared`] (a
/// guard: lending ends when it is dropped).
pub(crate) struct Feed {
    previous: Option<Lending>,
}

impl Feed {
    fn lend(lending: Lending) -> Feed {
        let previous = LENDING.with(|current| current.borrow_mut().replace(lending));
        Feed { previous }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        LENDING.with(|lending| *lending.borrow_mut() = previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `head`, then `LEND_FROM` bytes of `fill`, then `tail`.
    fn message(head: &[u8], fill: u8, tail: &[u8]) -> Vec<u8> {
        let mut bytes = head.to_vec();
        bytes.resize(head.len() + LEND_FROM, fill);
        bytes.extend_from_slice(tail);
        bytes
    }

    #[test]
    fn bytes_outside_the_input_fed_and_small_ones_are_copied() {
        let elsewhere = vec![1u8; LEND_FROM];
        let kept = keep(&elsewhere);
        assert_eq!(&kept[..], &elsewhere[..]);
        assert_ne!(kept.as_ptr(), elsewhere.as_ptr());
        let mut input = message(b"ab", 7, b"cdef");
        let mut offer = Offer::default();
        offer.open(&input);
        assert!(offer.lend(&input[2..]), "a section in the input is lent");
        assert_ne!(keep(&elsewhere).as_ptr(), elsewhere.as_ptr());
        let small = keep(&input[2..LEND_FROM]);
        assert_ne!(
            small.as_ptr(),
            input[2..].as_ptr(),
            "fewer than LEND_FROM bytes are copied"
        );
        offer.take_back();
        offer.close(&mut input, 2 + LEND_FROM);
        assert_eq!(input, b"cdef");
        assert_eq!(&small[..], &[7; LEND_FROM - 2][..]);
    }

    #[test]
    fn held_bytes_keep_the_input_buffer_and_the_connection_gets_a_new_one() {
        let mut input = message(b"first:", b'm', b"|rest");
        let address = input.as_ptr();
        let mut offer = Offer::default();
        offer.open(&input);
        assert!(offer.lend(&input[6..6 + LEND_FROM]));
        let kept = keep(&input[6..6 + LEND_FROM]);
        assert_eq!(kept.as_ptr(), input[6..].as_ptr(), "a view in place, not a copy");
        offer.take_back();
        // A second message of the same feed shares the holders.
        assert!(offer.lend(&input[5..5 + LEND_FROM]));
        drop(keep(&input[5..5 + LEND_FROM]));
        offer.take_back();
        offer.close(&mut input, 7 + LEND_FROM);
        assert_eq!(input, b"rest");
        assert_ne!(input.as_ptr(), address, "the connection reads on into a new buffer");
        input.clear();
        input.resize(4 * LEND_FROM, b'x'); // overwritten, and grown past the old capacity
        assert_eq!(
            &kept[..],
            &[b'm'; LEND_FROM][..],
            "the held bytes are where they were, unchanged"
        );
        assert_eq!(kept.as_ptr(), address.wrapping_add(6));
        // Nothing lent any more: bytes are copied again.
        assert_ne!(keep(&input).as_ptr(), input.as_ptr());
    }

    #[test]
    fn only_sections_in_the_offered_input_large_enough_to_lend_are_lent() {
        let mut input = message(b"ab", 7, b"cd");
        let mut offer = Offer::default();
        assert!(!offer.lend(&input[2..]), "nothing offered");
        offer.open(&input);
        assert!(!offer.lend(&input[3..LEND_FROM]), "fewer than LEND_FROM bytes");
        let elsewhere = input.clone();
        assert!(!offer.lend(&elsewhere[2..]), "outside the input");
        offer.close(&mut input, 2);
        assert_eq!(&input[..2], &[7, 7]);
        assert!(!offer.lend(&input[..]), "the offer ends with the feed");
        assert_ne!(
            keep(&input).as_ptr(),
            input.as_ptr(),
            "nothing is lent outside a message"
        );
    }

    #[test]
    fn shared_bytes_are_kept_by_reference() {
        let owner = Bytes::from(message(b"params:", b'a', b""));
        let inside = shared(Some(&owner), || keep(&owner[7..]));
        assert_eq!(inside.as_ptr(), owner[7..].as_ptr());
        assert_eq!(&inside[..], &[b'a'; LEND_FROM][..]);
        let outside = [1u8; LEND_FROM];
        assert_ne!(shared(Some(&owner), || keep(&outside)).as_ptr(), outside.as_ptr());
        assert_ne!(
            keep(&owner[7..]).as_ptr(),
            owner[7..].as_ptr(),
            "lent only within `shared`"
        );
    }

    #[test]
    fn without_a_holder_left_the_input_stays_the_connections() {
        let mut input = message(b"", b'm', b"|rest");
        let address = input.as_ptr();
        let mut offer = Offer::default();
        offer.open(&input);
        assert!(offer.lend(&input[..LEND_FROM]));
        drop(keep(&input[..LEND_FROM]));
        offer.take_back();
        offer.close(&mut input, LEND_FROM + 1);
        assert_eq!(input, b"rest");
        assert_eq!(input.as_ptr(), address);
    }
}
