// SPDX-License-Identifier: Apache-2.0
//! HTTP/1.1 (RFC 9112): request heads and bodies, `POST /` JSON-RPC, REST-style calls,
//! the upgrade to WebSocket.

use std::sync::Arc;

use super::{attached, Calls, Context, MessageKind, Scratch, Step};
use crate::buffer::OutBuf;
use crate::context::{Context as CallContext, Transport};
use crate::date::monotonic_nanos;
use crate::dispatch::{self, Clock, Deferrals, DeferredAt, Invoked, Message, Outcome};
use crate::http1::chunked::{ChunkError, ChunkedDecoder};
use crate::http1::cors::{self, Cors};
use crate::http1::{self, rest, Framing, HeadStatus, Method, Persistence, Reject, RequestHead, Status};
use crate::jsonrpc::section::Section;
use crate::jsonrpc::{self, ErrorCode, RpcError};
use crate::metrics::{Metrics, Refusal};
use crate::request_log::{Carrier, Entry, Seed};
use crate::router::{Call, Router};
use crate::wire;
use crate::ws;

/// An HTTP/1.1 connection's state: the request under way.
#[derive(Debug, Default)]
pub(super) struct Http {
    /// `Some` while the body of this head is awaited.
    pending_head: Option<RequestHead>,
    /// The request target (path and query).
    target: String,
    chunked: ChunkedDecoder,
    /// A chunked body, decoded.
    body: Vec<u8>,
    /// The last request asked to close the connection after its reply.
    close_asked: bool,
    /// The CORS header lines for the reply to the current request, and the other header
    /// lines its reply carries (`Cache-Control`, `ETag`, `Allow`).
    cors_headers: Vec<u8>,
}

impl Http {
    /// Whether no request is partly received: its head is awaited.
    pub(super) fn is_between_requests(&self) -> bool {
        self.pending_head.is_none()
    }

    pub(super) fn holds_buffers(&self) -> bool {
        self.target.capacity() > 0 || self.body.capacity() > 0 || self.cors_headers.capacity() > 0
    }

    /// Between requests: the target, body and CORS lines are rewritten by the next one.
    pub(super) fn release_buffers(&mut self) {
        self.target = String::new();
        self.body = Vec::new();
        self.cors_headers = Vec::new();
    }

    /// The body's length when a head with `Content-Length` awaits it; 0 otherwise.
    pub(super) fn body_wanted(&self) -> usize {
        match self.pending_head.map(|head| head.framing) {
            Some(Framing::Length(length)) => length,
            _ => 0,
        }
    }

    /// The last request asked to close the connection after its reply (RFC 9112 §9.6).
    pub(super) fn close_asked(&self) -> bool {
        self.close_asked
    }

    /// The CORS header lines for a refusal of the request under way (none between requests).
    pub(super) fn refusal_headers(&self) -> &[u8] {
        if self.pending_head.is_some() {
            &self.cors_headers
        } else {
            b""
        }
    }

    pub(super) fn step(
        &mut self,
        calls: &mut Calls,
        rest: &[u8],
        out: &mut OutBuf,
        ctx: &mut Context<'_>,
    ) -> (usize, Step) {
        let Some(head) = self.pending_head else {
            return match http1::parse_head(
                rest,
                ctx.limits.max_head_bytes,
                ctx.limits.max_body_bytes,
                &mut self.target,
            ) {
                HeadStatus::Partial => (0, Step::NeedMore),
                HeadStatus::Rejected(reject) => {
                    self.cors_headers.clear();
                    if let Some((cors, origin)) = ctx.limits.cors.as_ref().zip(cors::origin_of(rest)) {
                        cors.write_response_headers(origin, &mut self.cors_headers);
                    }
                    respond_rejection(out, ctx.router.metrics(), ctx.date, reject, &self.cors_headers);
                    (0, Step::Close)
                }
                HeadStatus::Complete(head, _)
                    if head.websocket_key.is_some() && !origin_allowed(ctx.limits.cors.as_ref(), &head, rest) =>
                {
                    let reject = http1::reject(Status::Forbidden, "origin not allowed");
                    respond_rejection(out, ctx.router.metrics(), ctx.date, reject, b"");
                    (0, Step::Close)
                }
                HeadStatus::Complete(head, used) if head.websocket_key.is_some() => {
                    calls.keep_head(&rest[..used], ctx.router, false);
                    let key = head.websocket_key.unwrap_or_default();
                    out.push(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n");
                    out.push(b"Sec-WebSocket-Accept: ");
                    out.push(ws::accept_key(&key).as_bytes());
                    if head.websocket_binary {
                        out.push(b"\r\nSec-WebSocket-Protocol: ");
                        out.push(wire::SUBPROTOCOL.as_bytes());
                    } else if head.websocket_plain {
                        out.push(b"\r\nSec-WebSocket-Protocol: ");
                        out.push(ws::SUBPROTOCOL.as_bytes());
                    }
                    out.push(b"\r\n\r\n");
                    (
                        used,
                        Step::Upgrade {
                            binary: head.websocket_binary,
                        },
                    )
                }
                HeadStatus::Complete(head, used) => {
                    // The MCP endpoint reads its header fields (and the Origin) from the head.
                    let mcp = ctx.router.is_mcp_path(&self.target);
                    calls.keep_head(&rest[..used], ctx.router, mcp);
                    self.cors_headers.clear();
                    if let Some(cors) = &ctx.limits.cors {
                        cross_origin(cors, &head, rest, &mut self.cors_headers);
                    }
                    if let Some(max_age) = ctx.limits.hsts_max_age.filter(|_| calls.tls) {
                        // RFC 6797 §7.2: only over a secure transport.
                        let line = format!("Strict-Transport-Security: max-age={max_age}\r\n");
                        self.cors_headers.extend_from_slice(line.as_bytes());
                    }
                    let body_bytes = rest.len() - used;
                    match head.framing {
                        Framing::None => return (used, self.answer(calls, &head, &rest[..used], &[], out, ctx)),
                        // The body is in already: answered now, the head not kept for it.
                        Framing::Length(length) if body_bytes >= length => {
                            let end = used + length;
                            return (end, self.answer(calls, &head, &[], &rest[used..end], out, ctx));
                        }
                        Framing::Length(length) if head.expect_continue && body_bytes < length => {
                            out.push(http1::CONTINUE)
                        }
                        Framing::Chunked if head.expect_continue && body_bytes == 0 => out.push(http1::CONTINUE),
                        _ => {}
                    }
                    self.pending_head = Some(head);
                    (used, Step::Progressed)
                }
            };
        };
        match head.framing {
            Framing::Length(length) if rest.len() >= length => {
                self.pending_head = None;
                (length, self.answer(calls, &head, &[], &rest[..length], out, ctx))
            }
            Framing::Chunked => {
                let limits = ctx.limits;
                match self
                    .chunked
                    .decode(rest, &mut self.body, limits.max_body_bytes, limits.max_head_bytes)
                {
                    Ok((used, true)) => {
                        self.pending_head = None;
                        self.chunked.reset();
                        let body = std::mem::take(&mut self.body);
                        let step = self.answer(calls, &head, &[], &body, out, ctx);
                        self.body = body;
                        self.body.clear();
                        (used, step)
                    }
                    Ok((used, false)) => (used, Step::NeedMore),
                    Err(error) => {
                        let reject = match error {
                            ChunkError::Malformed => http1::reject(Status::BadRequest, "malformed chunked body"),
                            ChunkError::TooLarge => http1::body_too_large(limits.max_body_bytes),
                            ChunkError::TrailersTooLarge => {
                                http1::reject(Status::HeadersTooLarge, "trailers too large")
                            }
                        };
                        respond_rejection(out, ctx.router.metrics(), ctx.date, reject, &self.cors_headers);
                        (0, Step::Close)
                    }
                }
            }
            Framing::Length(_) | Framing::None => (0, Step::NeedMore),
        }
    }

    /// Answer the request of `head`; `head_bytes` are its bytes while they are still in
    /// the input (a request without a body), else empty.
    fn answer(
        &mut self,
        calls: &mut Calls,
        head: &RequestHead,
        head_bytes: &[u8],
        body: &[u8],
        out: &mut OutBuf,
        ctx: &mut Context<'_>,
    ) -> Step {
        self.close_asked = !head.keep_alive;
        let keep_alive = head.keep_alive && !calls.count_exchange(ctx);
        let persistence = match (keep_alive, head.minor_version) {
            (false, _) => Persistence::Close,
            (true, 0) => Persistence::KeepAliveLegacy,
            (true, _) => Persistence::KeepAlive,
        };
        if ctx.router.is_mcp_path(&self.target) {
            super::mcp::answer(calls, head, body, out, ctx, persistence, &mut self.cors_headers);
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        if head.method == Method::Delete {
            // RFC 9110 §9.1: a method HTTP defines that only the MCP endpoint takes.
            let reject = Reject {
                allow: Some(http1::allowed_methods(&self.target)),
                ..http1::reject(Status::MethodNotAllowed, "only GET, HEAD, POST and OPTIONS are served")
            };
            respond_rejection(out, ctx.router.metrics(), ctx.date, reject, &self.cors_headers);
            return Step::Close;
        }
        let scratch = &mut *ctx.scratch;
        let target = self.target.as_str();
        let reads = head.method.reads();
        if head.method == Method::Options {
            // A CORS preflight (its headers say it all: none when refused, which the browser
            // reads as a refusal), or a plain OPTIONS (a load balancer's check): the methods
            // of the target in `Allow` (RFC 9110 §9.3.7).
            let allow = if is_page(ctx.router, target, ctx.draining) {
                http1::ALLOW_PAGE
            } else {
                http1::allowed_methods(target)
            };
            for part in [b"Allow: ".as_slice(), allow.as_bytes(), b"\r\n"] {
                self.cors_headers.extend_from_slice(part);
            }
            http1::respond_out(out, persistence, &self.cors_headers, ctx.date, |_| {
                Some(Status::NoContent)
            });
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        if reads {
            // Probes, metrics and results change from one request to the next: no cache,
            // shared or private, keeps them (RFC 9111 §5.2.2.5). The documents say otherwise below.
            self.cors_headers.extend_from_slice(NO_STORE);
        }
        // What every reply to this request says the same (its probe's, its calls').
        let respond = http1::Respond {
            method: head.method,
            persistence,
            headers: &self.cors_headers,
            date: ctx.date,
        };
        // The health probes (`/healthz`, `/readyz`): a short JSON object each.
        let probe = reads.then(|| ctx.router.probe(target, ctx.draining));
        if let Some(probe) = probe.flatten() {
            respond.to(out, b"application/json", |out| {
                out.data().extend_from_slice(probe.body.as_bytes());
                Some(match (probe.ok, probe.not_found) {
                    (true, _) => Status::Ok,
                    (false, true) => Status::NotFound,
                    (false, false) => Status::ServiceUnavailable,
                })
            });
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        // The metrics page (`/metrics`), rendered only when asked for.
        let metrics = ctx.router.metrics().filter(|m| reads && m.is_page(target));
        if let Some(metrics) = metrics {
            let mut page = metrics.render().into_bytes();
            if head.accepts_gzip {
                page = crate::gzip::gzip(&page);
                self.cors_headers.extend_from_slice(GZIPPED);
            }
            self.cors_headers.extend_from_slice(VARY_ENCODING);
            let respond = http1::Respond {
                method: head.method,
                persistence,
                headers: &self.cors_headers,
                date: ctx.date,
            };
            respond.to(out, crate::metrics::CONTENT_TYPE.as_bytes(), |out| {
                out.data().extend_from_slice(&page);
                Some(Status::Ok)
            });
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        // The self-description documents (`/openrpc.json`, `/openapi.json`, `/docs`); only
        // a GET can ask for one, so a POST's path is not compared with theirs.
        let page = if reads { ctx.router.page(target) } else { None };
        if let Some(page) = page {
            // A document changes only with the server: kept, but revalidated by its tag
            // (RFC 9111 §5.2.2.4), which a client's `If-None-Match` answers with a 304.
            // Gzipped (compressed once, when serving starts) for a client that takes it,
            // with the tag of those bytes; caches keep the two apart by `Vary`.
            let (body, etag) = if head.accepts_gzip {
                (page.gzip, page.gzip_etag)
            } else {
                (page.body, page.etag)
            };
            let headers = &mut self.cors_headers;
            headers.truncate(headers.len() - NO_STORE.len());
            for part in [
                b"Cache-Control: no-cache\r\n".as_slice(),
                VARY_ENCODING,
                if head.accepts_gzip { GZIPPED } else { b"" },
                b"ETag: ",
                etag.as_bytes(),
                b"\r\n",
            ] {
                headers.extend_from_slice(part);
            }
            let unchanged = cors::Fields::get(head_bytes, head.if_none_match)
                .is_some_and(|held| http1::none_match_names(held, etag));
            let respond = http1::Respond {
                method: head.method,
                persistence,
                headers,
                date: ctx.date,
            };
            respond.to(out, page.content_type, |out| {
                if unchanged {
                    return Some(Status::NotModified);
                }
                out.data().extend_from_slice(body);
                Some(Status::Ok)
            });
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        // A binary body (docs/wire.md §3.1): its JSON text is the request, its attachment
        // section goes beside; broken framing is 400 and the connection goes on.
        let (body, section) = if head.binary_body && head.method == Method::Post {
            match split_binary(head, body) {
                Ok((json, section)) => (json, Some(section)),
                Err(message) => {
                    if let Some(metrics) = ctx.router.metrics() {
                        metrics.refused(Refusal::ParseError);
                    }
                    http1::respond_out(out, persistence, &self.cors_headers, ctx.date, |out| {
                        jsonrpc::write_error(out.data(), None, ErrorCode::ParseError.code(), message, None);
                        Some(Status::BadRequest)
                    });
                    return if keep_alive { Step::Progressed } else { Step::Close };
                }
            }
        } else {
            (body, None)
        };
        // A path names one procedure or none: a JSON-RPC body posted to a procedure's path is
        // that procedure's named params, never a call of another method (path-based rules
        // in front of the server see what runs).
        let is_jsonrpc = head.method == Method::Post
            && (is_root(target) || (looks_like_jsonrpc(body) && !names_procedure(ctx.router, target, scratch)));
        // A JSON-RPC reply may be a binary message when the request accepts one.
        let binary = is_jsonrpc && head.accepts_binary;
        let mut attachments = Section::new();
        let mut context = CallContext::new(Transport::Http, calls.tls, calls.peer, &calls.head)
            .with_timeout(head.timeout)
            .with_tls_subject(calls.tls_subject.as_deref())
            .with_liveness(calls.presence.liveness())
            .with_section(section)
            .with_binary_replies(binary);
        context.received_now_if(ctx.router.times_calls());
        let mut deferrals = Deferrals {
            target: ctx.defer.map(|target| target.with_presence(&calls.presence)),
            next_slot: &mut calls.next_slot,
            // Over HTTP, items need chunked transfer coding (HTTP/1.1) and a JSON-RPC id.
            streams: is_jsonrpc && head.minor_version >= 1,
            stream_attachments: head.accepts_binary_stream,
            attachments: binary.then_some(&mut attachments),
        };
        // A reply that waits for deferred calls is taken out whole, with where it began.
        let mut held: Option<(Vec<u8>, usize, Option<Section>)> = None;
        respond.with(out, b"application/json", |out| {
            // Built here, not captured: a value the closure borrowed was stored for it.
            let mut message = Message {
                context: &context,
                router: ctx.router,
                max_batch: ctx.limits.max_batch,
                deferrals: &mut deferrals,
            };
            let data = out.data();
            let start = data.len();
            let status = if is_jsonrpc {
                match message.process(body, &mut scratch.jsonrpc, data) {
                    Outcome::Silent => Status::NoContent,
                    Outcome::Replied | Outcome::ParseError => {
                        let retry_after = scratch.jsonrpc.retry_after;
                        (scratch.jsonrpc.http_status).map_or(Status::Ok, |code| Status::of_error(code, retry_after))
                    }
                }
            } else {
                rest_call(head.method, target, body, &mut message, scratch, data)
            };
            let section = deferrals.attachments.as_deref_mut().map(Section::take);
            if scratch.jsonrpc.deferred.is_empty() {
                let json_length = section.and_then(|section| attached::finish_http(out, start, section));
                Some((status, json_length))
            } else {
                held = Some((data.split_off(start), start, section));
                None
            }
        });
        if let Some((text, base, section)) = held {
            let headers = std::mem::take(&mut self.cors_headers);
            calls.hold_text(
                out,
                (text, base),
                MessageKind::Http(persistence, super::Lines::accepted(head), head.method),
                headers,
                &mut ctx.scratch.jsonrpc.deferred,
                section,
            );
        }
        if keep_alive {
            Step::Progressed
        } else {
            Step::Close
        }
    }
}

/// The JSON text and attachment section of a binary body, or why they cannot be read.
fn split_binary<'b>(head: &RequestHead, body: &'b [u8]) -> Result<(&'b [u8], &'b [u8]), &'static str> {
    let Some(json_len) = head.binary_json_length() else {
        return Err("Parse error: a binary body needs one UCall-JSON-Length of decimal digits");
    };
    wire::split_body(body, json_len).map_err(wire::Malformed::message)
}

/// Whether a WebSocket handshake may go on: without CORS, or without `Origin` (not a
/// browser), always; else only from an allowed origin. Browsers apply no CORS to WebSocket
/// (RFC 6455 §10.2: the server is to check `Origin` itself).
fn origin_allowed(cors: Option<&Cors>, head: &RequestHead, bytes: &[u8]) -> bool {
    match (cors, cors::Fields::get(bytes, head.cors.origin)) {
        (Some(cors), Some(origin)) => cors.allows_origin(origin),
        _ => true,
    }
}

/// The CORS header lines for the reply to `head` (parsed from `bytes`): a preflight's, or
/// those of any other request from an allowed origin.
fn cross_origin(cors: &Cors, head: &RequestHead, bytes: &[u8], out: &mut Vec<u8>) {
    let Some(origin) = cors::Fields::get(bytes, head.cors.origin) else {
        return; // same-origin, or not from a browser
    };
    let method = cors::Fields::get(bytes, head.cors.request_method);
    match method {
        Some(method) if head.method == Method::Options => {
            let requested = cors::Fields::get(bytes, head.cors.request_headers);
            let _ = cors.preflight(origin, method, requested, out);
        }
        _ => {
            cors.write_response_headers(origin, out);
        }
    }
}

/// `Cache-Control` for what no cache may keep.
const NO_STORE: &[u8] = b"Cache-Control: no-store\r\n";
/// The gzip content coding of a reply body (RFC 9110 §8.4).
const GZIPPED: &[u8] = b"Content-Encoding: gzip\r\n";
/// Replies that may be gzipped differ by what the client takes: caches keep both apart.
const VARY_ENCODING: &[u8] = b"Vary: Accept-Encoding\r\n";

/// Whether `target` is one of the server's own pages: a probe, `/metrics`, a document.
fn is_page(router: &Router, target: &str, draining: bool) -> bool {
    router.probe(target, draining).is_some()
        || router.metrics().is_some_and(|m| m.is_page(target))
        || router.page(target).is_some()
}

/// Whether the path of `target` names a registered procedure.
fn names_procedure(router: &Router, target: &str, scratch: &mut Scratch) -> bool {
    rest::split_target(target, &mut scratch.name).is_some()
        && std::str::from_utf8(&scratch.name).is_ok_and(|name| router.find(name).is_some())
}

fn is_root(target: &str) -> bool {
    matches!(target.split('?').next(), Some("/" | ""))
}

/// A POST to a named path carries JSON-RPC when the body is an array or an object with a
/// `"jsonrpc"` member; otherwise it is a REST-style call with the body as named params.
fn looks_like_jsonrpc(body: &[u8]) -> bool {
    if jsonrpc::message::is_batch(body) {
        return true;
    }
    let Some(text) = jsonrpc::as_text(body) else {
        return false;
    };
    // The member walk first: a REST body (no "jsonrpc") is then validated once, by the
    // REST call, not here as well.
    text.trim_start().starts_with('{')
        && jsonrpc::scan::Members::new(text).any(|(key, _)| key == "\"jsonrpc\"")
        && jsonrpc::message::is_json(text)
}

/// Run a REST-style call, writing the bare result (or an error object) as the body; with
/// the request log on, the call gets its line (a deferred one when it completes).
#[allow(clippy::too_many_arguments)]
fn rest_call(
    method: Method,
    target: &str,
    body: &[u8],
    message: &mut Message<'_, '_>,
    scratch: &mut Scratch,
    data: &mut Vec<u8>,
) -> Status {
    let Some(log) = message.router.request_log() else {
        return run_rest(method, target, body, message, scratch, None, data).0;
    };
    let start = data.len();
    let mut clock = Clock::default();
    let (status, code) = run_rest(method, target, body, message, scratch, Some(&mut clock), data);
    let context = message.context;
    if scratch.jsonrpc.deferred.is_empty() {
        let name = std::str::from_utf8(&scratch.name).ok().filter(|name| !name.is_empty());
        let ended = if clock.ended == 0 {
            monotonic_nanos()
        } else {
            clock.ended
        };
        let entry = Entry {
            ended,
            peer: context.peer(),
            transport: context.transport().as_str(),
            method: name,
            id: None,
            code,
            status: Some(status.code()),
            nanos: ended.saturating_sub(if clock.ended == 0 { ended } else { clock.started }),
            bytes_in: body.len(),
            bytes_out: data.len() - start,
            trace_id: context.trace().map(|trace| trace.parent.trace_id),
        };
        scratch.jsonrpc.lines.push(log, &entry);
    }
    status
}

/// [`rest_call`]'s work: the status, and the JSON-RPC code of the outcome (0 for a
/// result). With a `clock` (the request log is on), the call is timed in it, and a call
/// that defers carries its line's seed.
fn run_rest(
    method: Method,
    target: &str,
    body: &[u8],
    message: &mut Message<'_, '_>,
    scratch: &mut Scratch,
    clock: Option<&mut Clock>,
    data: &mut Vec<u8>,
) -> (Status, i32) {
    let Message {
        context,
        router,
        ref mut deferrals,
        ..
    } = *message;
    let failed = |data: &mut Vec<u8>, error: &RpcError| (rest_error(data, error), error.code());
    scratch.jsonrpc.deferred.clear();
    let Some(query) = rest::split_target(target, &mut scratch.name) else {
        scratch.name.clear();
        return failed(
            data,
            &RpcError::new(
                ErrorCode::InvalidRequest.code(),
                "Invalid Request: the path is not valid UTF-8",
            ),
        );
    };
    let name = std::str::from_utf8(&scratch.name).unwrap_or_default();
    let Some(found) = router.find(name) else {
        if let Some(metrics) = router.metrics() {
            metrics.unknown_method();
        }
        return failed(data, &RpcError::method_not_found(name));
    };
    if method == Method::Post && looks_like_jsonrpc(body) {
        // A path names one procedure or none: never a call of whatever the body names.
        let error = RpcError::new(
            ErrorCode::InvalidRequest.code(),
            format!("Invalid Request: POST /{name} takes the named params of '{name}' as a JSON object; JSON-RPC requests go to POST /"),
        );
        return failed(data, &error);
    }
    // GET, or a POST with no body (`curl -X POST '/sum?a=1&b=2'`): the query's params.
    let params = if method.reads() || body.iter().all(u8::is_ascii_whitespace) {
        if method == Method::Post && query.is_empty() {
            None
        } else if rest::query_to_params(query, &mut scratch.decoded, &mut scratch.params) {
            Some(std::str::from_utf8(&scratch.params).unwrap_or("{}"))
        } else {
            let error = RpcError::invalid_params("Invalid params: the query is not valid UTF-8");
            return failed(data, &error);
        }
    } else {
        match jsonrpc::as_text(body).filter(|text| jsonrpc::message::is_json(text)) {
            Some(text) if text.trim_start().starts_with('{') => Some(text.trim()),
            Some(_) => {
                let error = RpcError::invalid_params("Invalid params: the body must be a JSON object of named params");
                return failed(data, &error);
            }
            _ => {
                let error = RpcError::new(ErrorCode::ParseError.code(), "Parse error: the body is not valid JSON");
                return failed(data, &error);
            }
        }
    };
    let call = Call::new(name, params, Some("null")).with_context(context);
    let seed = clock.is_some().then(|| Seed {
        peer: context.peer(),
        transport: context.transport().as_str(),
        method: name,
        id: None,
        carrier: Carrier::Rest,
        bytes_in: body.len(),
        trace_id: context.trace().map(|trace| trace.parent.trace_id),
    });
    let outcome = match clock {
        Some(clock) => {
            let (outcome, ran) = dispatch::run_logged(found, &call, router.metrics(), seed.as_ref(), deferrals, data);
            *clock = ran;
            outcome
        }
        None => dispatch::run(found, &call, router.metrics(), deferrals, data),
    };
    match outcome {
        Ok(Invoked::Done) => (Status::Ok, 0),
        Ok(Invoked::Deferred(slot)) => {
            scratch.jsonrpc.deferred.push(DeferredAt {
                offset: data.len(),
                slot,
                id: None,
                tool: None,
            });
            (Status::Ok, 0)
        }
        Err(error) => failed(data, &error),
    }
}

/// Write a REST-style call's error object; the status its error names, else its code's
/// (the one table, `jsonrpc::codes`).
pub(super) fn rest_error(data: &mut Vec<u8>, error: &RpcError) -> Status {
    jsonrpc::write_error_object(data, error.code(), error.message(), error.data());
    Status::of_error(error.rest_status(), error.retry_after())
}

/// Answer a refused request and close; `headers` are its CORS header lines, if any, so
/// that a page from an allowed origin sees the refusal rather than a network error.
#[cold]
#[inline(never)]
pub(super) fn respond_rejection(
    out: &mut OutBuf,
    metrics: Option<&Arc<Metrics>>,
    date: &[u8],
    reject: Reject,
    headers: &[u8],
) {
    // Limits hit are worth a warning; malformed requests are the client's own business.
    let (level, why) = match reject.status {
        Status::PayloadTooLarge | Status::HeadersTooLarge | Status::UriTooLong => (log::Level::Warn, Refusal::Limit),
        Status::RequestTimeout => (log::Level::Warn, Refusal::Timeout),
        _ => (log::Level::Debug, Refusal::BadHttp),
    };
    if let Some(metrics) = metrics {
        metrics.refused(why);
    }
    crate::logs::throttled(
        &crate::logs::REQUEST_REFUSED,
        level,
        format_args!("request refused: {}", reject.message()),
    );
    let mut with_allow = Vec::new();
    let headers = match reject.allow {
        Some(allow) => {
            for part in [headers, b"Allow: ", allow.as_bytes(), b"\r\n"] {
                with_allow.extend_from_slice(part);
            }
            &with_allow[..]
        }
        None => headers,
    };
    http1::respond_out(out, Persistence::Close, headers, date, |out| {
        let data = out.data();
        if reject.to_head {
            return Some(reject.status); // no content (RFC 9110 §9.3.2)
        }
        let code = match reject.status {
            Status::MethodNotAllowed => ErrorCode::MethodNotFound,
            _ => ErrorCode::InvalidRequest,
        };
        let message = reject.message();
        jsonrpc::write_error_object(data, code.code(), &message, None);
        Some(reject.status)
    });
}
