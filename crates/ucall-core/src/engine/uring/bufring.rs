// SPDX-License-Identifier: Apache-2.0
//! The provided-buffer ring (`IORING_REGISTER_PBUF_RING`): the receive buffers the
//! kernel picks from when bytes arrive. The only memory this engine shares with the
//! kernel outside a single operation, so all of its `unsafe` is here.
//!
//! # Invariants
//!
//! - Both mappings (the ring's entries and the buffers) are anonymous, private, made by
//!   [`BufRing::new`] and unmapped only by `Drop`, which the worker runs after the ring is
//!   gone or once no operation is in flight (else the worker leaks them).
//! - The kernel reads entries only before the published tail, and only this struct writes
//!   the tail (the first entry's `resv` field, stored with release ordering): an entry is
//!   written before its buffer is published, never after.
//! - A buffer is the kernel's from its publication until a completion names it; the
//!   worker then reads it ([`BufRing::bytes`], which borrows the ring) until it gives it
//!   back ([`BufRing::recycle`], which needs `&mut self`, so no borrow outlives it).
//! - Buffer ids are below `count`, a power of two; every range handed out lies inside the
//!   storage mapping (checked).

use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::IoUring;

use super::BUFFER_GROUP;

/// The kernel's `struct io_uring_buf`; the first entry's last field is the ring's tail.
#[repr(C)]
struct RawBuf {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

/// A ring of receive buffers shared with the kernel (`IORING_REGISTER_PBUF_RING`).
///
/// Both the ring and the buffers are anonymous mappings owned by this struct. The kernel
/// reads entries up to the tail and writes into the buffers they name; see the module
/// documentation for who owns a buffer when.
pub(super) struct BufRing {
    entries: NonNull<RawBuf>,
    entries_bytes: usize,
    storage: NonNull<u8>,
    storage_bytes: usize,
    count: u16,
    size: u32,
    /// Our copy of the tail; published with a release store.
    tail: u16,
}

// SAFETY: the mappings are owned by this struct alone and touched only through `&mut self`
// (and by the kernel, as documented); moving them to another thread is sound.
unsafe impl Send for BufRing {}

/// Map `bytes` of zeroed, private, anonymous memory.
pub(super) fn map_anonymous(bytes: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing aliases
    // nothing; the result is checked before use.
    let ptr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
}

impl BufRing {
    /// `count` (a power of two) buffers of `size` bytes, all published.
    pub(super) fn new(count: u16, size: u32) -> io::Result<Self> {
        assert!(count.is_power_of_two(), "invariant: the buffer count is a power of two");
        let entries_bytes = usize::from(count) * std::mem::size_of::<RawBuf>();
        let storage_bytes = usize::from(count) * size as usize;
        let entries = map_anonymous(entries_bytes)?.cast::<RawBuf>();
        let storage = match map_anonymous(storage_bytes) {
            Ok(storage) => storage,
            Err(e) => {
                // SAFETY: the entries mapping was made just above with this length.
                unsafe { libc::munmap(entries.as_ptr().cast(), entries_bytes) };
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries,
            entries_bytes,
            storage,
            storage_bytes,
            count,
            size,
            tail: 0,
        };
        for bid in 0..count {
            ring.put(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Register the ring with `ring` as group [`BUFFER_GROUP`].
    pub(super) fn register(&self, ring: &IoUring) -> io::Result<()> {
        // SAFETY: the entries mapping is page-aligned (mmap), holds `count` entries and
        // lives as long as this struct, which the worker drops only after the ring.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(self.entries.as_ptr() as u64, self.count, BUFFER_GROUP, 0)
        }
    }

    /// The first `len` bytes of buffer `bid`, which a completion has just handed back.
    pub(super) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(
            bid < self.count && len <= self.size as usize,
            "invariant: a buffer of this ring"
        );
        // SAFETY: the range lies inside the storage mapping (checked above); the kernel
        // wrote it before posting the completion and will not touch it again until the
        // buffer is recycled, which needs `&mut self` and so ends this borrow.
        unsafe { std::slice::from_raw_parts(self.storage.as_ptr().add(usize::from(bid) * self.size as usize), len) }
    }

    /// Give buffer `bid` back to the kernel.
    pub(super) fn recycle(&mut self, bid: u16) {
        debug_assert!(bid < self.count);
        self.put(bid);
        self.publish();
    }

    /// Give the buffers' pages back to the system; a buffer reads as zeros until the kernel
    /// writes into it again, and its pages come back then. Call it only while no receive
    /// can write into the buffers: the worker does so with no connection left, since a
    /// connection's slot is freed only once the kernel reads none of its buffers.
    pub(super) fn release_pages(&mut self) {
        if self.storage_bytes == 0 {
            return;
        }
        // SAFETY: the storage mapping was made by `new` with this length and stays mapped
        // until `Drop`. MADV_DONTNEED on private anonymous memory only drops its pages
        // (the next touch maps zeroed ones); with no receive in flight (the caller's
        // contract) no byte the kernel wrote can be lost. A failure leaves the pages be.
        unsafe {
            libc::madvise(self.storage.as_ptr().cast(), self.storage_bytes, libc::MADV_DONTNEED);
        }
    }

    /// Write the entry for `bid` at the tail (not yet visible to the kernel).
    fn put(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: `index < count`, so the entry lies in the mapping. The kernel reads only
        // entries before the published tail, and this one is at or after it. Field
        // pointers are used so that the first entry's `resv` (the tail, which the kernel
        // reads) is not written here.
        unsafe {
            let entry = self.entries.as_ptr().add(index);
            ptr::addr_of_mut!((*entry).addr)
                .write(self.storage.as_ptr().add(usize::from(bid) * self.size as usize) as u64);
            ptr::addr_of_mut!((*entry).len).write(self.size);
            ptr::addr_of_mut!((*entry).bid).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Make every entry written so far visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail is the `resv` field of the first entry, inside the mapping and
        // aligned for a u16; the kernel reads it with acquire ordering, and only we write it.
        let tail = unsafe { &*ptr::addr_of!((*self.entries.as_ptr()).resv).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both mappings were made by `new` with these lengths; the ring that used
        // them is gone or no operation is in flight (see `UringWorker::drop`).
        unsafe {
            libc::munmap(self.storage.as_ptr().cast(), self.storage_bytes);
            libc::munmap(self.entries.as_ptr().cast(), self.entries_bytes);
        }
    }
}

// ---------------------------------------------------------------------------------------

impl BufRing {
    /// A ring that owns nothing, put in the place of one that must be leaked.
    pub(super) fn none() -> Self {
        BufRing {
            entries: NonNull::dangling(),
            entries_bytes: 0,
            storage: NonNull::dangling(),
            storage_bytes: 0,
            count: 0,
            size: 0,
            tail: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_pages_read_as_zeros_and_take_writes_again() {
        let mut ring = BufRing::new(4, 4096).expect("map a buffer ring");
        let write = |ring: &mut BufRing, byte: u8| {
            // SAFETY: the test stands in for the kernel: buffer 1 lies inside the storage
            // mapping and nothing else touches it.
            unsafe { ring.storage.as_ptr().add(4096).write_bytes(byte, 4096) };
        };
        write(&mut ring, 0xAB);
        assert!(ring.bytes(1, 4096).iter().all(|&b| b == 0xAB));
        ring.release_pages();
        assert!(
            ring.bytes(1, 4096).iter().all(|&b| b == 0),
            "released pages read as zeros"
        );
        write(&mut ring, 0xCD);
        assert!(ring.bytes(1, 4096).iter().all(|&b| b == 0xCD));
        BufRing::none().release_pages(); // owns nothing: nothing to give back
    }

    #[test]
    fn a_buffer_ring_publishes_every_buffer_and_recycles_in_order() {
        let mut ring = BufRing::new(4, 4096).expect("map a buffer ring");
        assert_eq!(ring.tail, 4);
        ring.recycle(2);
        assert_eq!(ring.tail, 5);
        // SAFETY: entry 0 lies in the mapping; nothing else uses it in this test.
        let (bid, len) = unsafe {
            let entry = ring.entries.as_ptr();
            ((*entry).bid, (*entry).len)
        };
        assert_eq!(
            (bid, len),
            (2, 4096),
            "the recycled buffer took the place after the tail"
        );
        assert_eq!(ring.bytes(3, 10), &[0; 10]);
    }
}
