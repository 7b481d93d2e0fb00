// SPDX-License-Identifier: Apache-2.0
//! A connection as the io_uring worker holds it: its registered file, the operations in
//! flight on it and the buffers they own, around the engine-independent [`Conn`].

use std::time::Instant;

use super::send::MsgBox;
use crate::buffer::OutBuf;
use crate::engine::conn::Conn;

/// A connection: its registered file and the operations in flight on it; the rest is the
/// engine-independent [`Conn`] (`core`).
pub(super) struct UringConn {
    /// Index in the ring's registered file table.
    pub(super) file: u32,
    /// Session, input, output (replies not yet handed to the kernel), TLS, clocks, phase.
    pub(super) core: Conn,
    /// Replies being sent; read by the kernel while `send_inflight`.
    pub(super) sending: OutBuf,
    /// Bytes `sending` held when it was filled (what it pins if it goes zero-copy).
    pub(super) sending_bytes: usize,
    /// What only large messages and zero-copy sends need (see [`Bulk`]).
    pub(super) bulk: Option<Box<Bulk>>,
    pub(super) msg: Option<Box<MsgBox>>,
    /// A receive is armed (until its last completion).
    pub(super) recv_armed: bool,
    /// A cancel has been sent for the armed receive.
    pub(super) recv_cancelled: bool,
    /// One-shot receives left before multishot again (see [`ONE_SHOT_SPELL`]).
    pub(super) one_shot: u32,
    pub(super) send_inflight: bool,
    /// Zero-copy notifications still owed: until they come, `sending` may not be reused.
    pub(super) zc_notifs: u32,
    /// Closed: operations are being cancelled, the slot is freed once they complete.
    pub(super) dead: bool,
    /// Timed out: cut at this time if the goodbye has not left by then.
    pub(super) cut_at: Option<Instant>,
    /// Queued in `UringWorker::touched`.
    pub(super) touched: bool,
    /// The worker's turn count when accepted, or started when accepted beyond a turn's
    /// share (`u64::MAX` until then): drain spares connections whose first bytes may not
    /// have been seen yet.
    pub(super) accepted_turn: u64,
    /// `close_notify` has been queued (or TLS failed): nothing more to encrypt.
    pub(super) tls_done: bool,
    /// Accepted on the Unix domain socket, which takes no zero-copy sends.
    pub(super) unix_socket: bool,
    /// A shutdown is in flight. The kernel runs it on a worker thread, where it looks up
    /// the registered file only then: the file's slot must not be closed (and reused by
    /// the next accept) before it completes.
    pub(super) shutdown_inflight: bool,
    /// Closed while a shutdown was in flight: the file is closed when it completes.
    pub(super) close_after_shutdown: bool,
}

/// A connection's buffers for large messages and zero-copy sends, which most connections
/// never need: behind one pointer, they keep the slot of every other connection 72 bytes
/// smaller (the slot is most of what an idle connection costs: issue goal, 1 KiB). The
/// kernel reads or writes the heap memory of these buffers, never this struct, so the box
/// may move; it is dropped only once all of them are empty (`UringConn::trim`).
#[derive(Default)]
pub(super) struct Bulk {
    /// Buffers sent with zero copy whose pages the kernel may still read: kept as they are
    /// until `zc_notifs` is back to zero.
    pub(super) parked: Vec<OutBuf>,
    pub(super) parked_bytes: usize,
    /// The input, while a receive straight into its spare capacity is in flight (see
    /// [`BULK_MIN`]); `core.input` is empty meanwhile.
    pub(super) receiving: Option<Vec<u8>>,
    /// Made when the buffer ring ran dry (`ENOBUFS`) for this connection's receive: the
    /// next receive reads into it, so that clients with much to send cannot keep the
    /// connection waiting for the ring. Written by the kernel while that receive is in
    /// flight; dropped once it completes.
    pub(super) own_buffer: Option<Vec<u8>>,
}

impl Bulk {
    /// Nothing in it is in use or holds memory.
    pub(super) fn is_vacant(&self) -> bool {
        self.parked.capacity() == 0 && self.receiving.is_none() && self.own_buffer.is_none()
    }
}

impl UringConn {
    /// The large-message buffers, made when first needed.
    pub(super) fn bulk(&mut self) -> &mut Bulk {
        self.bulk.get_or_insert_with(Box::default)
    }

    /// A receive straight into the input is in flight (see [`Bulk::receiving`]).
    pub(super) fn receiving(&self) -> bool {
        self.bulk.as_ref().is_some_and(|bulk| bulk.receiving.is_some())
    }

    /// Bytes handed to the kernel and not yet sent, and bytes sent but still pinned by
    /// zero-copy sends: they count against the output's high-water mark.
    pub(super) fn in_flight(&self) -> usize {
        self.sending.pending() + self.bulk.as_ref().map_or(0, |bulk| bulk.parked_bytes)
    }

    pub(super) fn is_quiet(&self) -> bool {
        !self.recv_armed && !self.send_inflight && self.zc_notifs == 0 && !self.shutdown_inflight
    }

    /// When the connection times out if nothing happens: once timed out, when its goodbye
    /// must have left; lingering, when the linger ends.
    pub(super) fn deadline(&self, config: &crate::engine::Config) -> Instant {
        self.cut_at
            .or(self.core.lingering_until())
            .unwrap_or_else(|| self.core.clocks.deadline(config))
    }

    /// When this idle connection gives its buffers back (see [`Conn::trim_at`]): never
    /// while the kernel may still read or write any of them.
    pub(super) fn trim_at(&self) -> Option<Instant> {
        let parked = self.bulk.as_ref().map_or(0, |bulk| bulk.parked.len());
        let kernel_done = !self.send_inflight && self.zc_notifs == 0 && parked == 0;
        let quiet = kernel_done && !self.dead && self.cut_at.is_none() && !self.receiving();
        // A buffer of its own is not counted: the next receive takes it (see `trim`).
        let bulk_held = self
            .bulk
            .as_ref()
            .is_some_and(|bulk| bulk.parked.capacity() > 0 || bulk.is_vacant());
        let held = self.sending.holds_memory() || self.msg.is_some() || bulk_held;
        quiet.then(|| self.core.trim_at(held)).flatten()
    }

    /// Give an idle connection's buffers back ([`UringConn::trim_at`] said when).
    pub(super) fn trim(&mut self) {
        self.core.release_buffers();
        self.sending.release();
        if let Some(bulk) = self.bulk.as_mut() {
            bulk.parked = Vec::new();
        }
        // A buffer of its own may still be the kernel's (a receive is armed): kept then.
        self.bulk.take_if(|bulk| bulk.is_vacant());
        self.msg = None;
    }
}
