// SPDX-License-Identifier: Apache-2.0
//! The portable engine: epoll (Linux) or kqueue (macOS, BSD) through mio, edge-triggered.
//!
//! Reads land in one per-worker buffer; only the unfinished tail of a request is copied
//! into the connection, so an idle connection holds no receive buffer. Replies leave with
//! one vectored write per flush.

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use slab::Slab;

mod write;

use write::{flush, NoSigPipe};

use crate::defer::{Completion, Sink};
use crate::engine::conn::{Conn, TlsFailed, IDLE_TRIM, OUTPUT_KEEP, SCAN_GRANULARITY};
use crate::engine::unix::{SocketFile, UnixListen};
use crate::engine::Shared;
use crate::engine::{ACCEPTS_PER_TURN, LISTENERS, PLAIN_PORT, TLS_PORT, UNIX_SOCKET};
use crate::error::Error;
use crate::session::Context;
use crate::tls::TlsSession;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// The listener of a separate TLS port.
const TLS_LISTENER: Token = Token(2);
/// The Unix domain socket's listener.
const UNIX_LISTENER: Token = Token(3);
const FIRST_CONNECTION: usize = 4;

/// Size of the per-worker read buffer, and of each read.
const READ_CHUNK: usize = 64 << 10;
/// Reads per connection per wake-up before other connections get a turn.
const READS_PER_TURN: usize = 16;

/// A connection's socket: TCP, or a stream of the Unix domain socket. Both take the same
/// system calls; only accepting them and `TCP_NODELAY` differ.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buf),
            Stream::Unix(stream) => stream.read(buf),
        }
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.shutdown(how),
            Stream::Unix(stream) => stream.shutdown(how),
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(stream) => stream.as_fd(),
            Stream::Unix(stream) => stream.as_fd(),
        }
    }
}

impl mio::event::Source for Stream {
    fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.register(registry, token, interests),
            Stream::Unix(stream) => stream.register(registry, token, interests),
        }
    }

    fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.reregister(registry, token, interests),
            Stream::Unix(stream) => stream.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.deregister(registry),
            Stream::Unix(stream) => stream.deregister(registry),
        }
    }
}

/// A connection: its socket and what the edge-triggered poller said of it; the rest is
/// the engine-independent [`Conn`].
struct PollConn {
    stream: Stream,
    /// Edge-triggered: the socket may hold unread bytes.
    readable: bool,
    /// An event reported the peer's close or an error: read until the end, since no
    /// further edge will announce it.
    hang_up: bool,
    conn: Conn,
}

pub(crate) struct PollWorker {
    shared: Arc<Shared>,
    poll: Poll,
    waker: Arc<Waker>,
    listener: Option<TcpListener>,
    /// A separate TLS port's listener.
    tls_listener: Option<TcpListener>,
    /// The Unix domain socket's listener, and this worker's share of its file.
    unix_listener: Option<(UnixListener, SocketFile)>,
    conns: Slab<PollConn>,
    read_buf: Vec<u8>,
    /// Connections to serve again without waiting for an event (their turn ended early).
    again: Vec<usize>,
    /// Listeners (by [`PLAIN_PORT`], [`TLS_PORT`], [`UNIX_SOCKET`]) to accept from again
    /// next turn: the last turn stopped at [`ACCEPTS_PER_TURN`].
    accept_again: [bool; LISTENERS],
    /// Connections held back while the worker awaits the most deferred calls it takes.
    held: super::HeldBack,
    next_scan: Option<Instant>,
    drain_deadline: Option<Instant>,
    events: Events,
    finished: bool,
    /// Procedures, completion sink, scratch buffers and date (see [`super::Serving`]).
    pub(crate) serving: super::Serving,
    completions: Vec<Completion>,
    next_generation: u64,
    /// The clock read once per turn, after the wait: progress and time-outs are counted in
    /// seconds, and a clock read per read and write cost 2–3 % of a small request.
    now: Instant,
    /// Waits that ended on their time-out (see [`super::Worker::waits_timed_out`]).
    pub(crate) waits_timed_out: u64,
}

pub(crate) fn register_wakers(shared: &Shared, workers: &[&PollWorker]) {
    let _ = shared
        .wakers
        .set(workers.iter().map(|w| Arc::clone(&w.waker)).collect());
}

pub(crate) fn wake_all(shared: &Shared) {
    for waker in shared.wakers.get().into_iter().flatten() {
        let _ = waker.wake();
    }
}

impl PollWorker {
    pub(crate) fn new(
        shared: Arc<Shared>,
        listener: std::net::TcpListener,
        unix: Option<UnixListen>,
    ) -> Result<Self, Error> {
        let poll = Poll::new().map_err(|e| Error::io("cannot create a poller", e))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| Error::io("cannot create a waker", e))?);
        let sink = {
            let waker = Arc::clone(&waker);
            Sink::bounded(
                move || {
                    let _ = waker.wake();
                },
                shared.config.max_pending_calls,
            )
        };
        let mut listener = TcpListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| Error::io("cannot register the listener", e))?;
        let tls_listener = match super::separate_tls_listener(&shared)? {
            None => None,
            Some(std_listener) => {
                let mut tls_listener = TcpListener::from_std(std_listener);
                poll.registry()
                    .register(&mut tls_listener, TLS_LISTENER, Interest::READABLE)
                    .map_err(|e| Error::io("cannot register the TLS listener", e))?;
                Some(tls_listener)
            }
        };
        let unix_listener = match unix {
            None => None,
            Some(UnixListen { listener, file }) => {
                let mut listener = UnixListener::from_std(listener);
                poll.registry()
                    .register(&mut listener, UNIX_LISTENER, Interest::READABLE)
                    .map_err(|e| Error::io("cannot register the Unix socket's listener", e))?;
                Some((listener, file))
            }
        };
        Ok(PollWorker {
            shared,
            poll,
            waker,
            listener: Some(listener),
            tls_listener,
            unix_listener,
            conns: Slab::new(),
            read_buf: vec![0; READ_CHUNK],
            again: Vec::new(),
            accept_again: [false; LISTENERS],
            held: super::HeldBack::default(),
            next_scan: None,
            drain_deadline: None,
            events: Events::with_capacity(1024),
            finished: false,
            serving: super::Serving::new(sink),
            completions: Vec::new(),
            next_generation: 0,
            now: Instant::now(),
            waits_timed_out: 0,
        })
    }

    pub(super) fn serve_one_turn(&mut self, wait_cap: Option<Duration>) -> bool {
        if self.finished {
            return false;
        }
        // Completions queued without a wake (`WakeHold`) go out before waiting.
        let awaited = self.deliver_completions();
        let timeout = super::turn_wait(&self.serving.sink, awaited, self.poll_timeout(), wait_cap);
        if let Err(e) = self.poll.poll(&mut self.events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                return true;
            }
            self.shared.report("worker stopped", &format!("poll failed: {e}"));
            self.finish();
            return false;
        }
        if self.events.is_empty() && timeout.is_some_and(|t| !t.is_zero()) {
            self.waits_timed_out += 1;
        }
        self.now = Instant::now();
        self.serving.date.refresh(self.now);
        // Serving needs `&mut self`; the events buffer is set aside meanwhile (an empty
        // `Events` does not allocate).
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for event in &events {
            match event.token() {
                LISTENER => self.accept(PLAIN_PORT),
                TLS_LISTENER => self.accept(TLS_PORT),
                UNIX_LISTENER => self.accept(UNIX_SOCKET),
                WAKER => {
                    self.deliver_completions();
                }
                Token(token) => {
                    let key = token - FIRST_CONNECTION;
                    if let Some(conn) = self.conns.get_mut(key) {
                        conn.hang_up |= event.is_read_closed() || event.is_error();
                        if event.is_readable() || conn.hang_up {
                            conn.readable = true;
                        }
                        self.serve(key);
                    }
                }
            }
        }
        self.events = events;
        for key in std::mem::take(&mut self.again) {
            self.serve(key);
        }
        let again = std::mem::take(&mut self.accept_again);
        for (port, _) in again.into_iter().enumerate().filter(|(_, again)| *again) {
            self.accept(port);
        }
        if self.shared.stopping.load(Ordering::Acquire) && self.drain() {
            self.finish();
            return false;
        }
        let now = self.now;
        if self.next_scan.is_some_and(|at| now >= at) {
            self.expire(now);
        }
        true
    }

    fn finish(&mut self) {
        self.shared.gave_up(self.serving.sink.awaited());
        for key in self.conns.iter().map(|(key, _)| key).collect::<Vec<_>>() {
            self.close(key);
        }
        self.finished = true;
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        if !self.again.is_empty() || self.accept_again.contains(&true) {
            return Some(Duration::ZERO);
        }
        let wake_at = match (self.next_scan, self.drain_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        wake_at.map(|at| at.saturating_duration_since(now))
    }

    /// Accept what waits on listener `port` ([`PLAIN_PORT`], [`TLS_PORT`] or
    /// [`UNIX_SOCKET`]), up to [`ACCEPTS_PER_TURN`] connections.
    fn accept(&mut self, port: usize) {
        let shared = Arc::clone(&self.shared);
        let tls_config = super::tls_of(&shared, port);
        for _ in 0..ACCEPTS_PER_TURN {
            let accepted = match port {
                // A Unix peer has no address worth keeping (clients' sockets are unnamed).
                UNIX_SOCKET => match &self.unix_listener {
                    Some((listener, _)) => listener.accept().map(|(stream, _)| (Stream::Unix(stream), None)),
                    None => return,
                },
                _ => {
                    let listener = if port == TLS_PORT {
                        self.tls_listener.as_ref()
                    } else {
                        self.listener.as_ref()
                    };
                    let Some(listener) = listener else { return };
                    listener.accept().map(|(stream, peer)| {
                        let _ = stream.set_nodelay(true);
                        (Stream::Tcp(stream), Some(peer))
                    })
                }
            };
            let (mut stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors or memory: leave the rest queued until a close frees some.
                    self.shared.report_accept_failure(&e);
                    return;
                }
            };
            let Some(peer_slot) = super::admit(&self.shared, self.serving.metrics(), peer) else {
                drop(stream);
                continue;
            };
            let tls = match tls_config.map(|tls| TlsSession::new(&tls.config)).transpose() {
                Ok(tls) => tls.map(Box::new),
                Err(_) => {
                    self.shared.connections.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
            };
            let entry = self.conns.vacant_entry();
            let token = Token(entry.key() + FIRST_CONNECTION);
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                self.shared.connections.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let now = self.now;
            self.next_generation += 1;
            let mut conn = Conn::new(self.next_generation, tls, peer, now);
            conn.peer_slot = peer_slot;
            entry.insert(PollConn {
                stream,
                readable: true,
                hang_up: false,
                conn,
            });
            self.schedule_scan(now + self.shared.config.idle_timeout.min(self.shared.config.header_timeout));
        }
        // Edge-triggered: no event announces the connections still queued.
        self.accept_again[port] = true;
    }

    /// Move bytes for one connection until it has nothing more to do right now.
    fn serve(&mut self, key: usize) {
        let shared = &*self.shared;
        let now = self.now;
        let Some(pc) = self.conns.get_mut(key) else { return };
        if let Some(until) = pc.conn.lingering_until() {
            if discard_input(pc, &mut self.read_buf) {
                self.close(key);
                return;
            }
            if pc.readable {
                // More to drop than one turn reads: the rest next turn.
                self.again.push(key);
            }
            self.schedule_scan(until);
            return;
        }
        let mut ctx = self.serving.context(shared, key, pc.conn.generation);
        let metrics = ctx.router.metrics().map(AsRef::as_ref);
        let mut reads = 0;
        let mut failed = false;
        loop {
            if pc.conn.has_output() {
                if flush(pc, now, metrics).is_err() {
                    failed = true;
                    break;
                }
                pc.conn.output_left(0);
            }
            if pc.conn.is_closing() {
                break;
            }
            if !pc.conn.has_room(0, ctx.worker()) {
                if ctx.worker().is_some_and(Sink::is_full) {
                    self.held.hold(&mut pc.conn.held, key, pc.conn.generation);
                }
                break;
            }
            if pc.conn.is_backlogged() {
                pc.conn.feed(&mut ctx, 0);
                continue;
            }
            if !pc.readable {
                break;
            }
            if reads == READS_PER_TURN {
                self.again.push(key);
                break;
            }
            reads += 1;
            if read_and_feed(pc, &mut self.read_buf, &mut ctx, now).is_err() {
                failed = true;
                break;
            }
        }
        // Replies still awaited (holes) keep a half-closed connection open until sent.
        if !failed && pc.conn.answer_end_of_input(&mut ctx) && pc.conn.has_output() && flush(pc, now, metrics).is_err()
        {
            failed = true;
        }
        let done = failed || (pc.conn.is_closing() && pc.conn.out.is_empty() && !pc.conn.has_output());
        // Edge-triggered: `readable` means the socket may hold more than was read.
        if done && !failed && pc.conn.must_linger(pc.readable) {
            // Input may still arrive or wait unread: closing now would reset the
            // connection and drop the replies not yet delivered.
            if let Some(tls) = pc.conn.tls.as_mut() {
                tls.close();
                let _ = tls.write_to(&mut NoSigPipe(&pc.stream));
            }
            let _ = pc.stream.shutdown(Shutdown::Write);
            pc.conn.linger(now);
            pc.readable = true;
            self.serve(key);
            return;
        }
        if done {
            self.close(key);
            return;
        }
        // Sent with a copy (writev, TLS): the kernel keeps none of it.
        pc.conn.out.release_sent();
        pc.conn.out.shrink(OUTPUT_KEEP);
        pc.conn.track_clocks(now);
        let deadline = pc.conn.clocks.deadline(&self.shared.config);
        let trim_at = pc.conn.trim_at(false);
        self.schedule_scan(trim_at.map_or(deadline, |at| at.min(deadline)));
    }

    /// Put the deferred replies that arrived in place and send what they unblock. Returns
    /// how many calls were awaited once they were taken (see [`super::turn_wait`]).
    fn deliver_completions(&mut self) -> usize {
        let mut completions = std::mem::take(&mut self.completions);
        let awaited = self.serving.sink.drain(&mut completions);
        // Most turns bring none: they skip the bookkeeping below (40 instructions a turn).
        if !completions.is_empty() {
            self.shared.replies_arrived(completions.len());
            let mut touched = Vec::new();
            for completion in completions.drain(..) {
                self.serving.count(&completion);
                let Some(pc) = self.conns.get_mut(completion.conn) else {
                    continue;
                };
                if pc.conn.generation != completion.generation {
                    continue;
                }
                // Input held back while replies were awaited may go on (`complete`).
                let key = completion.conn;
                if pc.conn.complete(completion, self.serving.date.get()) {
                    touched.push(key);
                }
            }
            touched.sort_unstable();
            touched.dedup();
            for key in touched {
                self.serve(key);
            }
        }
        self.completions = completions;
        while let Some((key, generation)) = self.held.next(&self.serving.sink) {
            if let Some(pc) = self.conns.get_mut(key).filter(|pc| pc.conn.generation == generation) {
                pc.conn.held = false;
                pc.conn.mark_backlog();
                self.serve(key);
            }
        }
        awaited
    }

    fn schedule_scan(&mut self, at: Instant) {
        let at = at.max(self.now + SCAN_GRANULARITY);
        if self.next_scan.is_none_or(|next| at < next) {
            self.next_scan = Some(at);
        }
    }

    /// Close connections whose time is up; plan the next scan.
    fn expire(&mut self, now: Instant) {
        self.next_scan = None;
        // A clone: the loop below closes and serves connections, which borrow `self`.
        let shared = Arc::clone(&self.shared);
        let config = &shared.config;
        // Waiting on the server, not on the client: no client time-out applies.
        let (due, earliest) = super::due(self.conns.iter(), now, |pc| {
            super::earliest(pc.conn.deadline(config), pc.conn.trim_at(false))
        });
        let mut trimmed = 0;
        for key in due {
            let Some(pc) = self.conns.get_mut(key) else { continue };
            if pc.conn.deadline(config).is_none_or(|at| at > now) {
                // Only its buffers' time is up: it stays open, holding its slot alone.
                pc.conn.release_buffers();
                trimmed += 1;
                continue;
            }
            if pc.conn.lingering_until().is_none() {
                pc.conn.time_out(self.serving.date.get(), self.serving.metrics());
                let _ = flush(pc, now, self.serving.metrics());
            }
            self.close(key);
        }
        super::after_scan(&mut self.conns, trimmed);
        if let Some(at) = earliest {
            self.schedule_scan(at);
        }
    }

    /// Graceful shutdown: stop accepting, close idle connections, let the others finish.
    /// Returns whether the worker is done.
    fn drain(&mut self) -> bool {
        if let Some(mut listener) = self.tls_listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        // The last worker to let go of the Unix socket removes its file.
        if let Some((mut listener, _file)) = self.unix_listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
            self.drain_deadline = Some(Instant::now() + self.shared.config.shutdown_timeout);
        }
        let idle: Vec<usize> = self
            .conns
            .iter()
            // Not `readable`: bytes may wait in the socket (a connection accepted just now).
            .filter(|(_, pc)| !pc.readable && pc.conn.is_idle())
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            // A WebSocket hears why it is closed (1001); other idle connections just close.
            let Some(pc) = self.conns.get_mut(key) else { continue };
            if pc.conn.going_away() {
                self.serve(key);
            } else {
                self.close(key);
            }
        }
        for (_, pc) in self.conns.iter_mut() {
            if !pc.readable {
                pc.conn.last_reply_closes();
            }
        }
        self.conns.is_empty() || self.drain_deadline.is_some_and(|at| Instant::now() >= at)
    }

    fn close(&mut self, key: usize) {
        if let Some(mut pc) = self.conns.try_remove(key) {
            pc.conn.release(self.serving.metrics());
            let lingering = pc.conn.lingering_until().is_some();
            if let Some(tls) = pc.conn.tls.as_mut().filter(|_| !lingering) {
                // Best effort: a clean end the client can tell from a truncation.
                tls.close();
                let _ = tls.write_to(&mut NoSigPipe(&pc.stream));
            }
            // Dropping the stream closes it, which also takes it out of the epoll set (it
            // is never duplicated): a deregister and a `shutdown` first cost two system
            // calls per connection, one of which failed with ENOTCONN when the client had
            // closed first.
            drop(pc);
            self.shared.connections.fetch_sub(1, Ordering::AcqRel);
            if super::table_oversized(&self.conns) {
                self.schedule_scan(self.now + IDLE_TRIM);
            }
        }
    }
}

/// A lingering connection: read and drop what arrives. Whether the client has closed (or
/// the connection failed), so that it can be closed now.
fn discard_input(pc: &mut PollConn, read_buf: &mut [u8]) -> bool {
    if !pc.readable {
        return false;
    }
    for _ in 0..READS_PER_TURN {
        match pc.stream.read(read_buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                pc.readable = false;
                return false;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}

/// Read once and hand the bytes to the connection. Reads go to the worker's buffer; only
/// an unfinished request's tail is kept in the connection.
fn read_and_feed(pc: &mut PollConn, read_buf: &mut [u8], ctx: &mut Context<'_>, now: Instant) -> io::Result<()> {
    if pc.conn.tls.is_some() {
        return read_tls_and_feed(pc, read_buf, ctx, now);
    }
    let conn = &mut pc.conn;
    let mut asked = READ_CHUNK;
    let in_place = !conn.input.is_empty();
    let result = if in_place {
        // Into the spare capacity, not a zeroed extension: zeroing 64 KiB per read cost
        // as much as the rest of a 1.6 MB request's handling (callgrind). All of it, up to
        // the input's cap: a large request arrives in a few reads rather than one per
        // 64 KiB.
        let len = conn.input.len();
        super::reserve_input(&mut conn.input, &conn.session, READ_CHUNK);
        let limit = super::read_limit(&conn.input, &conn.session);
        let spare = conn.input.spare_capacity_mut();
        asked = spare.len().min(limit);
        let result = socket2::SockRef::from(&pc.stream).recv(&mut spare[..asked]);
        if let Ok(read) = result {
            // SAFETY: `recv` initialised the first `read` bytes of the spare capacity.
            unsafe { conn.input.set_len(len + read) };
        }
        result
    } else {
        pc.stream.read(read_buf)
    };
    let read = match result {
        Ok(0) => {
            pc.readable = false;
            conn.input_ended = true;
            0
        }
        Ok(n) => {
            // A short read drained the socket: bytes arriving later raise a new edge (mio
            // registers EPOLLRDHUP too, so a later close does as well). Reading again only
            // to get EAGAIN would cost a system call per request. A close or reset already
            // reported must still be read to the end.
            if n < asked && !pc.hang_up {
                pc.readable = false;
            }
            n
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            pc.readable = false;
            0
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
        Err(e) => return Err(e),
    };
    if in_place {
        conn.received_in_place(read, ctx, now, 0);
    } else if read > 0 {
        conn.deliver(&read_buf[..read], ctx, now, 0);
    }
    Ok(())
}

/// TLS: read ciphertext into the worker's buffer, decrypt it into the connection's input,
/// and hand that to the session.
fn read_tls_and_feed(pc: &mut PollConn, read_buf: &mut [u8], ctx: &mut Context<'_>, now: Instant) -> io::Result<()> {
    let read = match pc.stream.read(read_buf) {
        Ok(0) => {
            pc.readable = false;
            pc.conn.input_ended = true;
            return Ok(());
        }
        Ok(n) => {
            if n < READ_CHUNK && !pc.hang_up {
                pc.readable = false;
            }
            n
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            pc.readable = false;
            return Ok(());
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
        Err(e) => return Err(e),
    };
    match pc.conn.receive_tls(&read_buf[..read], ctx, now, 0) {
        Ok(()) => Ok(()),
        Err(TlsFailed) => {
            // Send the alert rustls queued, then close. Nobody else is affected.
            if let Some(tls) = pc.conn.tls.as_mut() {
                let _ = tls.write_to(&mut NoSigPipe(&pc.stream));
            }
            Err(io::ErrorKind::InvalidData.into())
        }
    }
}

impl crate::engine::Turns for PollWorker {
    fn serve_turn(&mut self, wait_cap: Option<Duration>) -> bool {
        self.serve_one_turn(wait_cap)
    }

    fn serving(&mut self) -> &mut crate::engine::Serving {
        &mut self.serving
    }
}
