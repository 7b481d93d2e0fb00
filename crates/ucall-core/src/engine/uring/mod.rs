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

mod accept;
mod bufring;
mod conn;
mod recv;
mod ring;
mod send;

pub(crate) use ring::{probe, register_wakers, wake_all, EventFd, Features};

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;

use accept::{Accepting, ONE_SHOT};
use bufring::BufRing;
use conn::UringConn;
use ring::{build_ring, explain_setup_error, short_generation, token, untoken, Op};
use send::zero_copy_wanted;

use super::conn::{Phase, IDLE_TRIM, MAX_IOV, OUTPUT_KEEP, SCAN_GRANULARITY};
use super::unix::{SocketFile, UnixListen};
use super::LISTENERS;
use crate::buffer;
use crate::defer::{Completion, Sink};
use crate::engine::Shared;
use crate::error::Error;
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
// The worker

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
    /// The plain listener, with a TLS port of its own (`TlsConfig::port`) the TLS one, and
    /// the Unix domain socket's: indexed by the accept token's slot
    /// ([`super::PLAIN_PORT`], [`super::TLS_PORT`], [`super::UNIX_SOCKET`]), as `accepting` is.
    listeners: [Option<std::os::fd::OwnedFd>; LISTENERS],
    /// This worker's share of the Unix socket's file, let go when it stops accepting.
    unix_file: Option<SocketFile>,
    /// The accepts of each listener.
    accepting: [Accepting; LISTENERS],
    /// Where each listener's one-shot accept has the kernel write the peer's address, when
    /// the router keeps it (owned by the kernel while that accept is armed; dropped after
    /// the ring).
    accept_addrs: [Box<accept::PeerAddr>; LISTENERS],
    /// Accepting stopped on an error (a full file table...): retry after a close or at
    /// this time.
    accept_retry: Option<Instant>,
    bufs: BufRing,
    /// A connection has closed since the receive buffers' pages were last given back.
    /// The kernel takes the buffers in ring order, so traffic touches every one of them
    /// (a page each for small messages, 32 KiB for large); once no connection is left
    /// they can go back ([`BufRing::release_pages`]).
    bufs_touched: bool,
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
    /// Connections accepted beyond a turn's share, not yet started (see `on_accept`).
    unstarted: VecDeque<(usize, u32)>,
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
        unix: Option<UnixListen>,
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
            Sink::bounded(move || waker.wake(), shared.config.max_pending_calls)
        };
        let (unix_listener, unix_file) = match unix {
            Some(UnixListen { listener, file }) => (Some(listener.into()), Some(file)),
            None => (None, None),
        };
        Ok(UringWorker {
            ring,
            shared,
            enable_on_start,
            started: false,
            finished: false,
            finishing: false,
            listeners: [Some(listener.into()), tls_listener.map(Into::into), unix_listener],
            unix_file,
            accepting: Default::default(),
            accept_addrs: Default::default(),
            accept_retry: None,
            bufs,
            bufs_touched: false,
            waker,
            wake_buf: Box::new(0),
            conns: Slab::new(),
            generation: 0,
            serving: super::Serving::new(sink),
            completions: Vec::new(),
            inflight: 0,
            backlog: VecDeque::new(),
            touched: Vec::new(),
            unstarted: VecDeque::new(),
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

    pub(super) fn serve_one_turn(&mut self, wait_cap: Option<Duration>) -> bool {
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
        self.serving.date.refresh(self.now);
        self.reap();
        self.start_accepted();
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
        if !self.backlog.is_empty() || !self.unstarted.is_empty() {
            return Some(Duration::ZERO);
        }
        [self.next_scan, self.drain_deadline, self.accept_retry]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.saturating_duration_since(Instant::now()))
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
            Op::Accept => self.on_accept(key, generation == ONE_SHOT, result, flags),
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
        self.shared.replies_arrived(completions.len());
        for completion in completions.drain(..) {
            self.serving.count(&completion);
            let Some(conn) = self.conns.get_mut(completion.conn) else {
                continue;
            };
            if conn.core.generation != completion.generation || conn.dead {
                continue;
            }
            // Input held back while replies were awaited may now go on (`complete`).
            let key = completion.conn;
            if conn.core.complete(completion, self.serving.date.get()) {
                self.touch(key);
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
            // Over the high-water mark (or closing): stop taking input until the output
            // drains. A multishot receive takes all that has arrived (up to the worker's
            // receive buffers) before the worker sees it: a peer held back once goes on with
            // one-shot receives, a buffer at a time, so that its input stays within
            // `INPUT_HIGH_WATER` and a buffer from then on.
            conn.recv_cancelled = true;
            conn.one_shot = ONE_SHOT_SPELL;
            let target = token(Op::Recv, key, short_generation(conn.core.generation));
            self.cancel(target);
        }
        let shared = &*self.shared;
        let Some(conn) = self.conns.get_mut(key) else { return };
        if !conn.send_inflight {
            conn.sending.shrink(OUTPUT_KEEP);
        }
        // What the kernel reads was moved to `sending`: the output's sent part is free.
        conn.core.out.release_sent();
        conn.core.out.shrink(OUTPUT_KEEP);
        conn.core.track_clocks(self.now);
        let deadline = conn.deadline(&shared.config);
        let trim_at = conn.trim_at();
        self.schedule_scan(trim_at.map_or(deadline, |at| at.min(deadline)));
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
        conn.core.release(self.serving.metrics());
        conn.sending.release();
        self.bufs_touched = true;
        if self.conns.is_empty() || super::table_oversized(&self.conns) {
            self.schedule_scan(self.now + IDLE_TRIM);
        }
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
        // A clone: the loop below closes and serves connections, which borrow `self`.
        let shared = Arc::clone(&self.shared);
        let config = &shared.config;
        // Waiting on the server, not on the client: no client time-out applies.
        let time_out_at =
            |conn: &UringConn| (!conn.dead && !conn.core.session.has_pending()).then(|| conn.deadline(config));
        let (due, earliest) = super::due(self.conns.iter(), now, |conn| {
            super::earliest(time_out_at(conn), conn.trim_at())
        });
        let mut trimmed = 0;
        for key in due {
            let Some(conn) = self.conns.get_mut(key) else { continue };
            if time_out_at(conn).is_none_or(|at| at > now) {
                // Only its buffers' time is up: it stays open, holding its slot alone.
                conn.trim();
                trimmed += 1;
                continue;
            }
            if conn.cut_at.is_some() || conn.core.lingering_until().is_some() {
                // The goodbye did not leave in time, or the linger is over.
                self.close(key);
                continue;
            }
            conn.core.time_out(self.serving.date.get(), self.serving.metrics());
            conn.cut_at = Some(now + GOODBYE_GRACE);
            self.serve(key);
        }
        super::after_scan(&mut self.conns, trimmed);
        if self.conns.is_empty() && self.bufs_touched {
            // No receive is in flight: the receive buffers' pages can go back.
            self.bufs.release_pages();
            self.bufs_touched = false;
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
        self.shared.gave_up(self.serving.sink.awaited());
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
            let bufs = std::mem::replace(&mut self.bufs, BufRing::none());
            std::mem::forget(bufs);
        }
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

impl crate::engine::Turns for UringWorker {
    fn serve_turn(&mut self, wait_cap: Option<Duration>) -> bool {
        self.serve_one_turn(wait_cap)
    }

    fn serving(&mut self) -> &mut crate::engine::Serving {
        &mut self.serving
    }
}
