// SPDX-License-Identifier: Apache-2.0
//! The io_uring engine (Linux 5.19+): one ring per worker thread.
//!
//! - **Accept**: one multishot accept per worker; each connection becomes a *registered*
//!   (direct) file, so later operations skip the descriptor-table lookup. A flood of new
//!   connections switches it to one one-shot accept per turn (see [`Accepting`]).
//! - **Receive**: one multishot receive per connection, which takes its buffers from the
//!   worker's provided-buffer ring only when bytes arrive: an idle connection holds no
//!   receive buffer. Each buffer goes back to the ring as soon as its bytes have been fed
//!   to the session; only an unfinished request's tail is copied into the connection.
//!   Once that tail is large ([`BULK_MIN`], a big body on its way), the rest is received
//!   straight into the connection's input with one-shot receives, which saves a copy of
//!   every byte and a completion per 32 KiB.
//!   When the ring runs dry (`ENOBUFS`: clients with much queued took every buffer), the
//!   connection's next receive reads into a buffer of its own, so that those clients
//!   cannot keep the others waiting.
//! - **Send**: replies collect in the connection's output while a send is in flight, then
//!   leave together with one `SEND`/`SENDMSG` (or their zero-copy forms above
//!   [`ZC_THRESHOLD`], except on loopback). Submissions of every connection queue in the
//!   ring and reach the kernel with the next wait: one system call per turn, however many
//!   connections (see [`UringWorker::enter`]).
//! - **Wake**: an eventfd read stays armed, so [`wake_all`] (stop) and deferred replies
//!   completed on other threads interrupt the wait.
//! - No busy polling: the thread sleeps in `io_uring_enter` until a completion or the next
//!   deadline. `SQPOLL` (a kernel thread polling the submission queue) is an option.
//!
//! # Ownership of the memory the kernel uses
//!
//! Every submission goes through [`UringWorker::push`]; what it may point to, and who owns
//! it until the completion arrives:
//! - receive buffers belong to the [`BufRing`]: the kernel owns a buffer from the moment it
//!   is published in the ring until a completion names it; the worker then owns it until
//!   [`BufRing::recycle`] publishes it again;
//! - a receive into the input (see [`BULK_MIN`]) writes into the spare capacity of
//!   `Conn::receiving`, which holds the input meanwhile: it is neither read, grown nor
//!   freed until the completion (moving the `Vec` keeps its heap memory in place);
//! - a receive after the ring ran dry writes into the spare capacity of
//!   `Conn::own_buffer`, untouched until the completion in the same way;
//! - a send reads `Conn::sending` (a heap buffer) and `Conn::msg` (a box): neither is
//!   written or freed while `send_inflight`. A zero-copy send's pages stay the kernel's
//!   until its notification: once such a buffer is all sent it moves to `Conn::parked`
//!   (moving the `OutBuf` keeps its heap memory in place), where it stays untouched until
//!   every notification owed (`zc_notifs`) has come. A connection's slot is only freed
//!   once all its operations have completed;
//! - the wake read writes into `wake_buf` (a box) until its completion;
//! - accept, cancel and close point to no memory.
//!
//! Before the ring is dropped, [`UringWorker::finish`] cancels everything and waits for the
//! last completion; if that cannot happen, the memory is leaked rather than freed.
//!
//! Every completion's `user_data` carries the operation, the connection's slot and the
//! slot's generation ([`token`]), so a completion for a closed or reused slot is dropped.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};
use slab::Slab;

use super::conn::{Conn, Phase, MAX_IOV, OUTPUT_KEEP, SCAN_GRANULARITY};
use crate::buffer::{self, OutBuf};
use crate::defer::{Completion, Sink};
use crate::error::Error;
use crate::server::Shared;
use crate::session::Context;
use crate::tls::TlsSession;
/// After a time-out, how long the goodbye (a `408`) may take to leave before the
/// connection is cut.
const GOODBYE_GRACE: Duration = Duration::from_millis(500);
/// Replies of at least this many bytes go with `SEND_ZC`: the kernel sends from our pages
/// instead of copying them. Not on a loopback listener (see [`zero_copy_wanted`]).
const ZC_THRESHOLD: usize = 256 << 10;
/// Sends up to this size count as small: they fit the socket buffer and complete at once.
const SMALL_SEND: usize = 64 << 10;
/// Longest wait for the completion that should follow small sends (see `enter`).
const SEND_WAIT_CAP: Duration = Duration::from_millis(10);
/// Receive buffers per worker, and the size of each (4 MiB per worker in all).
const RECV_BUFFERS: u16 = 128;
const RECV_BUFFER_SIZE: u32 = 32 << 10;
/// An unfinished message whose buffered part reaches this size, or whose framing announces
/// it, is received straight into the connection's input (`Conn::receiving`), at least [`BULK_ROOM`] bytes at a time,
/// rather than through 32 KiB receive buffers copied into it. Not for TLS (the input is
/// plaintext) nor while lingering.
const BULK_MIN: usize = 128 << 10;
const BULK_ROOM: usize = 1 << 20;
/// After a large message a connection receives with one-shot receives, this many of them
/// before it goes back to multishot. A multishot receive takes all that has arrived, in
/// 32 KiB buffers, before the worker sees the first: the start of each 2 MB message came
/// that way, copied out of up to a megabyte of buffers (5 % of a 1.6 MB echo's server
/// time, perf). A one-shot receive takes one buffer, enough to read the message's size;
/// the rest goes straight into the input.
const ONE_SHOT_SPELL: u32 = 64;
/// The buffer group of the receive buffers (one group per ring).
const BUFFER_GROUP: u16 = 0;
/// Submission and completion queue sizes.
const SQ_ENTRIES: u32 = 512;
const CQ_ENTRIES: u32 = 4096;
/// Longest wait for the last completions when a worker finishes.
const FINISH_LIMIT: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------
// user_data: operation (8 bits) | generation (24 bits) | slot (32 bits)

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    Accept = 1,
    Wake = 2,
    Recv = 3,
    Send = 4,
    Cancel = 5,
    Close = 6,
    Shutdown = 7,
}

const GENERATION_MASK: u32 = (1 << 24) - 1;
/// An accept's token holds the listener (0 plain, 1 TLS) as its slot, and its kind as its
/// generation.
const MULTISHOT: u32 = 0;
const ONE_SHOT: u32 = 1;

/// The `user_data` of operation `op` on connection `slot` of generation `generation`.
fn token(op: Op, slot: usize, generation: u32) -> u64 {
    debug_assert!(u32::try_from(slot).is_ok());
    (u64::from(op as u8) << 56) | (u64::from(generation & GENERATION_MASK) << 32) | (slot as u64 & 0xFFFF_FFFF)
}

/// The part of a connection's generation that fits in a `user_data`.
fn short_generation(generation: u64) -> u32 {
    (generation & u64::from(GENERATION_MASK)) as u32
}

/// `(op, slot, generation)` of a `user_data`; `None` for an unknown operation.
fn untoken(user_data: u64) -> Option<(Op, usize, u32)> {
    let op = match (user_data >> 56) as u8 {
        1 => Op::Accept,
        2 => Op::Wake,
        3 => Op::Recv,
        4 => Op::Send,
        5 => Op::Cancel,
        6 => Op::Close,
        7 => Op::Shutdown,
        _ => return None,
    };
    Some((
        op,
        (user_data & 0xFFFF_FFFF) as usize,
        (user_data >> 32) as u32 & GENERATION_MASK,
    ))
}

// ---------------------------------------------------------------------------------------
// Probe and ring set-up

/// What the kernel offers, found once per process by [`probe`].
#[derive(Debug, Clone)]
pub(crate) struct Features {
    /// Index into [`FLAG_SETS`] of the set the kernel accepted.
    flag_set: usize,
    /// `SEND_ZC` (6.0).
    send_zc: bool,
    /// `SENDMSG_ZC` (6.1).
    sendmsg_zc: bool,
    /// Multishot receive (6.0; `SEND_ZC` came in the same release, so it stands for it).
    multishot_recv: bool,
}

impl Features {
    /// A one-line account, for the start-up log.
    pub(crate) fn describe(&self, sqpoll: bool) -> String {
        let mut parts = vec![if sqpoll {
            "SQPOLL"
        } else {
            FLAG_SETS[self.flag_set].name
        }];
        if self.multishot_recv {
            parts.push("multishot recv");
        }
        if self.send_zc {
            parts.push(if self.sendmsg_zc {
                "SEND_ZC+SENDMSG_ZC"
            } else {
                "SEND_ZC"
            });
        }
        parts.join(", ")
    }
}

struct FlagSet {
    name: &'static str,
    single_issuer: bool,
    defer_taskrun: bool,
    coop_taskrun: bool,
}

/// Set-up flags, best first; the first the kernel accepts is used. `SINGLE_ISSUER` lets
/// the kernel skip locking (6.0), `DEFER_TASKRUN` runs completion work only when the
/// worker asks for completions, with no interrupts (6.1), `COOP_TASKRUN` avoids the
/// interrupt when a completion is ready (5.19).
const FLAG_SETS: [FlagSet; 4] = [
    FlagSet {
        name: "SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN",
        single_issuer: true,
        defer_taskrun: true,
        coop_taskrun: true,
    },
    FlagSet {
        name: "SINGLE_ISSUER|COOP_TASKRUN",
        single_issuer: true,
        defer_taskrun: false,
        coop_taskrun: true,
    },
    FlagSet {
        name: "COOP_TASKRUN",
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: true,
    },
    FlagSet {
        name: "no set-up flags",
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: false,
    },
];

/// Build a ring with flag set `index` (or with `SQPOLL`). A single-issuer ring starts
/// disabled: the thread that serves enables it ([`UringWorker::start`]), which makes that
/// thread the issuer.
fn build_ring(index: usize, sqpoll: bool) -> io::Result<(IoUring, bool)> {
    let mut builder = IoUring::builder();
    builder.setup_cqsize(CQ_ENTRIES).setup_submit_all().setup_clamp();
    if sqpoll {
        // The kernel thread sleeps after a second without submissions.
        builder.setup_sqpoll(1000);
        return builder.build(SQ_ENTRIES).map(|ring| (ring, false));
    }
    let set = &FLAG_SETS[index];
    if set.single_issuer {
        builder.setup_single_issuer().setup_r_disabled();
    }
    if set.defer_taskrun {
        builder.setup_defer_taskrun();
    }
    if set.coop_taskrun {
        builder.setup_coop_taskrun().setup_taskrun_flag();
    }
    builder.build(SQ_ENTRIES).map(|ring| (ring, set.single_issuer))
}

/// Opcodes the engine cannot do without.
const REQUIRED: [(u8, &str); 8] = [
    (opcode::AcceptMulti::CODE, "ACCEPT"),
    (opcode::RecvMulti::CODE, "RECV"),
    (opcode::Send::CODE, "SEND"),
    (opcode::SendMsg::CODE, "SENDMSG"),
    (opcode::Read::CODE, "READ"),
    (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    (opcode::Close::CODE, "CLOSE"),
    (opcode::Shutdown::CODE, "SHUTDOWN"),
];

/// Whether io_uring can run this engine here, and with what; the answer is kept for the
/// life of the process.
pub(crate) fn probe() -> Result<Features, String> {
    static PROBED: OnceLock<Result<Features, String>> = OnceLock::new();
    PROBED.get_or_init(probe_now).clone()
}

fn probe_now() -> Result<Features, String> {
    let mut failure = None;
    let mut built = None;
    for index in 0..FLAG_SETS.len() {
        match build_ring(index, false) {
            Ok((ring, _)) => {
                built = Some((index, ring));
                break;
            }
            // An unknown flag: try the next set.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => failure = Some(e),
            Err(e) => return Err(explain_setup_error(&e)),
        }
    }
    let Some((flag_set, ring)) = built else {
        let e = failure.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL));
        return Err(explain_setup_error(&e));
    };
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("the kernel cannot list its io_uring opcodes ({e}); Linux 5.19+ is needed"))?;
    if let Some((_, name)) = REQUIRED.iter().find(|(code, _)| !probe.is_supported(*code)) {
        return Err(format!(
            "the kernel's io_uring lacks opcode {name}; Linux 5.19+ is needed"
        ));
    }
    ring.submitter()
        .register_files_sparse(4)
        .map_err(|e| format!("the kernel cannot register a sparse file table ({e}); Linux 5.19+ is needed"))?;
    let bufs = BufRing::new(2, 4096).map_err(|e| format!("cannot map a buffer ring: {e}"))?;
    bufs.register(&ring)
        .map_err(|e| format!("the kernel cannot register a provided-buffer ring ({e}); Linux 5.19+ is needed"))?;
    // Unregister before the memory goes (the ring is dropped first anyway).
    let _ = ring.submitter().unregister_buf_ring(BUFFER_GROUP);
    drop(ring);
    drop(bufs);
    let send_zc = probe.is_supported(opcode::SendZc::CODE);
    Ok(Features {
        flag_set,
        send_zc,
        sendmsg_zc: probe.is_supported(opcode::SendMsgZc::CODE),
        multishot_recv: send_zc,
    })
}

#[cold]
fn explain_setup_error(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring (ENOSYS)".into(),
        Some(libc::EPERM) => {
            let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
            match sysctl.trim() {
                "2" => "io_uring is disabled by the kernel.io_uring_disabled sysctl (EPERM)".into(),
                "1" => {
                    "io_uring is limited to the kernel.io_uring_group by the kernel.io_uring_disabled sysctl (EPERM)"
                        .into()
                }
                _ => "io_uring is forbidden here (EPERM), likely by a seccomp filter".into(),
            }
        }
        Some(libc::ENOMEM) => format!("io_uring set-up ran out of locked memory ({e})"),
        _ => format!("io_uring set-up failed: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Provided-buffer ring

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
struct BufRing {
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
fn map_anonymous(bytes: usize) -> io::Result<NonNull<u8>> {
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
    fn new(count: u16, size: u32) -> io::Result<Self> {
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
    fn register(&self, ring: &IoUring) -> io::Result<()> {
        // SAFETY: the entries mapping is page-aligned (mmap), holds `count` entries and
        // lives as long as this struct, which the worker drops only after the ring.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(self.entries.as_ptr() as u64, self.count, BUFFER_GROUP, 0)
        }
    }

    /// The first `len` bytes of buffer `bid`, which a completion has just handed back.
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
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
    fn recycle(&mut self, bid: u16) {
        debug_assert!(bid < self.count);
        self.put(bid);
        self.publish();
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
// Waking

/// An eventfd: [`EventFd::wake`] completes the worker's armed read.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    fn new() -> io::Result<Self> {
        // Blocking on purpose: io_uring polls it; a non-blocking one would fail the read
        // with EAGAIN instead of waiting.
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Interrupt the worker's wait.
    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to a descriptor we own; failure (counter
        // full) still leaves the worker woken.
        unsafe { libc::write(self.0.as_raw_fd(), ptr::addr_of!(one).cast(), 8) };
    }
}

/// Wake every io_uring worker of `shared`.
pub(crate) fn wake_all(shared: &Shared) {
    for waker in shared.uring_wakers.get().into_iter().flatten() {
        waker.wake();
    }
}

/// Record the workers' wakers in `shared`, for [`wake_all`].
pub(crate) fn register_wakers(shared: &Shared, workers: &[&UringWorker]) {
    let _ = shared
        .uring_wakers
        .set(workers.iter().map(|w| Arc::clone(&w.waker)).collect());
}

// ---------------------------------------------------------------------------------------
// Connections

/// `struct msghdr` and its iovecs, boxed so that their address is stable while a vectored
/// send is in flight.
struct MsgBox {
    hdr: libc::msghdr,
    iov: [libc::iovec; MAX_IOV],
}

// SAFETY: the raw pointers inside point into this box or into the owning connection's
// output buffer; the box moves between threads only with the worker that owns both.
unsafe impl Send for MsgBox {}

impl MsgBox {
    fn new() -> Box<Self> {
        // SAFETY: msghdr and iovec are plain C structs for which all-zero is valid.
        Box::new(unsafe { std::mem::zeroed::<MsgBox>() })
    }
}

/// A connection: its registered file and the operations in flight on it; the rest is the
/// engine-independent [`Conn`] (`core`).
struct UringConn {
    /// Index in the ring's registered file table.
    file: u32,
    /// Session, input, output (replies not yet handed to the kernel), TLS, clocks, phase.
    core: Conn,
    /// Replies being sent; read by the kernel while `send_inflight`.
    sending: OutBuf,
    /// Bytes `sending` held when it was filled (what it pins if it goes zero-copy).
    sending_bytes: usize,
    /// Buffers sent with zero copy whose pages the kernel may still read: kept as they are
    /// until `zc_notifs` is back to zero.
    parked: Vec<OutBuf>,
    parked_bytes: usize,
    msg: Option<Box<MsgBox>>,
    /// A receive is armed (until its last completion).
    recv_armed: bool,
    /// A cancel has been sent for the armed receive.
    recv_cancelled: bool,
    /// The input, while a receive straight into its spare capacity is in flight (see
    /// [`BULK_MIN`]); `core.input` is empty meanwhile.
    receiving: Option<Vec<u8>>,
    /// One-shot receives left before multishot again (see [`ONE_SHOT_SPELL`]).
    one_shot: u32,
    /// Made when the buffer ring ran dry (`ENOBUFS`) for this connection's receive: the
    /// next receive reads into it, so that clients with much to send cannot keep the
    /// connection waiting for the ring. Written by the kernel while that receive is in
    /// flight; dropped once it completes.
    own_buffer: Option<Vec<u8>>,
    send_inflight: bool,
    /// Zero-copy notifications still owed: until they come, `sending` may not be reused.
    zc_notifs: u32,
    /// Closed: operations are being cancelled, the slot is freed once they complete.
    dead: bool,
    /// Timed out: cut at this time if the goodbye has not left by then.
    cut_at: Option<Instant>,
    /// Queued in `UringWorker::touched`.
    touched: bool,
    /// The worker's turn count when accepted (drain spares connections whose first bytes
    /// may not have been seen yet).
    accepted_turn: u64,
    /// `close_notify` has been queued (or TLS failed): nothing more to encrypt.
    tls_done: bool,
    /// A shutdown is in flight. The kernel runs it on a worker thread, where it looks up
    /// the registered file only then: the file's slot must not be closed (and reused by
    /// the next accept) before it completes.
    shutdown_inflight: bool,
    /// Closed while a shutdown was in flight: the file is closed when it completes.
    close_after_shutdown: bool,
}

impl UringConn {
    /// Bytes handed to the kernel and not yet sent, and bytes sent but still pinned by
    /// zero-copy sends: they count against the output's high-water mark.
    fn in_flight(&self) -> usize {
        self.sending.pending() + self.parked_bytes
    }

    fn is_quiet(&self) -> bool {
        !self.recv_armed && !self.send_inflight && self.zc_notifs == 0 && !self.shutdown_inflight
    }

    /// When the connection times out if nothing happens: once timed out, when its goodbye
    /// must have left; lingering, when the linger ends.
    fn deadline(&self, config: &crate::Config) -> Instant {
        self.cut_at
            .or(self.core.lingering_until())
            .unwrap_or_else(|| self.core.clocks.deadline(config))
    }
}

// ---------------------------------------------------------------------------------------
// The worker

/// How one listener takes in connections.
///
/// A multishot accept takes every connection waiting, the whole listen backlog at once.
/// Under a flood (connections that each queue much work, faster than the worker can serve
/// them) that left thousands open, and every turn went to the newest of them while the
/// clients already served waited: a Python server answered its other client 170 times in
/// 5 s. So a turn that takes in [`super::ACCEPTS_PER_TURN`] connections or more ends the
/// multishot accept, and the listener is then *metered*: one one-shot accept per turn,
/// the rest waiting in the backlog, until a turn's accept finds no connection waiting.
#[derive(Debug, Default)]
struct Accepting {
    /// A multishot accept is armed.
    multishot: bool,
    /// A one-shot accept is armed.
    one_shot: bool,
    /// A flood is on: one connection per turn.
    metered: bool,
    /// Connections accepted since the last turn's end.
    this_turn: usize,
}

impl Accepting {
    /// An accept completed: `accepted` a connection or not, and `ended` it (a one-shot
    /// accept always does), so that it is no longer armed.
    fn completed(&mut self, one_shot: bool, ended: bool, accepted: bool) {
        if one_shot {
            self.one_shot = false;
        } else if ended {
            self.multishot = false;
        }
        self.this_turn += usize::from(accepted);
    }

    /// At a turn's end: whether to cancel the multishot accept (a flood began), and which
    /// accept to arm ([`MULTISHOT`] or [`ONE_SHOT`]), if one is missing.
    fn next_turn(&mut self) -> (bool, Option<u32>) {
        let flood = std::mem::take(&mut self.this_turn) >= super::ACCEPTS_PER_TURN;
        let mut cancel_multishot = false;
        if flood && !self.metered {
            self.metered = true;
            cancel_multishot = self.multishot;
        } else if self.metered && self.one_shot {
            // Last turn's one-shot accept found no connection waiting: the flood is over.
            self.metered = false;
        }
        let arm = if self.metered && !self.one_shot {
            self.one_shot = true;
            Some(ONE_SHOT)
        } else if !self.metered && !self.multishot {
            self.multishot = true;
            Some(MULTISHOT)
        } else {
            None
        };
        (cancel_multishot, arm)
    }
}

pub(crate) struct UringWorker {
    // Dropped first: the ring, so that the kernel lets go of the memory below.
    ring: IoUring,
    shared: Arc<Shared>,
    /// The ring was made disabled; the serving thread enables it.
    enable_on_start: bool,
    started: bool,
    finished: bool,
    /// Closing down: no operation is re-armed.
    finishing: bool,
    /// The plain listener, and with a TLS port of its own (`TlsConfig::port`) the TLS one:
    /// indexed by the port's accept token slot, as `accepting` is.
    listeners: [Option<std::net::TcpListener>; 2],
    /// The accepts of each listener.
    accepting: [Accepting; 2],
    /// Accepting stopped on an error (a full file table...): retry after a close or at
    /// this time.
    accept_retry: Option<Instant>,
    bufs: BufRing,
    waker: Arc<EventFd>,
    /// The wake read writes here (owned by the kernel while the read is armed).
    wake_buf: Box<u64>,
    conns: Slab<UringConn>,
    generation: u64,
    /// Procedures, completion sink, scratch buffers and date (see [`super::Serving`]).
    pub(crate) serving: super::Serving,
    completions: Vec<Completion>,
    /// Operations submitted (or queued) whose last completion has not arrived.
    inflight: usize,
    /// Submissions that did not fit in the submission queue.
    backlog: VecDeque<squeue::Entry>,
    /// Connections with news, served once the completions at hand are all read.
    touched: Vec<(usize, u32)>,
    /// Connections held back while the worker awaits the most deferred calls it takes.
    held: super::HeldBack,
    cqes: Vec<cqueue::Entry>,
    /// Multishot receive works (else one receive per completion, re-armed).
    multishot_recv: bool,
    /// Small sends queued since the last wait, and whether a large one was.
    small_sends: usize,
    large_send: bool,
    /// A send queued since the last wait leaves work behind it that its completion lets
    /// go on (more output, input held back): the wait must not outlast that completion.
    send_follow_up: bool,
    send_zc: bool,
    sendmsg_zc: bool,
    now: Instant,
    turns: u64,
    /// Waits that ended on their time-out (see [`super::Worker::waits_timed_out`]).
    pub(crate) waits_timed_out: u64,
    next_scan: Option<Instant>,
    drain_deadline: Option<Instant>,
}

impl UringWorker {
    pub(crate) fn new(
        shared: Arc<Shared>,
        listener: std::net::TcpListener,
        features: &Features,
    ) -> Result<Self, Error> {
        let (ring, enable_on_start) = build_ring(features.flag_set, shared.config.sqpoll)
            .map_err(|e| Error::engine(format!("cannot set up an io_uring: {}", explain_setup_error(&e))))?;
        // One registered file per connection; this worker may hold them all.
        let table = u32::try_from(shared.config.max_connections.saturating_add(64))
            .unwrap_or(u32::MAX)
            .min(fd_limit())
            .max(16);
        ring.submitter()
            .register_files_sparse(table)
            .map_err(|e| Error::io("cannot register the io_uring file table", e))?;
        let bufs =
            BufRing::new(RECV_BUFFERS, RECV_BUFFER_SIZE).map_err(|e| Error::io("cannot map receive buffers", e))?;
        bufs.register(&ring)
            .map_err(|e| Error::io("cannot register the receive buffer ring", e))?;
        let waker = Arc::new(EventFd::new().map_err(|e| Error::io("cannot create an eventfd", e))?);
        let zero_copy = zero_copy_wanted(&listener);
        let tls_listener = super::separate_tls_listener(&shared)?;
        let sink = {
            let waker = Arc::clone(&waker);
            Sink::new(move || waker.wake())
        };
        Ok(UringWorker {
            ring,
            shared,
            enable_on_start,
            started: false,
            finished: false,
            finishing: false,
            listeners: [Some(listener), tls_listener],
            accepting: [Accepting::default(), Accepting::default()],
            accept_retry: None,
            bufs,
            waker,
            wake_buf: Box::new(0),
            conns: Slab::new(),
            generation: 0,
            serving: super::Serving::new(sink),
            completions: Vec::new(),
            inflight: 0,
            backlog: VecDeque::new(),
            touched: Vec::new(),
            held: super::HeldBack::default(),
            cqes: Vec::with_capacity(CQ_ENTRIES as usize),
            multishot_recv: features.multishot_recv,
            small_sends: 0,
            large_send: false,
            send_follow_up: false,
            send_zc: features.send_zc && zero_copy,
            sendmsg_zc: features.sendmsg_zc && zero_copy,
            now: Instant::now(),
            turns: 0,
            waits_timed_out: 0,
            next_scan: None,
            drain_deadline: None,
        })
    }

    pub(crate) fn run(mut self) {
        while self.turn(None) {}
    }

    /// Wait for completions (at most `wait_cap`, when given), serve them, and return whether
    /// the worker goes on: `false` once it has stopped and closed every connection.
    pub(crate) fn turn(&mut self, wait_cap: Option<Duration>) -> bool {
        if self.finished {
            return false;
        }
        if !self.started {
            if let Err(e) = self.start() {
                self.shared
                    .report("worker stopped", &format!("the io_uring worker cannot start: {e}"));
                self.finish();
                return false;
            }
        }
        // Completions queued without a wake (`WakeHold`) go out with this wait's submissions.
        let awaited = self.deliver_completions();
        self.serve_touched();
        let timeout = super::turn_wait(&self.serving.sink, awaited, self.wait_timeout(), wait_cap);
        if let Err(e) = self.enter(timeout) {
            let why = if e.raw_os_error() == Some(libc::EEXIST) {
                format!("turned from a second thread; an io_uring worker serves from one thread only ({e})")
            } else {
                format!("io_uring_enter failed: {e}")
            };
            self.shared.report("worker stopped", &why);
            self.finish();
            return false;
        }
        self.turns += 1;
        self.now = Instant::now();
        self.serving.date.refresh(SystemTime::now());
        self.reap();
        if self.shared.stopping.load(Ordering::Acquire) && self.drain() {
            self.finish();
            return false;
        }
        if self.accept_retry.is_none_or(|at| self.now >= at) {
            self.arm_accept();
        }
        if self.next_scan.is_some_and(|at| self.now >= at) {
            self.expire();
        }
        true
    }

    /// On the serving thread: enable the ring (which makes this thread its single issuer)
    /// and arm the listener and the waker.
    fn start(&mut self) -> io::Result<()> {
        if self.enable_on_start {
            self.ring.submitter().register_enable_rings()?;
        }
        self.started = true;
        self.arm_wake();
        self.arm_accept();
        Ok(())
    }

    fn wait_timeout(&self) -> Option<Duration> {
        if !self.backlog.is_empty() {
            return Some(Duration::ZERO);
        }
        [self.next_scan, self.drain_deadline, self.accept_retry]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Submit what is queued and wait for at least one completion, or `timeout`.
    ///
    /// Small sends submitted here complete at once, each with a completion of its own, and
    /// a wait for one completion would return with only those. So the wait asks for one
    /// completion more than the small sends, typically the next request, and a request
    /// costs one `io_uring_enter`. A send that does not complete at once (a full socket)
    /// could leave that count short: the wait is then capped at [`SEND_WAIT_CAP`]. When a
    /// send leaves work behind it (a deep pipeline's replies beyond one send's slices,
    /// input held back), its completion is all the wait asks for: waiting for one more
    /// would wait for the cap, however much is left to do.
    fn enter(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.flush_backlog();
        let sends = std::mem::take(&mut self.small_sends);
        let large_send = std::mem::take(&mut self.large_send);
        let follow_up = std::mem::take(&mut self.send_follow_up);
        let (want, timeout) = if !self.ring.completion().is_empty() {
            // Completions are already waiting (see `reap`): collect what else is ready,
            // without sleeping.
            (1, Some(Duration::ZERO))
        } else if follow_up {
            (sends.max(1), timeout)
        } else if sends > 0 && !large_send {
            (sends + 1, Some(timeout.map_or(SEND_WAIT_CAP, |t| t.min(SEND_WAIT_CAP))))
        } else {
            (1, timeout)
        };
        let result = match timeout {
            None => self.ring.submit_and_wait(1),
            Some(timeout) => {
                let ts = types::Timespec::new()
                    .sec(timeout.as_secs())
                    .nsec(timeout.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
        };
        // Submitting makes the call return its count even when the wait then timed out:
        // fewer completions than asked for tell.
        if timeout.is_some_and(|t| !t.is_zero()) && self.ring.completion().len() < want {
            self.waits_timed_out += 1;
        }
        match result {
            Ok(_) => Ok(()),
            // Timed out, interrupted, or the completion queue is full (it is read next).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Queue one submission.
    ///
    /// # Safety
    /// Every buffer, iovec and `msghdr` that `entry` points to must stay valid, and must
    /// be neither written (what the kernel reads) nor read (what it writes), until the
    /// entry's last completion has been reaped; the module documentation lists who owns
    /// what.
    unsafe fn push(&mut self, entry: squeue::Entry) {
        self.inflight += 1;
        if self.backlog.is_empty() {
            // SAFETY: the caller vouches for the memory `entry` points to.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // Full: hand what is queued to the kernel, then try again.
            let _ = self.ring.submit();
            // SAFETY: as above.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
        }
        self.backlog.push_back(entry);
    }

    /// Move queued submissions into the submission queue, as far as they fit.
    fn flush_backlog(&mut self) {
        while let Some(entry) = self.backlog.front() {
            // SAFETY: every backlog entry came through `push`, whose caller vouched for it.
            if unsafe { self.ring.submission().push(entry) }.is_err() {
                if self.ring.submit().is_err() {
                    return;
                }
                // SAFETY: as above.
                if unsafe { self.ring.submission().push(entry) }.is_err() {
                    return;
                }
            }
            self.backlog.pop_front();
        }
    }

    /// Arm each listener's accept for the next turn: the multishot one, or while a flood
    /// lasts a one-shot one (see [`Accepting`]).
    fn arm_accept(&mut self) {
        for port in 0..self.listeners.len() {
            let Some(fd) = self.listeners[port].as_ref().map(AsRawFd::as_raw_fd) else {
                continue;
            };
            let (cancel_multishot, arm) = self.accepting[port].next_turn();
            if cancel_multishot {
                self.cancel(token(Op::Accept, port, MULTISHOT));
            }
            let Some(kind) = arm else { continue };
            let entry = if kind == ONE_SHOT {
                opcode::Accept::new(types::Fd(fd), ptr::null_mut(), ptr::null_mut())
                    .file_index(Some(types::DestinationSlot::auto_target()))
                    .build()
            } else {
                opcode::AcceptMulti::new(types::Fd(fd))
                    .allocate_file_index(true)
                    .build()
            };
            let entry = entry.user_data(token(Op::Accept, port, kind));
            // SAFETY: accept points to no memory (no address is asked for); the listener's
            // descriptor is held by the kernel's own reference while the accept is armed.
            unsafe { self.push(entry) };
        }
        self.accept_retry = None;
    }

    /// Whether the listeners are still up (until `stop_accepting`).
    fn listening(&self) -> bool {
        self.listeners.iter().any(Option::is_some)
    }

    /// Stop accepting: drop the listeners, cancelling their accepts.
    fn stop_accepting(&mut self) {
        for port in 0..self.listeners.len() {
            if self.listeners[port].take().is_none() {
                continue;
            }
            let Accepting {
                multishot, one_shot, ..
            } = self.accepting[port];
            for (armed, kind) in [(multishot, MULTISHOT), (one_shot, ONE_SHOT)] {
                if armed {
                    self.cancel(token(Op::Accept, port, kind));
                }
            }
        }
        self.accept_retry = None;
    }

    fn arm_wake(&mut self) {
        let entry = opcode::Read::new(
            types::Fd(self.waker.0.as_raw_fd()),
            ptr::addr_of_mut!(*self.wake_buf).cast(),
            8,
        )
        .build()
        .user_data(token(Op::Wake, 0, 0));
        // SAFETY: the kernel writes 8 bytes into `wake_buf`, a box the worker neither reads
        // nor frees until this read's completion (see `finish` and `drop`).
        unsafe { self.push(entry) };
    }

    fn arm_recv(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        let fd = types::Fixed(conn.file);
        let entry = if wants_bulk(conn) {
            let mut input = std::mem::take(&mut conn.core.input);
            super::reserve_input(&mut input, &conn.core.session, BULK_ROOM);
            let room = input.spare_capacity_mut();
            let (at, len) = (
                room.as_mut_ptr().cast::<u8>(),
                u32::try_from(room.len()).unwrap_or(u32::MAX),
            );
            conn.receiving = Some(input);
            conn.one_shot = ONE_SHOT_SPELL;
            opcode::Recv::new(fd, at, len).build()
        } else if let Some(own) = conn.own_buffer.as_mut() {
            let at = own.spare_capacity_mut().as_mut_ptr().cast::<u8>();
            opcode::Recv::new(fd, at, RECV_BUFFER_SIZE).build()
        } else if self.multishot_recv && conn.one_shot == 0 {
            opcode::RecvMulti::new(fd, BUFFER_GROUP).build()
        } else {
            opcode::Recv::new(fd, ptr::null_mut(), RECV_BUFFER_SIZE)
                .buf_group(BUFFER_GROUP)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        };
        conn.recv_armed = true;
        conn.recv_cancelled = false;
        let entry = entry.user_data(token(Op::Recv, key, short_generation(conn.core.generation)));
        // SAFETY: the receive writes only into buffers it takes from the worker's buffer
        // ring, which outlives every operation; each is the kernel's until a completion
        // names it. A receive into the input writes only into the spare capacity of
        // `conn.receiving`, which stays untouched until its completion, and one into a
        // buffer of its own likewise into `conn.own_buffer` (see the module's notes on
        // ownership).
        unsafe { self.push(entry) };
    }

    fn cancel(&mut self, target: u64) {
        let (_, key, generation) = untoken(target).expect("invariant: a token made by `token`");
        let entry = opcode::AsyncCancel::new(target)
            .build()
            .user_data(token(Op::Cancel, key, generation));
        // SAFETY: a cancel points to no memory.
        unsafe { self.push(entry) };
    }

    /// Read the completions at hand, then serve the connections they concern. Completions
    /// that serving brings (submissions that went early, the queue being full) wait for the
    /// next turn: looping until none came kept a worker under a flood of connections in
    /// one turn for a second and more, while the connections its wait would have heard
    /// from went unread.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.ring.completion());
        for cqe in cqes.drain(..) {
            self.complete(cqe.user_data(), cqe.result(), cqe.flags());
        }
        self.cqes = cqes;
        self.serve_touched();
    }

    /// Serve the connections with news.
    fn serve_touched(&mut self) {
        for (key, generation) in std::mem::take(&mut self.touched) {
            if let Some(conn) = self
                .conns
                .get_mut(key)
                .filter(|c| short_generation(c.core.generation) == generation)
            {
                conn.touched = false;
                self.serve(key);
            }
        }
    }

    fn complete(&mut self, user_data: u64, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.inflight = self.inflight.saturating_sub(1);
        }
        let Some((op, key, generation)) = untoken(user_data) else {
            return;
        };
        match op {
            Op::Accept => self.on_accept(key == 1, generation == ONE_SHOT, result, flags),
            Op::Wake => {
                if !self.finishing {
                    self.arm_wake();
                }
                self.deliver_completions();
            }
            Op::Recv => self.on_recv(key, generation, result, flags),
            Op::Send => self.on_send(key, generation, result, flags),
            Op::Shutdown => self.on_shutdown(key, generation),
            Op::Cancel | Op::Close => {}
        }
    }

    /// The connection in `key` if it is still the one of `generation` (from a `user_data`).
    fn conn_of(&mut self, key: usize, generation: u32) -> Option<&mut UringConn> {
        self.conns
            .get_mut(key)
            .filter(|conn| short_generation(conn.core.generation) == generation)
    }

    /// Put the deferred replies that arrived in place (their connections are served with
    /// the touched ones) and serve held-back connections while there is room. Returns how
    /// many calls were awaited once they were taken (see [`super::turn_wait`]).
    fn deliver_completions(&mut self) -> usize {
        let mut completions = std::mem::take(&mut self.completions);
        let awaited = self.serving.sink.drain(&mut completions);
        for completion in completions.drain(..) {
            let Some(conn) = self.conns.get_mut(completion.conn) else {
                continue;
            };
            if conn.core.generation != completion.generation || conn.dead {
                continue;
            }
            // Input held back while replies were awaited may now go on (`complete`).
            if conn
                .core
                .complete(completion.slot, completion.outcome, self.serving.date.get())
            {
                self.touch(completion.conn);
            }
        }
        self.completions = completions;
        while let Some((key, generation)) = self.held.next(&self.serving.sink) {
            if let Some(conn) = self
                .conns
                .get_mut(key)
                .filter(|conn| conn.core.generation == generation)
            {
                conn.core.held = false;
                conn.core.mark_backlog();
                self.serve(key);
            }
        }
        awaited
    }

    fn touch(&mut self, key: usize) {
        if let Some(conn) = self.conns.get_mut(key) {
            if !conn.touched {
                conn.touched = true;
                self.touched.push((key, short_generation(conn.core.generation)));
            }
        }
    }

    /// A connection accepted on the plain listener, or with `tls_port` the separate TLS one.
    fn on_accept(&mut self, tls_port: bool, one_shot: bool, result: i32, flags: u32) {
        let ended = one_shot || !cqueue::more(flags);
        self.accepting[usize::from(tls_port)].completed(one_shot, ended, result >= 0);
        if result < 0 {
            if ended
                && !matches!(
                    -result,
                    libc::ECANCELED | libc::EINTR | libc::EAGAIN | libc::ECONNABORTED
                )
            {
                // Out of registered files or memory: retry after a close or a moment.
                self.accept_retry = Some(self.now + SCAN_GRANULARITY);
                if result != -libc::ENFILE {
                    self.shared
                        .report_accept_failure(&io::Error::from_raw_os_error(-result));
                }
            }
            return;
        }
        let file = result.unsigned_abs();
        if !self.listening() || !super::admit(&self.shared) {
            self.close_file(file, 0, 0);
            return;
        }
        let tls = match self.shared.tls.as_ref() {
            Some(tls) if tls_port || tls.separate.is_none() => match TlsSession::new(&tls.config) {
                Ok(session) => Some(Box::new(session)),
                Err(_) => {
                    self.shared.connections.fetch_sub(1, Ordering::AcqRel);
                    self.close_file(file, 0, 0);
                    return;
                }
            },
            _ => None,
        };
        self.generation += 1;
        let now = self.now;
        let key = self.conns.insert(UringConn {
            file,
            core: Conn::new(self.generation, tls, now),
            receiving: None,
            one_shot: 0,
            own_buffer: None,
            sending: OutBuf::new(),
            sending_bytes: 0,
            parked: Vec::new(),
            parked_bytes: 0,
            msg: None,
            recv_armed: false,
            recv_cancelled: false,
            send_inflight: false,
            zc_notifs: 0,
            dead: false,
            cut_at: None,
            touched: false,
            accepted_turn: self.turns,
            tls_done: false,
            shutdown_inflight: false,
            close_after_shutdown: false,
        });
        // `serve` arms the receive, or, while the worker is full, holds the connection back
        // unread: a multishot receive would take in all the client has sent.
        self.serve(key);
        let config = &self.shared.config;
        self.schedule_scan(now + config.idle_timeout.min(config.header_timeout));
    }

    fn close_file(&mut self, file: u32, key: usize, generation: u32) {
        let entry = opcode::Close::new(types::Fixed(file))
            .build()
            .user_data(token(Op::Close, key, generation));
        // SAFETY: a close points to no memory.
        unsafe { self.push(entry) };
    }

    fn on_recv(&mut self, key: usize, generation: u32, result: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let shared = &*self.shared;
        let now = self.now;
        let mut matched = false;
        let mut switch_to_bulk = false;
        if let Some(conn) = self
            .conns
            .get_mut(key)
            .filter(|conn| short_generation(conn.core.generation) == generation)
        {
            matched = true;
            if !cqueue::more(flags) {
                conn.recv_armed = false;
            }
            // A buffer of its own is what this receive read into, unless it went into the
            // input (`arm_recv` takes that first).
            let own = conn.own_buffer.take_if(|_| conn.receiving.is_none()).map(|mut own| {
                // SAFETY: the receive initialised the first `result` bytes of the spare
                // capacity (it cannot exceed the capacity it was given).
                unsafe { own.set_len(usize::try_from(result).unwrap_or(0)) };
                own
            });
            let in_flight = conn.in_flight();
            let mut ctx = self.serving.context(shared, key, conn.core.generation);
            if let Some(input) = conn.receiving.take() {
                received_into_input(conn, input, result, &mut ctx, now);
            } else if !conn.dead {
                match result {
                    n if n > 0 => {
                        let bytes = match &own {
                            Some(own) => own.as_slice(),
                            None => self.bufs.bytes(
                                bid.expect("invariant: a receive with bytes names its buffer"),
                                n.unsigned_abs() as usize,
                            ),
                        };
                        if conn.core.tls.is_none() {
                            conn.core.deliver(bytes, &mut ctx, now, in_flight);
                        } else if conn.core.receive_tls(bytes, &mut ctx, now, in_flight).is_err() {
                            // The alert rustls queued goes out, then the close.
                            conn.tls_done = true;
                        }
                        // A large message under way: the rest goes straight into the input
                        // once this multishot receive has ended.
                        let bulk = wants_bulk(conn);
                        switch_to_bulk = conn.recv_armed && !conn.recv_cancelled && bulk;
                        if !bulk && !conn.recv_armed {
                            conn.one_shot = conn.one_shot.saturating_sub(1);
                        }
                    }
                    0 => conn.core.input_ended = true,
                    e if e == -libc::ENOBUFS => {
                        conn.own_buffer = Some(Vec::with_capacity(RECV_BUFFER_SIZE as usize));
                    }
                    e if e == -libc::ECANCELED => {}
                    e if e == -libc::EINVAL && self.multishot_recv => {
                        // A kernel without multishot receive: one receive per completion.
                        self.multishot_recv = false;
                    }
                    _ => conn.core.phase = Phase::Failed,
                }
            }
            if switch_to_bulk {
                conn.recv_cancelled = true;
            }
        }
        if let Some(bid) = bid {
            self.bufs.recycle(bid);
        }
        if switch_to_bulk {
            self.cancel(token(Op::Recv, key, generation));
        }
        if matched {
            self.touch(key);
        }
    }

    fn on_shutdown(&mut self, key: usize, generation: u32) {
        let Some(conn) = self.conn_of(key, generation) else {
            return;
        };
        conn.shutdown_inflight = false;
        if conn.close_after_shutdown {
            conn.close_after_shutdown = false;
            let file = conn.file;
            self.close_file(file, key, generation);
        }
        self.touch(key);
    }

    fn on_send(&mut self, key: usize, generation: u32, result: i32, flags: u32) {
        let now = self.now;
        let mut zc_unsupported = false;
        let Some(conn) = self.conn_of(key, generation) else {
            return;
        };
        if cqueue::notif(flags) {
            conn.zc_notifs = conn.zc_notifs.saturating_sub(1);
            if conn.zc_notifs == 0 {
                // The kernel has let go of every zero-copy page.
                for mut parked in conn.parked.drain(..) {
                    parked.shrink(0);
                }
                conn.parked_bytes = 0;
            }
        } else {
            conn.send_inflight = false;
            if cqueue::more(flags) {
                conn.zc_notifs += 1;
            }
            match result {
                n if n > 0 => {
                    conn.sending.advance(n.unsigned_abs() as usize);
                    conn.core.clocks.last_progress = now;
                }
                e if e == -libc::EOPNOTSUPP && !conn.dead => zc_unsupported = true,
                _ => conn.core.phase = Phase::Failed,
            }
            if conn.sending.is_empty() && conn.zc_notifs > 0 {
                // All sent, but zero-copy pages may still be read: park the buffer (its
                // heap memory stays where it is) and fill a fresh one meanwhile.
                conn.parked.push(std::mem::take(&mut conn.sending));
                conn.parked_bytes += conn.sending_bytes;
            }
        }
        if zc_unsupported {
            // Sent nothing; the bytes go again without zero copy.
            self.send_zc = false;
            self.sendmsg_zc = false;
        }
        self.touch(key);
    }

    /// Move a connection forward after news: feed held-back input, answer a half-close,
    /// start a send, arm or pause the receive, or close.
    fn serve(&mut self, key: usize) {
        let shared = &*self.shared;
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.dead {
            if conn.is_quiet() {
                self.free_slot(key);
            }
            return;
        }
        let in_flight = conn.in_flight();
        if conn.core.is_backlogged() {
            let mut ctx = self.serving.context(shared, key, conn.core.generation);
            conn.core.feed_backlog(&mut ctx, in_flight);
        }
        if conn.core.input_ended && conn.core.phase == Phase::Open {
            let mut ctx = self.serving.context(shared, key, conn.core.generation);
            conn.core.answer_end_of_input(&mut ctx);
        }
        if conn.core.phase == Phase::Failed {
            self.close(key);
            return;
        }
        self.start_send(key);
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.core.is_closing() && conn.core.out.is_empty() && conn.sending.is_empty() && !conn.send_inflight {
            if let Some(tls) = conn.core.tls.as_mut().filter(|_| !conn.tls_done) {
                // A clean end the client can tell from a truncation; closed once it is sent.
                tls.close();
                conn.tls_done = true;
                self.start_send(key);
                return;
            }
            if !conn.core.must_linger(false) {
                self.close(key);
                return;
            }
            if conn.core.lingering_until().is_none() {
                // Input may still arrive or wait unread: closing now would reset the
                // connection and drop the replies not yet delivered.
                conn.core.linger(self.now);
                conn.shutdown_inflight = true;
                let entry = opcode::Shutdown::new(types::Fixed(conn.file), libc::SHUT_WR)
                    .build()
                    .user_data(token(Op::Shutdown, key, short_generation(conn.core.generation)));
                // SAFETY: a shutdown points to no memory; its registered file stays open
                // until it completes (`close_after_shutdown`).
                unsafe { self.push(entry) };
            }
        }
        let Some(conn) = self.conns.get_mut(key) else { return };
        let wants_input = conn.core.wants_input(conn.in_flight(), Some(&self.serving.sink));
        if !conn.core.is_closing() && self.serving.sink.is_full() {
            self.held.hold(&mut conn.core.held, key, conn.core.generation);
        }
        if wants_input && !conn.recv_armed && !self.finishing {
            self.arm_recv(key);
        } else if !wants_input && conn.recv_armed && !conn.recv_cancelled {
            // Over the high-water mark (or closing): stop taking input until the output drains.
            conn.recv_cancelled = true;
            let target = token(Op::Recv, key, short_generation(conn.core.generation));
            self.cancel(target);
        }
        let shared = &*self.shared;
        let Some(conn) = self.conns.get_mut(key) else { return };
        if !conn.send_inflight {
            conn.sending.shrink(OUTPUT_KEEP);
        }
        conn.core.out.shrink(OUTPUT_KEEP);
        conn.core.track_clocks(self.now);
        let at = conn.deadline(&shared.config);
        self.schedule_scan(at);
    }

    /// Hand the queued replies to the kernel, unless a send is already under way.
    fn start_send(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.send_inflight || conn.dead {
            return;
        }
        if conn.sending.is_empty() {
            conn.core.seal_into(&mut conn.sending);
            conn.sending_bytes = conn.sending.pending();
        }
        let mut slices = [IoSlice::new(&[]); MAX_IOV];
        let count = conn.sending.io_slices(&mut slices);
        if count == 0 {
            return;
        }
        let total: usize = slices[..count].iter().map(|s| s.len()).sum();
        let fd = types::Fixed(conn.file);
        let entry = if count == 1 {
            let (buf, len) = (slices[0].as_ptr(), u32::try_from(slices[0].len()).unwrap_or(u32::MAX));
            if self.send_zc && total >= ZC_THRESHOLD {
                opcode::SendZc::new(fd, buf, len).flags(libc::MSG_NOSIGNAL).build()
            } else {
                opcode::Send::new(fd, buf, len).flags(libc::MSG_NOSIGNAL).build()
            }
        } else {
            let msg = conn.msg.get_or_insert_with(MsgBox::new);
            for (iov, slice) in msg.iov.iter_mut().zip(&slices[..count]) {
                iov.iov_base = slice.as_ptr().cast_mut().cast();
                iov.iov_len = slice.len();
            }
            msg.hdr.msg_iov = msg.iov.as_mut_ptr();
            msg.hdr.msg_iovlen = count as _;
            let hdr = ptr::addr_of!(msg.hdr);
            let flags = libc::MSG_NOSIGNAL.unsigned_abs();
            if self.sendmsg_zc && total >= ZC_THRESHOLD {
                opcode::SendMsgZc::new(fd, hdr).flags(flags).build()
            } else {
                opcode::SendMsg::new(fd, hdr).flags(flags).build()
            }
        };
        conn.send_inflight = true;
        self.send_follow_up |=
            total < conn.sending.pending() || conn.core.out.has_sendable() || conn.core.is_backlogged();
        if total <= SMALL_SEND {
            self.small_sends += 1;
        } else {
            self.large_send = true;
        }
        let entry = entry.user_data(token(Op::Send, key, short_generation(conn.core.generation)));
        // SAFETY: the send reads the ranges of `conn.sending` listed in `slices` (and, when
        // vectored, `conn.msg`): heap memory that nothing writes, swaps out or frees while
        // `send_inflight`. A zero-copy send's pages are read until its notification: the
        // buffer then waits in `conn.parked`, untouched, until `zc_notifs` is zero. The slot
        // is freed only once quiet (`serve`, `close`).
        unsafe { self.push(entry) };
    }

    /// Close a connection: cancel its operations, close its file, free the slot once the
    /// last completion is in.
    fn close(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.dead {
            return;
        }
        conn.dead = true;
        buffer::keep(std::mem::take(&mut conn.core.input));
        let (file, generation) = (conn.file, short_generation(conn.core.generation));
        let cancel_recv = conn.recv_armed && !conn.recv_cancelled;
        let cancel_send = conn.send_inflight;
        conn.recv_cancelled = true;
        // The file is closed once the shutdown in flight completes, if there is one.
        let close_now = !conn.shutdown_inflight;
        conn.close_after_shutdown = conn.shutdown_inflight;
        if cancel_recv {
            self.cancel(token(Op::Recv, key, generation));
        }
        if cancel_send {
            self.cancel(token(Op::Send, key, generation));
        }
        // The socket is released once the cancelled operations let go of it too.
        if close_now {
            self.close_file(file, key, generation);
        }
        self.shared.connections.fetch_sub(1, Ordering::AcqRel);
        if self.accept_retry.is_some() {
            self.accept_retry = Some(self.now);
        }
        if self.conns.get(key).is_some_and(UringConn::is_quiet) {
            self.free_slot(key);
        }
    }

    /// Free a closed connection's slot once quiet (the kernel reads none of its buffers
    /// any more). Its large buffers go back to the kept ones (`buffer::keep`): dropped,
    /// each connection that closed after a 1.6 MB reply cost the next one fresh
    /// megabytes, and the allocator's arenas grew by a step now and then.
    fn free_slot(&mut self, key: usize) {
        let mut conn = self.conns.remove(key);
        // A receive that completed after `close` brought the input back.
        conn.core.release();
        conn.sending.release();
    }

    fn schedule_scan(&mut self, at: Instant) {
        let at = at.max(self.now + SCAN_GRANULARITY);
        if self.next_scan.is_none_or(|next| at < next) {
            self.next_scan = Some(at);
        }
    }

    /// Close connections whose time is up; plan the next scan.
    fn expire(&mut self) {
        let now = self.now;
        self.next_scan = None;
        let config = &self.shared.config;
        // Waiting on the server, not on the client: no client time-out applies.
        let (expired, earliest) = super::due(self.conns.iter(), now, |conn| {
            (!conn.dead && !conn.core.session.has_pending()).then(|| conn.deadline(config))
        });
        for key in expired {
            let Some(conn) = self.conns.get_mut(key) else { continue };
            if conn.cut_at.is_some() || conn.core.lingering_until().is_some() {
                // The goodbye did not leave in time, or the linger is over.
                self.close(key);
                continue;
            }
            conn.core.time_out(self.serving.date.get());
            conn.cut_at = Some(now + GOODBYE_GRACE);
            self.serve(key);
        }
        if let Some(at) = earliest {
            self.schedule_scan(at);
        }
    }

    /// Graceful shutdown: stop accepting, close idle connections, let the others finish.
    /// Returns whether the worker is done.
    fn drain(&mut self) -> bool {
        if self.listening() {
            self.stop_accepting();
            self.drain_deadline = Some(self.now + self.shared.config.shutdown_timeout);
        }
        let turns = self.turns;
        let idle: Vec<usize> = self
            .conns
            .iter()
            // Accepted in an earlier turn: its first bytes, if any, have been received.
            .filter(|(_, c)| {
                !c.dead && c.accepted_turn < turns && c.core.is_idle() && c.sending.is_empty() && !c.send_inflight
            })
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            // A WebSocket hears why it is closed (1001); other idle connections just close.
            let Some(conn) = self.conns.get_mut(key) else { continue };
            if conn.core.going_away() {
                self.serve(key);
            } else {
                self.close(key);
            }
        }
        for (_, conn) in self.conns.iter_mut() {
            if !conn.dead {
                conn.core.last_reply_closes();
            }
        }
        !self.conns.iter().any(|(_, c)| !c.dead) || self.drain_deadline.is_some_and(|at| self.now >= at)
    }

    /// Close everything, then wait (bounded) until the kernel has returned every buffer.
    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finishing = true;
        let keys: Vec<usize> = self.conns.iter().map(|(key, _)| key).collect();
        for key in keys {
            self.close(key);
        }
        self.stop_accepting();
        if self.started {
            self.cancel(token(Op::Wake, 0, 0));
            let limit = Instant::now() + FINISH_LIMIT;
            while self.inflight > 0 {
                let left = limit.saturating_duration_since(Instant::now());
                if left.is_zero() || self.enter(Some(left)).is_err() {
                    break;
                }
                self.now = Instant::now();
                self.reap();
            }
        } else {
            // Nothing reached the kernel.
            self.inflight = 0;
            self.backlog.clear();
        }
        self.finished = true;
    }
}

impl Drop for UringWorker {
    fn drop(&mut self) {
        if !self.finished {
            self.finish();
        }
        if self.inflight > 0 {
            // The kernel may still use this memory: leak it rather than free it.
            self.shared.report(
                "buffers leaked",
                "io_uring operations still in flight at shutdown; their buffers are leaked",
            );
            std::mem::forget(std::mem::take(&mut self.conns));
            std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new(0)));
            let bufs = std::mem::replace(
                &mut self.bufs,
                BufRing {
                    entries: NonNull::dangling(),
                    entries_bytes: 0,
                    storage: NonNull::dangling(),
                    storage_bytes: 0,
                    count: 0,
                    size: 0,
                    tail: 0,
                },
            );
            std::mem::forget(bufs);
        }
    }
}

/// Whether large replies go with zero copy: `UCALL_URING_SEND_ZC=on|off` decides, else yes
/// unless `listener` is on a loopback address. Over loopback the kernel copies the pages
/// at the receiver anyway, so zero copy only adds pinning and a second completion; worse,
/// a receiver with a small buffer cannot take the zero-copy segments, and the transfer
/// then crawls through retransmissions (a 20 MB pipeline to a client with a 4 KiB receive
/// buffer stalled for 30 s, against 2 s when copied).
fn zero_copy_wanted(listener: &std::net::TcpListener) -> bool {
    match std::env::var("UCALL_URING_SEND_ZC").as_deref().map(str::trim) {
        Ok("on" | "1") => true,
        Ok("off" | "0") => false,
        _ => !listener.local_addr().is_ok_and(|addr| addr.ip().is_loopback()),
    }
}

/// The soft limit on open files: a registered file table may not be larger.
fn fd_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    u32::try_from(limit.rlim_cur).unwrap_or(u32::MAX)
}

/// Whether the next receive of `conn` should go straight into its input: an unfinished
/// message of at least [`BULK_MIN`] bytes is buffered or announced, and nothing else holds
/// the input.
fn wants_bulk(conn: &UringConn) -> bool {
    let core = &conn.core;
    (core.input.len() >= BULK_MIN || core.session.input_wanted() >= BULK_MIN)
        && core.tls.is_none()
        && core.phase == Phase::Open
        && !conn.dead
}

/// A receive straight into the input has completed (`result` as the kernel gave it): the
/// input is back in place with the bytes received, which go to the session.
fn received_into_input(conn: &mut UringConn, mut input: Vec<u8>, result: i32, ctx: &mut Context<'_>, now: Instant) {
    let read = usize::try_from(result).unwrap_or(0);
    debug_assert!(read <= input.capacity() - input.len() && conn.core.input.is_empty());
    // SAFETY: the receive initialised the first `read` bytes of the spare capacity.
    unsafe { input.set_len(input.len() + read) };
    conn.core.input = input;
    if conn.dead {
        return;
    }
    match result {
        n if n > 0 => {
            let in_flight = conn.in_flight();
            conn.core.received_in_place(read, ctx, now, in_flight);
        }
        0 => conn.core.input_ended = true,
        e if e == -libc::ECANCELED => {}
        _ => conn.core.phase = Phase::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ACCEPTS_PER_TURN;

    #[test]
    fn a_flood_meters_the_accepts_until_the_backlog_is_empty() {
        let mut accepting = Accepting::default();
        assert_eq!(accepting.next_turn(), (false, Some(MULTISHOT)), "multishot at start");
        for _ in 1..ACCEPTS_PER_TURN {
            accepting.completed(false, false, true);
        }
        assert_eq!(accepting.next_turn(), (false, None), "below a flood: multishot stays");
        for _ in 0..ACCEPTS_PER_TURN {
            accepting.completed(false, false, true);
        }
        assert_eq!(
            accepting.next_turn(),
            (true, Some(ONE_SHOT)),
            "a flood: cancel, one-shot"
        );
        // The multishot's cancellation arrives; each turn's one-shot accept takes one.
        accepting.completed(false, true, false);
        for _ in 0..3 {
            accepting.completed(true, true, true);
            assert_eq!(accepting.next_turn(), (false, Some(ONE_SHOT)), "still metered");
        }
        // A turn whose one-shot accept is still armed: nobody was waiting.
        assert_eq!(accepting.next_turn(), (false, Some(MULTISHOT)), "the flood is over");
        assert!(accepting.one_shot && accepting.multishot && !accepting.metered);
        accepting.completed(true, true, true);
        assert_eq!(accepting.next_turn(), (false, None));
    }

    #[test]
    fn tokens_round_trip_and_wrap_the_generation() {
        for (op, slot, generation) in [
            (Op::Recv, 0, 0),
            (Op::Send, 12_345, 77),
            (Op::Close, u32::MAX as usize, GENERATION_MASK),
        ] {
            assert_eq!(untoken(token(op, slot, generation)), Some((op, slot, generation)));
        }
        // Generations are compared modulo 2^24, as they are stored.
        assert_eq!(untoken(token(Op::Send, 3, GENERATION_MASK + 2)), Some((Op::Send, 3, 1)));
        assert_eq!(untoken(0), None);
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
