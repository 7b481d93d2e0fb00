// SPDX-License-Identifier: Apache-2.0
//! Reply framing: finds where one reply ends in a stream of bytes.
//!
//! Both framers are sans-I/O. The caller keeps the received bytes in a buffer,
//! hands the unconsumed part to [`Framer::parse`] after every read, and drops
//! [`Reply::len`] bytes from the front for each reply returned. A framer keeps
//! a little state between calls so that a large reply arriving in many small
//! reads is not re-parsed from its first byte every time.

use std::fmt;
use std::ops::Range;

/// The largest response head (status line and headers) accepted, in bytes.
pub const MAX_HEAD_LEN: usize = 64 * 1024;

/// The most headers one response may carry.
const MAX_HEADERS: usize = 64;

/// Why a reply stream cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramingError {
    /// The status line or a header is not valid HTTP/1.x.
    BadHead(String),
    /// The head is longer than [`MAX_HEAD_LEN`].
    HeadTooLarge,
    /// `Content-Length` is not a number, or two of them disagree.
    BadContentLength,
    /// A chunk-size line of a chunked body is malformed.
    BadChunk,
    /// The peer closed the connection in the middle of a reply.
    Truncated,
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::BadHead(why) => write!(f, "malformed response head: {why}"),
            FramingError::HeadTooLarge => write!(f, "response head exceeds {MAX_HEAD_LEN} bytes"),
            FramingError::BadContentLength => write!(f, "invalid Content-Length"),
            FramingError::BadChunk => write!(f, "malformed chunked body"),
            FramingError::Truncated => write!(f, "connection closed inside a reply"),
        }
    }
}

impl std::error::Error for FramingError {}

/// Where the payload of a reply lies, relative to the start of the buffer
/// that was passed to [`Framer::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// One contiguous range (a `Content-Length` body, a body read until the
    /// connection closed, or a raw TCP line without its terminator).
    Contiguous(Range<usize>),
    /// The data ranges of a chunked body, in order, without chunk framing.
    Chunks(Vec<Range<usize>>),
}

/// One complete reply at the front of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// How many bytes the reply occupies, framing included. Interim `1xx`
    /// responses that preceded it are counted here too.
    pub len: usize,
    /// HTTP status code, or 0 for a raw TCP reply.
    pub status: u16,
    /// The server will close the connection after this reply.
    pub close: bool,
    /// The payload.
    pub body: Body,
}

impl Reply {
    /// Whether the status code is 2xx (always true for raw TCP replies).
    pub fn is_success(&self) -> bool {
        self.status == 0 || (200..300).contains(&self.status)
    }

    /// Whether the payload contains `needle`; `buf` must be the buffer the
    /// reply was parsed from.
    pub fn body_contains(&self, buf: &[u8], needle: &[u8]) -> bool {
        match &self.body {
            Body::Contiguous(range) => contains(&buf[range.clone()], needle),
            Body::Chunks(chunks) => {
                let mut joined = Vec::new();
                for range in chunks {
                    joined.extend_from_slice(&buf[range.clone()]);
                }
                contains(&joined, needle)
            }
        }
    }

    /// The payload as one vector (chunks joined).
    pub fn body_bytes(&self, buf: &[u8]) -> Vec<u8> {
        match &self.body {
            Body::Contiguous(range) => buf[range.clone()].to_vec(),
            Body::Chunks(chunks) => chunks.iter().flat_map(|r| buf[r.clone()].iter().copied()).collect(),
        }
    }
}

/// Whether `needle` occurs in `haystack`; an empty needle always does.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    // SIMD search: replies run to megabytes, and a byte-wise scan made the load
    // generator, not the server, the bottleneck of the 1.6 MB echo. From the end: the
    // expected text of a long reply is its tail (benches/run.py), found at once.
    memchr::memmem::rfind(haystack, needle).is_some()
}

/// A framer for either protocol.
#[derive(Debug, Clone)]
pub enum Framer {
    /// HTTP/1.x responses.
    Http(HttpFramer),
    /// Newline-delimited replies over raw TCP.
    Line(LineFramer),
    /// A WebSocket handshake, then one reply per data message.
    Ws(WsFramer),
}

impl Framer {
    /// Looks for one complete reply at the start of `buf`. `eof` says the peer
    /// has closed its side, so nothing more will be appended to `buf`.
    /// Returns `Ok(None)` when more bytes are needed.
    pub fn parse(&mut self, buf: &[u8], eof: bool) -> Result<Option<Reply>, FramingError> {
        match self {
            Framer::Http(f) => f.parse(buf, eof),
            Framer::Line(f) => f.parse(buf, eof),
            Framer::Ws(f) => f.parse(buf, eof),
        }
    }

    /// Forgets any partially parsed reply (call when the connection is replaced).
    pub fn reset(&mut self) {
        match self {
            Framer::Http(f) => f.reset(),
            Framer::Line(f) => *f = LineFramer::default(),
            Framer::Ws(f) => *f = WsFramer::default(),
        }
    }
}

/// Frames newline-delimited replies. A trailing `\r` before the `\n` is not
/// part of the payload.
#[derive(Debug, Clone, Default)]
pub struct LineFramer {
    /// Bytes already known to hold no newline.
    scanned: usize,
}

impl LineFramer {
    /// See [`Framer::parse`]. Bytes left after the last newline when the peer
    /// closes are a truncated reply.
    pub fn parse(&mut self, buf: &[u8], eof: bool) -> Result<Option<Reply>, FramingError> {
        let from = self.scanned.min(buf.len());
        match memchr::memchr(b'\n', &buf[from..]) {
            Some(off) => {
                self.scanned = 0;
                let nl = from + off;
                let end = if nl > 0 && buf[nl - 1] == b'\r' { nl - 1 } else { nl };
                Ok(Some(Reply {
                    len: nl + 1,
                    status: 0,
                    close: false,
                    body: Body::Contiguous(0..end),
                }))
            }
            None => {
                self.scanned = buf.len();
                if eof && !buf.is_empty() {
                    Err(FramingError::Truncated)
                } else {
                    Ok(None)
                }
            }
        }
    }
}

/// The status a [`WsFramer`] reports for the server's handshake response; the caller
/// starts sending messages when it sees it, and does not count it as a reply.
pub const WS_SWITCHED: u16 = 101;

/// Frames what a WebSocket server sends (RFC 6455): first the `101` response to the
/// opening handshake, reported with status [`WS_SWITCHED`] (any other status is a failed
/// upgrade, reported as such with `close` set); then one reply per complete data message
/// (text or binary, possibly fragmented). Ping and pong frames are skipped; a close frame
/// ends the stream.
#[derive(Debug, Clone, Default)]
pub struct WsFramer {
    open: bool,
}

impl WsFramer {
    /// See [`Framer::parse`].
    pub fn parse(&mut self, buf: &[u8], eof: bool) -> Result<Option<Reply>, FramingError> {
        if !self.open {
            let Some((pending, _)) = parse_head(buf)? else {
                return if eof && !buf.is_empty() {
                    Err(FramingError::Truncated)
                } else {
                    Ok(None)
                };
            };
            let switched = pending.status == WS_SWITCHED;
            self.open = switched;
            let head_len = pending.body_start;
            return Ok(Some(Reply {
                len: head_len,
                status: pending.status,
                close: !switched,
                body: Body::Contiguous(head_len..head_len),
            }));
        }
        let mut pos = 0;
        let mut chunks = Vec::new();
        loop {
            let Some(&[b0, b1]) = buf
                .get(pos..pos + 2)
                .map(|b| <&[u8; 2]>::try_from(b).expect("two bytes"))
            else {
                return incomplete(eof, buf);
            };
            if b1 & 0x80 != 0 {
                return Err(FramingError::BadHead("a server frame is masked".into()));
            }
            let (len, header) = match b1 & 0x7f {
                126 => match buf.get(pos + 2..pos + 4) {
                    Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
                    None => return incomplete(eof, buf),
                },
                127 => match buf.get(pos + 2..pos + 10) {
                    Some(b) => (u64::from_be_bytes(b.try_into().expect("eight bytes")), 10),
                    None => return incomplete(eof, buf),
                },
                n => (u64::from(n), 2),
            };
            let start = pos + header;
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| start.checked_add(l))
                .ok_or_else(|| FramingError::BadHead("frame too large".into()))?;
            if buf.len() < end {
                return incomplete(eof, buf);
            }
            pos = end;
            match b0 & 0x0f {
                0x0..=0x2 => {
                    chunks.push(start..end);
                    if b0 & 0x80 != 0 {
                        let body = if chunks.len() == 1 {
                            Body::Contiguous(chunks.pop().expect("one chunk"))
                        } else {
                            Body::Chunks(chunks)
                        };
                        return Ok(Some(Reply {
                            len: pos,
                            status: 0,
                            close: false,
                            body,
                        }));
                    }
                }
                0x9 | 0xA => {}
                0x8 => return Err(FramingError::Truncated),
                op => return Err(FramingError::BadHead(format!("unknown WebSocket opcode {op:#x}"))),
            }
        }
    }
}

fn incomplete(eof: bool, buf: &[u8]) -> Result<Option<Reply>, FramingError> {
    if eof && !buf.is_empty() {
        Err(FramingError::Truncated)
    } else {
        Ok(None)
    }
}

/// One client WebSocket frame: a final text frame carrying `payload`, masked with `mask`
/// as RFC 6455 requires of clients.
pub fn ws_client_frame(payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 14);
    frame.push(0x81);
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n <= usize::from(u16::MAX) => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// How the body of a response whose head has been parsed is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// Exactly this many bytes follow the head.
    Length(usize),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the connection closes.
    UntilClose,
}

/// A response whose head has been parsed but whose body is not complete yet.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Where the body starts in the buffer (interim responses included).
    body_start: usize,
    status: u16,
    close: bool,
    kind: BodyKind,
}

/// Frames HTTP/1.0 and HTTP/1.1 responses: status line, headers,
/// `Content-Length`, chunked transfer coding, bodies delimited by the end of
/// the connection, interim `1xx` responses and `Connection: close`.
#[derive(Debug, Clone, Default)]
pub struct HttpFramer {
    pending: Option<Pending>,
    /// The bytes of the last final response head parsed (when it was short
    /// and not preceded by interim responses) and what they said. A server
    /// under load sends the same head again and again, and identical bytes
    /// parse identically, so a byte comparison replaces the parse.
    last_head: Vec<u8>,
    last_info: Option<Pending>,
}

/// Heads longer than this are not remembered.
const MAX_CACHED_HEAD: usize = 512;

impl HttpFramer {
    /// See [`Framer::parse`].
    pub fn parse(&mut self, buf: &[u8], eof: bool) -> Result<Option<Reply>, FramingError> {
        let pending = match self.pending {
            Some(p) => p,
            None => match self.same_head_as_last(buf) {
                Some(p) => p,
                None => match parse_head(buf)? {
                    Some((p, 0)) if p.body_start <= MAX_CACHED_HEAD => {
                        self.last_head.clear();
                        self.last_head.extend_from_slice(&buf[..p.body_start]);
                        self.last_info = Some(p);
                        p
                    }
                    Some((p, _)) => p,
                    None => {
                        return if eof && !buf.is_empty() {
                            Err(FramingError::Truncated)
                        } else {
                            Ok(None)
                        };
                    }
                },
            },
        };
        let reply = match pending.kind {
            BodyKind::Length(n) => {
                let end = pending
                    .body_start
                    .checked_add(n)
                    .ok_or(FramingError::BadContentLength)?;
                (buf.len() >= end).then_some(Reply {
                    len: end,
                    status: pending.status,
                    close: pending.close,
                    body: Body::Contiguous(pending.body_start..end),
                })
            }
            BodyKind::Chunked => parse_chunked(buf, pending.body_start)?.map(|(end, chunks)| Reply {
                len: end,
                status: pending.status,
                close: pending.close,
                body: Body::Chunks(chunks),
            }),
            BodyKind::UntilClose => eof.then_some(Reply {
                len: buf.len(),
                status: pending.status,
                close: true,
                body: Body::Contiguous(pending.body_start..buf.len()),
            }),
        };
        match reply {
            Some(r) => {
                self.pending = None;
                Ok(Some(r))
            }
            None if eof => Err(FramingError::Truncated),
            None => {
                self.pending = Some(pending);
                Ok(None)
            }
        }
    }
}

impl HttpFramer {
    /// Forgets a partially parsed response but keeps the remembered head,
    /// which stays valid on a new connection.
    pub fn reset(&mut self) {
        self.pending = None;
    }

    /// What the last head said, if `buf` starts with the very same bytes.
    fn same_head_as_last(&self, buf: &[u8]) -> Option<Pending> {
        let info = self.last_info?;
        let head = self.last_head.as_slice();
        (buf.len() >= head.len() && &buf[..head.len()] == head).then_some(info)
    }
}

/// Parses the head of the first final (non-1xx) response in `buf`, skipping
/// interim responses; also returns where that final head starts. `Ok(None)`
/// means the head is not complete yet.
fn parse_head(buf: &[u8]) -> Result<Option<(Pending, usize)>, FramingError> {
    let mut start = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let head_len = match resp.parse(&buf[start..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return if buf.len() - start > MAX_HEAD_LEN {
                    Err(FramingError::HeadTooLarge)
                } else {
                    Ok(None)
                };
            }
            Err(e) => return Err(FramingError::BadHead(e.to_string())),
        };
        if head_len > MAX_HEAD_LEN {
            return Err(FramingError::HeadTooLarge);
        }
        let status = resp.code.unwrap_or(0);
        // 101 Switching Protocols is final; other 1xx are interim and carry no body.
        if (100..200).contains(&status) && status != 101 {
            start += head_len;
            continue;
        }
        let http10 = resp.version == Some(0);
        let mut content_length: Option<usize> = None;
        let mut chunked = false;
        let mut close = http10;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let value = std::str::from_utf8(h.value).map_err(|_| FramingError::BadContentLength)?;
                let value = value.trim();
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(FramingError::BadContentLength);
                }
                let n: usize = value.parse().map_err(|_| FramingError::BadContentLength)?;
                if content_length.is_some_and(|prev| prev != n) {
                    return Err(FramingError::BadContentLength);
                }
                content_length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked applies when it is the last coding listed.
                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
                chunked = trim(last).eq_ignore_ascii_case(b"chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = trim(token);
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                        close = false;
                    }
                }
            }
        }
        let body_start = start + head_len;
        let kind = if status == 204 || status == 304 || status == 101 {
            BodyKind::Length(0)
        } else if chunked {
            BodyKind::Chunked
        } else if let Some(n) = content_length {
            BodyKind::Length(n)
        } else {
            close = true;
            BodyKind::UntilClose
        };
        return Ok(Some((
            Pending {
                body_start,
                status,
                close,
                kind,
            },
            start,
        )));
    }
}

/// Trims ASCII spaces and tabs from both ends.
fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Finds `\r\n` at or after `from`; returns the index of the `\r`.
fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| from + p)
}

/// The end of a chunked body and the ranges of its data.
type ChunkedBody = (usize, Vec<Range<usize>>);

/// Parses a chunked body starting at `pos`. Returns the end of the body
/// (after the trailer section) and the data ranges, or `None` if incomplete.
fn parse_chunked(buf: &[u8], mut pos: usize) -> Result<Option<ChunkedBody>, FramingError> {
    let mut chunks = Vec::new();
    loop {
        let Some(line_end) = find_crlf(buf, pos) else {
            return if buf.len() - pos > 1024 {
                Err(FramingError::BadChunk)
            } else {
                Ok(None)
            };
        };
        let line = &buf[pos..line_end];
        let size_part = trim(line.split(|&b| b == b';').next().unwrap_or_default());
        if size_part.is_empty() || size_part.len() > 15 {
            return Err(FramingError::BadChunk);
        }
        let mut size: usize = 0;
        for &b in size_part {
            let digit = (b as char).to_digit(16).ok_or(FramingError::BadChunk)? as usize;
            size = size * 16 + digit;
        }
        pos = line_end + 2;
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let Some(end) = find_crlf(buf, pos) else {
                    return Ok(None);
                };
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Ok(Some((pos, chunks)));
                }
            }
        }
        let data_end = pos + size;
        if buf.len() < data_end + 2 {
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(FramingError::BadChunk);
        }
        chunks.push(pos..data_end);
        pos = data_end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 35\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":3}";

    fn http() -> Framer {
        Framer::Http(HttpFramer::default())
    }

    /// Feeds `stream` in pieces of `step` bytes, the way reads would deliver
    /// it, and returns the payloads of the replies framed.
    fn feed(framer: &mut Framer, stream: &[u8], step: usize) -> Vec<(u16, bool, Vec<u8>)> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for piece in stream.chunks(step) {
            buf.extend_from_slice(piece);
            while let Some(reply) = framer.parse(&buf, false).unwrap() {
                out.push((reply.status, reply.close, reply.body_bytes(&buf)));
                buf.drain(..reply.len);
            }
        }
        assert!(buf.is_empty(), "bytes left over: {:?}", String::from_utf8_lossy(&buf));
        out
    }

    #[test]
    fn single_response() {
        let mut f = http();
        let r = f.parse(OK, false).unwrap().unwrap();
        assert_eq!(r.len, OK.len());
        assert_eq!(r.status, 200);
        assert!(!r.close);
        assert!(r.is_success());
        assert_eq!(r.body_bytes(OK), br#"{"jsonrpc":"2.0","id":1,"result":3}"#);
        assert!(r.body_contains(OK, b"\"result\":3"));
        assert!(!r.body_contains(OK, b"error"));
    }

    #[test]
    fn split_reads_every_size() {
        for step in 1..=OK.len() {
            let mut f = http();
            let got = feed(&mut f, OK, step);
            assert_eq!(got.len(), 1, "step {step}");
            assert_eq!(got[0].2, br#"{"jsonrpc":"2.0","id":1,"result":3}"#);
        }
    }

    #[test]
    fn incomplete_head_and_body() {
        let mut f = http();
        assert_eq!(f.parse(&OK[..10], false).unwrap(), None);
        let head_end = OK.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(f.parse(&OK[..head_end], false).unwrap(), None);
        assert_eq!(f.parse(&OK[..OK.len() - 1], false).unwrap(), None);
        assert!(f.parse(OK, false).unwrap().is_some());
    }

    #[test]
    fn pipelined_replies_in_one_read() {
        let mut stream = Vec::new();
        for _ in 0..16 {
            stream.extend_from_slice(OK);
        }
        for step in [stream.len(), 7, 100, OK.len() + 3] {
            let mut f = http();
            let got = feed(&mut f, &stream, step);
            assert_eq!(got.len(), 16, "step {step}");
        }
    }

    #[test]
    fn chunked_body() {
        let stream: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            7\r\n{\"a\":12\r\n\
            A;ext=1\r\n34567890}\n\r\n\
            0\r\n\r\n";
        for step in 1..=stream.len() {
            let mut f = http();
            let got = feed(&mut f, stream, step);
            assert_eq!(got, vec![(200, false, b"{\"a\":1234567890}\n".to_vec())], "step {step}");
        }
        let mut f = http();
        let r = f.parse(stream, false).unwrap().unwrap();
        assert!(r.body_contains(stream, b"1234"), "needle spanning two chunks");
    }

    #[test]
    fn chunked_with_trailers_then_pipelined() {
        let mut stream = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n\
            3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"
            .to_vec();
        stream.extend_from_slice(OK);
        for step in 1..=stream.len() {
            let mut f = http();
            let got = feed(&mut f, &stream, step);
            assert_eq!(got.len(), 2, "step {step}");
            assert_eq!(got[0].2, b"abc");
            assert_eq!(got[1].2, br#"{"jsonrpc":"2.0","id":1,"result":3}"#);
        }
    }

    #[test]
    fn bad_chunk_size() {
        let stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(http().parse(stream, false), Err(FramingError::BadChunk));
        let stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n";
        assert_eq!(http().parse(stream, false), Err(FramingError::BadChunk));
    }

    #[test]
    fn non_2xx_and_connection_close() {
        let stream = b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno";
        let r = http().parse(stream, false).unwrap().unwrap();
        assert_eq!(r.status, 500);
        assert!(!r.is_success());
        assert!(r.close);
        let stream = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let r = http().parse(stream, false).unwrap().unwrap();
        assert_eq!((r.status, r.len, r.close), (404, stream.len(), false));
    }

    #[test]
    fn http10_defaults_to_close() {
        let stream = b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx";
        assert!(http().parse(stream, false).unwrap().unwrap().close);
        let stream = b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx";
        assert!(!http().parse(stream, false).unwrap().unwrap().close);
    }

    #[test]
    fn body_until_close() {
        let stream = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello";
        let mut f = http();
        assert_eq!(f.parse(&stream[..], false).unwrap(), None);
        let r = f.parse(&stream[..], true).unwrap().unwrap();
        assert!(r.close);
        assert_eq!(r.len, stream.len());
        assert_eq!(r.body_bytes(stream), b"hello");
    }

    #[test]
    fn truncated_at_eof() {
        let mut f = http();
        assert_eq!(f.parse(&OK[..OK.len() - 2], false).unwrap(), None);
        assert_eq!(f.parse(&OK[..OK.len() - 2], true), Err(FramingError::Truncated));
        assert_eq!(http().parse(&OK[..5], true), Err(FramingError::Truncated));
        assert_eq!(http().parse(b"", true).unwrap(), None);
    }

    #[test]
    fn interim_responses_are_skipped() {
        let mut stream = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        stream.extend_from_slice(OK);
        let r = http().parse(&stream, false).unwrap().unwrap();
        assert_eq!((r.status, r.len), (200, stream.len()));
        assert_eq!(r.body_bytes(&stream), br#"{"jsonrpc":"2.0","id":1,"result":3}"#);
    }

    #[test]
    fn no_body_statuses() {
        let mut stream = b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n".to_vec();
        let first = stream.len();
        stream.extend_from_slice(OK);
        let r = http().parse(&stream, false).unwrap().unwrap();
        assert_eq!((r.status, r.len), (204, first));
    }

    #[test]
    fn malformed_heads() {
        assert!(matches!(
            http().parse(b"HTTX/1.1 200 OK\r\n\r\n", false),
            Err(FramingError::BadHead(_))
        ));
        let cl = b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n";
        assert_eq!(http().parse(cl, false), Err(FramingError::BadContentLength));
        let twice = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab";
        assert_eq!(http().parse(twice, false), Err(FramingError::BadContentLength));
        let mut huge = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        huge.resize(MAX_HEAD_LEN + 10, b'a');
        assert_eq!(http().parse(&huge, false), Err(FramingError::HeadTooLarge));
    }

    #[test]
    fn remembered_head_is_only_reused_for_identical_bytes() {
        let other_len: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 36\r\n\r\n\
            {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":42}";
        let other_status: &[u8] = b"HTTP/1.1 500 OK\r\nContent-Type: application/json\r\nContent-Length: 35\r\n\r\n\
            {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":3}";
        let chunked: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n";
        let mut stream = Vec::new();
        for part in [OK, OK, other_len, OK, other_status, other_status, chunked, OK, chunked] {
            stream.extend_from_slice(part);
        }
        for step in [1, 3, 50, stream.len()] {
            let mut f = http();
            let got = feed(&mut f, &stream, step);
            let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
            assert_eq!(statuses, [200, 200, 200, 200, 500, 500, 200, 200, 200], "step {step}");
            assert_eq!(got[2].2, br#"{"jsonrpc":"2.0","id":1,"result":42}"#);
            assert_eq!(got[3].2, br#"{"jsonrpc":"2.0","id":1,"result":3}"#);
            assert_eq!(got[6].2, b"ab");
            assert_eq!(got[8].2, b"ab");
        }
        // A reset (new connection) keeps the remembered head but drops a partial reply.
        let mut f = http();
        assert!(f.parse(OK, false).unwrap().is_some());
        assert_eq!(f.parse(&OK[..OK.len() - 1], false).unwrap(), None);
        f.reset();
        assert_eq!(f.parse(other_len, false).unwrap().unwrap().len, other_len.len());
    }

    #[test]
    fn lines() {
        let stream = b"{\"result\":3}\n{\"result\":4}\r\n{\"error\":{}}\n";
        for step in 1..=stream.len() {
            let mut f = Framer::Line(LineFramer::default());
            let got = feed(&mut f, stream, step);
            let bodies: Vec<_> = got.into_iter().map(|g| g.2).collect();
            assert_eq!(
                bodies,
                vec![
                    b"{\"result\":3}".to_vec(),
                    b"{\"result\":4}".to_vec(),
                    b"{\"error\":{}}".to_vec()
                ]
            );
        }
        let mut f = Framer::Line(LineFramer::default());
        assert_eq!(f.parse(b"{\"res", true), Err(FramingError::Truncated));
    }

    #[test]
    fn substring_search() {
        assert!(contains(b"abcabd", b"abd"));
        assert!(contains(b"abc", b""));
        assert!(!contains(b"ab", b"abc"));
        assert!(!contains(b"aaaa", b"ab"));
        assert!(contains(b"xxab", b"ab"));
    }

    #[test]
    fn frames_websocket_handshake_and_messages() {
        let mut f = WsFramer::default();
        let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        assert_eq!(f.parse(&head[..20], false).unwrap(), None);
        let r = f.parse(head, false).unwrap().unwrap();
        assert_eq!((r.len, r.status, r.close), (head.len(), WS_SWITCHED, false));

        // A ping, then a text message in two fragments, then a 300-byte binary message.
        let mut buf = vec![0x89, 0x00, 0x01, 0x03, b'a', b'b', b'c', 0x80, 0x02, b'd', b'e'];
        let big = vec![7u8; 300];
        buf.extend_from_slice(&[0x82, 126, 1, 44]);
        buf.extend_from_slice(&big);
        assert_eq!(f.parse(&buf[..9], false).unwrap(), None);
        let r = f.parse(&buf, false).unwrap().unwrap();
        assert_eq!(r.len, 11);
        assert_eq!(r.body_bytes(&buf), b"abcde");
        let rest = &buf[r.len..];
        let r = f.parse(rest, false).unwrap().unwrap();
        assert_eq!((r.len, r.body_bytes(rest)), (rest.len(), big));
        assert_eq!(f.parse(&[0x88, 0x00], false), Err(FramingError::Truncated));
        assert!(
            f.parse(&[0x81, 0x81, 0, 0, 0, 0, 0], false).is_err(),
            "masked server frame"
        );

        let mut f = WsFramer::default();
        let r = f
            .parse(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert!(r.close && r.status == 404);
    }

    #[test]
    fn masks_client_frames() {
        let frame = ws_client_frame(b"hi", [1, 2, 3, 4]);
        assert_eq!(frame, [0x81, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2]);
        let long = ws_client_frame(&[0; 70_000], [0; 4]);
        assert_eq!(&long[..10], &[0x81, 0x80 | 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]);
    }
}
