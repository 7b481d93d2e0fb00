// SPDX-License-Identifier: Apache-2.0
//! The Model Context Protocol (<https://modelcontextprotocol.io/specification>): the
//! registered procedures served as MCP tools, a protocol adapter beside REST. Sans-I/O:
//! one message in (with the HTTP header fields that matter, or none over stdio), the
//! reply's body and status out; `tools/call` runs the procedure through `dispatch` like
//! any call, so hooks, metrics and the request log see it.
//!
//! Both eras clients speak, chosen per request:
//! - the session era (2025-03-26 .. 2025-11-25): `initialize`, `ping`, notifications
//!   answered 202, `MCP-Protocol-Version` checked when sent; a session is minted only when
//!   the settings ask ([`crate::mcp_sessions`]), else every request stands alone;
//! - the stateless revision 2026-07-28: `server/discover`, the version and capabilities
//!   in each request's `_meta`, `Mcp-Method` and `Mcp-Name` checked against the body,
//!   `resultType` in every result.

use std::borrow::Cow;

use crate::cancellation::Cancellation;
use crate::context::Context;
use crate::discover::mcp::{write_string, McpTools, ToolReply};
use crate::dispatch::{self, Deferrals, DeferredAt, Invoked};
use crate::http1::Status;
use crate::jsonrpc::message::{self, Envelope};
use crate::jsonrpc::{self, scan, ErrorCode, RpcError};
use crate::mcp_sessions::Sessions;
use crate::request_log::{Carrier, Lines, Seed};
use crate::router::{Call, Router};

/// The stateless revision: version and capabilities in every request's `_meta`.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The session-era revisions, newest first: the first is offered to a client that asks
/// for one not listed.
pub const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Every revision served, newest first, as `server/discover` and version errors list them.
const SUPPORTED: &str = r#"["2026-07-28","2025-11-25","2025-06-18","2025-03-26"]"#;
/// The revision a request without `MCP-Protocol-Version` is taken to speak (2025-06-18:
/// "the server SHOULD assume protocol version 2025-03-26").
const ASSUMED_VERSION: &str = "2025-03-26";

/// The HTTP headers do not match the body, or one required is missing (2026-07-28).
const HEADER_MISMATCH: i32 = -32020;
/// The requested protocol version is not served (2026-07-28).
const UNSUPPORTED_VERSION: i32 = -32022;

/// The `_meta` key of a request's protocol version (2026-07-28).
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a request's client capabilities (2026-07-28).
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The HTTP header fields the protocol reads; `None` over stdio, where there are none.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fields<'a> {
    /// `MCP-Protocol-Version`.
    pub version: Option<&'a str>,
    /// `Mcp-Method` (2026-07-28).
    pub method: Option<&'a str>,
    /// `Mcp-Name` (2026-07-28), possibly in the `=?base64?...?=` form.
    pub name: Option<&'a str>,
    /// `Mcp-Session-Id` (session era).
    pub session: Option<&'a str>,
}

impl<'a> Fields<'a> {
    /// The fields of the request `context` carries (its head kept).
    #[must_use]
    pub fn of(context: &Context<'a>) -> Self {
        let text = |name| context.header(name).and_then(|value| std::str::from_utf8(value).ok());
        Fields {
            version: text("mcp-protocol-version"),
            method: text("mcp-method"),
            name: text("mcp-name"),
            session: text("mcp-session-id"),
        }
    }
}

/// What answering one message produced, besides its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The HTTP status: 200 with a body, 202 for a notification or response (no body),
    /// 4xx for a refusal.
    pub status: Status,
    /// A `tools/call` may still send progress (its reply is deferred): over HTTP the
    /// reply is then a server-sent event stream once the first one comes.
    pub streams: bool,
}

impl Answered {
    fn ok() -> Self {
        Answered {
            status: Status::Ok,
            streams: false,
        }
    }

    fn status(status: Status) -> Self {
        Answered { status, streams: false }
    }

    /// No body: a notification or a response was accepted.
    #[must_use]
    pub fn is_accepted(&self) -> bool {
        self.status.code() == 202
    }
}

/// The members of a request's `params` the protocol reads, as raw JSON.
#[derive(Default)]
struct Params<'a> {
    name: Option<&'a str>,
    arguments: Option<&'a str>,
    meta: Option<&'a str>,
    cursor: Option<&'a str>,
    protocol_version: Option<&'a str>,
    /// `notifications/cancelled`'s `requestId`.
    request_id: Option<&'a str>,
}

/// The members of `params._meta` the protocol reads, as raw JSON.
#[derive(Default)]
struct Meta<'a> {
    progress_token: Option<&'a str>,
    version: Option<&'a str>,
    capabilities: Option<&'a str>,
}

/// One request, read.
struct Request<'a> {
    method: &'a str,
    id: Option<&'a str>,
    params: Params<'a>,
    meta: Meta<'a>,
    /// Its revision is 2026-07-28 (or later): served statelessly.
    modern: bool,
    /// The size of the message it came in, for the request log.
    bytes_in: usize,
}

/// What answering a message works with: where it came from, what the server serves, and
/// where deferred tool calls, request-log lines and a new session's id go.
pub(crate) struct Answering<'a, 'b> {
    /// The message's HTTP header fields (`None` over stdio).
    pub fields: Option<&'a Fields<'b>>,
    /// How the message reached the server.
    pub context: &'a Context<'b>,
    /// The procedures.
    pub router: &'a Router,
    /// The tools and the endpoint's settings.
    pub tools: &'a McpTools,
    /// Where a tool whose procedure defers reports.
    pub deferrals: &'a mut Deferrals<'b>,
    /// The places of the deferred tool calls' replies, for the session to hold.
    pub deferred: &'a mut Vec<DeferredAt>,
    /// The request log's lines.
    pub lines: &'a mut Lines,
    /// The `Mcp-Session-Id` an `initialize` opened, for the reply's header.
    pub opened: Option<Box<str>>,
}

/// Answer one MCP message (`body`, a request, a notification, or, where the revision
/// allows, a batch), appending the reply to `out`. A `tools/call` whose procedure defers
/// leaves its place in `at.deferred`, for the session to hold as for any call.
pub(crate) fn answer(body: &[u8], at: &mut Answering<'_, '_>, out: &mut Vec<u8>) -> Answered {
    at.deferred.clear();
    let Some(text) = jsonrpc::as_text(body) else {
        return refuse(
            out,
            None,
            ErrorCode::ParseError.code(),
            "Parse error: the body is not UTF-8",
        );
    };
    if message::is_batch(text.as_bytes()) {
        return batch(text, at, out);
    }
    match message::parse_request(text) {
        Ok(Envelope::Request(request)) => {
            let started = out.len();
            match read(&request, text.len()) {
                Ok(read) => one(&read, at, out),
                Err(error) => {
                    out.truncate(started);
                    jsonrpc::write_rpc_error(out, request.id, &error);
                    Answered::status(Status::BadRequest)
                }
            }
        }
        Ok(Envelope::Invalid { id, reason }) => {
            if is_response(text) {
                // A client's answer to a server request: this server sends none, so there
                // is nothing to match it with; accepted as the transport says.
                return Answered::status(Status::Other(202));
            }
            refuse(
                out,
                id,
                ErrorCode::InvalidRequest.code(),
                &format!("Invalid Request: {reason}"),
            )
        }
        Err(_) => refuse(
            out,
            None,
            ErrorCode::ParseError.code(),
            "Parse error: the body is not valid JSON",
        ),
    }
}

/// A JSON-RPC batch: only the 2025-03-26 revision has them (2025-06-18 removed them, and
/// 2026-07-28 says "a single JSON-RPC request or notification").
fn batch(text: &str, at: &mut Answering<'_, '_>, out: &mut Vec<u8>) -> Answered {
    let version = at.fields.and_then(|fields| fields.version).unwrap_or(ASSUMED_VERSION);
    if version != ASSUMED_VERSION {
        return refuse(
            out,
            None,
            ErrorCode::InvalidRequest.code(),
            "Invalid Request: JSON-RPC batches are not part of this MCP revision (only 2025-03-26 has them)",
        );
    }
    let mut elements = Vec::new();
    if message::parse_batch(text, &mut elements).is_err() {
        return refuse(
            out,
            None,
            ErrorCode::ParseError.code(),
            "Parse error: the body is not valid JSON",
        );
    }
    if elements.is_empty() {
        return refuse(
            out,
            None,
            ErrorCode::InvalidRequest.code(),
            "Invalid Request: empty batch",
        );
    }
    // A batch's reply is one message: its calls cannot stream progress.
    let streams = std::mem::replace(&mut at.deferrals.streams, false);
    let opening = out.len();
    out.push(b'[');
    let mut replies = 0;
    for element in &elements {
        let comma_at = out.len();
        if replies > 0 {
            out.push(b',');
        }
        let before = out.len();
        match element.envelope(text) {
            Envelope::Request(request) => match read(&request, text.len()) {
                Ok(read) => {
                    one(&read, at, out);
                }
                Err(error) => jsonrpc::write_rpc_error(out, request.id, &error),
            },
            Envelope::Invalid { id, reason } => {
                let message = format!("Invalid Request: {reason}");
                jsonrpc::write_error(out, id, ErrorCode::InvalidRequest.code(), &message, None);
            }
        }
        if out.len() == before && at.deferred.last().is_none_or(|held| held.offset != before) {
            out.truncate(comma_at); // a notification: no reply
        } else {
            replies += 1;
        }
    }
    at.deferrals.streams = streams;
    if replies == 0 {
        out.truncate(opening);
        return Answered::status(Status::Other(202));
    }
    out.push(b']');
    Answered::ok()
}

/// Whether `text` is a JSON-RPC response (`result` or `error`, no `method`).
fn is_response(text: &str) -> bool {
    matches!(
        message::object_members(text, &["method", "result", "error"]),
        Ok(Some([None, result, error])) if result.is_some() || error.is_some()
    )
}

/// Read the members of `request` (of a body of `bytes_in` bytes) the protocol needs.
fn read<'a>(request: &'a message::Request<'a>, bytes_in: usize) -> Result<Request<'a>, RpcError> {
    let mut params = Params::default();
    if let Some(raw) = request.params {
        let names = ["name", "arguments", "_meta", "cursor", "protocolVersion", "requestId"];
        let Ok(Some([name, arguments, meta, cursor, protocol_version, request_id])) =
            message::object_members(raw, &names)
        else {
            return Err(RpcError::invalid_params("Invalid params: MCP params are an object"));
        };
        params = Params {
            name,
            arguments,
            meta,
            cursor,
            protocol_version,
            request_id,
        };
    }
    let mut meta = Meta::default();
    if let Some(raw) = params.meta {
        let names = ["progressToken", META_VERSION, META_CAPABILITIES];
        let Ok(Some([progress_token, version, capabilities])) = message::object_members(raw, &names) else {
            return Err(RpcError::invalid_params("Invalid params: _meta is an object"));
        };
        meta = Meta {
            progress_token,
            version,
            capabilities,
        };
    }
    Ok(Request {
        method: &request.method,
        id: request.id,
        bytes_in,
        modern: meta.version.is_some(),
        params,
        meta,
    })
}

/// Answer one request or notification.
fn one(request: &Request<'_>, at: &mut Answering<'_, '_>, out: &mut Vec<u8>) -> Answered {
    let header_version = at.fields.and_then(|fields| fields.version);
    let modern = request.modern || header_version == Some(MODERN_VERSION);
    if modern {
        if let Err((status, error)) = check_modern(request, at.fields) {
            jsonrpc::write_rpc_error(out, request.id, &error);
            return Answered::status(status);
        }
    } else if let Some(version) = header_version.filter(|version| !LEGACY_VERSIONS.contains(version)) {
        // 2025-06-18: "an invalid or unsupported MCP-Protocol-Version" is 400.
        let message = format!("Bad Request: unsupported MCP-Protocol-Version {version:?}");
        let error = RpcError::new(ErrorCode::InvalidRequest.code(), message);
        let error = error.clone().with_raw_data(&supported_data(version)).unwrap_or(error);
        jsonrpc::write_rpc_error(out, request.id, &error);
        return Answered::status(Status::BadRequest);
    }
    // The session, when the server mints them (session era, over HTTP).
    let session = match (&at.tools.sessions, at.fields) {
        (Some(sessions), Some(fields)) if !modern => match check_session(request, fields, sessions, out) {
            Ok(session) => session,
            Err(refused) => return refused,
        },
        _ => None,
    };
    let Some(id) = request.id else {
        // Notifications (`notifications/initialized`, `notifications/cancelled`, ...):
        // accepted. A cancellation in a session reaches the tool call it names. Without
        // one it reaches none: a request id is only its client's own (clients count from
        // 0 or 1), so acting on it could cancel another client's call; such a client
        // cancels by closing the call's stream, which the server sees (2026-07-28:
        // "Closing the SSE response stream is the cancellation signal").
        if let (Some(sessions), Some(session), "notifications/cancelled") =
            (&at.tools.sessions, session, request.method)
        {
            if let Some(request_id) = request.params.request_id {
                sessions.cancel(session, request_id);
            }
        }
        return Answered::status(Status::Other(202));
    };
    let started = out.len();
    let result = match request.method {
        "tools/call" => return call_tool(request, id, session, at, out),
        "tools/list" => list_tools(request, at.tools, out),
        "server/discover" => {
            discover(at.tools, out);
            Ok(())
        }
        "initialize" if !request.modern => {
            match at
                .tools
                .sessions
                .as_ref()
                .filter(|_| at.fields.is_some())
                .map(|s| s.open())
            {
                Some(None) => Err(RpcError::internal("Internal error: no session id could be made")),
                opened => {
                    at.opened = opened.flatten();
                    initialize(request, at.tools, out);
                    Ok(())
                }
            }
        }
        "ping" if !request.modern => {
            out.extend_from_slice(b"{}");
            Ok(())
        }
        method => Err(RpcError::method_not_found(method)),
    };
    let body = out.split_off(started);
    match result {
        Ok(()) => {
            jsonrpc::write_result_opening(out, id);
            if request.modern {
                // Every result of the stateless revision says it is complete; lists and
                // discovery are `CacheableResult`s: the tools are fixed while serving and
                // the same for every caller.
                let cacheable = matches!(request.method, "tools/list" | "server/discover");
                close_with_result_type(&body, cacheable, out);
            } else {
                out.extend_from_slice(&body);
            }
            out.push(b'}');
            Answered::ok()
        }
        Err(error) => {
            jsonrpc::write_rpc_error(out, Some(id), &error);
            // 2026-07-28: an unknown method is 404 with -32601.
            let unknown = request.modern && error.code() == ErrorCode::MethodNotFound.code();
            Answered::status(if unknown { Status::NotFound } else { Status::Ok })
        }
    }
}

/// The session a session-era request belongs to (`Ok(None)` for `initialize`, which
/// opens one), or its refusal: 400 without `Mcp-Session-Id`, 404 for one not open
/// (2025-03-26 "Session Management").
fn check_session<'f>(
    request: &Request<'_>,
    fields: &Fields<'f>,
    sessions: &Sessions,
    out: &mut Vec<u8>,
) -> Result<Option<&'f str>, Answered> {
    if request.method == "initialize" {
        return Ok(None);
    }
    let (status, message) = match fields.session {
        Some(session) if sessions.touch(session) => return Ok(Some(session)),
        Some(_) => (
            Status::NotFound,
            "Not Found: the session has ended or is unknown; initialize a new one",
        ),
        None => (
            Status::BadRequest,
            "Bad Request: the Mcp-Session-Id header is required after initialize",
        ),
    };
    if request.id.is_some() {
        jsonrpc::write_error(out, request.id, ErrorCode::InvalidRequest.code(), message, None);
    }
    Err(Answered::status(status))
}

/// The header checks of the stateless revision (its "Server Validation"), and its version
/// check: the refusal's status and error.
fn check_modern(request: &Request<'_>, fields: Option<&Fields<'_>>) -> Result<(), (Status, RpcError)> {
    let mismatch = |message: String| (Status::BadRequest, RpcError::new(HEADER_MISMATCH, message));
    let version = request.meta.version.and_then(decode_string);
    if let Some(fields) = fields {
        let Some(header) = fields.version else {
            return Err(mismatch(
                "Header mismatch: the MCP-Protocol-Version header is missing".into(),
            ));
        };
        if version.as_deref() != Some(header) {
            return Err(mismatch(format!(
                "Header mismatch: MCP-Protocol-Version header value '{header}' does not match the body's _meta value {}",
                request.meta.version.unwrap_or("(missing)")
            )));
        }
        match fields.method {
            None => return Err(mismatch("Header mismatch: the Mcp-Method header is missing".into())),
            Some(method) if method != request.method => {
                return Err(mismatch(format!(
                    "Header mismatch: Mcp-Method header value '{method}' does not match body value '{}'",
                    request.method
                )))
            }
            Some(_) => {}
        }
        if request.method == "tools/call" {
            let body_name = request.params.name.and_then(decode_string);
            match fields.name.map(decode_header_value) {
                None => return Err(mismatch("Header mismatch: the Mcp-Name header is missing".into())),
                Some(None) => {
                    return Err(mismatch(
                        "Header mismatch: the Mcp-Name header is not valid base64 UTF-8".into(),
                    ))
                }
                Some(Some(name)) if Some(&name) != body_name.as_ref() => {
                    return Err(mismatch(format!(
                        "Header mismatch: Mcp-Name header value '{name}' does not match body value '{}'",
                        body_name.as_deref().unwrap_or("(missing)")
                    )))
                }
                Some(Some(_)) => {}
            }
        }
    }
    let Some(version) = version else {
        let message = format!("Invalid params: _meta[\"{META_VERSION}\"] must be a string");
        return Err((Status::BadRequest, RpcError::invalid_params(message)));
    };
    if version != MODERN_VERSION {
        let error = RpcError::new(UNSUPPORTED_VERSION, "Unsupported protocol version")
            .with_raw_data(&supported_data(&version))
            .unwrap_or_else(|| RpcError::new(UNSUPPORTED_VERSION, "Unsupported protocol version"));
        return Err((Status::BadRequest, error));
    }
    if !request.meta.capabilities.is_some_and(|raw| raw.starts_with('{')) {
        let message = format!("Invalid params: _meta[\"{META_CAPABILITIES}\"] must be an object");
        return Err((Status::BadRequest, RpcError::invalid_params(message)));
    }
    Ok(())
}

/// `{"supported":[...],"requested":"<version>"}`.
fn supported_data(requested: &str) -> String {
    let mut data = Vec::with_capacity(96);
    data.extend_from_slice(b"{\"supported\":");
    data.extend_from_slice(SUPPORTED.as_bytes());
    data.extend_from_slice(b",\"requested\":");
    write_string(&mut data, requested);
    data.push(b'}');
    String::from_utf8(data).unwrap_or_default()
}

/// The string a raw JSON string member holds (`None` for any other value).
fn decode_string(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        scan::cold_decode_string(raw).map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// A header value as sent, or decoded from the `=?base64?...?=` form (2026-07-28 "Value
/// Encoding"); `None` when that form does not hold base64 of UTF-8.
fn decode_header_value(value: &str) -> Option<Cow<'_, str>> {
    let Some(encoded) = value.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) else {
        return Some(Cow::Borrowed(value));
    };
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok().map(Cow::Owned)
}

/// How long a client may keep `tools/list` and `server/discover` results (2026-07-28
/// `CacheableResult.ttlMs`): the list is fixed while serving, but a redeployed server may
/// bring new tools.
const LIST_TTL: &str = "60000";

/// Append `body` (an object's JSON text) with `"resultType":"complete"` as its last member,
/// and, when `cacheable`, the cache hints.
fn close_with_result_type(body: &[u8], cacheable: bool, out: &mut Vec<u8>) {
    let Some(inner) = body.strip_suffix(b"}") else {
        out.extend_from_slice(body);
        return;
    };
    out.extend_from_slice(inner);
    if inner.trim_ascii_end() != b"{" {
        out.push(b',');
    }
    if cacheable {
        out.extend_from_slice(b"\"ttlMs\":");
        out.extend_from_slice(LIST_TTL.as_bytes());
        out.extend_from_slice(b",\"cacheScope\":\"public\",");
    }
    out.extend_from_slice(b"\"resultType\":\"complete\"}");
}

/// The server's `capabilities`: tools only, and their list does not change.
const CAPABILITIES: &[u8] = b"{\"tools\":{\"listChanged\":false}}";

fn write_server_info(tools: &McpTools, out: &mut Vec<u8>) {
    out.extend_from_slice(b"\"serverInfo\":{\"name\":");
    write_string(out, &tools.settings.name);
    out.extend_from_slice(b",\"version\":");
    write_string(out, &tools.settings.version);
    out.push(b'}');
    if let Some(instructions) = &tools.settings.instructions {
        out.extend_from_slice(b",\"instructions\":");
        write_string(out, instructions);
    }
}

/// `initialize` (session era): the version the client asked for when served, else the
/// newest session-era one ("the server MUST respond with another protocol version it
/// supports"; the client decides whether it can go on).
fn initialize(request: &Request<'_>, tools: &McpTools, out: &mut Vec<u8>) {
    let asked = request.params.protocol_version.and_then(decode_string);
    let version = asked
        .as_deref()
        .and_then(|asked| LEGACY_VERSIONS.iter().find(|known| **known == asked))
        .unwrap_or(&LEGACY_VERSIONS[0]);
    out.extend_from_slice(b"{\"protocolVersion\":\"");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\",\"capabilities\":");
    out.extend_from_slice(CAPABILITIES);
    out.push(b',');
    write_server_info(tools, out);
    out.push(b'}');
}

/// `server/discover` (2026-07-28).
fn discover(tools: &McpTools, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"supportedVersions\":");
    out.extend_from_slice(SUPPORTED.as_bytes());
    out.extend_from_slice(b",\"capabilities\":");
    out.extend_from_slice(CAPABILITIES);
    out.push(b',');
    write_server_info(tools, out);
    out.push(b'}');
}

/// `tools/list`: a page of tools from the cursor on (the cursor is the index of the
/// page's first tool), with the next page's cursor when there is one.
fn list_tools(request: &Request<'_>, tools: &McpTools, out: &mut Vec<u8>) -> Result<(), RpcError> {
    let first = match request.params.cursor.filter(|raw| *raw != "null") {
        None => 0,
        Some(raw) => decode_string(raw)
            .and_then(|cursor| cursor.parse::<usize>().ok())
            .filter(|first| *first < tools.tools.len())
            .ok_or_else(|| RpcError::invalid_params("Invalid params: unknown cursor"))?,
    };
    let end = (first + tools.settings.page_size).min(tools.tools.len());
    out.extend_from_slice(b"{\"tools\":[");
    for (n, tool) in tools.tools[first..end].iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(tool.json.as_bytes());
    }
    out.push(b']');
    if end < tools.tools.len() {
        out.extend_from_slice(b",\"nextCursor\":\"");
        out.extend_from_slice(itoa::Buffer::new().format(end).as_bytes());
        out.push(b'"');
    }
    out.push(b'}');
    Ok(())
}

/// `tools/call`: the procedure runs through `dispatch` as any call; its result becomes
/// a `CallToolResult`, its error one with `isError: true`.
fn call_tool(
    request: &Request<'_>,
    id: &str,
    session: Option<&str>,
    at: &mut Answering<'_, '_>,
    out: &mut Vec<u8>,
) -> Answered {
    let (context, router, tools) = (at.context, at.router, at.tools);
    let invalid = |out: &mut Vec<u8>, message: String| {
        jsonrpc::write_rpc_error(out, Some(id), &RpcError::invalid_params(message));
        Answered::ok()
    };
    let Some(name) = request.params.name.and_then(decode_string) else {
        return invalid(out, "Invalid params: tools/call needs the tool's name".into());
    };
    let (Some(tool), Some(found)) = (tools.tool(&name), router.find(&name)) else {
        if let Some(metrics) = router.metrics() {
            metrics.unknown_method();
        }
        return invalid(out, format!("Unknown tool: {name}"));
    };
    let arguments = request.params.arguments.filter(|raw| *raw != "null");
    if arguments.is_some_and(|raw| !raw.starts_with('{')) {
        return invalid(out, "Invalid params: arguments are an object".into());
    }
    let reply = ToolReply {
        shape: tool.shape,
        modern: request.modern,
        progress_token: request.meta.progress_token.map(Box::from),
        progress: 0,
        in_flight: None,
    };
    // In a session, a `notifications/cancelled` may name the call while it runs: it gets
    // a cancellation of its own, so that its neighbours on the connection go on.
    let cancellation = session.is_some().then(Cancellation::default);
    let own_context = cancellation
        .as_ref()
        .map(|cancellation| context.with_cancellation(cancellation));
    let call = Call::new(&tool.name, arguments, Some(id)).with_context(own_context.as_ref().unwrap_or(context));
    let mut deferrals = Deferrals {
        target: at.deferrals.target.map(|target| match &cancellation {
            Some(cancellation) => target.with_cancellation(cancellation),
            None => target,
        }),
        next_slot: &mut *at.deferrals.next_slot,
        streams: at.deferrals.streams,
        // A tool's items are progress notifications: JSON.
        stream_attachments: false,
        attachments: at.deferrals.attachments.as_deref_mut(),
    };
    let start = out.len();
    // With the request log on, the call is timed and gets its line as any call (a
    // deferred one when it completes: it carries its seed).
    let seed = router.request_log().map(|_| Seed {
        peer: context.peer(),
        transport: context.transport().as_str(),
        method: &tool.name,
        id: Some(id),
        carrier: Carrier::Single,
        bytes_in: request.bytes_in,
        trace_id: context.trace().map(|trace| trace.parent.trace_id),
    });
    let (outcome, clock) = match &seed {
        None => (dispatch::run(found, &call, router.metrics(), &mut deferrals, out), None),
        Some(seed) => {
            let (outcome, clock) =
                dispatch::run_logged(found, &call, router.metrics(), Some(seed), &mut deferrals, out);
            (outcome, Some(clock))
        }
    };
    let answered = match outcome {
        Ok(Invoked::Done) => {
            let result = out.split_off(start);
            reply.write(out, id, Ok(&result));
            crate::buffer::keep(result);
            Answered::ok()
        }
        Ok(Invoked::Deferred(slot)) => {
            let in_flight = (tools.sessions.as_ref().zip(session).zip(cancellation))
                .and_then(|((sessions, session), cancellation)| sessions.track(session, id, cancellation));
            at.deferred.push(DeferredAt {
                offset: out.len(),
                slot,
                id: Some(id.into()),
                tool: Some(Box::new(ToolReply { in_flight, ..reply })),
            });
            Answered {
                status: Status::Ok,
                streams: true,
            }
        }
        Err(ref error) => match reply.write(out, id, Err(error)) {
            Some(status) => Answered::status(Status::from_code(status)),
            None => Answered::ok(),
        },
    };
    if let (Some(log), Some(seed), Some(clock)) = (router.request_log(), &seed, clock) {
        if !answered.streams {
            let code = outcome.as_ref().err().map_or(0, RpcError::code);
            let nanos = clock.ended.saturating_sub(clock.started);
            let ended = if clock.ended == 0 {
                crate::date::monotonic_nanos()
            } else {
                clock.ended
            };
            let entry = seed.entry(ended, nanos, code, Some(answered.status.code()), out.len() - start);
            at.lines.push(log, &entry);
        }
    }
    answered
}

/// Refuse the message with `code` (HTTP 400), naming its `id` when known.
#[cold]
#[inline(never)]
fn refuse(out: &mut Vec<u8>, id: Option<&str>, code: i32, message: &str) -> Answered {
    jsonrpc::write_error(out, id, code, message, None);
    Answered::status(Status::BadRequest)
}
