// SPDX-License-Identifier: Apache-2.0
//! How a call reached the server: its transport, whether TLS carried it (and the subject
//! of the client's certificate, with mutual TLS), the peer's address and, over HTTP and
//! WebSocket, the request head's header fields.
//!
//! A handler reads it through [`crate::Call::context`]. The transport and the TLS flag
//! are always known. The peer's address and the header fields are kept only when the
//! server asks for them ([`crate::ServerBuilder::keep_context`]; the Python and C front
//! ends ask when a procedure or a hook wants them), so a server that never reads them
//! copies no head and, on io_uring, asks the kernel for no address.
//!
//! The caller's W3C trace context ([`Context::trace`]) comes from the request's `"_meta"`
//! member (`{"traceparent": "...", "tracestate": "..."}`, the place for raw TCP, WebSocket
//! messages and each call of a batch) or else from the request head's `traceparent` and
//! `tracestate` fields (HTTP, and a WebSocket's upgrade request, when kept). Invalid values
//! are ignored ([`crate::trace_context`]).
//!
//! Whether the caller is still there ([`Context::caller`]) comes from the connection's
//! [`Liveness`], the flag that streamed replies and calls queued for a batch watch too:
//! it goes down when the connection ends (a reset, a failed write, the engine closing it),
//! when an HTTP client stops sending, and when a WebSocket client sends Close or stops
//! sending. A raw TCP client that half-closes may still be reading its replies: that alone
//! does not count as gone. A call may also have a [`Cancellation`] of its own, for a caller
//! that gives up that one call while its connection goes on (MCP's
//! `notifications/cancelled`): the call then sees its caller gone, its neighbours do not.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

use crate::cancellation::Cancellation;
use crate::trace_context::{TraceContext, TraceParent};

/// The protocol a call arrived over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Transport {
    /// HTTP/1.1 (`POST /` JSON-RPC, or a REST-style URL).
    #[default]
    Http,
    /// A raw TCP stream of JSON texts.
    Tcp,
    /// WebSocket messages after an HTTP upgrade.
    WebSocket,
}

impl Transport {
    /// `"http"`, `"tcp"` or `"websocket"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Tcp => "tcp",
            Transport::WebSocket => "websocket",
        }
    }
}

/// Where a call comes from (see the module documentation for what is kept when).
#[derive(Clone, Copy, Debug, Default)]
pub struct Context<'a> {
    transport: Transport,
    tls: bool,
    peer: Option<SocketAddr>,
    /// The HTTP request head as received (request line and header fields); for WebSocket
    /// the upgrade request's; empty over raw TCP or when not kept.
    head: &'a [u8],
    /// The time the caller allows the call (`UCall-Timeout`, or the request's `"timeout"`).
    timeout: Option<Duration>,
    /// The subject of the client's TLS certificate, when it presented one.
    tls_subject: Option<&'a str>,
    /// Whether the connection's caller is still there; `None` outside a connection.
    liveness: Option<&'a Liveness>,
    /// The call's own cancellation, for a call that can be cancelled alone.
    cancellation: Option<&'a Cancellation>,
    /// The attachment section of the binary message the call came in (docs/wire.md);
    /// `None` for a plain JSON text.
    section: Option<&'a [u8]>,
    /// The caller accepts a binary reply (docs/wire.md §3): results' binary values may
    /// travel as attachments.
    binary_replies: bool,
    /// The request's `"_meta"` member, raw JSON, when it has one.
    meta: Option<&'a str>,
    /// When the session read the request (monotonic nanoseconds), when calls are timed
    /// ([`crate::Router::time_calls`]); 0 otherwise.
    received: u64,
}

/// The context of a call built without one (tests, in-memory sessions): HTTP, no TLS,
/// nothing kept.
pub const NONE: Context<'static> = Context {
    transport: Transport::Http,
    tls: false,
    peer: None,
    head: &[],
    timeout: None,
    tls_subject: None,
    liveness: None,
    cancellation: None,
    section: None,
    binary_replies: false,
    meta: None,
    received: 0,
};

impl<'a> Context<'a> {
    /// A context (the sessions build these; tests may too).
    #[must_use]
    pub fn new(transport: Transport, tls: bool, peer: Option<SocketAddr>, head: &'a [u8]) -> Self {
        Context {
            transport,
            tls,
            peer,
            head,
            timeout: None,
            tls_subject: None,
            liveness: None,
            cancellation: None,
            section: None,
            binary_replies: false,
            meta: None,
            received: 0,
        }
    }

    /// The same context, for a request read at `received` (monotonic nanoseconds, 0 when
    /// not timed).
    #[must_use]
    pub fn with_received(self, received: u64) -> Self {
        Context { received, ..self }
    }

    /// Timestamp the context's request as read now when calls are `timed`
    /// ([`crate::Router::times_calls`]). In place, after the other fields are set: a server
    /// that does not time calls pays one predictable branch (no clock, no copy).
    #[inline]
    pub fn received_now_if(&mut self, timed: bool) {
        if timed {
            self.received_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn received_now(&mut self) {
        self.received = crate::date::monotonic_nanos();
    }

    /// When the session read the request, in nanoseconds of `CLOCK_MONOTONIC` (Python's
    /// `time.monotonic_ns()`), when calls are timed ([`crate::ServerBuilder::time_calls`]).
    #[must_use]
    pub fn received(&self) -> Option<u64> {
        (self.received != 0).then_some(self.received)
    }

    /// How long the call waited between the session reading its request and `now`
    /// (monotonic nanoseconds, `crate::date::monotonic_nanos`): what a span reports as the
    /// time queued. `None` when calls are not timed.
    #[must_use]
    pub fn waited_until(&self, now: u64) -> Option<u64> {
        (self.received != 0).then(|| now.saturating_sub(self.received))
    }

    /// The same context, for calls of a binary message whose attachment section is
    /// `section`.
    #[must_use]
    pub fn with_section(self, section: Option<&'a [u8]>) -> Self {
        Context { section, ..self }
    }

    /// The same context, for calls whose caller accepts binary replies (`accepts`).
    #[must_use]
    pub fn with_binary_replies(self, accepts: bool) -> Self {
        Context {
            binary_replies: accepts,
            ..self
        }
    }

    /// Whether the caller accepts a binary reply (docs/wire.md §3): a binary request over
    /// raw TCP or WebSocket, or `Accept: application/vnd.ucall.binary` over HTTP.
    #[must_use]
    pub fn binary_replies(&self) -> bool {
        self.binary_replies
    }

    /// The attachment section of the binary message that carried the call; `None` when
    /// it came in a plain JSON text.
    #[must_use]
    pub fn section(&self) -> Option<&'a [u8]> {
        self.section
    }

    /// The same context, on a connection whose caller's presence `liveness` tracks.
    #[must_use]
    pub fn with_liveness(self, liveness: &'a Liveness) -> Self {
        Context {
            liveness: Some(liveness),
            ..self
        }
    }

    /// The same context, for a call that `cancellation` cancels alone.
    #[must_use]
    pub fn with_cancellation(self, cancellation: &'a Cancellation) -> Self {
        Context {
            cancellation: Some(cancellation),
            ..self
        }
    }

    /// Whether the caller is known to have gone now (see the module documentation). A
    /// handler that answers inline runs on the thread that serves its connection, which
    /// reads nothing meanwhile: this is for a call that asks later, through
    /// [`Context::caller`].
    #[must_use]
    pub fn is_caller_gone(&self) -> bool {
        self.liveness.is_some_and(Liveness::is_gone) || self.cancellation.is_some_and(Cancellation::is_cancelled)
    }

    /// A handle that says, from any thread and for as long as it is kept, whether the
    /// caller has gone: for a handler that answers later (a deferred reply, work on
    /// another thread), which can then stop working for nobody. The first ask on a
    /// connection makes its shared flag (one allocation); a call that never asks pays
    /// nothing. Outside a connection (a call built in memory) it never says gone.
    #[must_use]
    pub fn caller(&self) -> Caller {
        Caller {
            connection: self.liveness.map(Liveness::watch),
            cancellation: self.cancellation.cloned(),
        }
    }

    /// The same context with the caller's deadline budget `timeout`.
    #[must_use]
    pub fn with_timeout(self, timeout: Option<Duration>) -> Self {
        Context { timeout, ..self }
    }

    /// The time the caller allows the call, counted from its arrival, if it said: the HTTP
    /// header `UCall-Timeout`, or the request object's member `"timeout"` (the shorter of
    /// the two). At that time (or its procedure's own limit, if shorter) the caller gets
    /// "Deadline exceeded" ([`crate::Reply::deadline`]).
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The same context, for a request whose `"_meta"` member is `meta` (raw JSON).
    #[must_use]
    pub fn with_meta(self, meta: Option<&'a str>) -> Self {
        Context { meta, ..self }
    }

    /// The request's `"_meta"` member as sent (raw JSON), if it had one.
    #[must_use]
    pub fn meta(&self) -> Option<&'a str> {
        self.meta
    }

    /// The caller's W3C trace context, when it sent a valid one: the request's `"_meta"`
    /// member's `traceparent` (and `tracestate`) strings first, else the request head's
    /// `traceparent` field (one only) and `tracestate` fields (kept heads only: HTTP, and
    /// WebSocket's upgrade request). Invalid values count as absent (W3C Trace Context
    /// §3.2.2): the call starts a new trace.
    #[must_use]
    pub fn trace(&self) -> Option<TraceContext<'a>> {
        if let Some(found) = self.meta.and_then(trace_in_meta) {
            return Some(found);
        }
        if self.head.is_empty() {
            return None;
        }
        let mut parent: Option<&[u8]> = None;
        let mut states: Vec<&'a [u8]> = Vec::new();
        for (name, value) in self.headers() {
            if name.eq_ignore_ascii_case("traceparent") {
                if parent.is_some() {
                    return None; // two fields: which one is meant is unknown
                }
                parent = Some(value);
            } else if name.eq_ignore_ascii_case("tracestate") {
                states.push(value);
            }
        }
        TraceContext::parse(parent?, &states)
    }

    /// The same context, with the subject of the client's TLS certificate.
    #[must_use]
    pub fn with_tls_subject(self, tls_subject: Option<&'a str>) -> Self {
        Context { tls_subject, ..self }
    }

    /// The subject of the certificate the client presented, with mutual TLS (the server
    /// requires one when configured with `TlsConfig::client_ca`), as RFC 4514 writes a
    /// distinguished name: `CN=alice, O=Example`. `None` without TLS or a certificate.
    #[must_use]
    pub fn tls_subject(&self) -> Option<&'a str> {
        self.tls_subject
    }

    /// The protocol the call arrived over.
    #[must_use]
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Whether TLS carried the call.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The peer's address, when kept.
    #[must_use]
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The raw request head (empty over raw TCP, or when not kept).
    #[must_use]
    pub fn head(&self) -> &'a [u8] {
        self.head
    }

    /// The header fields of the request head, in order, names as sent (RFC 9110 §5.1:
    /// compare them case-insensitively). Values are trimmed of surrounding whitespace.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> {
        let head = self.head;
        // The request line is not a field; the head ends with an empty line.
        let first = memchr::memchr(b'\n', head).map_or(head.len(), |i| i + 1);
        head[first..]
            .split(|&c| c == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
            .take_while(|line| !line.is_empty())
            .filter_map(|line| {
                let colon = memchr::memchr(b':', line)?;
                let name = std::str::from_utf8(&line[..colon]).ok()?;
                Some((name, line[colon + 1..].trim_ascii()))
            })
    }

    /// The value of the first header field named `name` (compared case-insensitively).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }
}

/// The trace context in a request's `"_meta"` member (a JSON object with string members
/// `traceparent` and `tracestate`); `None` when it holds none, or none valid.
fn trace_in_meta(meta: &str) -> Option<TraceContext<'_>> {
    #[derive(Deserialize)]
    struct Meta<'m> {
        #[serde(borrow, default)]
        traceparent: Option<Cow<'m, str>>,
        #[serde(borrow, default)]
        tracestate: Option<Cow<'m, str>>,
    }
    let meta: Meta<'_> = serde_json::from_str(meta).ok()?;
    let parent = TraceParent::parse(meta.traceparent?.as_bytes())?;
    Some(TraceContext::new(parent, meta.tracestate))
}

/// Whether one connection's caller is still there. Its shared flag is made on the first
/// ask ([`Liveness::watch`]), so that connections whose calls never ask pay nothing; it
/// goes down once, when the caller is known gone ([`Liveness::gone`], or the drop of the
/// connection's state).
#[derive(Debug, Default)]
pub struct Liveness {
    /// `true` while the caller is there; shared with the calls that asked.
    shared: OnceLock<Arc<AtomicBool>>,
    /// The caller has gone (for a flag made after that).
    gone: AtomicBool,
}

impl Liveness {
    /// The flag shared with the calls that asked: `true` while the caller is there.
    pub fn watch(&self) -> Arc<AtomicBool> {
        Arc::clone(
            self.shared
                .get_or_init(|| Arc::new(AtomicBool::new(!self.gone.load(Ordering::Relaxed)))),
        )
    }

    /// The caller is gone: every call watching it learns so.
    pub fn gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
        if let Some(flag) = self.shared.get() {
            flag.store(false, Ordering::Relaxed);
        }
    }

    /// Whether the caller is known to have gone.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.gone();
    }
}

/// Whether a call's caller has gone, readable from any thread ([`Context::caller`]).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The connection's flag, `true` while the caller is there (`None` outside one).
    connection: Option<Arc<AtomicBool>>,
    /// The call's own cancellation, when it can be cancelled alone.
    cancellation: Option<Cancellation>,
}

impl Caller {
    /// Whether the caller has gone: its connection ended, it stopped sending (see the
    /// module documentation), or it cancelled this call. Never for a call made outside a
    /// connection.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        self.connection
            .as_ref()
            .is_some_and(|present| !present.load(Ordering::Relaxed))
            || self.cancellation.as_ref().is_some_and(Cancellation::is_cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_header_fields_of_the_head() {
        let head = b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization:  Bearer t0k \r\nX-Empty:\r\n\r\n";
        let context = Context::new(Transport::Http, false, None, head);
        let fields: Vec<_> = context.headers().collect();
        assert_eq!(
            fields,
            [("Host", &b"x"[..]), ("Authorization", b"Bearer t0k"), ("X-Empty", b"")]
        );
        assert_eq!(context.header("authorization"), Some(&b"Bearer t0k"[..]));
        assert_eq!(context.header("missing"), None);
        assert_eq!(Context::default().headers().count(), 0);
        assert_eq!(Context::default().transport().as_str(), "http");
    }

    #[test]
    fn the_caller_is_gone_once_its_connection_says_so() {
        assert!(!Context::default().caller().is_gone(), "outside a connection: never");
        let liveness = Liveness::default();
        let context = Context::default().with_liveness(&liveness);
        let early = context.caller();
        assert!(!early.is_gone() && !context.is_caller_gone());
        liveness.gone();
        assert!(early.is_gone() && context.is_caller_gone());
        assert!(context.caller().is_gone(), "a flag made after the caller went says so");
        let kept = {
            let liveness = Liveness::default();
            let caller = Context::default().with_liveness(&liveness).caller();
            assert!(!caller.is_gone());
            caller
        };
        assert!(kept.is_gone(), "the connection's state was dropped");
    }

    #[test]
    fn a_cancellation_reaches_only_its_call() {
        let liveness = Liveness::default();
        let cancellation = Cancellation::default();
        let connection = Context::default().with_liveness(&liveness);
        let cancelled = connection.with_cancellation(&cancellation);
        let (mine, neighbour) = (cancelled.caller(), connection.caller());
        assert!(!mine.is_gone() && !cancelled.is_caller_gone());
        cancellation.cancel();
        assert!(mine.is_gone() && cancelled.is_caller_gone());
        assert!(
            !neighbour.is_gone() && !connection.is_caller_gone(),
            "the connection goes on"
        );
        assert!(!liveness.is_gone());
        let other = Cancellation::default();
        let caller = connection.with_cancellation(&other).caller();
        liveness.gone();
        assert!(caller.is_gone(), "its connection ended");
    }
}
