// SPDX-License-Identifier: Apache-2.0
//! Buffers of large replies, kept for the next large replies once the caller lets go.
//!
//! A caller often holds many large replies at once (numpy arrays viewing a hundred
//! 1.6 MB replies, say) and frees them together; the few buffers the process keeps for
//! its server and requests (`ucall_core::buffer`, four) took one or two of them, and
//! every other reply was read into memory the allocator had given back to the kernel:
//! about 84 page faults more per 1.6 MB reply than reading into buffers made once.
//! Buffers of dropped replies are kept here instead, up to a budget for the whole process
//! (not per client: a program with many clients would hold many budgets), and reused for
//! the next large replies. The budget is [`BUDGET`] unless the environment variable
//! `UCALL_REPLY_BUFFERS_MIB` says otherwise when the first large reply is dropped (0 keeps
//! none). What stays in the process's RSS after large replies are dropped is at most the
//! budget more than before, and only once that many bytes of replies were alive at once.

use std::sync::{Mutex, PoisonError};

/// Bytes of kept reply buffers the process holds at most, by default: 256 MiB. A budget
/// below what a caller holds at once did not help (64 MiB against the benchmark's 100
/// replies of 1.6 MB alive together: as many page faults as keeping none).
pub const BUDGET: usize = 256 << 20;
/// Buffers smaller than this are not kept: allocating them is cheap.
const SMALLEST: usize = ucall_core::buffer::Spares::SMALLEST;
/// Buffers larger than this go back to `ucall_core::buffer` (which frees what it does
/// not keep): one huge reply should not take the whole default budget.
const LARGEST: usize = BUDGET / 4;

/// The process's budget: `UCALL_REPLY_BUFFERS_MIB` MiB, else [`BUDGET`].
fn budget() -> usize {
    static BUDGET_BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET_BYTES.get_or_init(|| {
        std::env::var("UCALL_REPLY_BUFFERS_MIB")
            .ok()
            .and_then(|mib| mib.trim().parse::<usize>().ok())
            .map_or(BUDGET, |mib| mib.saturating_mul(1 << 20))
    })
}

/// The kept buffers and the bytes they hold, up to a budget.
#[derive(Debug)]
struct Kept {
    buffers: Vec<Vec<u8>>,
    held: usize,
    /// None: [`budget`], read when first needed.
    budget: Option<usize>,
}

impl Kept {
    const fn new(budget: Option<usize>) -> Self {
        Self {
            buffers: Vec::new(),
            held: 0,
            budget,
        }
    }

    /// Keep `buffer` (emptied) when it is large and the budget has room; else hand it back.
    fn give(&mut self, mut buffer: Vec<u8>) -> Option<Vec<u8>> {
        let capacity = buffer.capacity();
        if !(SMALLEST..=LARGEST).contains(&capacity) || self.held + capacity > self.budget.unwrap_or_else(budget) {
            return Some(buffer);
        }
        buffer.clear();
        self.held += capacity;
        self.buffers.push(buffer);
        None
    }

    /// The smallest kept buffer with room for `at_least` bytes, if any.
    fn take(&mut self, at_least: usize) -> Option<Vec<u8>> {
        let index = (0..self.buffers.len())
            .filter(|&i| self.buffers[i].capacity() >= at_least)
            .min_by_key(|&i| self.buffers[i].capacity())?;
        let buffer = self.buffers.swap_remove(index);
        self.held -= buffer.capacity();
        Some(buffer)
    }
}

static KEPT: Mutex<Kept> = Mutex::new(Kept::new(None));

fn kept<T>(f: impl FnOnce(&mut Kept) -> T) -> T {
    f(&mut KEPT.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A buffer for a reply body of `len` bytes: a kept reply buffer, else one of
/// `ucall_core::buffer`'s, else a new one.
#[must_use]
pub fn take(len: usize) -> Vec<u8> {
    if len > SMALLEST / 2 {
        if let Some(buffer) = kept(|k| k.take(len)) {
            return buffer;
        }
    }
    ucall_core::buffer::take_or_allocate(len)
}

/// Keep a dropped reply's buffer for the next large reply; what the budget has no room
/// for goes to `ucall_core::buffer::keep`.
pub fn give(buffer: Vec<u8>) {
    if buffer.capacity() < SMALLEST {
        return;
    }
    if let Some(rest) = kept(|k| k.give(buffer)) {
        ucall_core::buffer::keep(rest);
    }
}

/// Bytes the kept reply buffers hold now (at most the budget).
#[must_use]
pub fn held() -> usize {
    kept(|k| k.held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_large_buffers_up_to_the_budget_and_reuses_the_smallest_that_fits() {
        let mut kept = Kept::new(Some(8 << 20));
        assert!(
            kept.give(Vec::with_capacity(1024)).is_some(),
            "small buffers are not kept"
        );
        assert!(
            kept.give(Vec::with_capacity(LARGEST + 1)).is_some(),
            "huge buffers are not kept"
        );
        for _ in 0..10 {
            let mut buffer = Vec::with_capacity(2 << 20);
            buffer.extend_from_slice(b"old reply");
            let _ = kept.give(buffer);
            assert!(kept.held <= 8 << 20);
        }
        assert_eq!(kept.held, 8 << 20);
        assert_eq!(kept.buffers.len(), 4);
        let mut small = Vec::with_capacity(1 << 20);
        small.push(1);
        assert!(kept.give(small).is_some(), "over the budget");
        let buffer = kept.take(1_700_000).expect("a kept buffer fits");
        assert!(buffer.is_empty() && buffer.capacity() >= 1_700_000);
        assert_eq!(kept.held, 6 << 20);
        assert!(kept.take(3 << 20).is_none());
        assert!(kept.give(buffer).is_none());
        assert_eq!(kept.held, 8 << 20);
    }
}
