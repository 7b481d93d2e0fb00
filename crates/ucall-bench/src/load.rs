// SPDX-License-Identifier: Apache-2.0
//! The closed-loop load generator behind `ucall-load`.
//!
//! Every connection keeps a fixed number of requests in flight: it sends a new
//! request as soon as a reply arrives, so the offered load follows what the
//! server can take. Connections are spread over worker threads; each thread
//! drives its connections with one `mio` poll and non-blocking sockets.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use crate::framing::{ws_client_frame, Framer, FramingError, HttpFramer, LineFramer, WsFramer, WS_SWITCHED};

/// The default request body: a JSON-RPC 2.0 call of `sum`.
pub const DEFAULT_BODY: &str = r#"{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}"#;

/// The masking key of every client frame (RFC 6455 asks clients to mask; servers unmask
/// whatever the key).
const WS_MASK: [u8; 4] = [0x5a, 0x17, 0xc3, 0x8e];

/// Initial size of a connection's receive buffer.
const READ_BUF: usize = 64 * 1024;
/// A connection whose unconsumed input grows past this is failed.
const MAX_READ_BUF: usize = 64 * 1024 * 1024;
/// Requests at least this long are sent from the one request buffer rather than copied
/// into each connection's queue: copying a 2 MB body before every send took a fifth of
/// the load generator's core on the 1.6 MB echo (perf).
const SEND_BY_REFERENCE: usize = 64 * 1024;
/// How long to wait before reconnecting after a failed connect.
const RECONNECT_DELAY: Duration = Duration::from_millis(10);

/// The wire protocol spoken to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 `POST` requests; replies framed by their headers.
    Http,
    /// The body followed by `\n`; replies are newline-delimited.
    Tcp,
    /// A WebSocket opened with `GET` on the path; each request a masked text frame.
    Ws,
}

impl Protocol {
    /// The protocol's name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Tcp => "tcp",
            Protocol::Ws => "ws",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's address.
    pub addr: SocketAddr,
    /// The wire protocol.
    pub proto: Protocol,
    /// Concurrent connections.
    pub connections: usize,
    /// Requests in flight on each connection.
    pub pipeline: usize,
    /// Open a new connection for every request.
    pub new_connection: bool,
    /// Length of the measured interval.
    pub duration: Duration,
    /// Load applied before measuring starts; its replies are not counted.
    pub warmup: Duration,
    /// The request payload (for HTTP the body; for TCP the line, without `\n`).
    pub body: Vec<u8>,
    /// The HTTP request target.
    pub path: String,
    /// Worker threads.
    pub threads: usize,
    /// Pin every worker thread to this CPU.
    pub cpu: Option<usize>,
    /// A reply whose payload lacks this is counted as an error.
    pub expect: Option<Vec<u8>>,
    /// Speak TLS (any server certificate is accepted).
    pub tls: bool,
    /// Extra HTTP header lines (`Name: value`), as an MCP client sends.
    pub headers: Vec<String>,
}

impl Config {
    /// A configuration with the defaults of the command line for `addr`.
    pub fn new(addr: SocketAddr) -> Config {
        Config {
            addr,
            proto: Protocol::Http,
            connections: 1,
            pipeline: 1,
            new_connection: false,
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            body: DEFAULT_BODY.as_bytes().to_vec(),
            path: "/".to_owned(),
            threads: 1,
            cpu: None,
            expect: None,
            tls: false,
            headers: Vec::new(),
        }
    }

    /// The bytes of one request.
    pub fn request_bytes(&self) -> Vec<u8> {
        match self.proto {
            Protocol::Http => {
                let mut req = format!(
                    "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
                    self.path,
                    self.addr,
                    self.body.len()
                );
                // A `--header 'Content-Type: ...'` (a binary message's) replaces the JSON one.
                let typed = self.headers.iter().any(|header| {
                    header
                        .split_once(':')
                        .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("content-type"))
                });
                if !typed {
                    req.push_str("Content-Type: application/json\r\n");
                }
                if self.new_connection {
                    req.push_str("Connection: close\r\n");
                }
                for header in &self.headers {
                    req.push_str(header);
                    req.push_str("\r\n");
                }
                req.push_str("\r\n");
                let mut bytes = req.into_bytes();
                bytes.extend_from_slice(&self.body);
                bytes
            }
            Protocol::Tcp => {
                let mut bytes = self.body.clone();
                bytes.push(b'\n');
                bytes
            }
            Protocol::Ws => ws_client_frame(&self.body, WS_MASK),
        }
    }

    /// The opening handshake of a WebSocket connection.
    pub fn ws_handshake(&self) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            self.path, self.addr
        )
        .into_bytes()
    }

    fn check(&self) -> io::Result<()> {
        let invalid = |msg: &str| Err(io::Error::new(ErrorKind::InvalidInput, msg.to_owned()));
        if self.connections == 0 {
            return invalid("--connections must be at least 1");
        }
        if self.pipeline == 0 {
            return invalid("--pipeline must be at least 1");
        }
        if self.new_connection && self.proto == Protocol::Ws {
            return invalid("--new-connection is not available over WebSocket");
        }
        if self.new_connection && self.pipeline != 1 {
            return invalid("--new-connection sends one request per connection: use --pipeline 1");
        }
        if self.threads == 0 {
            return invalid("--threads must be at least 1");
        }
        if self.duration.is_zero() {
            return invalid("--duration must be positive");
        }
        if self.proto == Protocol::Tcp && self.body.contains(&b'\n') {
            return invalid("a raw TCP request must not contain a newline");
        }
        if !self.path.starts_with('/') {
            return invalid("--path must start with '/'");
        }
        Ok(())
    }
}

/// The TLS settings of the load generator: the client's (rustls defaults, TLS 1.3 and
/// 1.2, session resumption) with any server certificate accepted, as raw TCP's (no ALPN).
/// The benchmarks run on loopback against a certificate made for the run: what they
/// measure is the cost of TLS, not who the server is. Signatures are still checked, so
/// the handshake does all of its usual work.
pub fn tls_client_config(addr: SocketAddr) -> io::Result<Arc<ClientConfig>> {
    ucall_client::Endpoint::new(addr.ip().to_string(), addr.port())
        .with_protocol(ucall_client::Protocol::Tcp)
        .insecure()
        .tls_config()
        .map_err(io::Error::other)?
        .ok_or_else(|| io::Error::other("an insecure endpoint has TLS"))
}

/// Reads plaintext from a TLS connection over a non-blocking socket, like `read` on
/// the socket itself: `Ok(0)` at the end, `WouldBlock` when the socket has nothing more.
fn tls_read(stream: &mut TcpStream, tls: &mut ClientConnection, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match tls.reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) => return Err(e),
        }
        match tls.read_tls(stream) {
            Ok(0) => return Ok(0),
            Ok(_) => {
                tls.process_new_packets()
                    .map_err(|e| io::Error::new(ErrorKind::InvalidData, e))?;
                // Handshake messages to answer, or data queued until the handshake ended.
                tls_flush(stream, tls)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sends what the TLS connection has ready, until the socket would block.
fn tls_flush(stream: &mut TcpStream, tls: &mut ClientConnection) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(stream) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Errors counted during the measured interval, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    /// Replies with a status outside 2xx.
    pub status: u64,
    /// Replies lacking the expected substring.
    pub expect: u64,
    /// Requests lost to a connection that failed or closed before replying.
    pub io: u64,
    /// Failed connection attempts.
    pub connect: u64,
    /// Replies that could not be framed.
    pub protocol: u64,
}

impl ErrorCounts {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.status + self.expect + self.io + self.connect + self.protocol
    }

    pub(crate) fn add(&mut self, other: &ErrorCounts) {
        self.status += other.status;
        self.expect += other.expect;
        self.io += other.io;
        self.connect += other.connect;
        self.protocol += other.protocol;
    }
}

/// Latency figures in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Replies received in the measured interval (successful or not).
    pub requests: u64,
    /// Length of the measured interval in seconds.
    pub elapsed: f64,
    /// Replies per second.
    pub requests_per_sec: f64,
    /// Bytes received per second.
    pub bytes_per_sec: f64,
    /// Errors, by cause.
    pub errors: ErrorCounts,
    /// Connections opened in the measured interval.
    pub connects: u64,
    /// Request latency: from writing a request (from starting to connect, with
    /// a new connection per request) to having its whole reply.
    pub latency: Latency,
    /// CPU time used by the load generator over the measured interval, as a
    /// percentage of one CPU; `None` where it cannot be read.
    pub cpu_percent: Option<f64>,
}

/// What one worker thread measured.
struct Stats {
    requests: u64,
    bytes: u64,
    connects: u64,
    errors: ErrorCounts,
    hist: Histogram<u64>,
    elapsed: Duration,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            requests: 0,
            bytes: 0,
            connects: 0,
            errors: ErrorCounts::default(),
            // Nanoseconds, 1 ns to 100 s, 3 significant digits.
            hist: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds"),
            elapsed: Duration::ZERO,
        }
    }

    fn reset(&mut self) {
        self.requests = 0;
        self.bytes = 0;
        self.connects = 0;
        self.errors = ErrorCounts::default();
        self.hist.reset();
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpu >= bits {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("CPU {cpu} is out of range"),
        ));
    }
    // SAFETY: cpu_set_t is plain data for which all-zero bytes is the empty
    // set; CPU_SET is given an index checked against the set's size above, and
    // sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPU time (user + system) used so far by this process.
pub(crate) fn process_cpu_time() -> Option<Duration> {
    // SAFETY: rusage is plain data and getrusage fills it in; all-zero bytes
    // are a valid value for it.
    let (rc, usage) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let rc = libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        (rc, usage)
    };
    if rc != 0 {
        return None;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Some(tv(usage.ru_utime) + tv(usage.ru_stime))
}

/// This process's CPU use between two samples of [`process_cpu_time`] taken `wall` apart,
/// in percent of one core; `None` when a sample failed.
pub(crate) fn cpu_percent(before: Option<Duration>, after: Option<Duration>, wall: Duration) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if !wall.is_zero() => Some(100.0 * b.saturating_sub(a).as_secs_f64() / wall.as_secs_f64()),
        _ => None,
    }
}

/// Sleeps until `from`, then until `end`, sampling this process's CPU time at both edges:
/// its use over the measured interval ([`cpu_percent`]).
pub(crate) fn cpu_percent_over(from: Instant, end: Instant) -> Option<f64> {
    let sleep_until = |t: Instant| {
        let now = Instant::now();
        if t > now {
            thread::sleep(t - now);
        }
    };
    sleep_until(from);
    let before = process_cpu_time();
    let wall = Instant::now();
    sleep_until(end);
    cpu_percent(before, process_cpu_time(), wall.elapsed())
}

/// Mean, percentiles and maximum of a histogram of nanoseconds, in microseconds.
pub(crate) fn latency_of(hist: &Histogram<u64>) -> Latency {
    let us = |ns: u64| ns as f64 / 1000.0;
    if hist.is_empty() {
        return Latency::default();
    }
    Latency {
        mean: hist.mean() / 1000.0,
        p50: us(hist.value_at_quantile(0.50)),
        p99: us(hist.value_at_quantile(0.99)),
        p999: us(hist.value_at_quantile(0.999)),
        max: us(hist.max()),
    }
}

/// Runs the load described by `config` and reports what was measured.
pub fn run(config: &Config) -> io::Result<Report> {
    config.check()?;
    let threads = config.threads.min(config.connections);
    let request = config.request_bytes();
    // Fail early, with a clear message, when nothing listens.
    std::net::TcpStream::connect_timeout(&config.addr, Duration::from_secs(5))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {}: {e}", config.addr)))?;

    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + config.warmup;
    let end = measure_from + config.duration;
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        // Connections t, t + threads, t + 2 * threads, ...
        let count = (config.connections - t).div_ceil(threads);
        let config = config.clone();
        let request = request.clone();
        let handle = thread::Builder::new().name(format!("ucall-load-{t}")).spawn(move || {
            if let Some(cpu) = config.cpu {
                pin_to_cpu(cpu)?;
            }
            Worker::new(&config, request, count)?.run(start, measure_from, end)
        })?;
        handles.push(handle);
    }

    let cpu_percent = cpu_percent_over(measure_from, end);

    let mut total = Stats::new();
    let mut first_error = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok(stats)) => {
                total.requests += stats.requests;
                total.bytes += stats.bytes;
                total.connects += stats.connects;
                total.errors.add(&stats.errors);
                total
                    .hist
                    .add(&stats.hist)
                    .map_err(|e| io::Error::other(e.to_string()))?;
                total.elapsed = total.elapsed.max(stats.elapsed);
            }
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => first_error = first_error.or(Some(io::Error::other("a worker thread panicked"))),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let elapsed = if total.elapsed.is_zero() {
        config.duration
    } else {
        total.elapsed
    }
    .as_secs_f64();
    let latency = latency_of(&total.hist);
    Ok(Report {
        requests: total.requests,
        elapsed,
        requests_per_sec: total.requests as f64 / elapsed,
        bytes_per_sec: total.bytes as f64 / elapsed,
        errors: total.errors,
        connects: total.connects,
        latency,
        cpu_percent,
    })
}

/// One connection's state.
struct Conn {
    stream: Option<TcpStream>,
    /// The TLS session over `stream`, with --tls.
    tls: Option<ClientConnection>,
    /// Connect in progress: wait for writability and check the outcome.
    connecting: bool,
    /// Received bytes; `rbuf[rstart..rend]` is not consumed yet.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Bytes to send; `wbuf[wpos..]` is not sent yet.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Large requests to send after `wbuf`, straight from the request buffer (see
    /// [`SEND_BY_REFERENCE`]); `queued_pos` bytes of the first are sent.
    queued: usize,
    queued_pos: usize,
    /// When each request in flight was sent, oldest first.
    inflight: VecDeque<Instant>,
    framer: Framer,
    /// Reconnect no earlier than this.
    retry_at: Option<Instant>,
}

/// Whether `request` is sent from the request buffer (see [`SEND_BY_REFERENCE`]).
fn sent_by_reference(request: &[u8]) -> bool {
    request.len() >= SEND_BY_REFERENCE
}

/// Queue one more `request` to send: copied into `wbuf`, or counted in `queued` when it is
/// sent by reference (a field-wise borrow, as the stream is borrowed meanwhile).
fn queue(wbuf: &mut Vec<u8>, queued: &mut usize, request: &[u8]) {
    if sent_by_reference(request) {
        *queued += 1;
    } else {
        wbuf.extend_from_slice(request);
    }
}

/// What became of a connection after handling an event.
enum Outcome {
    /// Still open.
    Open,
    /// Closed normally; open a new one now.
    Reconnect,
    /// Failed; open a new one after a pause.
    Failed,
}

/// One worker thread: some connections and a poll.
struct Worker<'a> {
    config: &'a Config,
    tls: Option<Arc<ClientConfig>>,
    request: Vec<u8>,
    poll: Poll,
    conns: Vec<Conn>,
    stats: Stats,
}

impl<'a> Worker<'a> {
    fn new(config: &'a Config, request: Vec<u8>, count: usize) -> io::Result<Worker<'a>> {
        let framer = match config.proto {
            Protocol::Http => Framer::Http(HttpFramer::default()),
            Protocol::Tcp => Framer::Line(LineFramer::default()),
            Protocol::Ws => Framer::Ws(WsFramer::default()),
        };
        let conns = (0..count)
            .map(|_| Conn {
                stream: None,
                tls: None,
                connecting: false,
                rbuf: vec![0; READ_BUF],
                rstart: 0,
                rend: 0,
                wbuf: Vec::with_capacity(if sent_by_reference(&request) {
                    0
                } else {
                    request.len() * config.pipeline
                }),
                wpos: 0,
                queued: 0,
                queued_pos: 0,
                inflight: VecDeque::with_capacity(config.pipeline),
                framer: framer.clone(),
                retry_at: None,
            })
            .collect();
        Ok(Worker {
            config,
            tls: config.tls.then(|| tls_client_config(config.addr)).transpose()?,
            request,
            poll: Poll::new()?,
            conns,
            stats: Stats::new(),
        })
    }

    fn run(mut self, start: Instant, measure_from: Instant, end: Instant) -> io::Result<Stats> {
        let now = Instant::now();
        if start > now {
            thread::sleep(start - now);
        }
        for i in 0..self.conns.len() {
            self.open(i, Instant::now())?;
        }
        let mut events = Events::with_capacity(1024);
        let mut measuring = false;
        let mut measure_start = measure_from;
        loop {
            let now = Instant::now();
            if !measuring && now >= measure_from {
                self.stats.reset();
                measuring = true;
                measure_start = now;
            }
            if now >= end {
                self.stats.elapsed = now - measure_start;
                break;
            }
            let mut deadline = if measuring { end } else { measure_from };
            for conn in &self.conns {
                if let Some(t) = conn.retry_at {
                    deadline = deadline.min(t);
                }
            }
            let timeout = deadline.saturating_duration_since(now);
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                let i = event.token().0;
                let read_closed = event.is_read_closed() || event.is_error();
                match self.on_event(i, event.is_readable() || read_closed, read_closed) {
                    Outcome::Open => {}
                    Outcome::Reconnect => self.open(i, Instant::now())?,
                    Outcome::Failed => {
                        self.close(i);
                        self.conns[i].retry_at = Some(Instant::now() + RECONNECT_DELAY);
                    }
                }
            }
            let now = Instant::now();
            for i in 0..self.conns.len() {
                if self.conns[i].retry_at.is_some_and(|t| t <= now) {
                    self.open(i, now)?;
                }
            }
        }
        Ok(self.stats)
    }

    /// Opens connection `i` and queues its first requests.
    fn open(&mut self, i: usize, now: Instant) -> io::Result<()> {
        self.close(i);
        let conn = &mut self.conns[i];
        conn.retry_at = None;
        let mut stream = match TcpStream::connect(self.config.addr) {
            Ok(s) => s,
            Err(e) if is_transient_connect_error(&e) => {
                self.stats.errors.connect += 1;
                conn.retry_at = Some(now + RECONNECT_DELAY);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        stream.set_nodelay(true)?;
        self.poll
            .registry()
            .register(&mut stream, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        conn.stream = Some(stream);
        if let Some(tls) = &self.tls {
            let name = ServerName::IpAddress(self.config.addr.ip().into());
            let mut session = ClientConnection::new(tls.clone(), name).map_err(io::Error::other)?;
            // Requests written before the handshake ends wait in rustls, whatever their size.
            session.set_buffer_limit(None);
            conn.tls = Some(session);
        }
        conn.connecting = true;
        self.stats.connects += 1;
        if self.config.proto == Protocol::Ws {
            // Requests follow the server's 101 (see on_event).
            conn.wbuf.extend_from_slice(&self.config.ws_handshake());
            return Ok(());
        }
        for _ in 0..self.config.pipeline {
            queue(&mut conn.wbuf, &mut conn.queued, &self.request);
            conn.inflight.push_back(now);
        }
        Ok(())
    }

    /// Drops connection `i` (if open), counting requests still in flight as lost.
    fn close(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        conn.tls = None;
        if let Some(mut stream) = conn.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.stats.errors.io += conn.inflight.len() as u64;
        conn.inflight.clear();
        conn.connecting = false;
        conn.rstart = 0;
        conn.rend = 0;
        conn.wbuf.clear();
        conn.wpos = 0;
        conn.queued = 0;
        conn.queued_pos = 0;
        conn.framer.reset();
    }

    fn on_event(&mut self, i: usize, readable: bool, read_closed: bool) -> Outcome {
        let Worker {
            config,
            request,
            conns,
            stats,
            ..
        } = self;
        let conn = &mut conns[i];
        let Some(stream) = conn.stream.as_mut() else {
            return Outcome::Open;
        };

        if conn.connecting {
            match stream.take_error() {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => {
                    stats.errors.connect += 1;
                    conn.inflight.clear();
                    return Outcome::Failed;
                }
            }
            match stream.peer_addr() {
                Ok(_) => conn.connecting = false,
                Err(e) if e.kind() == ErrorKind::NotConnected && !read_closed => return Outcome::Open,
                Err(_) => {
                    stats.errors.connect += 1;
                    conn.inflight.clear();
                    return Outcome::Failed;
                }
            }
        }

        // Read everything available and answer each reply with a new request.
        let mut eof = false;
        if readable {
            loop {
                if conn.rend == conn.rbuf.len() {
                    if conn.rstart > 0 {
                        conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                        conn.rend -= conn.rstart;
                        conn.rstart = 0;
                    } else if conn.rbuf.len() >= MAX_READ_BUF {
                        stats.errors.protocol += 1;
                        return Outcome::Failed;
                    } else {
                        let len = conn.rbuf.len() * 2;
                        conn.rbuf.resize(len, 0);
                    }
                }
                let space = conn.rbuf.len() - conn.rend;
                let got = match conn.tls.as_mut() {
                    Some(tls) => tls_read(stream, tls, &mut conn.rbuf[conn.rend..]),
                    None => stream.read(&mut conn.rbuf[conn.rend..]),
                };
                let n = match got {
                    Ok(0) => {
                        eof = true;
                        0
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return Outcome::Failed,
                };
                conn.rend += n;
                stats.bytes += n as u64;
                let now = Instant::now();
                loop {
                    let buf = &conn.rbuf[conn.rstart..conn.rend];
                    let reply = match conn.framer.parse(buf, eof) {
                        Ok(Some(r)) => r,
                        Ok(None) => break,
                        Err(FramingError::Truncated) => return Outcome::Failed,
                        Err(_) => {
                            stats.errors.protocol += 1;
                            return Outcome::Failed;
                        }
                    };
                    if config.proto == Protocol::Ws && reply.status != 0 {
                        // The handshake's answer: open, or a failed upgrade.
                        conn.rstart += reply.len;
                        if reply.status != WS_SWITCHED {
                            stats.errors.connect += 1;
                            return Outcome::Failed;
                        }
                        for _ in 0..config.pipeline {
                            queue(&mut conn.wbuf, &mut conn.queued, request);
                            conn.inflight.push_back(now);
                        }
                        continue;
                    }
                    let Some(sent) = conn.inflight.pop_front() else {
                        // A reply nobody asked for.
                        stats.errors.protocol += 1;
                        return Outcome::Failed;
                    };
                    stats.requests += 1;
                    stats.hist.saturating_record(now.duration_since(sent).as_nanos() as u64);
                    if !reply.is_success() {
                        stats.errors.status += 1;
                    } else if let Some(needle) = &config.expect {
                        if !reply.body_contains(buf, needle) {
                            stats.errors.expect += 1;
                        }
                    }
                    conn.rstart += reply.len;
                    if reply.close || config.new_connection {
                        return Outcome::Reconnect;
                    }
                    queue(&mut conn.wbuf, &mut conn.queued, request);
                    conn.inflight.push_back(now);
                }
                if conn.rstart == conn.rend {
                    conn.rstart = 0;
                    conn.rend = 0;
                }
                // A short read drained the socket; the next arrival raises a new
                // edge. Only when the peer has closed must we read on to the end.
                // (With TLS a short read says nothing about the socket: read on.)
                if eof || (n < space && !read_closed && conn.tls.is_none()) {
                    break;
                }
            }
        }
        if eof {
            // Closed by the server: an error only if requests were outstanding.
            return if conn.inflight.is_empty() {
                Outcome::Reconnect
            } else {
                Outcome::Failed
            };
        }

        // Send what is queued: `wbuf`, then the requests queued by reference.
        while conn.wpos < conn.wbuf.len() || conn.queued > 0 {
            let pending = if conn.wpos < conn.wbuf.len() {
                &conn.wbuf[conn.wpos..]
            } else {
                &request[conn.queued_pos..]
            };
            let sent = match conn.tls.as_mut() {
                Some(tls) => tls
                    .writer()
                    .write(pending)
                    .and_then(|n| tls_flush(stream, tls).map(|()| n)),
                None => stream.write(pending),
            };
            match sent {
                Ok(0) => return Outcome::Failed,
                Ok(n) if conn.wpos < conn.wbuf.len() => conn.wpos += n,
                Ok(n) => {
                    conn.queued_pos += n;
                    if conn.queued_pos == request.len() {
                        conn.queued -= 1;
                        conn.queued_pos = 0;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return Outcome::Failed,
            }
        }
        if conn.wpos == conn.wbuf.len() {
            conn.wbuf.clear();
            conn.wpos = 0;
        }
        // TLS records the socket could not take yet: this runs again when it can.
        if let Some(tls) = conn.tls.as_mut() {
            if tls_flush(stream, tls).is_err() {
                return Outcome::Failed;
            }
        }
        Outcome::Open
    }
}

/// Connect errors worth retrying rather than ending the run.
fn is_transient_connect_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset | ErrorKind::AddrNotAvailable | ErrorKind::TimedOut
    ) || e.raw_os_error() == Some(libc::EAGAIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const REPLY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":3}"#;

    /// A tiny blocking server, one thread per connection, that answers every
    /// HTTP request (heads only; bodies skipped by Content-Length) or every
    /// line. `status` is the HTTP status to answer with.
    fn serve(proto: Protocol, status: u16, stop: Arc<AtomicBool>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (sock, _) = match listener.accept() {
                    Ok(s) => s,
                    Err(_) => {
                        thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                };
                sock.set_nonblocking(false).unwrap();
                sock.set_nodelay(true).unwrap();
                let stop = stop.clone();
                thread::spawn(move || handle(sock, proto, status, &stop));
            }
        });
        addr
    }

    fn handle(sock: std::net::TcpStream, proto: Protocol, status: u16, stop: &AtomicBool) {
        let mut out = sock.try_clone().unwrap();
        let mut reader = io::BufReader::new(sock);
        let mut line = String::new();
        let mut served = 0usize;
        while !stop.load(Ordering::Relaxed) {
            served += 1;
            match proto {
                Protocol::Ws => {
                    // The handshake, then one reply frame per request frame.
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let _ = out.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n");
                    loop {
                        let mut head = [0u8; 2];
                        if reader.read_exact(&mut head).is_err() {
                            return;
                        }
                        let len = match head[1] & 0x7f {
                            126 => {
                                let mut b = [0u8; 2];
                                reader.read_exact(&mut b).unwrap();
                                usize::from(u16::from_be_bytes(b))
                            }
                            n => usize::from(n),
                        };
                        let mut rest = vec![0u8; 4 + len];
                        if reader.read_exact(&mut rest).is_err() {
                            return;
                        }
                        let mut frame = vec![0x81, REPLY.len() as u8];
                        frame.extend_from_slice(REPLY);
                        if out.write_all(&frame).is_err() {
                            return;
                        }
                    }
                }
                Protocol::Tcp => {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut reply = REPLY.to_vec();
                    reply.push(b'\n');
                    if out.write_all(&reply).is_err() {
                        return;
                    }
                }
                Protocol::Http => {
                    let mut content_length = 0;
                    let mut close = false;
                    let mut request_line = None;
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        request_line.get_or_insert_with(|| line.clone());
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            content_length = v.trim().parse().unwrap();
                        }
                        close |= lower.starts_with("connection: close");
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; content_length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let status = if intact(request_line.as_deref(), &body) {
                        status
                    } else {
                        400
                    };
                    // Alternate the two framings so both are exercised.
                    let reply = if served % 2 == 0 && !close {
                        let mut r =
                            format!("HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n").into_bytes();
                        r.extend_from_slice(&REPLY[..16]);
                        r.extend_from_slice(format!("\r\n{:x}\r\n", REPLY.len() - 16).as_bytes());
                        r.extend_from_slice(&REPLY[16..]);
                        r.extend_from_slice(b"\r\n0\r\n\r\n");
                        r
                    } else {
                        let mut r = format!(
                            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n{}\r\n",
                            REPLY.len(),
                            if close { "Connection: close\r\n" } else { "" }
                        )
                        .into_bytes();
                        r.extend_from_slice(REPLY);
                        r
                    };
                    if out.write_all(&reply).is_err() || close {
                        return;
                    }
                }
            }
        }
    }

    /// A body sent by reference (`SEND_BY_REFERENCE`), in the pieces the socket takes.
    fn large_body() -> Vec<u8> {
        (0..3 * SEND_BY_REFERENCE + 17).map(|i| b'a' + (i % 23) as u8).collect()
    }

    /// Whether a request the test servers read came whole: it starts with the request
    /// line, and a large body is exactly [`large_body`] (a byte lost or repeated in
    /// sending shows here).
    fn intact(request_line: Option<&str>, body: &[u8]) -> bool {
        request_line == Some("POST / HTTP/1.1\r\n") && (body.len() < SEND_BY_REFERENCE || body == large_body())
    }

    fn quick(addr: SocketAddr, proto: Protocol) -> Config {
        let mut c = Config::new(addr);
        c.proto = proto;
        c.duration = Duration::from_millis(300);
        c.warmup = Duration::from_millis(50);
        c.expect = Some(b"\"result\":3".to_vec());
        c
    }

    #[test]
    fn http_request_bytes() {
        let mut c = Config::new("127.0.0.1:9".parse().unwrap());
        c.body = b"{}".to_vec();
        assert_eq!(
            c.request_bytes(),
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"
        );
        // A binary message names its own type, in place of the JSON one.
        c.headers = vec![
            "content-type: application/vnd.ucall.binary".into(),
            "UCall-JSON-Length: 2".into(),
        ];
        assert_eq!(
            c.request_bytes(),
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 2\r\n\
content-type: application/vnd.ucall.binary\r\nUCall-JSON-Length: 2\r\n\r\n{}"
        );
        c.headers.clear();
        c.proto = Protocol::Tcp;
        assert_eq!(c.request_bytes(), b"{}\n");
    }

    #[test]
    fn loads_http_server() {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = serve(Protocol::Http, 200, stop.clone());
        let large = large_body();
        for (pipeline, body) in [
            (1, DEFAULT_BODY.as_bytes()),
            (8, b"{\"x\":1}".as_slice()),
            (4, large.as_slice()),
        ] {
            let mut c = quick(addr, Protocol::Http);
            c.connections = 3;
            c.threads = 2;
            c.pipeline = pipeline;
            c.body = body.to_vec();
            let r = run(&c).unwrap();
            assert!(r.requests > 0);
            assert_eq!(r.errors.total(), 0, "{r:?}");
            assert!(r.latency.p50 > 0.0 && r.latency.p50 <= r.latency.p99);
        }
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn new_connection_per_request() {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = serve(Protocol::Http, 200, stop.clone());
        let mut c = quick(addr, Protocol::Http);
        c.connections = 2;
        c.new_connection = true;
        let r = run(&c).unwrap();
        assert!(r.requests > 0);
        assert_eq!(r.errors.total(), 0, "{r:?}");
        // Only connections opened before the interval may carry its first replies.
        assert!(r.connects + c.connections as u64 >= r.requests, "{r:?}");
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn counts_non_2xx_and_missing_substring() {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = serve(Protocol::Http, 503, stop.clone());
        let r = run(&quick(addr, Protocol::Http)).unwrap();
        assert!(r.requests > 0);
        assert_eq!(r.errors.status, r.requests);

        let addr = serve(Protocol::Http, 200, stop.clone());
        let mut c = quick(addr, Protocol::Http);
        c.expect = Some(b"\"result\":4".to_vec());
        let r = run(&c).unwrap();
        assert!(r.requests > 0);
        assert_eq!(r.errors.expect, r.requests);
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn loads_tcp_server() {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = serve(Protocol::Tcp, 0, stop.clone());
        let mut c = quick(addr, Protocol::Tcp);
        c.connections = 2;
        c.pipeline = 4;
        let r = run(&c).unwrap();
        assert!(r.requests > 0);
        assert_eq!(r.errors.total(), 0, "{r:?}");
        let per_reply = r.bytes_per_sec / r.requests_per_sec;
        assert!((per_reply - (REPLY.len() + 1) as f64).abs() < 1.0, "{per_reply}");
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn loads_websocket_server() {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = serve(Protocol::Ws, 0, stop.clone());
        let mut c = quick(addr, Protocol::Ws);
        c.connections = 2;
        c.pipeline = 3;
        let r = run(&c).unwrap();
        assert!(r.requests > 0);
        assert_eq!(r.errors.total(), 0, "{r:?}");
        stop.store(true, Ordering::Relaxed);
    }

    /// A blocking HTTPS server (rustls, a certificate made for the test) answering every
    /// request with REPLY, one thread per connection.
    fn serve_tls() -> SocketAddr {
        use rustls::pki_types::PrivateKeyDer;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
                )
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for sock in listener.incoming() {
                let Ok(sock) = sock else { return };
                let config = config.clone();
                thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(config).unwrap();
                    let mut reader = io::BufReader::new(rustls::StreamOwned::new(conn, sock));
                    let mut line = String::new();
                    loop {
                        let mut length = 0;
                        let mut request_line = None;
                        loop {
                            line.clear();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            request_line.get_or_insert_with(|| line.clone());
                            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                                length = v.trim().parse().unwrap();
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        let status = if intact(request_line.as_deref(), &body) {
                            200
                        } else {
                            400
                        };
                        let mut reply =
                            format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n", REPLY.len()).into_bytes();
                        reply.extend_from_slice(REPLY);
                        if reader.get_mut().write_all(&reply).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn loads_https_server() {
        let addr = serve_tls();
        let large = large_body();
        for (pipeline, new_connection, body) in [(4, false, None), (1, true, None), (4, false, Some(&large))] {
            let mut c = quick(addr, Protocol::Http);
            if let Some(body) = body {
                c.body.clone_from(body);
            }
            c.tls = true;
            c.connections = 2;
            c.pipeline = pipeline;
            c.new_connection = new_connection;
            let r = run(&c).unwrap();
            assert!(r.requests > 0);
            assert_eq!(r.errors.total(), 0, "{r:?}");
        }
    }

    #[test]
    fn refuses_bad_settings() {
        let mut c = Config::new("127.0.0.1:9".parse().unwrap());
        c.connections = 0;
        assert!(run(&c).is_err());
        let mut c = Config::new("127.0.0.1:9".parse().unwrap());
        c.new_connection = true;
        c.pipeline = 2;
        assert!(run(&c).is_err());
    }
}
