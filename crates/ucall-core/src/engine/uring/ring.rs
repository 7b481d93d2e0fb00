// SPDX-License-Identifier: Apache-2.0
//! The ring itself: what the kernel offers ([`probe`]), how a ring is set up, how a
//! submission is queued and a turn's wait made ([`UringWorker::enter`]), the `user_data`
//! that tells a completion's operation and connection, and the eventfd that wakes a
//! waiting worker.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::bufring::BufRing;
use super::{UringWorker, BUFFER_GROUP, CQ_ENTRIES, SEND_WAIT_CAP, SQ_ENTRIES};
use crate::engine::Shared;

// ---------------------------------------------------------------------------------------
// user_data: operation (8 bits) | generation (24 bits) | slot (32 bits)

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    Accept = 1,
    Wake = 2,
    Recv = 3,
    Send = 4,
    Cancel = 5,
    Close = 6,
    Shutdown = 7,
}

pub(super) const GENERATION_MASK: u32 = (1 << 24) - 1;

/// The `user_data` of operation `op` on connection `slot` of generation `generation`.
pub(super) fn token(op: Op, slot: usize, generation: u32) -> u64 {
    debug_assert!(u32::try_from(slot).is_ok());
    (u64::from(op as u8) << 56) | (u64::from(generation & GENERATION_MASK) << 32) | (slot as u64 & 0xFFFF_FFFF)
}

/// The part of a connection's generation that fits in a `user_data`.
pub(super) fn short_generation(generation: u64) -> u32 {
    (generation & u64::from(GENERATION_MASK)) as u32
}

/// `(op, slot, generation)` of a `user_data`; `None` for an unknown operation.
pub(super) fn untoken(user_data: u64) -> Option<(Op, usize, u32)> {
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

//

// ---------------------------------------------------------------------------------------
// Probe and ring set-up

/// What the kernel offers, found once per process by [`probe`].
#[derive(Debug, Clone)]
pub(crate) struct Features {
    /// Index into [`FLAG_SETS`] of the set the kernel accepted.
    pub(super) flag_set: usize,
    /// `SEND_ZC` (6.0).
    pub(super) send_zc: bool,
    /// `SENDMSG_ZC` (6.1).
    pub(super) sendmsg_zc: bool,
    /// Multishot receive (6.0; `SEND_ZC` came in the same release, so it stands for it).
    pub(super) multishot_recv: bool,
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

pub(super) struct FlagSet {
    name: &'static str,
    single_issuer: bool,
    defer_taskrun: bool,
    coop_taskrun: bool,
}

/// Set-up flags, best first; the first the kernel accepts is used. `SINGLE_ISSUER` lets
/// the kernel skip locking (6.0), `DEFER_TASKRUN` runs completion work only when the
/// worker asks for completions, with no interrupts (6.1), `COOP_TASKRUN` avoids the
/// interrupt when a completion is ready (5.19).
pub(super) const FLAG_SETS: [FlagSet; 4] = [
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
pub(super) fn build_ring(index: usize, sqpoll: bool) -> io::Result<(IoUring, bool)> {
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
pub(super) const REQUIRED: [(u8, &str); 8] = [
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

pub(super) fn probe_now() -> Result<Features, String> {
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
pub(super) fn explain_setup_error(e: &io::Error) -> String {
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

// ---------------------------------------------------------------------------------------
// Waking

/// An eventfd: [`EventFd::wake`] completes the worker's armed read.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(super) fn new() -> io::Result<Self> {
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

// ---------------------------------------------------------------------------------------
// Submissions and the wait

impl UringWorker {
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
    pub(super) fn enter(&mut self, timeout: Option<Duration>) -> io::Result<()> {
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
    pub(super) unsafe fn push(&mut self, entry: squeue::Entry) {
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
    pub(super) fn flush_backlog(&mut self) {
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

    pub(super) fn cancel(&mut self, target: u64) {
        let (_, key, generation) = untoken(target).expect("invariant: a token made by `token`");
        let entry = opcode::AsyncCancel::new(target)
            .build()
            .user_data(token(Op::Cancel, key, generation));
        // SAFETY: a cancel points to no memory.
        unsafe { self.push(entry) };
    }

    pub(super) fn arm_wake(&mut self) {
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

    pub(super) fn close_file(&mut self, file: u32, key: usize, generation: u32) {
        let entry = opcode::Close::new(types::Fixed(file))
            .build()
            .user_data(token(Op::Close, key, generation));
        // SAFETY: a close points to no memory.
        unsafe { self.push(entry) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
