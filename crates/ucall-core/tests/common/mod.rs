// SPDX-License-Identifier: Apache-2.0
//! Shared by the integration suites: an in-process server with the vector procedures,
//! raw-socket conversations that never hang, and the comparison rule of the vectors.
//!
//! Engines: every test runs once per engine named in `UCALL_TEST_ENGINES` (comma
//! separated; default `poll,uring` where io_uring works here, else `poll`, saying so).
#![allow(dead_code)] // each test binary uses a different part

#[path = "../../../../examples/rust/src/spec.rs"]
pub mod spec;

pub mod json;
pub mod rule;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub use json::{json, Json};
use ucall_core::buffer::OutBuf;
use ucall_core::session::{Context, Progress, Scratch, Session};
use ucall_core::{EngineKind, Limits, Router, Server, ServerBuilder, ServerHandle};

/// Longest wait for any single read, write or connect; no test waits longer on a socket.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest run of one test body on one engine.
pub const TEST_LIMIT: Duration = Duration::from_secs(40);

/// The engines to test, from `UCALL_TEST_ENGINES` (default: `poll`, and `uring` where
/// io_uring works here).
pub fn engines() -> Vec<EngineKind> {
    let list =
        std::env::var("UCALL_TEST_ENGINES").unwrap_or_else(|_| match ucall_core::engine::resolve(EngineKind::Uring) {
            Ok(_) => "poll,uring".into(),
            Err(why) => {
                eprintln!("testing the poll engine only: {why}");
                "poll".into()
            }
        });
    let engines: Vec<EngineKind> = list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| EngineKind::parse(name).unwrap_or_else(|| panic!("UCALL_TEST_ENGINES: unknown engine {name:?}")))
        .collect();
    assert!(!engines.is_empty(), "UCALL_TEST_ENGINES names no engine");
    engines
}

/// Run `test` once per engine, each run bounded by [`TEST_LIMIT`].
pub fn for_each_engine<F>(test: F)
where
    F: Fn(EngineKind) + Send + Sync + 'static,
{
    for_each_engine_within(TEST_LIMIT, test);
}

/// Run `test` once per engine, failing a run that takes longer than `limit`.
pub fn for_each_engine_within<F>(limit: Duration, test: F)
where
    F: Fn(EngineKind) + Send + Sync + 'static,
{
    let test = Arc::new(test);
    for engine in engines() {
        let test = Arc::clone(&test);
        bounded(&format!("engine {}", engine.name()), limit, move || test(engine));
    }
}

/// Run `body` on its own thread; fail if it panics or outlives `limit`.
pub fn bounded(what: &str, limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(what.into())
        .spawn(move || {
            body();
            let _ = done.send(());
        })
        .expect("spawn a test thread");
    match finished.recv_timeout(limit) {
        Ok(()) => thread.join().expect("the test thread finished"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = thread.join() {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                panic!("{what}: {message}");
            }
        }
        // The thread is left behind; the test binary ends without it.
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: still running after {limit:?}"),
    }
}

/// A builder with the vector procedures, on a free loopback port, two worker threads.
pub fn builder(engine: EngineKind) -> ServerBuilder {
    spec::register(Server::builder().host("127.0.0.1").port(0).threads(2).engine(engine))
}

/// Bind and spawn `builder`, checking that the engine asked for is the one running.
pub fn start(engine: EngineKind, builder: ServerBuilder) -> ServerHandle {
    let server = builder.bind().expect("bind the test server");
    assert!(
        engine == EngineKind::Auto || server.engine() == engine,
        "asked for engine {} but {} runs (is UCALL_ENGINE set?)",
        engine.name(),
        server.engine().name()
    );
    server.spawn().expect("spawn the test server")
}

/// A server with the vector procedures and default limits.
pub fn serve(engine: EngineKind) -> ServerHandle {
    start(engine, builder(engine))
}

/// Poll `condition` until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Raise this process's soft limit on open files to at least `wanted` (up to the hard limit).
#[allow(clippy::unnecessary_cast)] // rlim_t is u64 on some targets only
pub fn raise_open_files(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    let target = (wanted as libc::rlim_t).min(limit.rlim_max);
    if target > limit.rlim_cur {
        limit.rlim_cur = target;
        // SAFETY: setrlimit reads the struct we own; failure leaves the old limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            // SAFETY: as above.
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        }
    }
    limit.rlim_cur as u64
}

// ---------------------------------------------------------------------------------------
// Messages

/// A JSON-RPC call as text.
pub fn call(method: &str, params: &str, id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":{id}}}"#)
}

/// A JSON-RPC notification as text.
pub fn notification(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#)
}

/// A client's WebSocket text message in one masked frame (RFC 6455 §5.2).
pub fn ws_text(payload: &str) -> Vec<u8> {
    ws_frame(1, payload.as_bytes())
}

/// A client's WebSocket frame, final (FIN set) and masked as clients must, of any length.
pub fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    ws_fragment(true, opcode, payload)
}

/// [`ws_frame`] with FIN as `fin` says: `false` for a fragment that more frames continue.
pub fn ws_fragment(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= 0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&MASK);
    out.extend(payload.iter().zip(MASK.iter().cycle()).map(|(b, k)| b ^ k));
    out
}

/// The first (unmasked) server frame in `bytes`: (opcode, payload, bytes used), once whole.
pub fn ws_server_frame(bytes: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let (len, at) = match *bytes.get(1)? & 0x7F {
        126 => (usize::from(u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?])), 4),
        127 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize, 10),
        n => (usize::from(n), 2),
    };
    Some((bytes[0] & 0x0F, bytes.get(at..at + len)?.to_vec(), at + len))
}

/// `POST path` with a JSON body and Content-Length.
pub fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// `method` on `/mcp` as an MCP client sends it (a JSON body, either reply form
/// accepted), with `headers` besides.
pub fn mcp_request(method: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut request = format!("{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n");
    request.push_str("Accept: application/json, text/event-stream\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    request.into_bytes()
}

/// `GET target`.
pub fn get(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

/// Parse `reply` as strict JSON or fail naming it.
pub fn parse_reply(reply: &[u8]) -> Json {
    json::parse(reply).unwrap_or_else(|e| panic!("reply is not strict JSON ({e}): {}", show(reply)))
}

/// `reply` is the success Response `{"jsonrpc":"2.0","result":RESULT,"id":ID}`.
pub fn assert_result(reply: &[u8], result: &str, id: &str) {
    let expected = json(&format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{id}}}"#));
    let mut problems = Vec::new();
    json::differences(&expected, &parse_reply(reply), "$", &mut problems);
    assert!(problems.is_empty(), "{}\nreply: {}", problems.join("\n"), show(reply));
}

/// `reply` is an error Response with `code` and `id` (JSON text), message a string.
pub fn assert_error(reply: &[u8], code: i64, id: &str) {
    let problems = error_differences(&parse_reply(reply), code, id);
    assert!(problems.is_empty(), "{}\nreply: {}", problems.join("\n"), show(reply));
}

/// Where `reply` is not an error Response with `code` and `id`.
pub fn error_differences(reply: &Json, code: i64, id: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let Json::Object(members) = reply else {
        return vec![format!("expected an error object, got {reply}")];
    };
    let mut names: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    if names != ["error", "id", "jsonrpc"] {
        problems.push(format!("members must be error, id, jsonrpc; got {names:?}"));
    }
    if let Some(version) = reply.get("jsonrpc") {
        json::differences(&json("\"2.0\""), version, "$.jsonrpc", &mut problems);
    }
    if let Some(actual_id) = reply.get("id") {
        json::differences(&json(id), actual_id, "$.id", &mut problems);
    }
    match reply.get("error") {
        Some(error @ Json::Object(_)) => problems.extend(error_object_differences(error, code)),
        other => problems.push(format!("$.error: expected an object, got {other:?}")),
    }
    problems
}

/// Where `error` is not a bare error object `{"code":CODE,"message":"..."[,"data":..]}`.
pub fn error_object_differences(error: &Json, code: i64) -> Vec<String> {
    let mut problems = Vec::new();
    let Json::Object(members) = error else {
        return vec![format!("expected an error object, got {error}")];
    };
    if error.get("code").and_then(Json::as_i64) != Some(code) {
        problems.push(format!("error code: expected {code} in {error}"));
    }
    if error.get("message").and_then(Json::as_str).is_none() {
        problems.push(format!("error message must be a string: {error}"));
    }
    if let Some((name, _)) = members
        .iter()
        .find(|(k, _)| !matches!(k.as_str(), "code" | "message" | "data"))
    {
        problems.push(format!("unexpected error member {name:?}: {error}"));
    }
    problems
}

/// Bytes for a failure message: text when UTF-8 (shortened), else escaped.
pub fn show(bytes: &[u8]) -> String {
    const MAX: usize = 600;
    let shown = &bytes[..bytes.len().min(MAX)];
    let mut text = String::from_utf8_lossy(shown).escape_debug().to_string();
    if bytes.len() > MAX {
        text.push_str(&format!("... ({} bytes)", bytes.len()));
    }
    text
}

// ---------------------------------------------------------------------------------------
// Conversations

/// An HTTP response as received.
#[derive(Debug, Clone)]
pub struct Response {
    /// The minor version of the status line (`1` for HTTP/1.1).
    pub minor_version: u8,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The value of header `name` (any case); fails if it appears more than once.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name));
        let first = values.next().map(|(_, v)| v.as_str());
        assert!(
            values.next().is_none(),
            "header {name} appears twice: {:?}",
            self.headers
        );
        first
    }

    /// The body as strict JSON.
    pub fn json(&self) -> Json {
        parse_reply(&self.body)
    }

    /// Whether the response says the connection closes.
    pub fn says_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
    }
}

/// Every response in `input`, which must end where the last one does.
pub fn parse_responses(mut input: &[u8]) -> Result<Vec<Response>, String> {
    let mut responses = Vec::new();
    while !input.is_empty() {
        match parse_response(input)? {
            Some((response, used)) => {
                responses.push(response);
                input = &input[used..];
            }
            None => return Err(format!("a response is cut short: {}", show(input))),
        }
    }
    Ok(responses)
}

/// Feed `input` to `session` in memory, as an engine would: the output and the session's
/// progress.
pub fn feed(
    session: &mut Session,
    input: &[u8],
    router: &Router,
    limits: &Limits,
    scratch: &mut Scratch,
) -> (Vec<u8>, Progress) {
    let mut out = OutBuf::new();
    let progress = session.feed(input, &mut out, &mut context(router, limits, scratch), usize::MAX);
    (out.to_vec(), progress)
}

/// A session's context in memory: no deferring, not draining, the clock at RFC 9110's
/// example date.
pub fn context<'a>(router: &'a Router, limits: &'a Limits, scratch: &'a mut Scratch) -> Context<'a> {
    Context {
        router,
        limits,
        date: b"Sun, 06 Nov 1994 08:49:37 GMT",
        scratch,
        defer: None,
        draining: false,
    }
}

/// Parse one response at the start of `input`: `Ok(Some((response, used)))`, `Ok(None)`
/// when more bytes are needed, `Err` when the bytes are not an HTTP response.
///
/// `1xx`, `204` and `304` have no body; others need a Content-Length (the server always
/// sends one), so a body delimited by the end of the connection is an error here.
pub fn parse_response(input: &[u8]) -> Result<Option<(Response, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP response ({e}): {}", show(input))),
    };
    let status = parsed.code.unwrap_or(0);
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).trim().to_string()))
        .collect();
    let mut response = Response {
        minor_version: parsed.version.unwrap_or(9),
        status,
        reason: parsed.reason.unwrap_or("").to_string(),
        headers,
        body: Vec::new(),
    };
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Some((response, head_len)));
    }
    let lengths: Vec<&str> = response
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.as_str())
        .collect();
    let [length] = lengths[..] else {
        return Err(format!(
            "a {status} response needs exactly one Content-Length: {}",
            show(&input[..head_len])
        ));
    };
    let length: usize = length.parse().map_err(|_| format!("bad Content-Length {length:?}"))?;
    if input.len() < head_len + length {
        return Ok(None);
    }
    response.body = input[head_len..head_len + length].to_vec();
    Ok(Some((response, head_len + length)))
}

/// One client connection: every read and write is bounded by a time-out.
pub struct Conn {
    pub stream: TcpStream,
    /// Received and not yet taken.
    pub buf: Vec<u8>,
    /// The server closed (EOF or reset).
    pub closed: bool,
    /// Longest wait for a whole response or line ([`IO_TIMEOUT`] unless set).
    pub patience: Duration,
}

impl Conn {
    /// Connect to `addr` with [`IO_TIMEOUT`] on connect, reads and writes.
    pub fn open(addr: SocketAddr) -> Conn {
        Self::try_open(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
    }

    /// Connect, or the error.
    pub fn try_open(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            closed: false,
            patience: IO_TIMEOUT,
        })
    }

    /// Connect with small kernel buffers (`SO_RCVBUF`, `SO_SNDBUF`, set before connecting),
    /// so that what the server holds back shows up quickly on the client's side.
    pub fn open_with_buffers(addr: SocketAddr, receive: usize, send: usize) -> Conn {
        let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)
            .expect("open a socket");
        socket.set_recv_buffer_size(receive).expect("set SO_RCVBUF");
        socket.set_send_buffer_size(send).expect("set SO_SNDBUF");
        socket
            .connect_timeout(&addr.into(), IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        let stream: TcpStream = socket.into();
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("set a read time-out");
        stream
            .set_write_timeout(Some(IO_TIMEOUT))
            .expect("set a write time-out");
        stream.set_nodelay(true).expect("set TCP_NODELAY");
        Conn {
            stream,
            buf: Vec::new(),
            closed: false,
            patience: IO_TIMEOUT,
        }
    }

    /// Connect to the server behind `handle`.
    pub fn to(handle: &ServerHandle) -> Conn {
        Self::open(handle.local_addr())
    }

    /// Send all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("send {} bytes: {e}", bytes.len()));
    }

    /// Send `bytes` in pieces of `size`, pausing after each.
    pub fn send_in_pieces(&mut self, bytes: &[u8], size: usize, pause: Duration) {
        for piece in bytes.chunks(size) {
            self.send(piece);
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
    }

    /// End the sending side (TCP half-close).
    pub fn shutdown_write(&self) {
        self.stream.shutdown(Shutdown::Write).expect("shutdown(Write)");
    }

    /// Read once into the buffer, waiting until `deadline`. `Ok(0)` when closed.
    fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        if self.closed {
            return Ok(0);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 64 << 10];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return Ok(0);
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(io::ErrorKind::TimedOut.into())
                }
                Err(e) if is_reset(&e) => {
                    self.closed = true;
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The next HTTP response, or why there is none within [`Conn::patience`].
    pub fn try_read_response(&mut self) -> Result<Response, String> {
        let deadline = Instant::now() + self.patience;
        loop {
            if let Some((response, used)) = parse_response(&self.buf)? {
                self.buf.drain(..used);
                return Ok(response);
            }
            match self.fill(deadline) {
                Ok(0) => {
                    return Err(format!(
                        "connection closed before a full response; received: {}",
                        show(&self.buf)
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(format!("no full response ({e}); received: {}", show(&self.buf))),
            }
        }
    }

    /// The next HTTP response (fails the test when there is none).
    pub fn read_response(&mut self) -> Response {
        self.try_read_response().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Send `request` and read one response.
    pub fn roundtrip(&mut self, request: &[u8]) -> Response {
        self.send(request);
        self.read_response()
    }

    /// The next line (without its `\n`), or why there is none within [`Conn::patience`].
    pub fn try_read_line(&mut self) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + self.patience;
        let mut scanned = 0;
        loop {
            if let Some(i) = self.buf[scanned..].iter().position(|&c| c == b'\n') {
                let end = scanned + i;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                return Ok(line);
            }
            scanned = self.buf.len();
            match self.fill(deadline) {
                Ok(0) => {
                    return Err(format!(
                        "connection closed before a full line; received: {}",
                        show(&self.buf)
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(format!("no full line ({e}); received: {}", show(&self.buf))),
            }
        }
    }

    /// The next `n` bytes (fails the test when they do not come within [`Conn::patience`]).
    pub fn read_exact_bytes(&mut self, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + self.patience;
        while self.buf.len() < n {
            match self.fill(deadline) {
                Ok(0) => panic!("connection closed before {n} bytes; received: {}", show(&self.buf)),
                Ok(_) => {}
                Err(e) => panic!("no {n} bytes ({e}); received: {}", show(&self.buf)),
            }
        }
        self.buf.drain(..n).collect()
    }

    /// The next line (fails the test when there is none).
    pub fn read_line(&mut self) -> Vec<u8> {
        self.try_read_line().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Everything until the server closes, within `limit`; `Err` with what came if it
    /// does not close in time.
    pub fn read_until_closed(&mut self, limit: Duration) -> Result<Vec<u8>, Vec<u8>> {
        let deadline = Instant::now() + limit;
        loop {
            match self.fill(deadline) {
                Ok(0) => return Ok(std::mem::take(&mut self.buf)),
                Ok(_) => {}
                Err(_) => return Err(std::mem::take(&mut self.buf)),
            }
        }
    }

    /// The server closes within `limit` without sending anything more.
    pub fn expect_closed(&mut self, limit: Duration) {
        match self.read_until_closed(limit) {
            Ok(extra) => assert!(extra.is_empty(), "bytes before the close: {}", show(&extra)),
            Err(got) => panic!("the connection is still open after {limit:?}; received: {}", show(&got)),
        }
    }

    /// Whether the server closes within `limit`; what it sends first stays in `buf`.
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match self.fill(deadline) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// Whether nothing arrives and the connection stays open for `quiet`.
    pub fn nothing_within(&mut self, quiet: Duration) -> bool {
        if !self.buf.is_empty() || self.closed {
            return false;
        }
        matches!(self.fill(Instant::now() + quiet), Err(e) if e.kind() == io::ErrorKind::TimedOut)
    }
}

/// Whether `e` means the peer reset or aborted the connection.
pub fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe
    )
}
