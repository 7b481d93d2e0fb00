// SPDX-License-Identifier: Apache-2.0
//! The portable engine: epoll (Linux) or kqueue (macOS, BSD) through mio, edge-triggered.
//!
//! Reads land in one per-worker buffer; only the unfinished tail of a request is copied
//! into the connection, so an idle connection holds no receive buffer. Replies leave with
//! one vectored write per flush.

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use super::{Clocks, ACCEPTS_PER_TURN};
use crate::buffer::{self, OutBuf};
use crate::defer::{Completion, Sink};
use crate::error::Error;
use crate::server::Shared;
use crate::session::{Context, Session};
use crate::tls::{Received, TlsSession};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// The listener of a separate TLS port.
const TLS_LISTENER: Token = Token(2);
const FIRST_CONNECTION: usize = 3;

/// Size of the per-worker read buffer, and of each read.
const READ_CHUNK: usize = 64 << 10;
/// Stop processing a connection's requests while this much output waits to be sent.
const OUTPUT_HIGH_WATER: usize = 1 << 20;
/// Reads per connection per wake-up before other connections get a turn.
const READS_PER_TURN: usize = 16;
/// Output capacity a connection keeps after a large reply has gone.
const OUTPUT_KEEP: usize = 64 << 10;
/// Slices per vectored write.
const MAX_IOV: usize = 64;
/// Least time between two time-out scans.
const SCAN_GRANULARITY: Duration = Duration::from_millis(50);

struct Conn {
    stream: TcpStream,
    session: Session,
    /// Unconsumed input (the tail of an unfinished request), empty when between requests.
    input: Vec<u8>,
    out: OutBuf,
    /// Edge-triggered: the socket may hold unread bytes.
    readable: bool,
    /// An event reported the peer's close or an error: read until the end, since no
    /// further edge will announce it.
    hang_up: bool,
    /// `input` may hold whole requests, left unprocessed while the output was full: they
    /// go first, before anything more is read.
    backlog: bool,
    /// The peer shut its sending side.
    peer_closed: bool,
    /// Close once the output is flushed.
    closing: bool,
    /// Time-out clocks (idle, header).
    clocks: Clocks,
    /// Tells this connection from an earlier one in the same slab slot, so that a late
    /// deferred reply never reaches the wrong client.
    generation: u64,
    /// TLS state, on a TLS port: ciphertext in `stream`, plaintext in `input` and `out`.
    tls: Option<Box<TlsSession>>,
    /// Closing in stages (see [`super::LINGER`]): the sending side is shut, what arrives is
    /// read and dropped until the client closes or this time passes.
    lingering: Option<Instant>,
    /// Listed in the worker's `held` (see [`super::HeldBack`]).
    held: bool,
}

pub(crate) struct PollWorker {
    shared: Arc<Shared>,
    poll: Poll,
    waker: Arc<Waker>,
    listener: Option<TcpListener>,
    /// A separate TLS port's listener.
    tls_listener: Option<TcpListener>,
    conns: Slab<Conn>,
    read_buf: Vec<u8>,
    /// Connections to serve again without waiting for an event (their turn ended early).
    again: Vec<usize>,
    /// Listeners (plain, TLS) to accept from again next turn: the last turn stopped at
    /// [`ACCEPTS_PER_TURN`].
    accept_again: [bool; 2],
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
    pub(crate) fn new(shared: Arc<Shared>, listener: std::net::TcpListener) -> Result<Self, Error> {
        let poll = Poll::new().map_err(|e| Error::io("cannot create a poller", e))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| Error::io("cannot create a waker", e))?);
        let sink = {
            let waker = Arc::clone(&waker);
            Sink::new(move || {
                let _ = waker.wake();
            })
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
        Ok(PollWorker {
            shared,
            poll,
            waker,
            listener: Some(listener),
            tls_listener,
            conns: Slab::new(),
            read_buf: vec![0; READ_CHUNK],
            again: Vec::new(),
            accept_again: [false; 2],
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

    pub(crate) fn run(mut self) {
        while self.turn(None) {}
    }

    /// Wait for events (at most `wait_cap`, when given), serve them, and return whether
    /// the worker goes on: `false` once it has stopped and closed every connection.
    pub(crate) fn turn(&mut self, wait_cap: Option<Duration>) -> bool {
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
        self.serving.date.refresh(SystemTime::now());
        // Serving needs `&mut self`; the events buffer is set aside meanwhile (an empty
        // `Events` does not allocate).
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for event in &events {
            match event.token() {
                LISTENER => self.accept(false),
                TLS_LISTENER => self.accept(true),
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
        for tls_port in [false, true] {
            if std::mem::take(&mut self.accept_again[usize::from(tls_port)]) {
                self.accept(tls_port);
            }
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

    /// Accept what waits on the plain listener, or with `tls_port` the separate TLS one,
    /// up to [`ACCEPTS_PER_TURN`] connections.
    fn accept(&mut self, tls_port: bool) {
        let shared = Arc::clone(&self.shared);
        let tls_config = shared.tls.as_ref().filter(|tls| tls_port || tls.separate.is_none());
        for _ in 0..ACCEPTS_PER_TURN {
            let listener = if tls_port {
                self.tls_listener.as_ref()
            } else {
                self.listener.as_ref()
            };
            let Some(listener) = listener else { return };
            let (mut stream, _) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors or memory: leave the rest queued until a close frees some.
                    self.shared.report_accept_failure(&e);
                    return;
                }
            };
            if !super::admit(&self.shared) {
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
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
            entry.insert(Conn {
                generation: self.next_generation,
                stream,
                session: Session::new(),
                input: Vec::new(),
                out: OutBuf::new(),
                readable: true,
                hang_up: false,
                backlog: false,
                peer_closed: false,
                closing: false,
                // The handshake must finish within the header time-out.
                clocks: Clocks {
                    last_progress: now,
                    head_started: tls.is_some().then_some(now),
                },
                tls,
                lingering: None,
                held: false,
            });
            self.schedule_scan(now + self.shared.config.idle_timeout.min(self.shared.config.header_timeout));
        }
        // Edge-triggered: no event announces the connections still queued.
        self.accept_again[usize::from(tls_port)] = true;
    }

    /// Move bytes for one connection until it has nothing more to do right now.
    fn serve(&mut self, key: usize) {
        let shared = &*self.shared;
        let now = self.now;
        let Some(conn) = self.conns.get_mut(key) else { return };
        if let Some(until) = conn.lingering {
            if discard_input(conn, &mut self.read_buf) {
                self.close(key);
                return;
            }
            if conn.readable {
                // More to drop than one turn reads: the rest next turn.
                self.again.push(key);
            }
            self.schedule_scan(until);
            return;
        }
        let mut ctx = self.serving.context(shared, key, conn.generation);
        let mut reads = 0;
        let mut failed = false;
        loop {
            if has_output(conn) && flush(conn, now).is_err() {
                failed = true;
                break;
            }
            if conn.closing {
                break;
            }
            if conn.out.pending() > OUTPUT_HIGH_WATER || conn.session.is_saturated(ctx.worker()) {
                if ctx.worker().is_some_and(Sink::is_full) {
                    self.held.hold(&mut conn.held, key, conn.generation);
                }
                break;
            }
            if conn.backlog {
                feed_input(conn, &mut ctx);
                continue;
            }
            if !conn.readable {
                break;
            }
            if reads == READS_PER_TURN {
                self.again.push(key);
                break;
            }
            reads += 1;
            match read_and_feed(conn, &mut self.read_buf, &mut ctx, now) {
                Ok(()) => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if !failed && conn.peer_closed && !conn.closing && !conn.backlog {
            // Half-closed by the client: what it sent is answered, the rest is never coming.
            conn.session.end_of_input(&conn.input, &mut conn.out, &mut ctx);
            conn.closing = true;
            // Replies still awaited (holes) keep the connection open until they are sent.
            if has_output(conn) && flush(conn, now).is_err() {
                failed = true;
            }
        }
        let done = failed || (conn.closing && conn.out.is_empty() && !has_output(conn));
        // Edge-triggered: `readable` means the socket may hold more than was read.
        let unread = conn.readable || !conn.input.is_empty();
        if done && !failed && !conn.peer_closed && super::must_linger(&conn.session, unread, conn.tls.is_some()) {
            // Input may still arrive or wait unread: closing now would reset the
            // connection and drop the replies not yet delivered.
            if let Some(tls) = conn.tls.as_mut() {
                tls.close();
                let _ = tls.write_to(&mut NoSigPipe(&conn.stream));
            }
            let _ = conn.stream.shutdown(Shutdown::Write);
            let until = now + super::LINGER;
            conn.lingering = Some(until);
            buffer::keep(std::mem::take(&mut conn.input));
            conn.readable = true;
            self.serve(key);
            return;
        }
        if done {
            self.close(key);
            return;
        }
        conn.out.shrink(OUTPUT_KEEP);
        let in_head = super::head_under_way(&conn.session, &conn.input, conn.backlog, conn.tls.as_deref());
        conn.clocks.track_head(in_head, now);
        let deadline = conn.clocks.deadline(&self.shared.config);
        self.schedule_scan(deadline);
    }

    /// Put the deferred replies that arrived in place and send what they unblock. Returns
    /// how many calls were awaited once they were taken (see [`super::turn_wait`]).
    fn deliver_completions(&mut self) -> usize {
        let mut completions = std::mem::take(&mut self.completions);
        let awaited = self.serving.sink.drain(&mut completions);
        let mut touched = Vec::new();
        for completion in completions.drain(..) {
            let Some(conn) = self.conns.get_mut(completion.conn) else {
                continue;
            };
            if conn.generation != completion.generation {
                continue;
            }
            if conn.session.complete(
                completion.slot,
                completion.outcome,
                &mut conn.out,
                self.serving.date.get(),
            ) {
                touched.push(completion.conn);
            }
        }
        self.completions = completions;
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.backlog |= !conn.input.is_empty();
            }
            self.serve(key);
        }
        while let Some((key, generation)) = self.held.next(&self.serving.sink) {
            if let Some(conn) = self.conns.get_mut(key).filter(|conn| conn.generation == generation) {
                conn.held = false;
                conn.backlog |= !conn.input.is_empty();
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
        let config = &self.shared.config;
        // Waiting on the server, not on the client: no client time-out applies.
        let (expired, earliest) = super::due(self.conns.iter(), now, |conn| {
            conn.lingering
                .or_else(|| (!conn.session.has_pending()).then(|| conn.clocks.deadline(config)))
        });
        for key in expired {
            if let Some(conn) = self.conns.get_mut(key).filter(|conn| conn.lingering.is_none()) {
                // A 408 answers a request partly received; an idle connection is closed
                // silently, or a client could read the 408 as the reply to its next request.
                if !conn.input.is_empty() || !conn.session.is_between_requests() {
                    conn.session.time_out(&mut conn.out, self.serving.date.get());
                }
                conn.closing = true;
                let _ = flush(conn, now);
            }
            self.close(key);
        }
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
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
            self.drain_deadline = Some(Instant::now() + self.shared.config.shutdown_timeout);
        }
        let idle: Vec<usize> = self
            .conns
            .iter()
            // Not `readable`: bytes may wait in the socket (a connection accepted just now).
            .filter(|(_, c)| !c.readable && c.input.is_empty() && c.out.is_empty() && c.session.is_between_requests())
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            // A WebSocket hears why it is closed (1001); other idle connections just close.
            let Some(conn) = self.conns.get_mut(key) else { continue };
            if conn.session.going_away(&mut conn.out) {
                conn.closing = true;
                self.serve(key);
            } else {
                self.close(key);
            }
        }
        for (_, conn) in self.conns.iter_mut() {
            if !conn.readable && conn.input.is_empty() && conn.session.last_reply_closes() {
                conn.closing = true;
            }
        }
        self.conns.is_empty() || self.drain_deadline.is_some_and(|at| Instant::now() >= at)
    }

    fn close(&mut self, key: usize) {
        if let Some(mut conn) = self.conns.try_remove(key) {
            buffer::keep(std::mem::take(&mut conn.input));
            conn.out.release();
            if let Some(tls) = conn.tls.as_mut().filter(|_| conn.lingering.is_none()) {
                // Best effort: a clean end the client can tell from a truncation.
                tls.close();
                let _ = tls.write_to(&mut NoSigPipe(&conn.stream));
            }
            // Dropping the stream closes it, which also takes it out of the epoll set (it
            // is never duplicated): a deregister and a `shutdown` first cost two system
            // calls per connection, one of which failed with ENOTCONN when the client had
            // closed first.
            drop(conn);
            self.shared.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A lingering connection: read and drop what arrives. Whether the client has closed (or
/// the connection failed), so that it can be closed now.
fn discard_input(conn: &mut Conn, read_buf: &mut [u8]) -> bool {
    if !conn.readable {
        return false;
    }
    for _ in 0..READS_PER_TURN {
        match conn.stream.read(read_buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                conn.readable = false;
                return false;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}

/// Read once and hand the bytes to the session. Reads go to the worker's buffer; only an
/// unfinished request's tail is kept in the connection.
fn read_and_feed(conn: &mut Conn, read_buf: &mut [u8], ctx: &mut Context<'_>, now: Instant) -> io::Result<()> {
    if conn.tls.is_some() {
        return read_tls_and_feed(conn, read_buf, ctx, now);
    }
    let mut asked = READ_CHUNK;
    let result = if conn.input.is_empty() {
        conn.stream.read(read_buf)
    } else {
        // Into the spare capacity, not a zeroed extension: zeroing 64 KiB per read cost
        // as much as the rest of a 1.6 MB request's handling (callgrind). All of it: a
        // large request arrives in a few reads rather than one per 64 KiB.
        let len = conn.input.len();
        super::reserve_input(&mut conn.input, &conn.session, READ_CHUNK);
        let spare = conn.input.spare_capacity_mut();
        asked = spare.len();
        let result = socket2::SockRef::from(&conn.stream).recv(spare);
        if let Ok(read) = result {
            // SAFETY: `recv` initialised the first `read` bytes of the spare capacity.
            unsafe { conn.input.set_len(len + read) };
        }
        result
    };
    let read = match result {
        Ok(0) => {
            conn.readable = false;
            conn.peer_closed = true;
            0
        }
        Ok(n) => {
            // A short read drained the socket: bytes arriving later raise a new edge (mio
            // registers EPOLLRDHUP too, so a later close does as well). Reading again only
            // to get EAGAIN would cost a system call per request. A close or reset already
            // reported must still be read to the end.
            if n < asked && !conn.hang_up {
                conn.readable = false;
            }
            n
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            conn.readable = false;
            0
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
        Err(e) => return Err(e),
    };
    if read > 0 {
        conn.clocks.last_progress = now;
    }
    if conn.input.is_empty() {
        if read > 0 {
            let progress = conn
                .session
                .feed(&read_buf[..read], &mut conn.out, ctx, OUTPUT_HIGH_WATER);
            let left = &read_buf[progress.consumed..read];
            if !left.is_empty() {
                super::reserve_input(&mut conn.input, &conn.session, left.len());
                conn.input.extend_from_slice(left);
            }
            conn.closing |= progress.close;
            conn.backlog = !conn.input.is_empty()
                && (conn.out.pending() > OUTPUT_HIGH_WATER || conn.session.is_saturated(ctx.worker()));
        }
    } else {
        feed_input(conn, ctx);
    }
    Ok(())
}

/// Hand the buffered input to the session. What it leaves while the output is over the
/// high-water mark is a backlog, processed before the socket is read again, so that a
/// client that reads its replies slowly cannot make the server buffer all it sends.
fn feed_input(conn: &mut Conn, ctx: &mut Context<'_>) {
    conn.out.prepare(conn.input.len());
    let progress = conn.session.feed(&conn.input, &mut conn.out, ctx, OUTPUT_HIGH_WATER);
    conn.input.drain(..progress.consumed);
    conn.closing |= progress.close;
    conn.backlog =
        !conn.input.is_empty() && (conn.out.pending() > OUTPUT_HIGH_WATER || conn.session.is_saturated(ctx.worker()));
    if conn.input.is_empty() && conn.input.capacity() > READ_CHUNK * 2 {
        buffer::keep(std::mem::take(&mut conn.input));
    }
}

/// TLS: read ciphertext into the worker's buffer, decrypt it into the connection's input,
/// and hand that to the session.
fn read_tls_and_feed(conn: &mut Conn, read_buf: &mut [u8], ctx: &mut Context<'_>, now: Instant) -> io::Result<()> {
    let read = match conn.stream.read(read_buf) {
        Ok(0) => {
            conn.readable = false;
            conn.peer_closed = true;
            return Ok(());
        }
        Ok(n) => {
            if n < READ_CHUNK && !conn.hang_up {
                conn.readable = false;
            }
            n
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            conn.readable = false;
            return Ok(());
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
        Err(e) => return Err(e),
    };
    conn.clocks.last_progress = now;
    let tls = conn.tls.as_mut().expect("invariant: called for TLS connections");
    // The plaintext is never longer than the records it came in.
    super::reserve_input(&mut conn.input, &conn.session, read);
    match tls.receive(&read_buf[..read], &mut conn.input) {
        Ok(Received::Open) => {}
        Ok(Received::Closed) => conn.peer_closed = true,
        Err(_) => {
            // Handshake failure, bad record, plaintext on a TLS port: send the alert rustls
            // queued, then close. Nobody else is affected.
            let _ = tls.write_to(&mut NoSigPipe(&conn.stream));
            return Err(io::ErrorKind::InvalidData.into());
        }
    }
    if !conn.input.is_empty() {
        feed_input(conn, ctx);
    }
    Ok(())
}

/// Writes to a socket with `MSG_NOSIGNAL`: a peer that has gone yields `EPIPE` instead of
/// a `SIGPIPE` that would kill a host program that does not ignore it (C programs do
/// not; Rust and Python programs do). `writev`, which std and rustls use for vectored
/// writes, has no such flag.
struct NoSigPipe<'a>(&'a TcpStream);

/// Where `MSG_NOSIGNAL` is missing (macOS), no flag; such systems have `SO_NOSIGPIPE`.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const SEND_FLAGS: libc::c_int = 0;

impl Write for NoSigPipe<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        socket2::SockRef::from(self.0).send_with_flags(bytes, SEND_FLAGS)
    }

    fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        socket2::SockRef::from(self.0).send_vectored_with_flags(slices, SEND_FLAGS)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether anything waits to be written: plaintext before the first hole, or ciphertext.
fn has_output(conn: &Conn) -> bool {
    conn.out.has_sendable() || conn.tls.as_ref().is_some_and(|tls| tls.wants_write())
}

/// Write what is queued; `Ok` also when the socket is full (the rest goes on the next
/// writable event).
fn flush(conn: &mut Conn, now: Instant) -> io::Result<()> {
    if let Some(tls) = conn.tls.as_mut() {
        // Encrypt only as the socket takes it: rustls bounds what it buffers, so the
        // output high-water mark keeps holding back a client that does not read.
        loop {
            tls.write_to(&mut NoSigPipe(&conn.stream))?;
            if tls.wants_write() || !conn.out.has_sendable() {
                conn.clocks.last_progress = now;
                return Ok(());
            }
            tls.seal(&mut conn.out);
        }
    }
    while conn.out.has_sendable() {
        let mut slices = [IoSlice::new(&[]); MAX_IOV];
        let count = conn.out.io_slices(&mut slices);
        match NoSigPipe(&conn.stream).write_vectored(&slices[..count]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                conn.out.advance(n);
                conn.clocks.last_progress = now;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
