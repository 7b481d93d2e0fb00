// SPDX-License-Identifier: Apache-2.0
//! HTTP/1.1 (RFC 9112), sans-I/O: request heads, body framing, response heads.
#![forbid(unsafe_code)]

pub mod chunked;
pub mod cors;
pub mod rest;
mod status;

use status::reason_phrase;
pub(crate) use status::{body_too_large, reject};
pub use status::{Reject, Status};

use crate::buffer::OutBuf;
use crate::wire;

/// The request methods the server distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// `GET`: REST-style calls (`GET /sum?a=1&b=2`).
    #[default]
    Get,
    /// `POST`: a JSON-RPC body, or a REST-style call with named params.
    Post,
    /// `HEAD`: a `GET` answered without its content (RFC 9110 §9.3.2).
    Head,
    /// `OPTIONS`: a CORS preflight where [`cors::Cors`] is configured, else the target's
    /// methods in `Allow` (RFC 9110 §9.3.7).
    Options,
    /// `DELETE`: ends an MCP session; 405 anywhere else.
    Delete,
}

impl Method {
    /// Whether this method reads a route as `GET` does (`GET` and `HEAD`).
    #[must_use]
    pub fn reads(self) -> bool {
        matches!(self, Method::Get | Method::Head)
    }
}

/// The methods of `/` (JSON-RPC), for `Allow` (RFC 9110 §10.2.1).
pub const ALLOW_ROOT: &str = "POST, OPTIONS";
/// The methods of a document, a probe or `/metrics`.
pub const ALLOW_PAGE: &str = "GET, HEAD, OPTIONS";
/// The methods of a REST route (and of any other path: it may name a procedure).
pub const ALLOW_ROUTE: &str = "GET, HEAD, POST, OPTIONS";

/// The methods `Allow` names for a path the head alone can tell (`/`, else a route's).
#[must_use]
pub fn allowed_methods(target: &str) -> &'static str {
    match target.split('?').next() {
        Some("/" | "") => ALLOW_ROOT,
        _ => ALLOW_ROUTE,
    }
}

/// How the request body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// No body.
    #[default]
    None,
    /// `Content-Length: n`.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What the server keeps of a request head once it is parsed.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Whether the connection stays open after the reply (§9.3).
    pub keep_alive: bool,
    /// How the body is delimited.
    pub framing: Framing,
    /// `Expect: 100-continue` (RFC 9110 §10.1.1).
    pub expect_continue: bool,
    /// A valid WebSocket opening handshake (RFC 6455 §4.2.1): the client's key.
    pub websocket_key: Option<[u8; 24]>,
    /// Where the CORS request headers are in the head's bytes.
    pub cors: cors::Fields,
    /// `Accept` names `text/event-stream`: a streamed reply goes as server-sent events
    /// (docs/streaming.md).
    pub event_stream: bool,
    /// `UCall-Timeout: <seconds>`: the time the caller allows the request's calls.
    pub timeout: Option<std::time::Duration>,
    /// Where `If-None-Match` (RFC 9110 §13.1.2) is in the head's bytes.
    pub if_none_match: Option<(u32, u32)>,
    /// `Accept-Encoding` takes gzip (RFC 9110 §12.5.3): the documents and `/metrics` may
    /// go compressed.
    pub accepts_gzip: bool,
    /// `Content-Type: application/vnd.ucall.binary`: the body is a binary message
    /// (docs/wire.md §3.1) whose JSON text is as long as [`RequestHead::json_length`] says.
    pub binary_body: bool,
    /// `UCall-JSON-Length`, when sent once as decimal digits; `Err` when sent otherwise.
    pub json_length: Option<Result<usize, ()>>,
    /// `Sec-WebSocket-Protocol` offers the binary-message subprotocol (docs/wire.md §3.3).
    pub websocket_binary: bool,
    /// `Accept` lists `application/vnd.ucall.binary` (with a `q` other than 0): a
    /// JSON-RPC reply with attachments may be a binary message (docs/wire.md §3.1).
    pub accepts_binary: bool,
    /// `Accept` lists `application/vnd.ucall.binary-stream` (with a `q` other than 0): a
    /// streamed reply's body may hold binary messages (docs/wire.md §3.1).
    pub accepts_binary_stream: bool,
    /// `Sec-WebSocket-Protocol` offers [`crate::ws::SUBPROTOCOL`] (plain JSON-RPC).
    pub websocket_plain: bool,
}

impl RequestHead {
    /// The JSON text's length of a binary body: `None` when the head does not give one
    /// that can be read (absent, repeated, not digits).
    #[must_use]
    pub fn binary_json_length(&self) -> Option<usize> {
        self.json_length.and_then(Result::ok)
    }
}

/// Whether an `Accept` value lists `media_type` with a `q` other than 0 (RFC 9110 §12.5.1:
/// media types and parameter names are case-insensitive).
fn lists(value: &[u8], media_type: &str) -> bool {
    value.split(|&b| b == b',').any(|range| {
        let mut parts = range.split(|&b| b == b';');
        let media = parts.next().unwrap_or_default().trim_ascii();
        media.eq_ignore_ascii_case(media_type.as_bytes())
            && !parts.any(|param| {
                let param = param.trim_ascii();
                param.len() > 2
                    && param[..2].eq_ignore_ascii_case(b"q=")
                    && param[2..].iter().all(|&b| b == b'0' || b == b'.')
            })
    })
}

/// Result of looking for a request head at the start of the buffered input.
#[derive(Debug)]
pub enum HeadStatus {
    /// A head of this many bytes was parsed.
    Complete(RequestHead, usize),
    /// More bytes are needed.
    Partial,
    /// The head is refused.
    Rejected(Reject),
}

/// Most header fields accepted in one head (more is `431`).
pub const MAX_HEADERS: usize = 64;

/// A length written as 1 to 19 decimal digits, nothing else.
fn decimal(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Parse a request head from `input`, storing its request-target into `target`.
#[must_use]
pub fn parse_head(input: &[u8], max_head_bytes: usize, max_body_bytes: usize, target: &mut String) -> HeadStatus {
    match parse_head_fields(input, max_head_bytes, max_body_bytes, target) {
        // RFC 9110 §9.3.2: the answer to a HEAD has no content, a refusal's neither.
        HeadStatus::Rejected(refused) if input.starts_with(b"HEAD ") => HeadStatus::Rejected(Reject {
            to_head: true,
            ..refused
        }),
        status => status,
    }
}

fn parse_head_fields(input: &[u8], max_head_bytes: usize, max_body_bytes: usize, target: &mut String) -> HeadStatus {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let used = match request.parse(input) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) if input.len() > max_head_bytes => {
            return HeadStatus::Rejected(too_large(input, max_head_bytes))
        }
        Ok(httparse::Status::Partial) => return HeadStatus::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return HeadStatus::Rejected(reject(Status::HeadersTooLarge, "too many header fields"))
        }
        Err(httparse::Error::Version) => {
            // RFC 9110 §2.5: a later HTTP/1 minor version is read as 1.1, the highest this
            // server speaks; another major version (an HTTP/2 preface, say) gets 505.
            return match as_http_1_1(input, max_head_bytes) {
                Some(read_as_1_1) => parse_head(&read_as_1_1, max_head_bytes, max_body_bytes, target),
                None => HeadStatus::Rejected(reject(Status::VersionNotSupported, "only HTTP/1.x is served")),
            };
        }
        Err(_) => return HeadStatus::Rejected(reject(Status::BadRequest, "malformed request head")),
    };
    if used > max_head_bytes {
        return HeadStatus::Rejected(too_large(input, max_head_bytes));
    }
    let Some(path) = origin_form(request.path.unwrap_or("/")) else {
        return HeadStatus::Rejected(reject(Status::BadRequest, "request-target must be a path"));
    };
    target.clear();
    if !path.starts_with('/') {
        target.push('/');
    }
    target.push_str(path);
    let method = match request.method {
        Some("POST") => Method::Post,
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        Some("OPTIONS") => Method::Options,
        Some("DELETE") => Method::Delete,
        // RFC 9110 §9.1: 405 for a method HTTP defines, 501 for one the server does not know.
        Some("PUT" | "PATCH" | "CONNECT" | "TRACE") => {
            return HeadStatus::Rejected(Reject {
                allow: Some(allowed_methods(target)),
                ..reject(Status::MethodNotAllowed, "only GET, HEAD, POST and OPTIONS are served")
            })
        }
        _ => return HeadStatus::Rejected(reject(Status::NotImplemented, "unknown method")),
    };
    let minor_version = request.version.unwrap_or(1);

    let mut head = RequestHead {
        method,
        minor_version,
        keep_alive: minor_version >= 1,
        ..RequestHead::default()
    };
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let (mut upgrade_websocket, mut connection_upgrade) = (false, false);
    let (mut websocket_key, mut websocket_version): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let mut websocket_key_repeated = false;
    let mut hosts = 0u32;
    for header in request.headers.iter() {
        let name = header.name;
        let value = trim(header.value);
        // Dispatch on length first: most fields (Host, User-Agent, Accept, ...) are then
        // skipped without a case-insensitive comparison.
        match name.len() {
            14 if name.eq_ignore_ascii_case("content-length") => {
                // §6.3: an invalid or conflicting Content-Length is unrecoverable.
                let Some(length) = parse_content_length(value) else {
                    return HeadStatus::Rejected(reject(Status::BadRequest, "invalid Content-Length"));
                };
                if content_length.is_some_and(|earlier| earlier != length) {
                    return HeadStatus::Rejected(reject(Status::BadRequest, "conflicting Content-Length"));
                }
                content_length = Some(length);
            }
            17 if name.eq_ignore_ascii_case("transfer-encoding") => {
                // §6.1: chunked must be the final coding; we decode no other.
                let mut codings = tokens(value);
                match (codings.next_back(), codings.next()) {
                    (Some(last), None) if last.eq_ignore_ascii_case(b"chunked") && !chunked => chunked = true,
                    (Some(last), Some(_)) if last.eq_ignore_ascii_case(b"chunked") => {
                        return HeadStatus::Rejected(reject(Status::NotImplemented, "unsupported transfer coding"))
                    }
                    _ => return HeadStatus::Rejected(reject(Status::BadRequest, "invalid Transfer-Encoding")),
                }
            }
            17 if name.eq_ignore_ascii_case("sec-websocket-key") => {
                // RFC 6455 §11.3.1: the field appears at most once.
                websocket_key_repeated |= websocket_key.replace(value).is_some();
            }
            21 if name.eq_ignore_ascii_case("sec-websocket-version") => websocket_version = Some(value),
            7 if name.eq_ignore_ascii_case("upgrade") => {
                upgrade_websocket |= tokens(value).any(|t| t.eq_ignore_ascii_case(b"websocket"));
            }
            10 if name.eq_ignore_ascii_case("connection") => {
                for option in tokens(value) {
                    if option.eq_ignore_ascii_case(b"upgrade") {
                        connection_upgrade = true;
                    }
                    if option.eq_ignore_ascii_case(b"close") {
                        head.keep_alive = false;
                    } else if option.eq_ignore_ascii_case(b"keep-alive") && minor_version == 0 {
                        head.keep_alive = true;
                    }
                }
            }
            4 if name.eq_ignore_ascii_case("host") => hosts += 1,
            22 if name.eq_ignore_ascii_case("sec-websocket-protocol") => {
                head.websocket_binary |= tokens(value).any(|t| t == wire::SUBPROTOCOL.as_bytes());
                head.websocket_plain |= tokens(value).any(|t| t == crate::ws::SUBPROTOCOL.as_bytes());
            }
            6 if name.eq_ignore_ascii_case("accept") => {
                head.event_stream |= memchr::memmem::find(value, b"text/event-stream").is_some();
                head.accepts_binary |= lists(value, wire::CONTENT_TYPE);
                head.accepts_binary_stream |= lists(value, wire::STREAM_CONTENT_TYPE);
            }
            12 if name.eq_ignore_ascii_case("content-type") => {
                // Most requests say `application/json`, which its length rules out at once.
                let ours = wire::CONTENT_TYPE.as_bytes();
                head.binary_body = value.len() >= ours.len()
                    && value[..ours.len()].eq_ignore_ascii_case(ours)
                    && matches!(value.get(ours.len()), None | Some(b';' | b' ' | b'\t'));
            }
            17 if name.eq_ignore_ascii_case(wire::JSON_LENGTH_HEADER) => {
                head.json_length = Some(match head.json_length {
                    None => decimal(value).ok_or(()),
                    Some(_) => Err(()),
                });
            }
            13 if name.eq_ignore_ascii_case("ucall-timeout") => {
                let Some(timeout) = crate::jsonrpc::message::seconds(value) else {
                    return HeadStatus::Rejected(reject(
                        Status::BadRequest,
                        "invalid UCall-Timeout: a positive number of seconds is expected",
                    ));
                };
                head.timeout = Some(timeout);
            }
            6 if name.eq_ignore_ascii_case("expect") && value.eq_ignore_ascii_case(b"100-continue") => {
                head.expect_continue = minor_version >= 1;
            }
            6 if name.eq_ignore_ascii_case("origin") => head.cors.origin = span(input, value),
            13 if name.eq_ignore_ascii_case("if-none-match") => head.if_none_match = span(input, value),
            15 if name.eq_ignore_ascii_case("accept-encoding") => head.accepts_gzip |= accepts_gzip(value),
            29 if name.eq_ignore_ascii_case("access-control-request-method") => {
                head.cors.request_method = span(input, value);
            }
            30 if name.eq_ignore_ascii_case("access-control-request-headers") => {
                head.cors.request_headers = span(input, value);
            }
            _ => {}
        }
    }
    // RFC 6455 §4.2.1: a GET over HTTP/1.1 with `Upgrade: websocket`, `Connection:
    // Upgrade`, a 16-byte base64 key and version 13.
    if upgrade_websocket && connection_upgrade && method == Method::Get && minor_version >= 1 {
        if websocket_version != Some(b"13".as_slice()) {
            return HeadStatus::Rejected(reject(Status::UpgradeRequired, "WebSocket version 13 is required"));
        }
        match websocket_key {
            Some(key) if !websocket_key_repeated && crate::ws::is_valid_key(key) => {
                let mut owned = [0u8; 24];
                owned.copy_from_slice(key);
                head.websocket_key = Some(owned);
            }
            _ => return HeadStatus::Rejected(reject(Status::BadRequest, "invalid Sec-WebSocket-Key")),
        }
    }
    head.framing = match (content_length, chunked) {
        (Some(_), true) => {
            return HeadStatus::Rejected(reject(Status::BadRequest, "both Content-Length and Transfer-Encoding"))
        }
        (Some(length), false) if length > max_body_bytes => {
            return HeadStatus::Rejected(body_too_large(max_body_bytes))
        }
        (Some(0) | None, false) => Framing::None,
        (Some(length), false) => Framing::Length(length),
        (None, true) => Framing::Chunked,
    };
    if head.websocket_key.is_some() && head.framing != Framing::None {
        // RFC 9110 §7.8: the new protocol starts after the whole request; bytes sent as a
        // body must not be read as frames.
        return HeadStatus::Rejected(reject(Status::BadRequest, "a WebSocket handshake has no body"));
    }
    // RFC 9112 §3.2: 400 for an HTTP/1.1 request without Host, or any with more than one.
    if hosts > 1 || (hosts == 0 && minor_version >= 1) {
        let reason = if hosts > 1 {
            "more than one Host header"
        } else {
            "an HTTP/1.1 request needs a Host header"
        };
        return HeadStatus::Rejected(reject(Status::BadRequest, reason));
    }
    if chunked && minor_version == 0 {
        // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing; answer, then close.
        head.keep_alive = false;
    }
    HeadStatus::Complete(head, used)
}

/// The head at the start of `input` (at most `max_head_bytes` and a line more), with its
/// request line's `HTTP/1.<digit>` (a minor version above 1) made `HTTP/1.1`; `None` for
/// any other version. Same length, so the offsets `parse_head` returns hold for `input`.
fn as_http_1_1(input: &[u8], max_head_bytes: usize) -> Option<Vec<u8>> {
    let line_end = memchr::memchr(b'\n', input)?;
    let line = input[..line_end].strip_suffix(b"\r").unwrap_or(&input[..line_end]);
    let minor = line.len().checked_sub(1)?;
    let later_minor = line[..minor].ends_with(b" HTTP/1.") && matches!(line[minor], b'2'..=b'9');
    if !later_minor {
        return None;
    }
    // The whole request line stays, however long: cut at the limit, it lost the digit to
    // rewrite (an index past the copy: a panic that stopped the server). parse_head then
    // refuses the over-long line (414) as it would any other.
    let kept = input.len().min((max_head_bytes + 2).max(minor + 1));
    let mut head = input[..kept].to_vec();
    head[minor] = b'1';
    Some(head)
}

/// The refusal of a head over `max_head_bytes`: 414 when the request line alone is over
/// it (RFC 9112 §3: a request-target longer than the server takes), else 431.
fn too_large(input: &[u8], max_head_bytes: usize) -> Reject {
    let request_line = memchr::memchr(b'\n', input).unwrap_or(input.len());
    let refused = if request_line > max_head_bytes {
        reject(Status::UriTooLong, "request-target too long")
    } else {
        reject(Status::HeadersTooLarge, "request head too large")
    };
    Reject {
        limit: Some(("max_head_bytes", max_head_bytes)),
        ..refused
    }
}

/// The path and query of a request-target in origin-form (`/sum?a=1`) or absolute-form
/// (`http://host/sum?a=1`), which a server must accept too (RFC 9112 §3.2.2); an empty
/// path comes back as `""` or `"?query"`. `None` for any other form.
fn origin_form(target: &str) -> Option<&str> {
    if target.starts_with('/') {
        return Some(target);
    }
    let (scheme, rest) = target.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return None;
    }
    Some(rest.find(['/', '?']).map_or("", |start| &rest[start..]))
}

/// `Content-Length = 1*DIGIT` (RFC 9110 §8.6), leading zeros and all; `None` for anything
/// else or an overflow.
fn parse_content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value
        .iter()
        .try_fold(0usize, |n, d| n.checked_mul(10)?.checked_add(usize::from(d - b'0')))
}

/// Where `value`, a slice of `input`, lies in it.
fn span(input: &[u8], value: &[u8]) -> Option<(u32, u32)> {
    let start = (value.as_ptr() as usize).checked_sub(input.as_ptr() as usize)?;
    Some((u32::try_from(start).ok()?, u32::try_from(value.len()).ok()?))
}

fn trim(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t'))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

/// The comma-separated tokens of a list-valued field (RFC 9110 §5.6.1), trimmed, empty ones skipped.
fn tokens(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&c| c == b',').map(trim).filter(|t| !t.is_empty())
}

/// Whether an `Accept-Encoding` field value takes gzip: a `gzip` (or `x-gzip`, or `*`)
/// coding whose weight is not 0 (RFC 9110 §12.5.3, §12.4.2).
#[must_use]
pub fn accepts_gzip(value: &[u8]) -> bool {
    tokens(value).any(|coding| {
        let mut parts = coding.split(|&c| c == b';').map(trim);
        let name = parts.next().unwrap_or_default();
        let named = [b"gzip".as_slice(), b"x-gzip", b"*"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n));
        let weight = parts
            .filter_map(|p| p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q=")))
            .find_map(|q| std::str::from_utf8(q).ok()?.parse::<f32>().ok())
            .unwrap_or(1.0);
        named && weight > 0.0
    })
}

/// Whether an `If-None-Match` field value names `etag` (or is `*`): RFC 9110 §13.1.2,
/// with the weak comparison it asks for (`W/` is ignored on either side).
#[must_use]
pub fn none_match_names(field: &[u8], etag: &str) -> bool {
    let strip = |tag: &[u8]| -> Vec<u8> { tag.strip_prefix(b"W/").unwrap_or(tag).to_vec() };
    let wanted = strip(etag.as_bytes());
    tokens(field).any(|tag| tag == b"*" || strip(tag) == wanted)
}

/// Room reserved before each reply body for its head, which is written once the body's
/// length is known.
const HEAD_ROOM: usize = 256;
/// Longest reply moved next to the one queued before it (see [`Respond::with`]).
const CLOSE_UP_TO: usize = 16 << 10;

/// What a response says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// HTTP/1.1 default: say nothing.
    KeepAlive,
    /// An HTTP/1.0 client asked to keep the connection: `Connection: keep-alive`.
    KeepAliveLegacy,
    /// The connection closes after this reply: `Connection: close`.
    Close,
}

/// Append a response whose body `write_body` writes straight into the output buffer.
///
/// `write_body` returns the status, so that it can depend on the body (`204` when the body
/// is empty because only notifications came), or `None` to send nothing after all (the
/// reply was deferred; whatever it wrote is dropped). `date` is the current IMF-fixdate
/// (RFC 9110 §5.6.7). A `204` gets no body and no body headers.
pub fn respond(
    out: &mut OutBuf,
    persistence: Persistence,
    date: &[u8],
    write_body: impl FnOnce(&mut Vec<u8>) -> Option<Status>,
) {
    respond_out(out, persistence, b"", date, |out| write_body(out.data()));
}

/// [`respond`] for a body writer that may also attach buffers ([`OutBuf::attach`]):
/// they count in the `Content-Length` and go out in their places. `headers` are more
/// header lines for the head, each ending with CRLF (CORS headers, say).
pub fn respond_out(
    out: &mut OutBuf,
    persistence: Persistence,
    headers: &[u8],
    date: &[u8],
    write_body: impl FnOnce(&mut OutBuf) -> Option<Status>,
) {
    respond_typed(out, persistence, headers, date, b"application/json", write_body);
}

/// [`respond_out`] with a body of another `Content-Type` (a page, a document): a short
/// constant (the head must fit in `HEAD_ROOM`).
pub fn respond_typed(
    out: &mut OutBuf,
    persistence: Persistence,
    headers: &[u8],
    date: &[u8],
    content_type: &[u8],
    write_body: impl FnOnce(&mut OutBuf) -> Option<Status>,
) {
    let get = Respond {
        method: Method::Get,
        persistence,
        headers,
        date,
    };
    get.to(out, content_type, write_body);
}

/// What every reply to one request says the same: built once per request.
#[derive(Debug, Clone, Copy)]
pub struct Respond<'a> {
    /// The request's method: to a `HEAD`, the head a `GET` would get, its `Content-Length`
    /// included, without the content (RFC 9110 §9.3.2).
    pub method: Method,
    /// What the response says about the connection.
    pub persistence: Persistence,
    /// More header lines for the head, each ending with CRLF (CORS headers, say).
    pub headers: &'a [u8],
    /// The current IMF-fixdate (RFC 9110 §5.6.7).
    pub date: &'a [u8],
}

impl Respond<'_> {
    /// [`respond_typed`] for this request.
    pub fn to(self, out: &mut OutBuf, content_type: &[u8], write_body: impl FnOnce(&mut OutBuf) -> Option<Status>) {
        self.with(out, content_type, |out| write_body(out).map(|status| (status, None)));
    }

    /// [`Respond::to`] for a body writer that gives, with the status, the length of the
    /// JSON text at the body's start when the body is a binary message (docs/wire.md
    /// §3.1): the reply is then `application/vnd.ucall.binary` with `UCall-JSON-Length`,
    /// else of `content_type`.
    ///
    /// Inlined, so that the value is taken apart where the request's session builds it.
    #[inline(always)]
    pub fn with(
        self,
        out: &mut OutBuf,
        content_type: &[u8],
        write_body: impl FnOnce(&mut OutBuf) -> Option<(Status, Option<usize>)>,
    ) {
        let Respond {
            method,
            persistence,
            headers,
            date,
        } = self;
        write_response(out, method, persistence, headers, date, content_type, write_body);
    }
}

/// [`Respond::with`], its fields apart.
fn write_response(
    out: &mut OutBuf,
    method: Method,
    persistence: Persistence,
    headers: &[u8],
    date: &[u8],
    content_type: &[u8],
    write_body: impl FnOnce(&mut OutBuf) -> Option<(Status, Option<usize>)>,
) {
    let room = HEAD_ROOM + headers.len();
    let reserved = out.data().len();
    // Replies queued before this one and not yet sent (pipelined requests, a slow reader).
    let behind_others = out.pending() > 0;
    out.data().resize(reserved + room, 0);
    let body_start = reserved + room;
    let Some((status, json_length)) = write_body(out) else {
        out.truncate(reserved);
        return;
    };
    // RFC 9110 §15.3.5, §15.4.5: a 204 and a 304 have no content.
    let no_content = matches!(status, Status::NoContent | Status::NotModified);
    if no_content {
        out.truncate(body_start);
    }
    let body_len = out.data().len() - body_start + out.attached_since(body_start);
    let data = out.data();

    let mut head = [0u8; HEAD_ROOM];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        head[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    match status {
        Status::Other(code) => {
            put(b"HTTP/1.1 ");
            put(itoa::Buffer::new().format(code).as_bytes());
            put(b" ");
            put(reason_phrase(code).as_bytes());
            put(b"\r\n");
        }
        Status::RetryAfter { code, seconds } => {
            put(b"HTTP/1.1 ");
            put(itoa::Buffer::new().format(code).as_bytes());
            put(b" ");
            put(reason_phrase(code).as_bytes());
            put(b"\r\nRetry-After: ");
            put(itoa::Buffer::new().format(seconds).as_bytes());
            put(b"\r\n");
        }
        named => put(named.status_line()),
    }
    if !no_content {
        put(b"Content-Type: ");
        match json_length {
            None => put(content_type),
            Some(json_length) => {
                put(wire::CONTENT_TYPE.as_bytes());
                put(b"\r\n");
                put(wire::JSON_LENGTH_NAME.as_bytes());
                put(b": ");
                put(itoa::Buffer::new().format(json_length).as_bytes());
            }
        }
        put(b"\r\nContent-Length: ");
        put(itoa::Buffer::new().format(body_len).as_bytes());
        put(b"\r\n");
    }
    put(b"Date: ");
    put(date);
    put(b"\r\n");
    match persistence {
        Persistence::KeepAlive => {}
        Persistence::KeepAliveLegacy => put(b"Connection: keep-alive\r\n"),
        Persistence::Close => put(b"Connection: close\r\n"),
    }
    // The head ends right where the body starts: its own fields, the extra ones, a blank line.
    let head_start = body_start - len - headers.len() - 2;
    data[head_start..head_start + len].copy_from_slice(&head[..len]);
    data[head_start + len..body_start - 2].copy_from_slice(headers);
    data[body_start - 2..body_start].copy_from_slice(b"\r\n");
    if method == Method::Head {
        // Cut before the head's last CRLF, so that buffers attached at the body's start go
        // too, then end the head again.
        out.truncate(body_start - 2);
        out.data().extend_from_slice(b"\r\n");
    }
    let mut head_start = head_start;
    let mut end = out.data().len();
    if behind_others && head_start > reserved && end - head_start <= CLOSE_UP_TO && out.attached_since(reserved) == 0 {
        // Right after the reply before it, so that the two go out as one slice: the room
        // the head left unused would otherwise stay in memory with every pipelined reply
        // until all are sent (as much again as small replies hold).
        out.data().copy_within(head_start..end, reserved);
        end -= head_start - reserved;
        head_start = reserved;
        out.truncate(end);
    }
    out.commit(head_start..end);
}

/// The head of a streamed reply (docs/streaming.md): `200`, a body in chunked transfer
/// coding (RFC 9112 §7.1) of `content_type`, its length unknown until the last chunk.
pub fn write_stream_head(
    data: &mut Vec<u8>,
    persistence: Persistence,
    headers: &[u8],
    date: &[u8],
    content_type: &[u8],
) {
    data.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: ");
    data.extend_from_slice(content_type);
    // Proxies must pass each chunk on at once, not collect the body (`no-transform`; nginx
    // buffers a proxied body unless told `X-Accel-Buffering: no`).
    data.extend_from_slice(
        b"\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache, no-transform\r\nX-Accel-Buffering: no\r\nDate: ",
    );
    data.extend_from_slice(date);
    data.extend_from_slice(b"\r\n");
    match persistence {
        Persistence::KeepAlive => {}
        Persistence::KeepAliveLegacy => data.extend_from_slice(b"Connection: keep-alive\r\n"),
        Persistence::Close => data.extend_from_slice(b"Connection: close\r\n"),
    }
    data.extend_from_slice(headers);
    data.extend_from_slice(b"\r\n");
}

/// Append `payload` as one chunk (RFC 9112 §7.1: size in hex, CRLF, data, CRLF).
pub fn write_chunk(data: &mut Vec<u8>, payload: &[u8]) {
    if payload.is_empty() {
        return; // an empty chunk would end the body
    }
    write_chunk_size(data, payload.len());
    data.extend_from_slice(payload);
    data.extend_from_slice(b"\r\n");
}

/// Append the line that opens a chunk of `len` bytes (not 0: that ends the body); its
/// data and a CRLF follow.
pub fn write_chunk_size(data: &mut Vec<u8>, len: usize) {
    let mut size = [0u8; 16];
    let mut at = size.len();
    let mut n = len;
    while n > 0 || at == size.len() {
        at -= 1;
        size[at] = b"0123456789abcdef"[n % 16];
        n /= 16;
    }
    data.extend_from_slice(&size[at..]);
    data.extend_from_slice(b"\r\n");
}

/// The last chunk, with no trailer: the end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// `100 Continue` (RFC 9110 §15.2.1), sent before reading a body the client holds back.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

#[cfg(test)]
mod tests;
