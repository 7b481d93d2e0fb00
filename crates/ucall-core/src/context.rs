// SPDX-License-Identifier: Apache-2.0
//! How a call reached the server: its transport, whether TLS carried it, the peer's
//! address and, over HTTP and WebSocket, the request head's header fields.
//!
//! A handler reads it through [`crate::Call::context`]. The transport and the TLS flag
//! are always known. The peer's address and the header fields are kept only when the
//! server asks for them ([`crate::ServerBuilder::keep_context`]; the Python and C front
//! ends ask when a procedure or a hook wants them), so a server that never reads them
//! copies no head and, on io_uring, asks the kernel for no address.

use std::net::SocketAddr;
use std::time::Duration;

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
}

/// The context of a call built without one (tests, in-memory sessions): HTTP, no TLS,
/// nothing kept.
pub const NONE: Context<'static> = Context {
    transport: Transport::Http,
    tls: false,
    peer: None,
    head: &[],
    timeout: None,
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
        }
    }

    /// The same context with the caller's deadline budget `timeout`.
    #[must_use]
    pub fn with_timeout(self, timeout: Option<Duration>) -> Self {
        Context { timeout, ..self }
    }

    /// The time the caller allows the call, counted from its arrival, if it said: the HTTP
    /// header `UCall-Timeout`, or the request object's member `"timeout"` (the shorter of
    /// the two). The server answers nothing on its own at that time; front ends that
    /// bound calls (the Python one) do.
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
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
}
