// SPDX-License-Identifier: Apache-2.0
//! Bytes on the wire, without I/O: requests framed into an output queue, replies framed
//! out of whatever the socket gave.
//!
//! - HTTP/1.1 (RFC 9112): `POST` requests with `Content-Length`; responses framed by
//!   `Content-Length` (§6.3), chunked coding (§7.1) or the end of the connection, `1xx`
//!   skipped, `Connection: close` noted. Response heads are parsed by httparse.
//! - Raw TCP: one JSON text per request, a newline after it; replies are JSON texts framed
//!   by their own syntax (`ucall_core::stream`).
//! - WebSocket (RFC 6455): the opening handshake (§4.1), masked text frames out (§5.3),
//!   unmasked frames in, fragments joined (§5.4), pings answered (§5.5.2), the close
//!   frame answered (§5.5.1).
//!
//! A large body is read straight into its own buffer once its length is known, so a
//! 2 MB reply is copied once (socket to body), not twice.

mod stream_body;

use stream_body::StreamBody;

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::io::IoSlice;
use std::sync::Arc;

use ucall_core::http1::chunked::{ChunkError, ChunkedDecoder};
use ucall_core::jsonrpc::section::Section;
use ucall_core::stream::{Frame, Framer};
use ucall_core::wire;
use ucall_core::Bytes;

use crate::error::{Error, Result};

/// Longest reply head accepted.
pub const MAX_HEAD: usize = 64 << 10;
/// The largest reply a client takes unless told otherwise: 64 MiB, the largest request
/// a UCall server takes by default (its `max_body_bytes`).
pub const DEFAULT_MAX_REPLY_SIZE: usize = 64 << 20;
/// Bodies at least this long are read straight into their own buffer.
const DIRECT: usize = 64 << 10;
/// ...and at most this long: a buffer is made for the length a server announces before
/// any of the body arrives, so a longer one grows with what does arrive instead (a
/// `Content-Length` of a petabyte would otherwise be allocated, or abort the process).
const DIRECT_MAX: usize = 256 << 20;
/// Requests shorter than this are copied into one buffer with their neighbours (one
/// write for a thousand small calls); longer ones are written from where they are.
const COALESCE: usize = 16 << 10;
/// Smallest room offered to a read.
const READ_ROOM: usize = 64 << 10;
/// How far ahead of the bytes read a large body read in place is zeroed.
const ZEROED_AHEAD: usize = 256 << 10;

/// A large body's buffer, read into in place, with the `buffered` bytes of it already
/// read: a buffer kept from an earlier large reply when there is one ([`crate::reply_buffers`];
/// a 2 MB reply in fresh pages took some 500 page faults), and how much of it is filled.
fn direct_body(len: usize, buffered: &[u8]) -> (Vec<u8>, usize) {
    let mut body = crate::reply_buffers::take(len);
    body.extend_from_slice(buffered);
    (body, buffered.len())
}

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 `POST`, kept alive and pipelined.
    Http,
    /// JSON texts back to back over the byte stream.
    Tcp,
    /// JSON texts as WebSocket text messages.
    WebSocket,
}

/// One reply as framed off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status; `None` over raw TCP and WebSocket.
    pub status: Option<u16>,
    /// The JSON text (empty for `204 No Content`).
    pub body: Vec<u8>,
    /// The server closes the connection after this reply.
    pub close: bool,
    /// `Some(j)`: a binary message (docs/wire.md §1), `body` its body (the prefix taken
    /// off): the JSON text's `j` bytes, then padding and the attachment section, checked.
    pub binary: Option<usize>,
}

// ------------------------------------------------------------------------------ output

enum Chunk {
    Owned(Vec<u8>),
    Shared(Arc<Vec<u8>>),
    /// An attachment, written from the caller's memory.
    Attached(Bytes),
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Owned(bytes) => bytes,
            Chunk::Shared(bytes) => bytes,
            Chunk::Attached(bytes) => bytes,
        }
    }
}

/// Bytes waiting to be written: small requests coalesced, large ones kept where they are.
#[derive(Default)]
pub struct OutQueue {
    chunks: VecDeque<Chunk>,
    /// Bytes of the front chunk already written.
    offset: usize,
    /// Whether the back chunk takes more small writes.
    tail_open: bool,
    len: usize,
    spare: Vec<u8>,
    /// Bytes taken from the queue (written) since it was made.
    taken: u64,
}

impl OutQueue {
    /// Bytes taken from the queue (written) since it was made: a request queued when
    /// [`OutQueue::end`] was `e` has been written whole once this reaches `e`.
    #[must_use]
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Where the bytes queued so far end, counted as [`OutQueue::taken`] counts.
    #[must_use]
    pub fn end(&self) -> u64 {
        self.taken + self.len as u64
    }

    /// Bytes still to write.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether everything has been written.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queue a copy of `bytes`.
    pub fn push_slice(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        if self.tail_open {
            if let Some(Chunk::Owned(tail)) = self.chunks.back_mut() {
                tail.extend_from_slice(bytes);
                return;
            }
        }
        let mut chunk = std::mem::take(&mut self.spare);
        chunk.clear();
        chunk.extend_from_slice(bytes);
        self.chunks.push_back(Chunk::Owned(chunk));
        self.tail_open = true;
    }

    /// Queue `bytes`, copied when short, else written from where they are.
    pub fn push_owned(&mut self, bytes: Vec<u8>) {
        if bytes.len() < COALESCE {
            self.push_slice(&bytes);
            return;
        }
        self.len += bytes.len();
        self.chunks.push_back(Chunk::Owned(bytes));
        self.tail_open = false;
    }

    /// Queue shared bytes (kept for a resend), written from where they are when long.
    pub fn push_shared(&mut self, bytes: &Arc<Vec<u8>>) {
        if bytes.len() < COALESCE {
            self.push_slice(bytes);
            return;
        }
        self.len += bytes.len();
        self.chunks.push_back(Chunk::Shared(Arc::clone(bytes)));
        self.tail_open = false;
    }

    /// Queue an attachment: copied when short, else written from the caller's memory
    /// (one iovec of a vectored write; no copy in the client).
    pub fn push_bytes(&mut self, bytes: &Bytes) {
        if bytes.len() < COALESCE {
            self.push_slice(bytes);
            return;
        }
        self.len += bytes.len();
        self.chunks.push_back(Chunk::Attached(bytes.clone()));
        self.tail_open = false;
    }

    /// Up to `slices.len()` slices of what is pending, for a vectored write.
    pub fn slices<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (i, chunk) in self.chunks.iter().enumerate() {
            if n == slices.len() {
                break;
            }
            let bytes = chunk.bytes();
            slices[n] = IoSlice::new(if i == 0 { &bytes[self.offset..] } else { bytes });
            n += 1;
        }
        n
    }

    /// The first pending bytes.
    #[must_use]
    pub fn front(&self) -> &[u8] {
        self.chunks.front().map_or(&[], |chunk| &chunk.bytes()[self.offset..])
    }

    /// Forget `n` written bytes.
    pub fn advance(&mut self, mut n: usize) {
        self.len -= n;
        self.taken += n as u64;
        while n > 0 {
            let Some(front) = self.chunks.front() else { break };
            let left = front.bytes().len() - self.offset;
            if n < left {
                self.offset += n;
                return;
            }
            n -= left;
            self.offset = 0;
            if let Some(Chunk::Owned(done)) = self.chunks.pop_front() {
                // The small-request buffer is reused rather than freed and allocated again;
                // a large one goes to the process's kept buffers, for the next large reply
                // or request (fresh pages cost more than the copy into them).
                if done.capacity() <= 4 * COALESCE && done.capacity() > self.spare.capacity() {
                    self.spare = done;
                } else {
                    ucall_core::buffer::keep(done);
                }
            }
            if self.chunks.is_empty() {
                self.tail_open = false;
            }
        }
    }

    /// Drop everything pending.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.offset = 0;
        self.len = 0;
        self.tail_open = false;
    }
}

/// Masking keys for client frames (RFC 6455 §5.3: unpredictable to the page's script).
/// Each key is a SipHash with a key the standard library seeds from the OS.
struct Masks {
    hasher: std::collections::hash_map::RandomState,
    counter: u64,
}

impl Masks {
    fn new() -> Self {
        Masks {
            hasher: std::collections::hash_map::RandomState::new(),
            counter: 0,
        }
    }

    fn next(&mut self) -> [u8; 4] {
        self.counter += 1;
        let mut hasher = self.hasher.build_hasher();
        hasher.write_u64(self.counter);
        let word = hasher.finish();
        [word as u8, (word >> 8) as u8, (word >> 16) as u8, (word >> 24) as u8]
    }
}

fn mask_in_place(bytes: &mut [u8], mask: [u8; 4]) {
    let word = u32::from_ne_bytes(mask);
    let mut blocks = bytes.chunks_exact_mut(4);
    for block in &mut blocks {
        let value = u32::from_ne_bytes([block[0], block[1], block[2], block[3]]) ^ word;
        block.copy_from_slice(&value.to_ne_bytes());
    }
    for (byte, key) in blocks.into_remainder().iter_mut().zip(mask) {
        *byte ^= key;
    }
}

/// How a request body goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestKind {
    /// A JSON text, as any JSON-RPC server reads it.
    #[default]
    Json,
    /// A JSON text whose reply may be a binary message: over HTTP `Accept` lists
    /// `application/vnd.ucall.binary` (docs/wire.md §3.1); elsewhere as [`RequestKind::Json`].
    AcceptsBinary,
    /// A binary message's body (docs/wire.md §1) whose JSON text is this many bytes: HTTP
    /// with its content type and `UCall-JSON-Length`, raw TCP with the 16-byte prefix,
    /// WebSocket as a binary message (prefix and body).
    Binary(usize),
}

/// Frames request bodies for one connection's protocol.
pub struct RequestFramer {
    protocol: Protocol,
    /// HTTP: the head up to the `Content-Length` value.
    head: Vec<u8>,
    /// HTTP: the same for a JSON request that accepts a binary reply.
    accepting_head: Vec<u8>,
    /// HTTP: the head of a binary request up to the `UCall-JSON-Length` value.
    binary_head: Vec<u8>,
    /// HTTP: header lines of the requests framed now only ([`RequestFramer::set_request_lines`]).
    request_lines: String,
    /// Bytes framed after the last request's last byte.
    trailer: usize,
    masks: Masks,
    host: String,
    path: String,
}

/// An HTTP request head up to the value of `last`.
fn http_head(path: &str, host: &str, accept: &str, content_type: &str, lines: &str, last: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ucall-rust\r\nAccept: {accept}\r\n\
         Content-Type: {content_type}\r\n{lines}{last}: "
    )
    .into_bytes()
}

impl RequestFramer {
    /// Requests for `protocol`; over HTTP they go to `path` on `host` (the `Host` header).
    #[must_use]
    pub fn new(protocol: Protocol, host: &str, path: &str) -> Self {
        Self::with_lines(protocol, host, path, "")
    }

    fn with_lines(protocol: Protocol, host: &str, path: &str, lines: &str) -> Self {
        const JSON: &str = "application/json";
        // A streamed reply's items come as binary messages too (docs/streaming.md).
        let both = format!("{}, {}, {JSON}", wire::CONTENT_TYPE, wire::STREAM_CONTENT_TYPE);
        RequestFramer {
            protocol,
            head: http_head(path, host, JSON, JSON, lines, "Content-Length"),
            accepting_head: http_head(path, host, &both, JSON, lines, "Content-Length"),
            binary_head: http_head(path, host, &both, wire::CONTENT_TYPE, lines, "UCall-JSON-Length"),
            request_lines: String::new(),
            trailer: 0,
            masks: Masks::new(),
            host: host.to_owned(),
            path: path.to_owned(),
        }
    }

    /// The same, with `lines` (`Name: value\r\n` each, as [`crate::Endpoint::with_header`]
    /// checked them) in every HTTP request's head.
    #[must_use]
    pub fn with_header_lines(self, lines: &str) -> Self {
        if lines.is_empty() {
            return self;
        }
        Self::with_lines(self.protocol, &self.host, &self.path, lines)
    }

    /// `lines` (`Name: value\r\n` each, checked) in the head of each HTTP request framed
    /// from now on, after the connection's own, until set again (empty: none): a call's
    /// own headers, a trace context.
    pub fn set_request_lines(&mut self, lines: &str) {
        lines.clone_into(&mut self.request_lines);
    }

    /// Whether a notification gets a reply (HTTP answers every request, `204` for these).
    #[must_use]
    pub fn replies_to_notifications(&self) -> bool {
        self.protocol == Protocol::Http
    }

    fn http_head(&self, len: usize, kind: RequestKind, out: &mut OutQueue) {
        let mut digits = itoa::Buffer::new();
        let head = match kind {
            RequestKind::Json => &self.head,
            RequestKind::AcceptsBinary => &self.accepting_head,
            RequestKind::Binary(_) => &self.binary_head,
        };
        if self.request_lines.is_empty() {
            out.push_slice(head);
        } else {
            // Before the head's last line, its length's name.
            let last = head.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
            out.push_slice(&head[..last]);
            out.push_slice(self.request_lines.as_bytes());
            out.push_slice(&head[last..]);
        }
        if let RequestKind::Binary(json_len) = kind {
            out.push_slice(digits.format(json_len).as_bytes());
            out.push_slice(b"\r\nContent-Length: ");
        }
        out.push_slice(digits.format(len).as_bytes());
        out.push_slice(b"\r\n\r\n");
    }

    fn ws_head(&mut self, opcode: u8, len: usize, out: &mut OutQueue) -> [u8; 4] {
        let mask = self.masks.next();
        let mut head = [0u8; 14];
        head[0] = 0x80 | opcode;
        let used = if len < 126 {
            head[1] = 0x80 | len as u8;
            2
        } else if let Ok(short) = u16::try_from(len) {
            head[1] = 0x80 | 126;
            head[2..4].copy_from_slice(&short.to_be_bytes());
            4
        } else {
            head[1] = 0x80 | 127;
            head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        };
        head[used..used + 4].copy_from_slice(&mask);
        out.push_slice(&head[..used + 4]);
        mask
    }

    /// Bytes framed after a request's last byte (raw TCP's newline): a server may run a
    /// request before they arrive, as a JSON text is complete at its last byte.
    #[must_use]
    pub fn trailer_len(&self) -> usize {
        self.trailer
    }

    /// Frame one request body (a JSON text) into `out`, taking the body's buffer.
    pub fn frame(&mut self, body: Vec<u8>, out: &mut OutQueue) {
        self.frame_as(body, RequestKind::Json, out);
    }

    /// Frame one request body of `kind` into `out`, taking the body's buffer.
    pub fn frame_as(&mut self, mut body: Vec<u8>, kind: RequestKind, out: &mut OutQueue) {
        self.trailer = 0;
        match (self.protocol, kind) {
            (Protocol::Http, _) => {
                self.http_head(body.len(), kind, out);
                out.push_owned(body);
            }
            (Protocol::Tcp, RequestKind::Binary(json_len)) => {
                out.push_slice(&binary_prefix(json_len, body.len()));
                out.push_owned(body);
            }
            (Protocol::Tcp, _) => {
                out.push_owned(body);
                out.push_slice(b"\n");
                self.trailer = 1;
            }
            (Protocol::WebSocket, RequestKind::Binary(json_len)) => {
                let mut prefix = binary_prefix(json_len, body.len());
                let mask = self.ws_head(0x2, prefix.len() + body.len(), out);
                // The prefix is 16 bytes, a multiple of the key's 4: the body masks alike.
                mask_in_place(&mut prefix, mask);
                mask_in_place(&mut body, mask);
                out.push_slice(&prefix);
                out.push_owned(body);
            }
            (Protocol::WebSocket, _) => {
                let mask = self.ws_head(0x1, body.len(), out);
                mask_in_place(&mut body, mask);
                out.push_owned(body);
            }
        }
    }

    /// Frame a body that stays shared (kept by the caller for a possible resend).
    pub fn frame_shared(&mut self, body: &Arc<Vec<u8>>, out: &mut OutQueue) {
        self.frame_shared_as(body, RequestKind::Json, out);
    }

    /// Frame a body of `kind` that stays shared (kept by the caller for a possible resend).
    pub fn frame_shared_as(&mut self, body: &Arc<Vec<u8>>, kind: RequestKind, out: &mut OutQueue) {
        self.frame_attached(body, kind, &Section::new(), out);
    }

    /// Frame a body of `kind` that stays shared, then `attachments`: with any, `body` is
    /// the JSON text of a binary message (`kind` [`RequestKind::Binary`] of its length),
    /// and the padding and attachment section follow it (docs/wire.md §1), each attachment
    /// written from where it lies (HTTP, raw TCP: iovecs of a vectored write; WebSocket
    /// masks it, so it is copied once, masked, into the frame).
    pub fn frame_attached(
        &mut self,
        body: &Arc<Vec<u8>>,
        kind: RequestKind,
        attachments: &Section,
        out: &mut OutQueue,
    ) {
        self.trailer = 0;
        let body_len = if attachments.is_empty() {
            body.len()
        } else {
            wire::align(body.len()) + attachments.len()
        };
        match (self.protocol, kind) {
            (Protocol::Http, _) => {
                self.http_head(body_len, kind, out);
                out.push_shared(body);
                push_section(body.len(), attachments, out);
            }
            (Protocol::Tcp, RequestKind::Binary(json_len)) => {
                out.push_slice(&binary_prefix(json_len, body_len));
                out.push_shared(body);
                push_section(body.len(), attachments, out);
            }
            (Protocol::Tcp, _) => {
                out.push_shared(body);
                out.push_slice(b"\n");
                self.trailer = 1;
            }
            (Protocol::WebSocket, _) => {
                let mut whole = Vec::with_capacity(body_len);
                whole.extend_from_slice(body);
                if !attachments.is_empty() {
                    let start = wire::align(body.len());
                    for part in attachments.parts() {
                        whole.resize(start + part.offset, 0);
                        whole.extend_from_slice(&part.bytes);
                    }
                }
                self.frame_as(whole, kind, out);
            }
        }
    }

    /// A masked control frame (pong, close) with `payload`.
    fn control(&mut self, opcode: u8, payload: &[u8], out: &mut OutQueue) {
        let mask = self.ws_head(opcode, payload.len(), out);
        let mut payload = payload.to_vec();
        mask_in_place(&mut payload, mask);
        out.push_slice(&payload);
    }

    /// The closing frame (status 1000) of a WebSocket, nothing for other protocols.
    pub fn close(&mut self, out: &mut OutQueue) {
        if self.protocol == Protocol::WebSocket {
            self.control(0x8, &1000u16.to_be_bytes(), out);
        }
    }
}

/// The padding after a JSON text of `json_len` bytes and the attachment section of
/// `attachments` (docs/wire.md §1); nothing when there are none.
fn push_section(json_len: usize, attachments: &Section, out: &mut OutQueue) {
    const ZEROS: [u8; wire::ALIGN] = [0; wire::ALIGN];
    if attachments.is_empty() {
        return;
    }
    out.push_slice(&ZEROS[..wire::align(json_len) - json_len]);
    let mut end = 0;
    for part in attachments.parts() {
        out.push_slice(&ZEROS[..part.offset - end]);
        out.push_bytes(&part.bytes);
        end = part.offset + part.bytes.len();
    }
}

/// The 16-byte prefix of a binary message (docs/wire.md §3.2).
fn binary_prefix(json_len: usize, body_len: usize) -> [u8; wire::PREFIX_LEN] {
    wire::Prefix::encode(u32::try_from(json_len).unwrap_or(u32::MAX), body_len as u64)
}

/// The opening handshake of a WebSocket to `path` on `host` with the extra header `lines`
/// (`Name: value\r\n` each), and the key it sent.
#[must_use]
pub fn websocket_handshake(host: &str, path: &str, lines: &str) -> (Vec<u8>, String) {
    websocket_handshake_offering(host, path, lines, false)
}

/// The same, offering the subprotocol of binary messages (`ucall.binary.v1`,
/// docs/wire.md §3.3) when `binary`.
#[must_use]
pub fn websocket_handshake_offering(host: &str, path: &str, lines: &str, binary: bool) -> (Vec<u8>, String) {
    use base64::Engine as _;
    let mut masks = Masks::new();
    let mut nonce = [0u8; 16];
    for part in nonce.chunks_mut(4) {
        part.copy_from_slice(&masks.next());
    }
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    let offer = if binary {
        format!("Sec-WebSocket-Protocol: {}\r\n", wire::SUBPROTOCOL)
    } else {
        String::new()
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ucall-rust\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{offer}{lines}\r\n"
    );
    (request.into_bytes(), key)
}

// ------------------------------------------------------------------------------- input

enum State {
    /// Waiting for a response head (HTTP) or frame header (WebSocket) or text (TCP).
    Head,
    /// An HTTP body of a known length.
    Sized {
        status: u16,
        close: bool,
        len: usize,
        /// Large bodies: the body's own buffer and how much of it is filled.
        direct: Option<(Vec<u8>, usize)>,
    },
    Chunked {
        status: u16,
        close: bool,
        decoder: ChunkedDecoder,
        body: Vec<u8>,
        /// A streamed reply's body (docs/streaming.md), each message handed out as it
        /// completes: `application/jsonl`, or `application/vnd.ucall.binary-stream`.
        stream: Option<StreamBody>,
    },
    UntilEnd {
        status: u16,
    },
    /// A WebSocket frame's payload of a known length.
    Payload {
        opcode: u8,
        fin: bool,
        len: usize,
        direct: Option<(Vec<u8>, usize)>,
    },
}

/// Frames replies out of a byte stream (sans-I/O).
///
/// Reads go into [`ReplyReader::read_buf`], then [`ReplyReader::filled`] says how much
/// arrived; [`ReplyReader::next_reply`] hands out each complete reply.
pub struct ReplyReader {
    protocol: Protocol,
    data: Vec<u8>,
    start: usize,
    end: usize,
    state: State,
    json: Framer,
    eof: bool,
    /// The WebSocket is open (its handshake answered); always true otherwise.
    opened: bool,
    ws_key: String,
    message: Vec<u8>,
    in_message: bool,
    /// Bytes owed to the server (a pong, the closing frame).
    owed: OutQueue,
    masks: Option<RequestFramer>,
    why: String,
    closed_by_frame: bool,
    /// The bytes come through TLS: a failed handshake is not a plaintext client at a TLS port.
    over_tls: bool,
    /// The largest reply body (HTTP), JSON text (raw TCP) or message (WebSocket) taken.
    max_reply: usize,
    /// The JSON length of the binary reply being read (an HTTP head, a raw TCP prefix said so).
    binary_json_len: Option<usize>,
    /// The server selected the WebSocket subprotocol of binary messages.
    ws_binary: bool,
    /// The opcode of the WebSocket message being read (its first frame's).
    message_opcode: u8,
}

/// A binary reply whose framing is broken.
#[cold]
pub(crate) fn malformed(why: wire::Malformed) -> Error {
    let why = why.message().trim_start_matches("Parse error: ");
    Error::protocol(format!("a malformed binary reply: {why}"))
}

/// `reply` as the binary message whose JSON text is `json_len` bytes, its framing checked.
pub(crate) fn binary_reply(mut reply: Reply, json_len: usize) -> Result<Reply> {
    wire::split_body(&reply.body, json_len).map_err(malformed)?;
    reply.binary = Some(json_len);
    Ok(reply)
}

/// A reply over the client's limit: `size` bytes, or more when `at_least`.
#[cold]
pub(crate) fn too_large(size: usize, at_least: bool, max: usize) -> Error {
    let more = if at_least { " or more" } else { "" };
    Error::protocol(format!(
        "a reply of {size} bytes{more}, over the client's max_reply_size of {max} bytes \
         (the connection is closed; raise max_reply_size to take it)"
    ))
}

impl ReplyReader {
    /// A reader for `protocol`; a WebSocket reader expects the answer to the handshake
    /// that sent `ws_key` first.
    #[must_use]
    pub fn new(protocol: Protocol, ws_key: Option<String>) -> Self {
        let opened = protocol != Protocol::WebSocket;
        ReplyReader {
            protocol,
            data: vec![0; READ_ROOM],
            start: 0,
            end: 0,
            state: State::Head,
            json: Framer::default(),
            eof: false,
            opened,
            ws_key: ws_key.unwrap_or_default(),
            message: Vec::new(),
            in_message: false,
            owed: OutQueue::default(),
            masks: (protocol == Protocol::WebSocket).then(|| RequestFramer::new(protocol, "", "")),
            why: String::new(),
            closed_by_frame: false,
            over_tls: false,
            max_reply: DEFAULT_MAX_REPLY_SIZE,
            binary_json_len: None,
            ws_binary: false,
            message_opcode: 0,
        }
    }

    /// A reader that refuses replies over `max` bytes (the body of an HTTP reply, a raw TCP
    /// JSON text, a WebSocket message); [`DEFAULT_MAX_REPLY_SIZE`] unless set.
    #[must_use]
    pub fn with_max_reply(mut self, max: usize) -> Self {
        self.max_reply = max;
        self
    }

    /// The reader of a connection over TLS (its errors then suggest no TLS scheme).
    #[must_use]
    pub fn over_tls(mut self) -> Self {
        self.over_tls = true;
        self
    }

    /// What a WebSocket handshake cut short says: a plaintext client at a TLS port is the
    /// usual cause (the server sends an alert, or nothing, and closes).
    fn handshake_cut(&self, why: &str) -> Error {
        let hint = if self.over_tls {
            ""
        } else {
            " (if the port speaks TLS, use wss://)"
        };
        Error::protocol(format!(
            "the connection closed during the WebSocket handshake{why}{hint}"
        ))
    }

    /// Whether a WebSocket's handshake has been answered (always true otherwise).
    #[must_use]
    pub fn opened(&self) -> bool {
        self.opened
    }

    /// Whether the server selected the WebSocket subprotocol of binary messages
    /// (`ucall.binary.v1`, docs/wire.md §3.3) in its answer to the upgrade.
    #[must_use]
    pub fn binary_negotiated(&self) -> bool {
        self.ws_binary
    }

    /// Whether the server ended the stream (end of connection or a close frame).
    #[must_use]
    pub fn ended(&self) -> bool {
        self.eof || self.closed_by_frame
    }

    /// Why the stream ended, when the server said (a WebSocket close code), with a
    /// leading space; empty otherwise.
    #[must_use]
    pub fn why(&self) -> &str {
        &self.why
    }

    /// Whether part of a reply has arrived.
    #[must_use]
    pub fn in_reply(&self) -> bool {
        self.end > self.start || !matches!(self.state, State::Head) || self.json.in_text() || self.in_message
    }

    /// Bytes the connection owes the server, moved out.
    pub fn take_owed(&mut self, out: &mut OutQueue) {
        while !self.owed.is_empty() {
            let front = self.owed.front().to_vec();
            self.owed.advance(front.len());
            out.push_slice(&front);
        }
    }

    /// Where the next read should go.
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.end == self.start {
            if let State::Sized {
                direct: Some((body, filled)),
                len,
                ..
            }
            | State::Payload {
                direct: Some((body, filled)),
                len,
                ..
            } = &mut self.state
            {
                // Zeroed a window at a time, just before the kernel writes it: the pass is
                // over bytes in cache, not over the whole body up front.
                let window = (*filled + ZEROED_AHEAD).min(*len);
                if body.len() < window {
                    body.resize(window, 0);
                }
                return &mut body[*filled..];
            }
            self.start = 0;
            self.end = 0;
        }
        if self.data.len() - self.end < READ_ROOM / 4 {
            if self.start > 0 {
                self.data.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.data.len() - self.end < READ_ROOM / 4 {
                let len = self.data.len() * 2;
                self.data.resize(len, 0);
            }
        }
        &mut self.data[self.end..]
    }

    /// Where the next read may go as memory not yet written, when a large body is read in
    /// place and a read that writes raw memory (`recv`) saves zeroing it first; `None`
    /// otherwise ([`ReplyReader::read_buf`]). Then [`ReplyReader::filled`].
    pub fn read_spare(&mut self) -> Option<&mut [std::mem::MaybeUninit<u8>]> {
        if self.end != self.start {
            return None;
        }
        match &mut self.state {
            State::Sized {
                direct: Some((body, filled)),
                len,
                ..
            }
            | State::Payload {
                direct: Some((body, filled)),
                len,
                ..
            } if body.len() == *filled => Some(&mut body.spare_capacity_mut()[..*len - *filled]),
            _ => None,
        }
    }

    /// `n` bytes arrived in the last [`ReplyReader::read_buf`] or [`ReplyReader::read_spare`].
    pub fn filled(&mut self, n: usize) {
        if self.end == self.start {
            if let State::Sized {
                direct: Some((body, filled)),
                ..
            }
            | State::Payload {
                direct: Some((body, filled)),
                ..
            } = &mut self.state
            {
                *filled += n;
                if body.len() < *filled {
                    // SAFETY: the bytes up to `filled` were written by the read into the
                    // spare room `read_spare` handed out, within the body's capacity.
                    unsafe { body.set_len(*filled) };
                }
                return;
            }
        }
        self.end += n;
    }

    /// The server ended the stream.
    pub fn eof(&mut self) {
        self.eof = true;
    }

    /// Feed bytes at once (for tests and callers with their own buffers).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = self.read_buf();
            let n = room.len().min(bytes.len());
            room[..n].copy_from_slice(&bytes[..n]);
            self.filled(n);
            bytes = &bytes[n..];
        }
    }

    fn buffered(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// The next complete reply, `Ok(None)` until more bytes (or the end) arrive.
    ///
    /// # Errors
    /// A protocol error when the bytes are not a valid reply stream; the connection is
    /// then unusable.
    pub fn next_reply(&mut self) -> Result<Option<Reply>> {
        // No reply starts with 0x15 (a TLS alert record): a TLS port answering plaintext.
        let at_head = matches!(self.state, State::Head) && !self.json.in_text() && !self.in_message;
        if at_head && (!self.opened || self.protocol != Protocol::WebSocket) && self.buffered().starts_with(b"\x15\x03")
        {
            if !self.opened {
                return Err(self.handshake_cut(": the server answered with a TLS alert"));
            }
            return Err(Error::protocol(
                "the server answered with a TLS alert and closed: the port speaks TLS (use tls=True, https:// or --tls)",
            ));
        }
        match self.protocol {
            Protocol::Http => self.next_http(),
            Protocol::Tcp => self.next_json(),
            Protocol::WebSocket if !self.opened => {
                self.next_handshake()?;
                if self.opened {
                    self.next_ws()
                } else {
                    Ok(None)
                }
            }
            Protocol::WebSocket => self.next_ws(),
        }
    }

    fn next_json(&mut self) -> Result<Option<Reply>> {
        // A binary message's body read in place (see `next_tcp_binary`).
        if let State::Sized {
            len,
            direct: Some((body, filled)),
            ..
        } = &mut self.state
        {
            if *filled < *len {
                return if self.eof {
                    Err(Error::protocol("the connection closed in the middle of a binary reply"))
                } else {
                    Ok(None)
                };
            }
            let body = std::mem::take(body);
            self.state = State::Head;
            let json_len = self.binary_json_len.take().unwrap_or(body.len());
            let reply = Reply {
                status: None,
                body,
                close: false,
                binary: None,
            };
            return binary_reply(reply, json_len).map(Some);
        }
        if !self.json.in_text() {
            // Between replies: a binary message starts with a byte no JSON text starts with.
            let blank = self.buffered().iter().take_while(|b| b" \t\r\n".contains(b)).count();
            self.start += blank;
            if self.buffered().first() == Some(&wire::MAGIC) {
                return self.next_tcp_binary();
            }
        }
        match self.json.next(&self.data[self.start..self.end], self.max_reply) {
            Frame::Complete(range) => {
                let body = self.data[self.start + range.start..self.start + range.end].to_vec();
                self.start += range.end;
                self.json.reset();
                Ok(Some(Reply {
                    status: None,
                    body,
                    close: false,
                    binary: None,
                }))
            }
            Frame::Incomplete { skip } => {
                self.start += skip;
                if self.eof && self.json.in_text() {
                    return Err(Error::protocol("the connection closed in the middle of a reply"));
                }
                Ok(None)
            }
            Frame::Invalid => {
                let shown = String::from_utf8_lossy(&self.buffered()[..self.buffered().len().min(80)]).into_owned();
                Err(Error::protocol(format!("not a JSON reply: {shown:?}")))
            }
            Frame::TooLarge => {
                let seen = self.end - self.start;
                Err(too_large(seen.max(self.max_reply + 1), true, self.max_reply))
            }
        }
    }

    /// A raw TCP binary message (docs/wire.md §3.2): the 16-byte prefix, then its body.
    fn next_tcp_binary(&mut self) -> Result<Option<Reply>> {
        let cut = || Error::protocol("the connection closed in the middle of a binary reply");
        let Some(prefix) = wire::Prefix::parse(self.buffered()).map_err(malformed)? else {
            return if self.eof { Err(cut()) } else { Ok(None) };
        };
        let body_len = usize::try_from(prefix.body_len).unwrap_or(usize::MAX);
        if body_len > self.max_reply {
            return Err(too_large(body_len, false, self.max_reply));
        }
        let at = self.start + wire::PREFIX_LEN;
        let buffered = self.end - at;
        if buffered < body_len {
            if self.eof {
                return Err(cut());
            }
            if (DIRECT..=DIRECT_MAX).contains(&body_len) {
                // A large body is read into its own buffer, in place, as an HTTP body is:
                // not through the read buffer (grown, zeroed, scanned) and copied out.
                self.state = State::Sized {
                    status: 0,
                    close: false,
                    len: body_len,
                    direct: Some(direct_body(body_len, &self.data[at..self.end])),
                };
                self.binary_json_len = Some(prefix.json_len);
                self.start = self.end;
            }
            return Ok(None);
        }
        let body = self.data[at..at + body_len].to_vec();
        self.start = at + body_len;
        let reply = Reply {
            status: None,
            body,
            close: false,
            binary: None,
        };
        binary_reply(reply, prefix.json_len).map(Some)
    }

    /// Parse a response head at the start of the buffer: status, headers it matters to
    /// framing, and its length; `None` while incomplete.
    fn head(&mut self) -> Result<Option<Head>> {
        let buffered = self.buffered();
        let Some(end) = memchr::memmem::find(buffered, b"\r\n\r\n") else {
            if buffered.len() > MAX_HEAD {
                return Err(Error::protocol("the reply head is too large"));
            }
            if self.eof && !buffered.is_empty() {
                return Err(Error::protocol("the connection closed in the middle of a reply head"));
            }
            return Ok(None);
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        let not_http = |buffered: &[u8]| {
            let line = buffered.split(|&c| c == b'\r').next().unwrap_or_default();
            let line = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
            Error::protocol(format!("not an HTTP reply: {line:?}"))
        };
        match response.parse(&buffered[..end + 4]) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(not_http(buffered)),
        }
        let status = response.code.ok_or_else(|| not_http(buffered))?;
        let mut head = Head {
            status,
            len: end + 4,
            close: false,
            chunked: false,
            content_length: None,
            accept: None,
            upgrade: false,
            binary: false,
            json_length: None,
            subprotocol: None,
            stream: None,
        };
        for header in response.headers.iter() {
            let value = header.value;
            if header.name.eq_ignore_ascii_case("content-length") {
                let text = std::str::from_utf8(value).unwrap_or("").trim();
                let length = text
                    .parse::<usize>()
                    .map_err(|_| Error::protocol("a malformed Content-Length"))?;
                if head.content_length.is_some_and(|other| other != length) {
                    return Err(Error::protocol("two different Content-Length values"));
                }
                head.content_length = Some(length);
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked |= contains_token(value, b"chunked");
            } else if header.name.eq_ignore_ascii_case("connection") {
                head.close |= contains_token(value, b"close");
                head.upgrade |= contains_token(value, b"upgrade");
            } else if header.name.eq_ignore_ascii_case("sec-websocket-accept") {
                head.accept = Some(String::from_utf8_lossy(value).trim().to_owned());
            } else if header.name.eq_ignore_ascii_case("sec-websocket-protocol") {
                head.subprotocol = Some(String::from_utf8_lossy(value).trim().to_owned());
            } else if header.name.eq_ignore_ascii_case("content-type") {
                let media = value.split(|&c| c == b';').next().unwrap_or_default().trim_ascii();
                head.binary = media.eq_ignore_ascii_case(wire::CONTENT_TYPE.as_bytes());
                head.stream = if media.eq_ignore_ascii_case(b"application/jsonl") {
                    Some(false)
                } else if media.eq_ignore_ascii_case(wire::STREAM_CONTENT_TYPE.as_bytes()) {
                    Some(true)
                } else {
                    None
                };
            } else if header.name.eq_ignore_ascii_case(wire::JSON_LENGTH_HEADER) {
                let digits = value.trim_ascii();
                if head.json_length.is_some() {
                    return Err(Error::protocol(
                        "a malformed binary reply: UCall-JSON-Length is repeated",
                    ));
                }
                head.json_length = (!digits.is_empty() && digits.len() <= 19 && digits.iter().all(u8::is_ascii_digit))
                    .then(|| std::str::from_utf8(digits).ok()?.parse().ok())
                    .flatten();
                if head.json_length.is_none() {
                    return Err(Error::protocol(
                        "a malformed binary reply: UCall-JSON-Length is not decimal digits",
                    ));
                }
            }
        }
        Ok(Some(head))
    }

    fn next_http(&mut self) -> Result<Option<Reply>> {
        loop {
            match &mut self.state {
                State::Head => {
                    let Some(head) = self.head()? else { return Ok(None) };
                    self.start += head.len;
                    if (100..200).contains(&head.status) {
                        continue; // 100 Continue and friends: the real reply follows
                    }
                    self.binary_json_len = None;
                    if head.binary {
                        let json_length = head.json_length.ok_or_else(|| {
                            Error::protocol("a malformed binary reply: no UCall-JSON-Length with its content type")
                        })?;
                        self.binary_json_len = Some(json_length);
                    }
                    if matches!(head.status, 204 | 304) {
                        return Ok(Some(Reply {
                            status: Some(head.status),
                            body: Vec::new(),
                            close: head.close,
                            binary: None,
                        }));
                    }
                    self.state = if head.chunked {
                        State::Chunked {
                            status: head.status,
                            close: head.close,
                            decoder: ChunkedDecoder::default(),
                            body: Vec::new(),
                            stream: head.stream.map(StreamBody::new),
                        }
                    } else if let Some(len) = head.content_length {
                        if len > self.max_reply {
                            return Err(too_large(len, false, self.max_reply));
                        }
                        let buffered = self.end - self.start;
                        let direct = ((DIRECT..=DIRECT_MAX).contains(&len) && buffered < len)
                            .then(|| direct_body(len, &self.data[self.start..self.end]));
                        if direct.is_some() {
                            self.start = self.end;
                        }
                        State::Sized {
                            status: head.status,
                            close: head.close,
                            len,
                            direct,
                        }
                    } else {
                        State::UntilEnd { status: head.status }
                    };
                }
                State::Sized {
                    status,
                    close,
                    len,
                    direct,
                } => {
                    let (status, close, len) = (*status, *close, *len);
                    let body = match direct {
                        Some((body, filled)) => {
                            if *filled < len {
                                if self.eof {
                                    return Err(Error::protocol("the connection closed in the middle of a reply body"));
                                }
                                return Ok(None);
                            }
                            std::mem::take(body)
                        }
                        None => {
                            if self.end - self.start < len {
                                if self.eof {
                                    return Err(Error::protocol("the connection closed in the middle of a reply body"));
                                }
                                return Ok(None);
                            }
                            let body = self.data[self.start..self.start + len].to_vec();
                            self.start += len;
                            body
                        }
                    };
                    self.state = State::Head;
                    return self.http_reply(Reply {
                        status: Some(status),
                        body,
                        close,
                        binary: None,
                    });
                }
                State::Chunked {
                    status,
                    close,
                    decoder,
                    body,
                    stream: Some(stream),
                } => {
                    let (status, close, max) = (*status, *close, self.max_reply);
                    if !stream.finished {
                        // The stream's whole length is not bounded; each message is.
                        let input = &self.data[self.start..self.end];
                        let (used, done) = decoder
                            .decode(input, body, usize::MAX, MAX_HEAD)
                            .map_err(|_| Error::protocol("a malformed chunked body"))?;
                        self.start += used;
                        stream.finished = done;
                    }
                    if let Some(mut reply) = stream.next_message(body, max)? {
                        reply.status = Some(status);
                        return Ok(Some(reply));
                    }
                    if !stream.finished {
                        if self.eof {
                            return Err(Error::protocol(
                                "the connection closed in the middle of a streamed reply",
                            ));
                        }
                        return Ok(None);
                    }
                    self.state = State::Head;
                    if close {
                        // The server closes after the stream: nothing more comes.
                        self.eof = true;
                        return Ok(None);
                    }
                }
                State::Chunked {
                    status,
                    close,
                    decoder,
                    body,
                    stream: None,
                } => {
                    let input = &self.data[self.start..self.end];
                    let max = self.max_reply;
                    let (used, done) = decoder
                        .decode(input, body, max, MAX_HEAD)
                        .map_err(|error| match error {
                            ChunkError::TooLarge => too_large(max + 1, true, max),
                            _ => Error::protocol("a malformed chunked body"),
                        })?;
                    self.start += used;
                    if !done {
                        if self.eof {
                            return Err(Error::protocol("the connection closed in the middle of a chunked body"));
                        }
                        return Ok(None);
                    }
                    let reply = Reply {
                        status: Some(*status),
                        body: std::mem::take(body),
                        close: *close,
                        binary: None,
                    };
                    self.state = State::Head;
                    return self.http_reply(reply);
                }
                State::UntilEnd { status } => {
                    let seen = self.end - self.start;
                    if seen > self.max_reply {
                        return Err(too_large(seen, true, self.max_reply));
                    }
                    if !self.eof {
                        return Ok(None);
                    }
                    let reply = Reply {
                        status: Some(*status),
                        body: self.buffered().to_vec(),
                        close: true,
                        binary: None,
                    };
                    self.start = self.end;
                    self.state = State::Head;
                    return self.http_reply(reply);
                }
                State::Payload { .. } => return Err(Error::protocol("invariant: no frames over HTTP")),
            }
        }
    }

    /// An HTTP reply as its head framed it: a binary message when its content type says so.
    fn http_reply(&mut self, reply: Reply) -> Result<Option<Reply>> {
        match self.binary_json_len.take() {
            Some(json_len) => binary_reply(reply, json_len).map(Some),
            None => Ok(Some(reply)),
        }
    }

    fn next_handshake(&mut self) -> Result<()> {
        let Some(head) = self.head()? else {
            if self.eof {
                return Err(self.handshake_cut(""));
            }
            return Ok(());
        };
        if head.status != 101 {
            return Err(Error::protocol(format!(
                "the server refused the WebSocket upgrade: HTTP {}",
                head.status
            )));
        }
        let expected = ucall_core::ws::accept_key(self.ws_key.as_bytes());
        if head.accept.as_deref() != Some(expected.as_str()) || !head.upgrade {
            return Err(Error::protocol(
                "the server refused the WebSocket upgrade: a wrong Sec-WebSocket-Accept",
            ));
        }
        self.start += head.len;
        self.opened = true;
        self.ws_binary = head.subprotocol.as_deref() == Some(wire::SUBPROTOCOL);
        Ok(())
    }

    fn next_ws(&mut self) -> Result<Option<Reply>> {
        loop {
            match &mut self.state {
                State::Head => {
                    let buffered = self.buffered();
                    let [first, second, ..] = *buffered else {
                        return self.ws_end();
                    };
                    if first & 0x70 != 0 || second & 0x80 != 0 {
                        return Err(Error::protocol(
                            "not a valid WebSocket stream: reserved bits or a masked server frame",
                        ));
                    }
                    let (len, at) = match second & 0x7F {
                        126 => match buffered.get(2..4) {
                            Some(b) => (usize::from(u16::from_be_bytes([b[0], b[1]])), 4),
                            None => return self.ws_end(),
                        },
                        127 => match buffered.get(2..10) {
                            Some(b) => {
                                let mut word = [0u8; 8];
                                word.copy_from_slice(b);
                                let len = usize::try_from(u64::from_be_bytes(word))
                                    .map_err(|_| Error::protocol("a WebSocket frame too large"))?;
                                (len, 10)
                            }
                            None => return self.ws_end(),
                        },
                        short => (usize::from(short), 2),
                    };
                    let message = if self.in_message { self.message.len() } else { 0 };
                    if message.saturating_add(len) > self.max_reply {
                        let at_least = first & 0x80 == 0;
                        return Err(too_large(message.saturating_add(len), at_least, self.max_reply));
                    }
                    self.start += at;
                    let buffered = self.end - self.start;
                    let direct = ((DIRECT..=DIRECT_MAX).contains(&len) && buffered < len)
                        .then(|| direct_body(len, &self.data[self.start..self.end]));
                    if direct.is_some() {
                        self.start = self.end;
                    }
                    self.state = State::Payload {
                        opcode: first & 0x0F,
                        fin: first & 0x80 != 0,
                        len,
                        direct,
                    };
                }
                State::Payload {
                    opcode,
                    fin,
                    len,
                    direct,
                } => {
                    let (opcode, fin, len) = (*opcode, *fin, *len);
                    let payload = match direct {
                        Some((body, filled)) => {
                            if *filled < len {
                                return self.ws_end();
                            }
                            std::mem::take(body)
                        }
                        None => {
                            if self.end - self.start < len {
                                return self.ws_end();
                            }
                            let payload = self.data[self.start..self.start + len].to_vec();
                            self.start += len;
                            payload
                        }
                    };
                    self.state = State::Head;
                    if let Some(reply) = self.ws_frame(opcode, fin, payload)? {
                        return Ok(Some(reply));
                    }
                }
                _ => return Err(Error::protocol("invariant: no HTTP bodies in a WebSocket")),
            }
        }
    }

    fn ws_end(&self) -> Result<Option<Reply>> {
        if self.eof && (self.in_reply()) {
            return Err(Error::protocol("the connection closed in the middle of a message"));
        }
        Ok(None)
    }

    fn ws_frame(&mut self, opcode: u8, fin: bool, payload: Vec<u8>) -> Result<Option<Reply>> {
        match opcode {
            0x0..=0x2 => {
                if (opcode == 0x0) != self.in_message {
                    return Err(Error::protocol("not a valid WebSocket stream: a fragment out of order"));
                }
                if opcode != 0x0 {
                    self.message_opcode = opcode;
                }
                let body = if self.in_message || !fin {
                    self.message.extend_from_slice(&payload);
                    if !fin {
                        self.in_message = true;
                        return Ok(None);
                    }
                    self.in_message = false;
                    std::mem::take(&mut self.message)
                } else {
                    payload
                };
                if self.message_opcode == 0x2 && self.ws_binary {
                    return ws_binary_reply(body).map(Some);
                }
                Ok(Some(Reply {
                    status: None,
                    body,
                    close: false,
                    binary: None,
                }))
            }
            0x8 => {
                self.closed_by_frame = true;
                if payload.len() >= 2 {
                    let code = u16::from_be_bytes([payload[0], payload[1]]);
                    let reason = String::from_utf8_lossy(&payload[2..]);
                    self.why = if reason.is_empty() {
                        format!(" (WebSocket close code {code})")
                    } else {
                        format!(" (WebSocket close code {code}: {reason})")
                    };
                }
                if let Some(framer) = &mut self.masks {
                    framer.control(0x8, &payload[..payload.len().min(2)], &mut self.owed);
                }
                Ok(None)
            }
            0x9 => {
                if let Some(framer) = &mut self.masks {
                    framer.control(0xA, &payload, &mut self.owed);
                }
                Ok(None)
            }
            0xA => Ok(None),
            _ => Err(Error::protocol("not a valid WebSocket stream: an unknown opcode")),
        }
    }
}

/// A binary WebSocket message under the subprotocol: the prefix checked and taken off.
fn ws_binary_reply(mut message: Vec<u8>) -> Result<Reply> {
    let (json, _) = wire::split_message(&message).map_err(malformed)?;
    let json_len = json.len();
    message.drain(..wire::PREFIX_LEN);
    Ok(Reply {
        status: None,
        body: message,
        close: false,
        binary: Some(json_len),
    })
}

struct Head {
    status: u16,
    len: usize,
    close: bool,
    chunked: bool,
    content_length: Option<usize>,
    accept: Option<String>,
    upgrade: bool,
    /// `Content-Type: application/vnd.ucall.binary`.
    binary: bool,
    /// The `UCall-JSON-Length` value, when it is decimal digits.
    json_length: Option<usize>,
    /// The subprotocol the server selected.
    subprotocol: Option<String>,
    /// A streamed reply's content type: `Some(false)` `application/jsonl`, `Some(true)`
    /// `application/vnd.ucall.binary-stream`.
    stream: Option<bool>,
}

fn contains_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&c| c == b',')
        .any(|part| part.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(reader: &mut ReplyReader) -> Vec<Reply> {
        let mut out = Vec::new();
        while let Some(reply) = reader.next_reply().expect("valid") {
            out.push(reply);
        }
        out
    }

    #[test]
    fn http_replies_every_way_byte_by_byte() {
        let stream: &[u8] =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=1\r\n\":1}\r\n0\r\n\r\n\
HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]HTTP/1.1 204 No Content\r\n\r\n";
        let mut reader = ReplyReader::new(Protocol::Http, None);
        let mut replies = Vec::new();
        for byte in stream {
            reader.feed(&[*byte]);
            replies.extend(all(&mut reader));
        }
        let bodies: Vec<&[u8]> = replies.iter().map(|r| r.body.as_slice()).collect();
        assert_eq!(bodies, [&b"{\"a\":1}"[..], b"[]", b""]);
        assert_eq!(replies[2].status, Some(204));
    }

    #[test]
    fn a_large_body_is_read_into_its_own_buffer() {
        let body = vec![b'7'; 300_000];
        let mut stream = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        stream.extend_from_slice(&body);
        let mut reader = ReplyReader::new(Protocol::Http, None);
        let mut replies = Vec::new();
        for piece in stream.chunks(10_000) {
            reader.feed(piece);
            replies.extend(all(&mut reader));
        }
        assert_eq!(replies.len(), 1);
        assert!(replies[0].close);
        assert_eq!(replies[0].body, body);
    }

    #[test]
    fn a_large_body_is_read_in_place_by_raw_reads_and_zeroed_ones_alike() {
        let first: Vec<u8> = (0..700_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut http = Vec::new();
        for body in [&first[..], b"{}"] {
            http.extend_from_slice(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
            http.extend_from_slice(body);
        }
        // Raw TCP: a binary message (a JSON text, then `first` as its attachment), then a text.
        let text = br#"{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":0,"length":700000},"id":1}"#;
        let mut binary = text.to_vec();
        binary.resize(wire::align(text.len()), 0);
        binary.extend_from_slice(&first);
        let mut tcp = wire::Prefix::encode(text.len() as u32, binary.len() as u64).to_vec();
        tcp.extend_from_slice(&binary);
        tcp.extend_from_slice(b"{}");
        for (protocol, stream, large) in [(Protocol::Http, http, &first), (Protocol::Tcp, tcp, &binary)] {
            let mut reader = ReplyReader::new(protocol, None);
            let (mut replies, mut at, mut raw_reads) = (Vec::new(), 0, 0);
            for turn in 0.. {
                if at == stream.len() {
                    break;
                }
                // The first reads write raw memory (as recv does), the later ones go through
                // the zeroed window (as TLS plaintext does); pieces of odd sizes.
                let piece = &stream[at..stream.len().min(at + 30_001 + turn * 7)];
                let n = match reader.read_spare().filter(|_| turn < 10) {
                    Some(spare) => {
                        raw_reads += 1;
                        let n = piece.len().min(spare.len());
                        for (slot, &byte) in spare.iter_mut().zip(&piece[..n]) {
                            slot.write(byte);
                        }
                        reader.filled(n);
                        n
                    }
                    None => {
                        let room = reader.read_buf();
                        let n = piece.len().min(room.len());
                        room[..n].copy_from_slice(&piece[..n]);
                        reader.filled(n);
                        n
                    }
                };
                at += n;
                replies.extend(all(&mut reader));
            }
            assert!(
                (5..10).contains(&raw_reads),
                "{protocol:?}: the raw path was taken {raw_reads} times"
            );
            let bodies: Vec<&[u8]> = replies.iter().map(|r| r.body.as_slice()).collect();
            assert_eq!(bodies, [&large[..], b"{}"], "{protocol:?}");
            if protocol == Protocol::Tcp {
                assert_eq!((replies[0].binary, replies[1].binary), (Some(text.len()), None));
            }
        }
    }

    #[test]
    fn a_huge_announced_length_is_not_allocated_up_front() {
        // With no limit; under one, the head alone refuses it.
        let mut reader = ReplyReader::new(Protocol::Http, None).with_max_reply(usize::MAX);
        reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1125899906842624\r\n\r\n{\"a\":");
        assert!(reader.next_reply().expect("partial").is_none());
        assert!(reader.data.capacity() < 1 << 20);
        reader.eof();
        assert!(reader.next_reply().is_err());
    }

    #[test]
    fn a_reply_over_the_limit_is_refused_naming_both_sizes() {
        let refused = |protocol: Protocol, bytes: &[u8]| -> String {
            let mut reader = ReplyReader::new(protocol, None).with_max_reply(100);
            reader.opened = true;
            let mut error = None;
            for piece in bytes.chunks(7) {
                reader.feed(piece);
                match reader.next_reply() {
                    Ok(Some(reply)) => panic!("a reply over the limit was taken: {} bytes", reply.body.len()),
                    Ok(None) => {}
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            let error = error.expect("refused");
            assert_eq!(error.kind(), crate::ErrorKind::Protocol);
            error.message().to_owned()
        };
        let body = format!("[{}1]", "1,".repeat(60));
        let sized = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let message = refused(Protocol::Http, sized.as_bytes());
        assert!(
            message.contains("a reply of 123 bytes, over the client's max_reply_size of 100 bytes"),
            "{message}"
        );
        let chunked = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7b\r\n{body}\r\n0\r\n\r\n");
        assert!(refused(Protocol::Http, chunked.as_bytes()).contains("of 101 bytes or more, over"));
        let until_end = format!("HTTP/1.1 200 OK\r\n\r\n{body}");
        assert!(refused(Protocol::Http, until_end.as_bytes())
            .contains("bytes or more, over the client's max_reply_size of 100"));
        assert!(refused(Protocol::Tcp, body.as_bytes()).contains("or more, over the client's max_reply_size of 100"));
        let mut frame = vec![0x81, 123];
        frame.extend_from_slice(body.as_bytes());
        assert!(refused(Protocol::WebSocket, &frame).contains("a reply of 123 bytes, over"));
        // Fragments count together: 60 + 63 bytes.
        let mut fragments = vec![0x01, 60];
        fragments.extend_from_slice(&body.as_bytes()[..60]);
        fragments.extend_from_slice(&[0x80, 63]);
        fragments.extend_from_slice(&body.as_bytes()[60..]);
        assert!(refused(Protocol::WebSocket, &fragments).contains("a reply of 123 bytes, over"));
        // At the limit, taken.
        let mut reader = ReplyReader::new(Protocol::Http, None).with_max_reply(123);
        reader.feed(sized.as_bytes());
        assert_eq!(all(&mut reader)[0].body, body.as_bytes());
    }

    /// The error a reader gives for `bytes`, fed whole then ended.
    fn refusal(mut reader: ReplyReader, bytes: &[u8]) -> String {
        reader.feed(bytes);
        reader.eof();
        match reader.next_reply() {
            Ok(reply) => panic!("taken: {reply:?}"),
            Err(error) => error.message().to_owned(),
        }
    }

    #[test]
    fn binary_replies_are_read_on_each_protocol() {
        let mut body = br#"{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":0,"length":3},"id":1}"#.to_vec();
        let json_len = body.len();
        body.resize(wire::align(json_len), 0);
        body.extend_from_slice(b"foo");
        let mut http = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.ucall.binary\r\nUCall-JSON-Length: {json_len}\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        http.extend_from_slice(&body);
        let mut tcp = wire::Prefix::encode(json_len as u32, body.len() as u64).to_vec();
        tcp.extend_from_slice(&body);
        for (protocol, stream) in [(Protocol::Http, &http), (Protocol::Tcp, &tcp)] {
            let mut reader = ReplyReader::new(protocol, None);
            let mut replies = Vec::new();
            for byte in stream.iter().chain(b"\n{\"id\":2}") {
                reader.feed(&[*byte]);
                replies.extend(all(&mut reader));
            }
            replies.extend(all(&mut reader));
            assert_eq!(replies[0].binary, Some(json_len), "{protocol:?}");
            assert_eq!(replies[0].body, body, "{protocol:?}");
            if protocol == Protocol::Tcp {
                assert_eq!((replies[1].binary, &replies[1].body[..]), (None, &b"{\"id\":2}"[..]));
            }
        }
        // WebSocket: under the subprotocol only; the prefix is taken off.
        let mut reader = ReplyReader::new(Protocol::WebSocket, None);
        reader.opened = true;
        reader.ws_binary = true;
        let mut frame = vec![0x82, 126];
        frame.extend_from_slice(&u16::try_from(tcp.len()).expect("short").to_be_bytes());
        frame.extend_from_slice(&tcp);
        reader.feed(&frame);
        let reply = all(&mut reader).remove(0);
        assert_eq!((reply.binary, reply.body), (Some(json_len), body));
    }

    #[test]
    fn malformed_and_oversized_binary_replies_are_clear_errors() {
        let http = |headers: &str, body: &[u8]| {
            let mut bytes = format!("HTTP/1.1 200 OK\r\n{headers}Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            bytes.extend_from_slice(body);
            refusal(ReplyReader::new(Protocol::Http, None), &bytes)
        };
        let binary = "Content-Type: application/vnd.ucall.binary\r\n";
        assert!(http(binary, b"{}").contains("no UCall-JSON-Length"));
        assert!(http(&format!("{binary}UCall-JSON-Length: 2x\r\n"), b"{}").contains("not decimal digits"));
        assert!(http(&format!("{binary}UCall-JSON-Length: 3\r\n"), b"{}").contains("passes the end of the body"));
        assert!(http(&format!("{binary}UCall-JSON-Length: 2\r\n"), b"{}\0\0").contains("inside the padding"));
        let tcp = |prefix: [u8; 16], body: &[u8], max: usize| {
            let mut bytes = prefix.to_vec();
            bytes.extend_from_slice(body);
            refusal(ReplyReader::new(Protocol::Tcp, None).with_max_reply(max), &bytes)
        };
        let mut version = wire::Prefix::encode(2, 2);
        version[1] = 2;
        assert!(tcp(version, b"{}", 100).contains("unsupported binary message version"));
        assert!(tcp(wire::Prefix::encode(2, 1000), b"{}", 100)
            .contains("a reply of 1000 bytes, over the client's max_reply_size of 100 bytes"));
        assert!(tcp(wire::Prefix::encode(3, 2), b"{}", 100).contains("passes the end of the body"));
        assert!(tcp(wire::Prefix::encode(2, 10), b"{}", 100).contains("closed in the middle of a binary reply"));
        let mut reader = ReplyReader::new(Protocol::WebSocket, None);
        reader.opened = true;
        reader.ws_binary = true;
        let mut frame = vec![0x82, 18];
        frame.extend_from_slice(&wire::Prefix::encode(2, 3));
        frame.extend_from_slice(b"{}");
        assert!(refusal(reader, &frame).contains("does not match"));
        // Without the subprotocol a binary WebSocket message is a JSON text, as ever.
        let mut reader = ReplyReader::new(Protocol::WebSocket, None);
        reader.opened = true;
        reader.feed(&[0x82, 2, b'{', b'}']);
        assert_eq!(all(&mut reader)[0].binary, None);
    }

    #[test]
    fn a_binary_request_is_framed_for_each_protocol() {
        let mut body = b"{}".to_vec();
        body.resize(64, 0);
        body.extend_from_slice(b"abc");
        let mut out = OutQueue::default();
        let mut framer = RequestFramer::new(Protocol::Http, "h:1", "/").with_header_lines("X-Key: 1\r\n");
        framer.frame_as(body.clone(), RequestKind::Binary(2), &mut out);
        let text = String::from_utf8_lossy(out.front()).into_owned();
        assert!(
            text.contains("Accept: application/vnd.ucall.binary, application/vnd.ucall.binary-stream, application/json\r\n")
                && text.contains("Content-Type: application/vnd.ucall.binary\r\nX-Key: 1\r\nUCall-JSON-Length: 2\r\nContent-Length: 67\r\n\r\n{}"),
            "{text}"
        );
        let mut out = OutQueue::default();
        RequestFramer::new(Protocol::Tcp, "", "").frame_as(body.clone(), RequestKind::Binary(2), &mut out);
        assert_eq!(&out.front()[..16], &wire::Prefix::encode(2, 67));
        assert_eq!(&out.front()[16..], &body[..]);
        let mut out = OutQueue::default();
        let mut framer = RequestFramer::new(Protocol::WebSocket, "", "");
        framer.frame_as(body.clone(), RequestKind::Binary(2), &mut out);
        let frame = out.front();
        assert_eq!(frame[..2], [0x82, 0x80 | 83]);
        let mask = [frame[2], frame[3], frame[4], frame[5]];
        let payload: Vec<u8> = frame[6..].iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        assert_eq!(wire::split_message(&payload), Ok((&b"{}"[..], &b"abc"[..])));
        let (upgrade, _) = websocket_handshake_offering("h", "/", "", true);
        assert!(String::from_utf8_lossy(&upgrade).contains("\r\nSec-WebSocket-Protocol: ucall.binary.v1\r\n"));
    }

    #[test]
    fn a_large_attachment_is_written_from_its_own_memory() {
        let mut attachments = Section::new();
        let large = Bytes::from(vec![7u8; 100_000]);
        let mut json = Vec::new();
        ucall_core::jsonrpc::section::write_bytes(&mut json, 0, Some(&mut attachments), Bytes::from_static(b"ab"));
        ucall_core::jsonrpc::section::write_bytes(&mut json, 0, Some(&mut attachments), large.clone());
        let json_len = json.len();
        let body = Arc::new(json);
        for protocol in [Protocol::Http, Protocol::Tcp] {
            let mut out = OutQueue::default();
            RequestFramer::new(protocol, "h", "/").frame_attached(
                &body,
                RequestKind::Binary(json_len),
                &attachments,
                &mut out,
            );
            let mut slices = [IoSlice::new(&[]); 8];
            let n = out.slices(&mut slices);
            assert!(
                slices[..n]
                    .iter()
                    .any(|slice| slice.as_ptr() == large.as_ptr() && slice.len() == large.len()),
                "{protocol:?}: the attachment is an iovec of its own"
            );
            let mut written = Vec::new();
            while !out.is_empty() {
                written.extend_from_slice(out.front());
                let n = out.front().len();
                out.advance(n);
            }
            let mut expected = (*body).clone();
            expected.resize(wire::align(json_len), 0);
            expected.extend_from_slice(b"ab");
            expected.resize(wire::align(json_len) + 64, 0);
            expected.extend_from_slice(&large);
            assert!(
                written.ends_with(&expected),
                "{protocol:?}: the body of docs/wire.md §1"
            );
        }
    }

    #[test]
    fn a_reply_cut_short_is_an_error() {
        let mut reader = ReplyReader::new(Protocol::Http, None);
        reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab");
        assert!(reader.next_reply().expect("partial").is_none());
        reader.eof();
        assert!(reader.next_reply().is_err());
        let mut reader = ReplyReader::new(Protocol::Http, None);
        reader.feed(b"SSH-2.0-OpenSSH\r\n\r\n");
        assert!(reader.next_reply().is_err());
    }

    #[test]
    fn tcp_texts_are_framed_by_their_syntax() {
        let mut reader = ReplyReader::new(Protocol::Tcp, None);
        reader.feed(b" {\"a\":\"}\\\"\"}\n[1,");
        assert_eq!(all(&mut reader)[0].body, b"{\"a\":\"}\\\"\"}");
        reader.feed(b"2]");
        assert_eq!(all(&mut reader)[0].body, b"[1,2]");
    }

    #[test]
    fn websocket_fragments_pings_and_close() {
        let (_, key) = websocket_handshake("h", "/", "");
        let accept = ucall_core::ws::accept_key(key.as_bytes());
        let mut reader = ReplyReader::new(Protocol::WebSocket, Some(key));
        reader.feed(
            format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n")
                .as_bytes(),
        );
        reader.feed(&[0x01, 2, b'{', b'"', 0x89, 1, b'p', 0x80, 3, b'a', b'"', b'}']);
        let replies = all(&mut reader);
        assert!(reader.opened());
        assert_eq!(replies[0].body, b"{\"a\"}");
        let mut owed = OutQueue::default();
        reader.take_owed(&mut owed);
        assert_eq!(owed.front()[0], 0x8A, "a pong");
        assert_eq!(owed.front()[1], 0x81, "masked, one byte");
        reader.feed(&[0x88, 2, 0x03, 0xE8]);
        assert!(all(&mut reader).is_empty());
        assert!(reader.ended());
        assert_eq!(reader.why(), " (WebSocket close code 1000)");
    }

    #[test]
    fn header_lines_go_in_every_request_and_the_upgrade() {
        let endpoint = crate::Endpoint::new("h", 1)
            .with_header("X-API-Key", " s3cret ")
            .expect("a valid header");
        let lines = endpoint.header_lines();
        assert_eq!(lines, "X-API-Key: s3cret\r\n");
        let mut framer = RequestFramer::new(Protocol::Http, "h:1", "/").with_header_lines(lines);
        for _ in 0..2 {
            let mut out = OutQueue::default();
            framer.frame(b"{}".to_vec(), &mut out);
            let text = String::from_utf8(out.front().to_vec()).expect("ascii");
            assert!(
                text.contains("\r\nX-API-Key: s3cret\r\nContent-Length: 2\r\n\r\n{}"),
                "{text}"
            );
        }
        let (upgrade, _) = websocket_handshake("h:1", "/", lines);
        let upgrade = String::from_utf8(upgrade).expect("ascii");
        assert!(
            upgrade.ends_with("Sec-WebSocket-Version: 13\r\nX-API-Key: s3cret\r\n\r\n"),
            "{upgrade}"
        );
    }

    #[test]
    fn request_lines_go_in_the_requests_framed_until_set_again() {
        let mut framer = RequestFramer::new(Protocol::Http, "h:1", "/").with_header_lines("X-API-Key: s\r\n");
        framer.set_request_lines("X-Call: 1\r\n");
        let mut out = OutQueue::default();
        framer.frame_as(b"{}".to_vec(), RequestKind::Json, &mut out);
        let text = String::from_utf8(out.front().to_vec()).expect("ascii");
        assert!(
            text.contains("X-API-Key: s\r\nX-Call: 1\r\nContent-Length: 2\r\n\r\n{}"),
            "{text}"
        );
        let mut out = OutQueue::default();
        framer.frame_as(b"{}".to_vec(), RequestKind::Binary(2), &mut out);
        let text = String::from_utf8(out.front().to_vec()).expect("ascii");
        assert!(
            text.contains("X-Call: 1\r\nUCall-JSON-Length: 2\r\nContent-Length: 2\r\n\r\n{}"),
            "{text}"
        );
        framer.set_request_lines("");
        let mut out = OutQueue::default();
        framer.frame(b"{}".to_vec(), &mut out);
        let text = String::from_utf8(out.front().to_vec()).expect("ascii");
        assert!(text.contains("X-API-Key: s\r\nContent-Length: 2\r\n\r\n{}"), "{text}");
    }

    #[test]
    fn a_calls_own_headers_are_checked_and_http_only_before_anything_is_sent() {
        let port = 1; // nothing listens: a request that got as far as connecting would say so
        let refused = |protocol, headers: &[(&str, &str)]| {
            let mut client =
                crate::Client::new(crate::Endpoint::new("127.0.0.1", port).with_protocol(protocol)).expect("a client");
            let error = client
                .exchange_with_headers(Vec::new(), 0, headers, &mut || None)
                .expect_err("refused");
            (error.kind(), error.message().to_owned())
        };
        let (kind, message) = refused(Protocol::Tcp, &[("X-Key", "1")]);
        assert_eq!(kind, crate::ErrorKind::Invalid, "{message}");
        assert!(message.contains("only HTTP"), "{message}");
        let (kind, message) = refused(Protocol::Http, &[("Host", "elsewhere")]);
        assert_eq!(kind, crate::ErrorKind::Invalid, "{message}");
        assert!(message.contains("Host"), "{message}");
    }

    #[test]
    fn bad_headers_are_refused() {
        let endpoint = || crate::Endpoint::new("h", 1);
        for (name, value) in [
            ("X Key", "v"),
            ("", "v"),
            ("X-Key", "a\r\nHost: evil"),
            ("X-Key", "\0"),
            ("content-length", "1"),
        ] {
            let error = endpoint().with_header(name, value).err().expect("refused");
            assert_eq!(error.kind(), crate::ErrorKind::Invalid, "{name:?}: {value:?}");
        }
    }

    #[test]
    fn requests_are_framed_and_masked() {
        let mut out = OutQueue::default();
        let mut framer = RequestFramer::new(Protocol::Http, "h:1", "/");
        framer.frame(b"{}".to_vec(), &mut out);
        let text = String::from_utf8(out.front().to_vec()).expect("ascii");
        assert!(text.starts_with("POST / HTTP/1.1\r\nHost: h:1\r\n") && text.ends_with("Content-Length: 2\r\n\r\n{}"));
        let mut out = OutQueue::default();
        let mut framer = RequestFramer::new(Protocol::WebSocket, "", "");
        framer.frame(b"{}".to_vec(), &mut out);
        let frame = out.front();
        assert_eq!(frame[..2], [0x81, 0x82]);
        let mask = [frame[2], frame[3], frame[4], frame[5]];
        assert_eq!([frame[6] ^ mask[0], frame[7] ^ mask[1]], *b"{}");
        let big = vec![b'x'; 100_000];
        let mut out = OutQueue::default();
        RequestFramer::new(Protocol::Tcp, "", "").frame(big, &mut out);
        assert_eq!(out.len(), 100_001);
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(out.slices(&mut slices), 2);
        out.advance(99_999);
        assert_eq!(out.front(), b"x");
        out.advance(2);
        assert!(out.is_empty());
    }
}
