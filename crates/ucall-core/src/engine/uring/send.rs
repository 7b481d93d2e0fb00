// SPDX-License-Identifier: Apache-2.0
//! Sending: the replies a connection has ready move into its send buffer
//! ([`crate::engine::conn::Conn::seal_into`]), which the kernel reads until the send's
//! completion; a zero-copy send's buffer is parked until its notification.

use std::io::IoSlice;
use std::ptr;

use io_uring::{cqueue, opcode, types};

use super::ring::{short_generation, token, Op};
use super::{UringWorker, MAX_IOV, SMALL_SEND, ZC_THRESHOLD};
use crate::engine::conn::Phase;

/// `struct msghdr` and its iovecs, boxed so that their address is stable while a vectored
/// send is in flight.
pub(super) struct MsgBox {
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

impl UringWorker {
    /// Hand the queued replies to the kernel, unless a send is already under way.
    pub(super) fn start_send(&mut self, key: usize) {
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
            if self.send_zc && total >= ZC_THRESHOLD && !conn.unix_socket {
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
            if self.sendmsg_zc && total >= ZC_THRESHOLD && !conn.unix_socket {
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

    pub(super) fn on_send(&mut self, key: usize, generation: u32, result: i32, flags: u32) {
        let now = self.now;
        let mut zc_unsupported = false;
        // Borrowed beside the connection, not through `self`.
        let metrics = self.serving.router.metrics().map(AsRef::as_ref);
        let Some(conn) = self
            .conns
            .get_mut(key)
            .filter(|conn| super::short_generation(conn.core.generation) == generation)
        else {
            return;
        };
        if cqueue::notif(flags) {
            conn.zc_notifs = conn.zc_notifs.saturating_sub(1);
            if conn.zc_notifs == 0 {
                // The kernel has let go of every zero-copy page.
                if let Some(bulk) = conn.bulk.as_mut() {
                    for mut parked in bulk.parked.drain(..) {
                        parked.shrink(0);
                    }
                    bulk.parked_bytes = 0;
                }
            }
        } else {
            conn.send_inflight = false;
            if cqueue::more(flags) {
                conn.zc_notifs += 1;
            }
            match result {
                n if n > 0 => {
                    conn.sending.advance(n.unsigned_abs() as usize);
                    conn.core.count_sent(n.unsigned_abs() as usize, metrics);
                    conn.core.clocks.last_progress = now;
                    conn.core.output_left(conn.sending.pending());
                }
                e if e == -libc::EOPNOTSUPP && !conn.dead => zc_unsupported = true,
                _ => conn.core.phase = Phase::Failed,
            }
            if conn.sending.is_empty() && conn.zc_notifs > 0 {
                // All sent, but zero-copy pages may still be read: park the buffer (its
                // heap memory stays where it is) and fill a fresh one meanwhile.
                let sent = std::mem::take(&mut conn.sending);
                let bytes = conn.sending_bytes;
                let bulk = conn.bulk();
                bulk.parked.push(sent);
                bulk.parked_bytes += bytes;
            }
        }
        if zc_unsupported {
            // Sent nothing; the bytes go again without zero copy.
            self.send_zc = false;
            self.sendmsg_zc = false;
        }
        self.touch(key);
    }
}

/// Whether large replies go with zero copy: `UCALL_URING_SEND_ZC=on|off` decides, else yes
/// unless `listener` is on a loopback address. Over loopback the kernel copies the pages
/// at the receiver anyway, so zero copy only adds pinning and a second completion; worse,
/// a receiver with a small buffer cannot take the zero-copy segments, and the transfer
/// then crawls through retransmissions (a 20 MB pipeline to a client with a 4 KiB receive
/// buffer stalled for 30 s, against 2 s when copied).
pub(super) fn zero_copy_wanted(listener: &std::net::TcpListener) -> bool {
    match std::env::var("UCALL_URING_SEND_ZC").as_deref().map(str::trim) {
        Ok("on" | "1") => true,
        Ok("off" | "0") => false,
        _ => !listener.local_addr().is_ok_and(|addr| addr.ip().is_loopback()),
    }
}
