// SPDX-License-Identifier: Apache-2.0
//! One connection's I/O: a non-blocking socket (plain or rustls), the output queue and
//! the reply reader, driven by readiness (mio).
//!
//! Writing and reading are interleaved: whenever the socket takes no more bytes, replies
//! are read, so a server that stops reading until its replies are read never deadlocks
//! with a client that has a thousand large requests to send.

use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind, Result, TlsRefusal};
use crate::framing::{
    websocket_handshake_offering, OutQueue, Protocol, Reply, ReplyReader, RequestFramer, RequestKind,
};

const SOCKET: Token = Token(0);
/// The token of a [`Waker`] made by [`Connection::waker`].
pub(crate) const WAKE: Token = Token(1);
/// Plaintext handed to rustls at a time: it encrypts while the socket drains.
const TLS_BUFFER: usize = 256 << 10;

/// What one [`Connection::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Bytes moved (or nothing was left to do).
    Progress,
    /// The deadline passed with nothing to do.
    TimedOut,
    /// The [`Waker`] fired.
    Woken,
}

/// A socket with its protocol state. Dropped as a whole when it fails.
struct Link {
    sock: TcpStream,
    tls: Option<rustls::ClientConnection>,
    out: OutQueue,
    reader: ReplyReader,
    framer: RequestFramer,
    readable: bool,
    writable: bool,
    /// Reply bytes the server has sent on this connection.
    received: u64,
    /// `host:port`, for errors.
    authority: String,
}

/// What a TLS connection agreed on (see [`Connection::tls_info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    /// The ALPN protocol chosen (`http/1.1` for HTTP and WebSocket), if any.
    pub alpn: Option<Vec<u8>>,
    /// Whether the session was resumed rather than negotiated in full.
    pub resumed: bool,
    /// The server's certificate (DER).
    pub peer_certificate: Option<Vec<u8>>,
}

/// A reusable connection to one endpoint: opened on demand, dropped on failure.
pub struct Connection {
    endpoint: Endpoint,
    poll: Poll,
    events: Events,
    link: Option<Link>,
    /// When the last step failed: the request bytes written and the reply bytes received
    /// on the connection until then.
    failed: (u64, u64),
    /// HTTP header lines of the requests queued now only ([`Connection::set_request_lines`]).
    request_lines: String,
}

fn io_error(endpoint: &Endpoint, error: &io::Error) -> Error {
    Error::transport(format!("connection to {} lost: {error}", endpoint.authority()))
}

impl Connection {
    /// A connection to `endpoint`, opened by the first call.
    ///
    /// # Errors
    /// The OS refused a poller (out of file descriptors).
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        let poll = Poll::new().map_err(|e| Error::connect(format!("cannot create a poller: {e}")))?;
        Ok(Connection {
            endpoint,
            poll,
            events: Events::with_capacity(8),
            link: None,
            failed: (0, 0),
            request_lines: String::new(),
        })
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A waker that interrupts [`Connection::step`] from another thread.
    pub(crate) fn waker(&self) -> Result<Waker> {
        Waker::new(self.poll.registry(), WAKE).map_err(|e| Error::connect(format!("cannot create a waker: {e}")))
    }

    /// Whether a socket is open.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.link.is_some()
    }

    /// Reply bytes the open socket has received (0 without one).
    pub(crate) fn received(&self) -> u64 {
        self.link.as_ref().map_or(0, |link| link.received)
    }

    /// Request bytes written on the open socket (0 without one); a request queued when
    /// [`Connection::queued_end`] was `e` is written whole once this reaches `e`.
    pub(crate) fn written(&self) -> u64 {
        self.link.as_ref().map_or(0, |link| link.out.taken())
    }

    /// Where the last request queued on the open socket ends, as [`Connection::written`]
    /// counts: its last byte a server needs to run it (before raw TCP's newline).
    pub(crate) fn queued_end(&self) -> u64 {
        self.link
            .as_ref()
            .map_or(0, |link| link.out.end() - link.framer.trailer_len() as u64)
    }

    /// [`Connection::written`] and [`Connection::received`] when the last step failed.
    pub(crate) fn failed(&self) -> (u64, u64) {
        self.failed
    }

    /// Bytes still to write.
    pub(crate) fn pending(&self) -> usize {
        self.link.as_ref().map_or(0, |link| {
            link.out.len() + usize::from(link.tls.as_ref().is_some_and(|tls| tls.wants_write()))
        })
    }

    /// Close the socket (a WebSocket with its closing frame, sent if the socket takes it).
    pub fn close(&mut self) {
        if let Some(mut link) = self.link.take() {
            if self.endpoint.protocol() == Protocol::WebSocket && link.reader.opened() && !link.reader.ended() {
                link.framer.close(&mut link.out);
                let _ = flush(&mut link);
            }
            let _ = self.poll.registry().deregister(&mut link.sock);
        }
    }

    /// Open a socket unless one is open. `deadline` bounds the connection and handshakes.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Connect`] or [`crate::ErrorKind::Timeout`].
    pub fn open(&mut self, deadline: Option<Instant>) -> Result<()> {
        if self.link.is_some() {
            return Ok(());
        }
        let tls = self.endpoint.tls_session()?;
        let sock = connect(&self.endpoint, deadline)?;
        let mut sock = TcpStream::from_std(sock);
        self.poll
            .registry()
            .register(&mut sock, SOCKET, Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| Error::connect(format!("cannot poll the socket: {e}")))?;
        let protocol = self.endpoint.protocol();
        let authority = self.endpoint.authority();
        let path = self.endpoint.path().to_owned();
        let (handshake, key) = if protocol == Protocol::WebSocket {
            let offer = self.endpoint.binary() != Some(false);
            let (request, key) = websocket_handshake_offering(&authority, &path, self.endpoint.header_lines(), offer);
            (Some(request), Some(key))
        } else {
            (None, None)
        };
        let reader = ReplyReader::new(protocol, key).with_max_reply(self.endpoint.max_reply_size());
        let reader = if tls.is_some() { reader.over_tls() } else { reader };
        let mut link = Link {
            sock,
            tls,
            out: OutQueue::default(),
            reader,
            framer: RequestFramer::new(protocol, &authority, &path).with_header_lines(self.endpoint.header_lines()),
            readable: false,
            writable: false,
            received: 0,
            authority,
        };
        link.framer.set_request_lines(&self.request_lines);
        if let Some(tls) = &mut link.tls {
            tls.set_buffer_limit(Some(TLS_BUFFER));
        }
        if let Some(request) = handshake {
            link.out.push_slice(&request);
        }
        self.link = Some(link);
        if let Err(error) = self.handshake(deadline) {
            self.close();
            return Err(error);
        }
        Ok(())
    }

    /// Drive TLS and WebSocket handshakes to their end.
    fn handshake(&mut self, deadline: Option<Instant>) -> Result<()> {
        let where_ = self.endpoint.authority();
        loop {
            let Some(link) = &self.link else { return Ok(()) };
            let tls_busy = link.tls.as_ref().is_some_and(|tls| tls.is_handshaking());
            if !tls_busy && link.reader.opened() {
                return Ok(());
            }
            let mut sink = |_reply: Reply| {};
            match self.step(deadline, &mut sink) {
                Ok(Step::TimedOut) => {
                    let what = if tls_busy { "TLS" } else { "WebSocket" };
                    return Err(Error::timeout(format!(
                        "no {what} handshake with {where_} within the time-out"
                    )));
                }
                Ok(_) => {}
                Err(error) if error.tls_refusal().is_some() => return Err(error),
                Err(error) if tls_busy => {
                    let why = error.message().trim_start_matches("TLS: ");
                    return Err(Error::connect(format!("TLS handshake with {where_} failed: {why}")));
                }
                Err(error) if error.kind() == ErrorKind::Protocol => return Err(error),
                Err(error) => {
                    return Err(Error::connect(format!(
                        "WebSocket handshake with {where_} failed: {}",
                        error.message()
                    )))
                }
            }
        }
    }

    /// What the open TLS connection agreed on; `None` without TLS or a connection.
    #[must_use]
    pub fn tls_info(&self) -> Option<TlsInfo> {
        let tls = self.link.as_ref()?.tls.as_ref()?;
        Some(TlsInfo {
            alpn: tls.alpn_protocol().map(<[u8]>::to_vec),
            resumed: tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
            peer_certificate: tls
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|cert| cert.as_ref().to_vec()),
        })
    }

    /// Whether the kept-alive socket is unfit for the next call: between calls a server
    /// sends nothing, so anything to read (its close, a reset, stray bytes) means it has
    /// gone out of step. TLS records that carry no data (session tickets) do not count.
    pub fn closed_by_peer(&mut self) -> bool {
        let Some(link) = &mut self.link else { return false };
        if link.reader.ended() {
            return true;
        }
        if link.tls.is_none() {
            let mut byte = [0u8; 1];
            return !matches!(link.sock.peek(&mut byte), Err(error) if error.kind() == io::ErrorKind::WouldBlock);
        }
        let mut sink = |_reply: Reply| {};
        link.readable = true;
        match fill(link, &mut sink) {
            Ok(()) => link.reader.ended() || link.reader.in_reply(),
            Err(_) => true,
        }
    }

    /// Header lines (checked) for the HTTP requests queued from now on, on this socket and
    /// on any opened later, until set again ([`RequestFramer::set_request_lines`]).
    pub(crate) fn set_request_lines(&mut self, lines: &str) {
        lines.clone_into(&mut self.request_lines);
        if let Some(link) = &mut self.link {
            link.framer.set_request_lines(lines);
        }
    }

    /// Frame a request body into the output queue.
    pub(crate) fn queue(&mut self, body: Vec<u8>) {
        self.queue_as(body, RequestKind::Json);
    }

    /// Frame a request body of `kind` into the output queue.
    pub(crate) fn queue_as(&mut self, body: Vec<u8>, kind: RequestKind) {
        if let Some(link) = &mut self.link {
            link.framer.frame_as(body, kind, &mut link.out);
        }
    }

    /// Frame a request body of `kind` kept by the caller, then its `attachments`, written
    /// from where they lie ([`RequestFramer::frame_attached`]).
    pub(crate) fn queue_shared(
        &mut self,
        body: &std::sync::Arc<Vec<u8>>,
        kind: RequestKind,
        attachments: &ucall_core::jsonrpc::section::Section,
    ) {
        if let Some(link) = &mut self.link {
            link.framer.frame_attached(body, kind, attachments, &mut link.out);
        }
    }

    /// As [`Connection::queue_shared`], with `lines` (checked header lines) in this HTTP
    /// request's head only, after the connection's and those [`Connection::set_request_lines`] set.
    pub(crate) fn queue_headed(
        &mut self,
        body: &std::sync::Arc<Vec<u8>>,
        kind: RequestKind,
        attachments: &ucall_core::jsonrpc::section::Section,
        lines: &str,
    ) {
        let Some(link) = &mut self.link else {
            return;
        };
        if lines.is_empty() {
            link.framer.frame_attached(body, kind, attachments, &mut link.out);
        } else {
            let both = format!("{}{lines}", self.request_lines);
            link.framer.set_request_lines(&both);
            link.framer.frame_attached(body, kind, attachments, &mut link.out);
            link.framer.set_request_lines(&self.request_lines);
        }
    }

    /// Whether the open WebSocket carries binary messages (the server selected
    /// `ucall.binary.v1` at the upgrade); false for other protocols and without a socket.
    #[must_use]
    pub fn binary_negotiated(&self) -> bool {
        self.link.as_ref().is_some_and(|link| link.reader.binary_negotiated())
    }

    /// Whether notifications get a reply on this protocol.
    #[must_use]
    pub fn replies_to_notifications(&self) -> bool {
        self.endpoint.protocol() == Protocol::Http
    }

    /// Whether part of a reply has been read and the rest has not (an HTTP body's last
    /// chunk still to come after its last message).
    pub(crate) fn in_reply(&self) -> bool {
        self.link.as_ref().is_some_and(|link| link.reader.in_reply())
    }

    /// Whether the server has ended the stream.
    pub(crate) fn ended(&self) -> Option<String> {
        let link = self.link.as_ref()?;
        link.reader.ended().then(|| link.reader.why().to_owned())
    }

    /// Wait (without a socket, or with nothing to move) until woken or `timeout` passes.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> Step {
        if self.poll.poll(&mut self.events, timeout).is_err() {
            return Step::Progress; // EINTR: the caller looks again
        }
        let mut woken = false;
        for event in &self.events {
            if event.token() == WAKE {
                woken = true;
            } else if let Some(link) = &mut self.link {
                link.readable |= event.is_readable() || event.is_read_closed() || event.is_error();
                link.writable |= event.is_writable() || event.is_write_closed();
            }
        }
        if woken {
            Step::Woken
        } else {
            Step::Progress
        }
    }

    /// Write what the socket takes and read what arrived (each reply to `sink`), without
    /// waiting. Returns whether bytes moved. Errors leave the socket dropped.
    pub(crate) fn advance(&mut self, sink: &mut dyn FnMut(Reply)) -> Result<bool> {
        let Some(link) = &mut self.link else {
            return Err(Error::transport("the connection is closed"));
        };
        match flush(link).and_then(|wrote| Ok(wrote | fill_counting(link, sink)?)) {
            Ok(moved) => Ok(moved),
            Err(error) => {
                self.failed = (self.written(), self.received());
                self.close();
                Err(error)
            }
        }
    }

    /// Move bytes, or wait for readiness (until `deadline`) when none could move.
    pub(crate) fn step(&mut self, deadline: Option<Instant>, sink: &mut dyn FnMut(Reply)) -> Result<Step> {
        if self.advance(sink)? {
            return Ok(Step::Progress);
        }
        let timeout = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(Step::TimedOut);
                }
                Some(left)
            }
            None => None,
        };
        // After a wait that ended with no event, the next step finds the deadline passed.
        Ok(self.wait(timeout))
    }
}

/// Write what the socket takes. Returns whether any byte moved.
fn flush(link: &mut Link) -> Result<bool> {
    let mut moved = false;
    loop {
        if let Some(tls) = &mut link.tls {
            // Plaintext into rustls while its buffer has room, then ciphertext out.
            while !link.out.is_empty() && !tls.is_handshaking() {
                let front = link.out.front();
                let taken = tls
                    .writer()
                    .write(front)
                    .map_err(|e| Error::transport(format!("TLS: {e}")))?;
                if taken == 0 {
                    break;
                }
                link.out.advance(taken);
            }
            if !tls.wants_write() || !link.writable {
                return Ok(moved);
            }
            match tls.write_tls(&mut link.sock) {
                Ok(0) => return Ok(moved),
                Ok(_) => moved = true,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    link.writable = false;
                    return Ok(moved);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(Error::transport(format!("write: {error}"))),
            }
            continue;
        }
        if link.out.is_empty() || !link.writable {
            return Ok(moved);
        }
        let mut slices = [IoSlice::new(&[]); 64];
        let n = link.out.slices(&mut slices);
        match link.sock.write_vectored(&slices[..n]) {
            Ok(0) => return Err(Error::transport("write: the socket took nothing")),
            Ok(written) => {
                link.out.advance(written);
                moved = true;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                link.writable = false;
                return Ok(moved);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(Error::transport(format!("write: {error}"))),
        }
    }
}

fn fill_counting(link: &mut Link, sink: &mut dyn FnMut(Reply)) -> Result<bool> {
    let was_readable = link.readable;
    fill(link, sink)?;
    Ok(was_readable)
}

/// `recv(2)` into memory not yet written: a large reply's body read in place, not zeroed
/// first (zeroing it cost as much as the kernel's copy into it).
fn recv(sock: &TcpStream, room: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `room` is writable for its length; recv writes at most that many bytes and
    // says how many, which is all the caller treats as written.
    let n = unsafe { libc::recv(sock.as_raw_fd(), room.as_mut_ptr().cast(), room.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Read what arrived until the socket would block, each complete reply to `sink`.
fn fill(link: &mut Link, sink: &mut dyn FnMut(Reply)) -> Result<()> {
    while link.readable {
        match &mut link.tls {
            None => {
                let read = match link.reader.read_spare() {
                    Some(spare) => recv(&link.sock, spare),
                    None => link.sock.read(link.reader.read_buf()),
                };
                match read {
                    Ok(0) => {
                        link.reader.eof();
                        link.readable = false;
                    }
                    Ok(n) => {
                        link.reader.filled(n);
                        link.received += n as u64;
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => link.readable = false,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(Error::transport(format!("read: {error}"))),
                }
            }
            Some(tls) => {
                match tls.read_tls(&mut link.sock) {
                    Ok(0) => {
                        link.readable = false;
                        link.reader.eof();
                    }
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => link.readable = false,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(Error::transport(format!("read: {error}"))),
                }
                let state = tls.process_new_packets().map_err(|e| tls_error(&link.authority, &e))?;
                let mut plain = state.plaintext_bytes_to_read();
                while plain > 0 {
                    let room = link.reader.read_buf();
                    match tls.reader().read(room) {
                        Ok(0) => {
                            link.reader.eof();
                            break;
                        }
                        Ok(n) => {
                            link.reader.filled(n);
                            link.received += n as u64;
                            plain = plain.saturating_sub(n);
                        }
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            link.reader.eof();
                            break;
                        }
                    }
                }
                if state.peer_has_closed() {
                    link.reader.eof();
                }
            }
        }
        while let Some(reply) = link.reader.next_reply()? {
            sink(reply);
        }
        link.reader.take_owed(&mut link.out);
        if link.reader.ended() {
            link.readable = false;
        }
    }
    Ok(())
}

/// A TLS failure as the caller can act on it: the server's certificate that did not
/// verify, the server's refusal of the client's certificate (under TLS 1.3 that alert
/// comes after the handshake, in place of a reply), or anything else.
fn tls_error(authority: &str, error: &rustls::Error) -> Error {
    use rustls::{AlertDescription as Alert, CertificateError as Cert};
    match error {
        rustls::Error::InvalidCertificate(why) => {
            let why = match why {
                Cert::NotValidForName | Cert::NotValidForNameContext { .. } => format!("hostname mismatch: {why}"),
                Cert::UnknownIssuer => "unknown issuer: no trusted CA signed it (a self-signed certificate, or \
                                        one from a CA that is not trusted here)"
                    .to_owned(),
                Cert::Expired | Cert::ExpiredContext { .. } => format!("certificate has expired: {why}"),
                _ => why.to_string(),
            };
            Error::refused(
                TlsRefusal::ServerCertificate,
                format!("cannot verify the TLS certificate of {authority}: {why}"),
            )
        }
        rustls::Error::AlertReceived(alert) => {
            let what = match alert {
                Alert::CertificateRequired => "certificate required",
                Alert::BadCertificate => "bad certificate",
                Alert::UnsupportedCertificate => "unsupported certificate",
                Alert::CertificateRevoked => "certificate revoked",
                Alert::CertificateExpired => "certificate expired",
                Alert::CertificateUnknown => "certificate unknown",
                Alert::UnknownCA => "unknown ca",
                Alert::AccessDenied => "access denied",
                _ => return Error::transport(format!("TLS: {error}")),
            };
            Error::refused(
                TlsRefusal::ClientCertificate,
                format!("{authority} requires a client certificate it trusts: {what}"),
            )
        }
        _ => Error::transport(format!("TLS: {error}")),
    }
}

/// A connected, non-blocking socket with `TCP_NODELAY`, trying each address in turn.
fn connect(endpoint: &Endpoint, deadline: Option<Instant>) -> Result<StdTcpStream> {
    let where_ = endpoint.authority();
    let addrs: Vec<SocketAddr> = (endpoint.host(), endpoint.port())
        .to_socket_addrs()
        .map_err(|e| Error::connect(format!("cannot connect to {where_}: {e}")))?
        .collect();
    let mut last = None;
    for addr in addrs {
        let attempt = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::timeout(format!(
                        "cannot connect to {where_} within the time-out"
                    )));
                }
                StdTcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1)))
            }
            None => StdTcpStream::connect(addr),
        };
        match attempt {
            Ok(sock) => {
                sock.set_nodelay(true).map_err(|e| io_error(endpoint, &e))?;
                sock.set_nonblocking(true).map_err(|e| io_error(endpoint, &e))?;
                return Ok(sock);
            }
            Err(error) if error.kind() == io::ErrorKind::TimedOut => {
                return Err(Error::timeout(format!(
                    "cannot connect to {where_} within the time-out"
                )))
            }
            Err(error) => last = Some(error),
        }
    }
    Err(Error::connect(match last {
        Some(error) => format!("cannot connect to {where_}: {error}"),
        None => format!("cannot connect to {where_}: no address"),
    }))
}
