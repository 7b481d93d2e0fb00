// SPDX-License-Identifier: Apache-2.0
//! Engines move bytes between sockets and sessions; they hold no protocol logic.
//!
//! Each worker thread owns one listener (`SO_REUSEPORT`, so the kernel spreads new
//! connections), its connections and its buffers; workers share only the router, the
//! configuration and a few counters. A Unix domain socket, when configured, is one
//! socket that every worker accepts from (see `unix`).

mod config;
mod conn;
#[cfg(test)]
mod conn_tests;
mod poll;
mod shared;
mod unix;
#[cfg(target_os = "linux")]
mod uring;

pub use config::{Config, EngineKind, EventLog};
pub(crate) use shared::{Shared, TlsShared};
#[cfg(target_os = "linux")]
pub(crate) use uring::EventFd;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slab::Slab;

use crate::buffer::{self, Spares};
use crate::date::DateCache;
use crate::defer::{Completion, Sink, Target};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::router::Router;
use crate::session::{Context, Scratch, Session};
use crate::tls::TlsSession;
use conn::INPUT_HIGH_WATER;

/// One worker: a listener, its connections and its buffers, served by one thread.
///
/// [`crate::Server::spawn`] and [`crate::Server::run`] drive workers on threads of their
/// own; [`crate::Server::into_workers`] hands them to callers that bring their own threads
/// (the C API's `ucall_take_calls(server, thread_index)`). A worker of the `uring` engine
/// must be driven from one thread only: the first to call [`Worker::turn`] becomes the
/// ring's single issuer.
pub struct Worker {
    inner: Inner,
}

/// Boxed: a worker is moved to its thread once and then only used there.
enum Inner {
    Poll(Box<poll::PollWorker>),
    #[cfg(target_os = "linux")]
    Uring(Box<uring::UringWorker>),
}

impl Worker {
    /// Serve until the server is stopped and this worker has drained.
    pub fn run(self) {
        match self.inner {
            Inner::Poll(worker) => worker.run(),
            #[cfg(target_os = "linux")]
            Inner::Uring(worker) => worker.run(),
        }
    }

    /// Wait for events (at most `wait`, when given), serve what is ready and return.
    /// Returns `false` once the server has stopped and this worker has closed every
    /// connection; later calls return `false` at once.
    pub fn turn(&mut self, wait: Option<std::time::Duration>) -> bool {
        match &mut self.inner {
            Inner::Poll(worker) => worker.turn(wait),
            #[cfg(target_os = "linux")]
            Inner::Uring(worker) => worker.turn(wait),
        }
    }

    /// How many of this worker's waits ended because their time ran out rather than on
    /// an event: a diagnostic. While a connection has input buffered and its output can
    /// take more, no wait may end that way (the tests count it on a deep pipeline).
    #[must_use]
    pub fn waits_timed_out(&self) -> u64 {
        match &self.inner {
            Inner::Poll(worker) => worker.waits_timed_out,
            #[cfg(target_os = "linux")]
            Inner::Uring(worker) => worker.waits_timed_out,
        }
    }

    /// A handle with which the thread turning this worker completes calls between turns
    /// without waking it (see [`crate::WakeHold`]).
    pub fn wake_hold(&self) -> crate::defer::WakeHold {
        match &self.inner {
            Inner::Poll(worker) => crate::defer::WakeHold(Arc::clone(&worker.serving.sink)),
            #[cfg(target_os = "linux")]
            Inner::Uring(worker) => crate::defer::WakeHold(Arc::clone(&worker.serving.sink)),
        }
    }

    /// The server's counters, once serving has started with metrics on: the front ends
    /// render them outside the engine (Python's worker processes report their totals).
    #[must_use]
    pub fn metrics(&self) -> Option<Arc<Metrics>> {
        match &self.inner {
            Inner::Poll(worker) => worker.serving.router.metrics().cloned(),
            #[cfg(target_os = "linux")]
            Inner::Uring(worker) => worker.serving.router.metrics().cloned(),
        }
    }

    /// Hand over the procedures this worker serves.
    pub(crate) fn set_router(&mut self, router: Arc<crate::router::Router>) {
        match &mut self.inner {
            Inner::Poll(worker) => worker.serving.router = router,
            #[cfg(target_os = "linux")]
            Inner::Uring(worker) => worker.serving.router = router,
        }
    }
}

/// The engine chosen for a server, and why.
pub(crate) struct Selected {
    pub(crate) kind: EngineKind,
    /// What `poll` runs on, and why it was taken when it was asked for.
    detail: &'static str,
    /// Why `auto` could not take `uring` here, when it could not.
    pub(crate) fallback: Option<String>,
    #[cfg(target_os = "linux")]
    features: Option<uring::Features>,
}

impl Selected {
    /// The start-up log's account: the engine, and what it uses or why it was taken.
    pub(crate) fn describe(&self, sqpoll: bool) -> String {
        #[cfg(target_os = "linux")]
        if let Some(features) = &self.features {
            return format!("{} (io_uring: {})", self.kind.name(), features.describe(sqpoll));
        }
        let _ = sqpoll;
        match &self.fallback {
            Some(why) => format!("{} (io_uring unavailable: {why})", self.kind.name()),
            None => format!("{} ({})", self.kind.name(), self.detail),
        }
    }
}

/// Which engine runs when `requested` is asked for here: `auto` is `uring` where
/// io_uring works (Linux 5.19+, not forbidden by seccomp or the `io_uring_disabled`
/// sysctl) and `poll` elsewhere.
///
/// # Errors
/// When `uring` is asked for and cannot run here; the message says why.
pub fn resolve(requested: EngineKind) -> Result<EngineKind, Error> {
    select(requested).map(|selected| selected.kind)
}

/// The engine that will run for `requested`, or why it cannot.
pub(crate) fn select(requested: EngineKind) -> Result<Selected, Error> {
    let poll = |detail: &'static str, fallback: Option<String>| Selected {
        kind: EngineKind::Poll,
        detail,
        fallback,
        #[cfg(target_os = "linux")]
        features: None,
    };
    #[cfg(target_os = "linux")]
    {
        match (requested, requested == EngineKind::Poll) {
            (_, true) => Ok(poll("epoll, as configured", None)),
            (_, false) => match uring::probe() {
                Ok(features) => Ok(Selected {
                    kind: EngineKind::Uring,
                    detail: "",
                    fallback: None,
                    features: Some(features),
                }),
                Err(why) if requested == EngineKind::Auto => Ok(poll("epoll", Some(why))),
                Err(why) => Err(Error::engine(format!(
                    "the uring engine cannot run here: {why}; use engine = auto or poll (UCALL_ENGINE=poll)"
                ))),
            },
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        match requested {
            EngineKind::Auto | EngineKind::Poll => Ok(poll("kqueue", None)),
            EngineKind::Uring => Err(Error::engine(
                "the uring engine needs Linux; use engine = auto or poll (UCALL_ENGINE=poll)",
            )),
        }
    }
}

/// Open one listener per worker on `addr` and prepare the workers.
pub(crate) fn bind_workers(
    engine: &Selected,
    shared: &Arc<Shared>,
    addr: SocketAddr,
) -> Result<(Vec<Worker>, SocketAddr), Error> {
    if !shared.config.share_port {
        refuse_taken(addr)?;
        if let Some(tls) = shared.tls.as_ref().and_then(|tls| tls.separate.as_ref()) {
            refuse_taken(*tls.lock().unwrap_or_else(std::sync::PoisonError::into_inner))?;
        }
    }
    let mut workers = Vec::with_capacity(shared.config.threads);
    let mut bound = addr;
    let unix = match &shared.config.unix_socket {
        Some(path) => Some(unix::bind(path, shared.config.unix_socket_mode)?),
        None => None,
    };
    for index in 0..shared.config.threads {
        let listener = listen(bound)?;
        if index == 0 {
            bound = listener
                .local_addr()
                .map_err(|e| Error::io("cannot read the bound address", e))?;
        }
        let unix = unix.as_ref().map(unix::UnixListen::share).transpose()?;
        let inner = match engine.kind {
            #[cfg(target_os = "linux")]
            EngineKind::Uring => {
                let features = engine
                    .features
                    .as_ref()
                    .expect("invariant: uring is selected with its features");
                Inner::Uring(Box::new(uring::UringWorker::new(
                    Arc::clone(shared),
                    listener,
                    unix,
                    features,
                )?))
            }
            _ => Inner::Poll(Box::new(poll::PollWorker::new(Arc::clone(shared), listener, unix)?)),
        };
        workers.push(Worker { inner });
    }
    let polls: Vec<&poll::PollWorker> = workers
        .iter()
        .filter_map(|w| match &w.inner {
            Inner::Poll(worker) => Some(&**worker),
            #[cfg(target_os = "linux")]
            Inner::Uring(_) => None,
        })
        .collect();
    poll::register_wakers(shared, &polls);
    #[cfg(target_os = "linux")]
    {
        let rings: Vec<&uring::UringWorker> = workers
            .iter()
            .filter_map(|w| match &w.inner {
                Inner::Uring(worker) => Some(&**worker),
                Inner::Poll(_) => None,
            })
            .collect();
        uring::register_wakers(shared, &rings);
    }
    Ok((workers, bound))
}

/// Wake every worker so it notices a stop request.
pub(crate) fn wake_all(shared: &Shared) {
    poll::wake_all(shared);
    #[cfg(target_os = "linux")]
    uring::wake_all(shared);
}

/// A connection admitted by [`admit`]: its place in its peer's count, when peers are
/// capped (given back when the connection drops it).
pub(crate) type Admitted = Option<crate::limit::PeerSlot>;

/// Count a connection from `peer` (when known) just accepted in, unless the server is
/// stopping (a worker may accept one before it has seen the stop that others have), at
/// its connection limit, or the peer at its own. Returns whether to serve it (counted in
/// `metrics` then); when not, the caller closes it.
pub(crate) fn admit(shared: &Shared, metrics: Option<&Metrics>, peer: Option<SocketAddr>) -> Option<Admitted> {
    use std::sync::atomic::Ordering;
    if shared.stopping.load(Ordering::Acquire) {
        return None;
    }
    let slot = match (&shared.peer_caps, peer) {
        (Some(caps), Some(peer)) => match caps.admit(peer.ip()) {
            Some(slot) => Some(slot),
            None => {
                peer_refused(shared, metrics, peer);
                return None;
            }
        },
        _ => None,
    };
    let open = shared.connections.fetch_add(1, Ordering::AcqRel);
    if open >= shared.config.max_connections {
        shared.connections.fetch_sub(1, Ordering::AcqRel);
        static FULL: crate::logs::Throttle = crate::logs::Throttle::new();
        crate::logs::throttled(
            &FULL,
            log::Level::Warn,
            format_args!(
                "connection refused: max_connections = {} are open",
                shared.config.max_connections
            ),
        );
        return None;
    }
    if let Some(metrics) = metrics {
        metrics.accepted();
    }
    Some(slot)
}

#[cold]
#[inline(never)]
fn peer_refused(shared: &Shared, metrics: Option<&Metrics>, peer: SocketAddr) {
    if let Some(metrics) = metrics {
        metrics.refused(crate::metrics::Refusal::PeerConnections);
    }
    static FULL: crate::logs::Throttle = crate::logs::Throttle::new();
    crate::logs::throttled(
        &FULL,
        log::Level::Warn,
        format_args!(
            "connection refused: {} holds max_connections_per_peer = {} already",
            peer.ip(),
            shared.config.max_connections_per_peer.unwrap_or(0)
        ),
    );
}

/// Make room in a connection's `input` for `at_least` more bytes, and at once for the
/// rest of the message being received when its framing tells its size (see
/// [`Session::input_wanted`]), up to [`Spares::LARGEST`]. A 2 MB body then lands in one
/// buffer rather than being copied at every doubling (a sixth of a 1.6 MB echo's time
/// in the Python server, perf). The room is only reserved: untouched pages cost no
/// memory, so a client that announces a large body and stalls holds little.
pub(crate) fn reserve_input(input: &mut Vec<u8>, session: &Session, at_least: usize) {
    let rest = session.input_wanted().min(Spares::LARGEST).saturating_sub(input.len());
    buffer::reserve(input, at_least.max(rest));
}

/// How many bytes to read into a connection's `input` at once: the rest of the message
/// being received when its framing tells its size, and at most [`INPUT_HIGH_WATER`]
/// beyond that, however much room the input has (a large message leaves it megabytes).
pub(crate) fn read_limit(input: &[u8], session: &Session) -> usize {
    INPUT_HIGH_WATER.max(session.input_wanted().saturating_sub(input.len()))
}

/// Whether the header time-out runs for a connection: its TLS handshake is under way, or
/// the session waits for a request head of which some bytes have arrived (plaintext in
/// `input` not held back as a backlog, or a TLS record not yet whole).
pub(crate) fn head_under_way(session: &Session, input: &[u8], backlog: bool, tls: Option<&TlsSession>) -> bool {
    let handshaking = tls.is_some_and(TlsSession::is_handshaking);
    let mid_record = tls.is_some_and(TlsSession::is_mid_record);
    handshaking || (session.is_reading_head() && !backlog && (!input.is_empty() || mid_record))
}

/// A worker's turns, alike for both engines: each serves what is ready, then writes the
/// turn's request log lines together.
pub(crate) trait Turns: Sized {
    /// Wait (at most `wait_cap`, when given) and serve what is ready; whether the worker
    /// goes on.
    fn serve_turn(&mut self, wait_cap: Option<Duration>) -> bool;

    /// The worker's serving state.
    fn serving(&mut self) -> &mut Serving;

    /// Wait for events or completions (at most `wait_cap`, when given), serve them, and
    /// return whether the worker goes on: `false` once it has stopped and closed every
    /// connection.
    fn turn(&mut self, wait_cap: Option<Duration>) -> bool {
        let going = self.serve_turn(wait_cap);
        // The turn's request log lines go out together, without a lock per call.
        self.serving().flush_log();
        going
    }

    /// Turn until the worker stops.
    fn run(mut self) {
        while self.turn(None) {}
    }
}

/// How long a turn waits: until the first of the engine's own deadline (`own`) and the
/// caller's cap, or not at all when calls were deferred since the worker's `sink` awaited
/// `awaited` (a count read right after the turn took its completions). Delivering those
/// completions before the wait may let calls in (a connection held back reads on), and a
/// front end that runs calls between turns (Python) runs them only once the turn
/// returns: waiting first would leave them queued until an unrelated event came, which
/// never does for a client that has sent all it meant to.
pub(crate) fn turn_wait(sink: &Sink, awaited: usize, own: Option<Duration>, cap: Option<Duration>) -> Option<Duration> {
    if sink.awaited() > awaited {
        return Some(Duration::ZERO);
    }
    match (own, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Connections that stopped reading while their worker's sink was full ([`Sink::is_full`]),
/// as (slot, generation), in the order they stopped. No event or completion of their own
/// may come, so the worker serves them again as calls complete, while there is room.
#[derive(Default)]
pub(crate) struct HeldBack(VecDeque<(usize, u64)>);

impl HeldBack {
    /// List connection `key` of `generation`, unless `listed` (its own flag) says it is.
    pub(crate) fn hold(&mut self, listed: &mut bool, key: usize, generation: u64) {
        if !*listed {
            *listed = true;
            self.0.push_back((key, generation));
        }
    }

    /// The next connection to serve again, while `sink` has room. The rest stay listed
    /// untouched: serving thousands only to list them again cost more than the calls.
    pub(crate) fn next(&mut self, sink: &Sink) -> Option<(usize, u64)> {
        if sink.is_full() {
            None
        } else {
            self.0.pop_front()
        }
    }
}

/// What a worker serves connections with, the same in both engines: the procedures, the
/// sink deferred replies come back through, scratch buffers and the cached date.
pub(crate) struct Serving {
    /// The procedures, handed over when serving starts (see [`crate::Server::router_mut`]).
    pub(crate) router: Arc<Router>,
    /// Deferred replies arrive here from any thread; its waker announces them.
    pub(crate) sink: Arc<Sink>,
    scratch: Scratch,
    pub(crate) date: DateCache,
}

impl Serving {
    pub(crate) fn new(sink: Arc<Sink>) -> Self {
        Serving {
            router: Arc::default(),
            sink,
            scratch: Scratch::default(),
            date: DateCache::new(),
        }
    }

    /// The counters, when metrics are on.
    pub(crate) fn metrics(&self) -> Option<&Metrics> {
        self.router.metrics().map(AsRef::as_ref)
    }

    /// Count, and log, a deferred call whose completion arrived (whether or not its
    /// connection is still there to be answered).
    pub(crate) fn count(&mut self, completion: &Completion) {
        let Some(meter) = completion.meter else { return };
        // One reading of the clock for the metrics and the request log both.
        let ended = crate::date::monotonic_nanos();
        if let Some(metrics) = self.router.metrics() {
            let code = completion.outcome.as_ref().map(|_| ());
            metrics.completed_at(meter.method, code, meter.started, ended);
        }
        if let (Some(log), Some(note)) = (self.router.request_log(), &completion.note) {
            let times = (meter.started, ended);
            crate::dispatch::log_completed(log, self.scratch.lines(), note, times, &completion.outcome);
        }
    }

    /// Write the request log lines of this turn (one branch when the log is off).
    pub(crate) fn flush_log(&mut self) {
        if let Some(log) = self.router.request_log() {
            self.scratch.lines().flush(log);
        }
    }

    /// The session context for serving connection `conn` (of `generation`).
    pub(crate) fn context<'a>(&'a mut self, shared: &'a Shared, conn: usize, generation: u64) -> Context<'a> {
        Context {
            router: &self.router,
            limits: &shared.config.limits,
            date: self.date.get(),
            scratch: &mut self.scratch,
            defer: Some(Target {
                sink: &self.sink,
                conn,
                generation,
                presence: None,
                cancellation: None,
            }),
            draining: shared.stopping.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// A worker's listeners, as indices of its state per listener (and, on io_uring, in its
/// accepts' tokens): the TCP port, a separate TLS port, the Unix domain socket.
pub(crate) const PLAIN_PORT: usize = 0;
pub(crate) const TLS_PORT: usize = 1;
pub(crate) const UNIX_SOCKET: usize = 2;
pub(crate) const LISTENERS: usize = 3;

/// The TLS settings of a connection accepted on listener `port`: the separate TLS port's,
/// or the TCP port's when TLS takes it. The Unix socket is plaintext.
pub(crate) fn tls_of(shared: &Shared, port: usize) -> Option<&TlsShared> {
    let tls = shared.tls.as_ref()?;
    match port {
        TLS_PORT => Some(tls),
        PLAIN_PORT if tls.separate.is_none() => Some(tls),
        _ => None,
    }
}

/// Connections a worker takes in per listener per turn; the rest wait in the listen
/// backlog. A flood of new connections, each with work queued, then cannot make one turn
/// (and every open connection's wait) as long as all of it, nor crowd out the open ones.
pub(crate) const ACCEPTS_PER_TURN: usize = 64;

/// A connection that closes while its client may still be sending closes in stages
/// (RFC 9112, 9.6): the server shuts its sending side, then reads and drops what arrives
/// until the client closes, for at most this long. Closing at once with unread input
/// would make the kernel reset the connection and drop the replies not yet delivered.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a connection the server closes once its replies are sent must close in stages
/// (see [`LINGER`]). Not when the client asked for the close and nothing it sent is left
/// unread (`unread`: buffered, seen arriving, or maybe waiting in the socket): it sends
/// nothing more (RFC 9112 §9.6), so closing at once loses nothing and saves the
/// half-close (on uring, a trip to a kernel worker thread), a wake-up and a read per
/// connection. TLS connections always close in stages, after their close_notify.
pub(crate) fn must_linger(session: &Session, unread: bool, tls: bool) -> bool {
    unread || tls || !session.close_was_asked()
}

/// The clocks a connection's time-outs run on, the same in every engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clocks {
    /// Bytes last moved either way.
    pub(crate) last_progress: Instant,
    /// A request head (or a TLS handshake) began and is not complete yet.
    pub(crate) head_started: Option<Instant>,
}

impl Clocks {
    /// Start the header clock while a head (or a handshake) is under way, stop it after.
    pub(crate) fn track_head(&mut self, in_head: bool, now: Instant) {
        if in_head {
            self.head_started.get_or_insert(now);
        } else {
            self.head_started = None;
        }
    }

    /// When the connection times out if nothing happens: the header time-out from the
    /// start of a head, the idle time-out from the last progress, whichever comes first.
    pub(crate) fn deadline(&self, config: &Config) -> Instant {
        let idle = self.last_progress + config.idle_timeout;
        match self.head_started {
            Some(started) => (started + config.header_timeout).min(idle),
            None => idle,
        }
    }
}

/// The connections whose deadline has passed at `now`, and the earliest deadline of the
/// others (when the next scan is due). `None` from `deadline_of`: no time-out applies now.
pub(crate) fn due<'a, C: 'a>(
    conns: impl Iterator<Item = (usize, &'a C)>,
    now: Instant,
    deadline_of: impl Fn(&C) -> Option<Instant>,
) -> (Vec<usize>, Option<Instant>) {
    let mut expired = Vec::new();
    let mut earliest: Option<Instant> = None;
    for (key, conn) in conns {
        match deadline_of(conn) {
            Some(at) if at <= now => expired.push(key),
            Some(at) => earliest = Some(earliest.map_or(at, |e| e.min(at))),
            None => {}
        }
    }
    (expired, earliest)
}

/// The earlier of two optional times.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    a.into_iter().chain(b).min()
}

/// Connection-table slots a worker keeps however few connections remain.
const TABLE_KEEP: usize = 1024;

/// A storm of connections has passed: most of the table's slots are empty, and a scan
/// should give them back ([`after_scan`]).
pub(crate) fn table_oversized<T>(conns: &Slab<T>) -> bool {
    conns.capacity() > TABLE_KEEP && conns.len() < conns.capacity() / 4
}

/// Idle connections whose buffers went back in one scan before the allocator is asked to
/// return free pages: their small buffers lie scattered among the heap's pages.
const TRIMMED_TO_GIVE_BACK: usize = 64;

/// After a scan that released `trimmed` idle connections' buffers: give the connection
/// table's empty tail back when a storm of connections has passed (slots in use stay where
/// they are), and the memory the allocator holds free when either freed much. Without
/// this, RSS stayed at its peak after 9,000 connections had gone idle or closed
/// (docs/design.md, memory per idle connection).
pub(crate) fn after_scan<T>(conns: &mut Slab<T>, trimmed: usize) {
    let mut freed = trimmed >= TRIMMED_TO_GIVE_BACK;
    if table_oversized(conns) {
        let before = conns.capacity();
        conns.shrink_to_fit();
        freed |= conns.capacity() < before;
    }
    if freed {
        give_back_free_memory();
    }
}

/// glibc keeps freed memory in its arenas, and returns only the top of the main heap on
/// its own; `malloc_trim` returns every free page.
fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's arenas to the system; it
    // takes the arenas' locks itself and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// This worker's listener for the TLS port, when TLS has a port of its own
/// (`TlsConfig::port`). The first worker to bind port 0 tells the others which port it got.
fn separate_tls_listener(shared: &Shared) -> Result<Option<std::net::TcpListener>, Error> {
    let Some(bound) = shared.tls.as_ref().and_then(|tls| tls.separate.as_ref()) else {
        return Ok(None);
    };
    let mut bound = bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let listener = listen(*bound)?;
    *bound = listener
        .local_addr()
        .map_err(|e| Error::io("cannot read the bound TLS address", e))?;
    Ok(Some(listener))
}

/// Fail when something already listens on `addr`'s port. The workers' listeners share
/// their port (`SO_REUSEPORT`), and so would any other process of the same user that
/// asked for it: a second server started by mistake would bind without a word and take
/// half of the first one's clients. A socket without `SO_REUSEPORT` cannot share a port
/// someone listens on, so binding one first tells. Port 0 picks a free port anyway.
fn refuse_taken(addr: SocketAddr) -> Result<(), Error> {
    if addr.port() == 0 {
        return Ok(());
    }
    tcp_socket(addr, false)?.bind(&addr.into()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            Error::bind(format!("cannot bind {addr}: another server listens on that port"), e)
        } else {
            bind_failed(addr, "bind", e)
        }
    })
}

fn bind_failed(addr: SocketAddr, what: &str, e: std::io::Error) -> Error {
    Error::bind(format!("cannot {what} {addr}"), e)
}

/// A TCP socket for `addr` as both the listeners and the probe of [`refuse_taken`] bind
/// it: `SO_REUSEADDR`, IPv6 only for an IPv6 address, and `SO_REUSEPORT` when `shared`.
fn tcp_socket(addr: SocketAddr, shared: bool) -> Result<socket2::Socket, Error> {
    use socket2::{Domain, Protocol, Socket, Type};
    let fail = |what: &str, e| bind_failed(addr, what, e);
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| fail("open a socket for", e))?;
    socket
        .set_reuse_address(true)
        .map_err(|e| fail("set SO_REUSEADDR on", e))?;
    if shared {
        #[cfg(unix)]
        socket
            .set_reuse_port(true)
            .map_err(|e| fail("set SO_REUSEPORT on", e))?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true).map_err(|e| fail("set IPV6_V6ONLY on", e))?;
    }
    Ok(socket)
}

/// A non-blocking listening socket with `SO_REUSEPORT`, so that each worker has its own.
fn listen(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    let fail = |what: &str, e| bind_failed(addr, what, e);
    let socket = tcp_socket(addr, true)?;
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux; the uring engine,
    // whose sockets are registered files, relies on it.
    socket.set_nodelay(true).map_err(|e| fail("set TCP_NODELAY on", e))?;
    socket.set_nonblocking(true).map_err(|e| fail("make non-blocking", e))?;
    socket.bind(&addr.into()).map_err(|e| fail("bind", e))?;
    socket.listen(4096).map_err(|e| fail("listen on", e))?;
    Ok(socket.into())
}

/// Raise the soft open-file limit towards the hard one so that `max_connections` fit.
pub(crate) fn raise_fd_limit(max_connections: usize) {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own; RLIMIT_NOFILE is a valid resource.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        let wanted = (max_connections as libc::rlim_t)
            .saturating_add(256)
            .min(limit.rlim_max);
        if wanted > limit.rlim_cur {
            limit.rlim_cur = wanted;
            // SAFETY: setrlimit reads the struct we own; failure only leaves the old limit.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        }
    }
}
