// SPDX-License-Identifier: Apache-2.0
//! HTTP/1.1 requests to the MCP endpoint (Streamable HTTP): the Origin check, CORS for
//! browser clients, `GET` refused, `DELETE` ending a session, and each `POST` answered by
//! [`crate::mcp`]: JSON, or server-sent events once a tool's progress flows.

use super::{Calls, Context, Lines, MessageKind};
use crate::buffer::OutBuf;
use crate::context::{Context as CallContext, Transport};
use crate::dispatch::Deferrals;
use crate::http1::{self, Method, Persistence, RequestHead, Status};
use crate::jsonrpc::{self, ErrorCode};
use crate::mcp::{self as protocol, Answering, Fields};

/// What a refused bearer token's reply says (RFC 6750 §3; MCP "Authorization").
const AUTHENTICATE: &[u8] = b"WWW-Authenticate: Bearer realm=\"mcp\"\r\n";

/// Take the cancelled calls' placeholders (`null`, which no response is) out of a batch's
/// reply `body`, leaving it empty when none is left.
pub(super) fn drop_cancelled(body: &mut Vec<u8>) {
    let Ok(elements) = serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(body) else {
        return;
    };
    if elements.iter().all(|element| element.get() != "null") {
        return; // nothing was cancelled: the reply stays as written
    }
    let kept: Vec<&str> = elements
        .iter()
        .map(|element| element.get())
        .filter(|element| *element != "null")
        .collect();
    let mut reply = Vec::with_capacity(body.len());
    if !kept.is_empty() {
        reply.push(b'[');
        reply.extend_from_slice(kept.join(",").as_bytes());
        reply.push(b']');
    }
    *body = reply;
}

/// The header lines a reply of `status` carries besides `headers` (its CORS lines).
pub(super) fn headers(headers: &[u8], status: Status) -> Vec<u8> {
    let mut lines = headers.to_vec();
    if status.code() == 401 {
        lines.extend_from_slice(AUTHENTICATE);
    }
    lines
}

/// Answer a request to the MCP endpoint. `cors_headers` are the server's CORS lines for
/// it (when CORS is configured); the endpoint adds its own for loopback origins otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) fn answer(
    calls: &mut Calls,
    head: &RequestHead,
    body: &[u8],
    out: &mut OutBuf,
    ctx: &mut Context<'_>,
    persistence: Persistence,
    cors_headers: &mut Vec<u8>,
) {
    let Some(tools) = ctx.router.mcp() else {
        return;
    };
    let mut context = CallContext::new(Transport::Http, calls.tls, calls.peer, &calls.head)
        .with_timeout(head.timeout)
        .with_tls_subject(calls.tls_subject.as_deref())
        .with_liveness(calls.presence.liveness());
    context.received_now_if(ctx.router.times_calls());
    // Browsers say where a page comes from; a page from elsewhere could reach a server
    // on this machine through DNS rebinding (MCP: "Servers MUST validate the Origin").
    if let Some(raw_origin) = context.header("origin") {
        let origin = std::str::from_utf8(raw_origin).unwrap_or("");
        let by_cors = ctx
            .limits
            .cors
            .as_ref()
            .is_some_and(|cors| cors.allows_origin(raw_origin));
        if !by_cors && !tools.settings.allows_origin(origin) {
            http1::respond_out(out, persistence, b"", ctx.date, |out| {
                let message = "Forbidden: this origin may not call the MCP endpoint";
                jsonrpc::write_error(out.data(), None, ErrorCode::InvalidRequest.code(), message, None);
                Some(Status::Forbidden)
            });
            return;
        }
        if !by_cors {
            let requested = context.header("access-control-request-headers");
            cross_origin(origin, head.method == Method::Options, requested, cors_headers);
        }
    }
    match head.method {
        Method::Options => {
            http1::respond_out(out, persistence, cors_headers, ctx.date, |_| Some(Status::NoContent));
        }
        Method::Delete => end_session(out, ctx, persistence, cors_headers, &context, tools),
        Method::Get | Method::Head => {
            // No stream of the server's own messages is offered (2025-03-26: "The server
            // MUST either return Content-Type: text/event-stream in response to this HTTP
            // GET, or else return HTTP 405"; 2026-07-28 has none).
            let mut lines = cors_headers.clone();
            lines.extend_from_slice(allow(tools));
            let respond = http1::Respond {
                method: head.method,
                persistence,
                headers: &lines,
                date: ctx.date,
            };
            respond.to(out, b"application/json", |out| {
                let message = "Method Not Allowed: the MCP endpoint takes POST; no stream is opened by GET";
                jsonrpc::write_error(out.data(), None, ErrorCode::InvalidRequest.code(), message, None);
                Some(Status::Other(405))
            });
        }
        Method::Post => {
            let mut deferrals = Deferrals {
                target: ctx.defer.map(|target| target.with_presence(&calls.presence)),
                next_slot: &mut calls.next_slot,
                // Progress goes as server-sent events: chunked transfer coding (HTTP/1.1).
                streams: head.minor_version >= 1,
                stream_attachments: false,
                attachments: None,
            };
            let held = post(
                body,
                out,
                ctx,
                persistence,
                cors_headers,
                &context,
                tools,
                &mut deferrals,
            );
            if let Some((text, base)) = held {
                calls.hold_text(
                    out,
                    (text, base),
                    MessageKind::Http(persistence, Lines::Events, head.method),
                    std::mem::take(cors_headers),
                    &mut ctx.scratch.jsonrpc.deferred,
                    None,
                );
            }
        }
    }
}

/// The methods the endpoint takes: `DELETE` too when it has sessions to end.
fn allow(tools: &crate::discover::mcp::McpTools) -> &'static [u8] {
    if tools.sessions.is_some() {
        b"Allow: POST, DELETE, OPTIONS\r\n"
    } else {
        b"Allow: POST, OPTIONS\r\n"
    }
}

/// `DELETE`: end the session its `Mcp-Session-Id` names (2025-03-26 "Session
/// Management"): 204, 404 for one not open, 400 without the header, 405 when the server
/// mints no sessions ("the server MAY respond to this request with HTTP 405").
fn end_session(
    out: &mut OutBuf,
    ctx: &Context<'_>,
    persistence: Persistence,
    cors_headers: &[u8],
    context: &CallContext<'_>,
    tools: &crate::discover::mcp::McpTools,
) {
    let mut lines = cors_headers.to_vec();
    let refusal = match (&tools.sessions, Fields::of(context).session) {
        (None, _) => {
            lines.extend_from_slice(allow(tools));
            Some((
                Status::Other(405),
                "Method Not Allowed: this server mints no MCP sessions",
            ))
        }
        (Some(_), None) => Some((Status::BadRequest, "Bad Request: DELETE names its Mcp-Session-Id")),
        (Some(sessions), Some(session)) if sessions.close(session) => None,
        (Some(_), Some(_)) => Some((Status::NotFound, "Not Found: the session has ended or is unknown")),
    };
    http1::respond_out(out, persistence, &lines, ctx.date, |out| {
        let Some((status, message)) = refusal else {
            return Some(Status::NoContent);
        };
        jsonrpc::write_error(out.data(), None, ErrorCode::InvalidRequest.code(), message, None);
        Some(status)
    });
}

/// Answer a `POST`; returns the reply's text and place when it waits for a deferred call.
#[allow(clippy::too_many_arguments)]
fn post<'c>(
    body: &[u8],
    out: &mut OutBuf,
    ctx: &mut Context<'_>,
    persistence: Persistence,
    cors_headers: &[u8],
    context: &CallContext<'c>,
    tools: &crate::discover::mcp::McpTools,
    deferrals: &mut Deferrals<'c>,
) -> Option<(Vec<u8>, usize)> {
    let fields = Fields::of(context);
    let scratch = &mut ctx.scratch.jsonrpc;
    let (deferred, log_lines) = (&mut scratch.deferred, &mut scratch.lines);
    let mut held: Option<(Vec<u8>, usize)> = None;
    let mut reply = Vec::new();
    let mut at = Answering {
        fields: Some(&fields),
        context,
        router: ctx.router,
        tools,
        deferrals,
        deferred,
        lines: log_lines,
        opened: None,
    };
    let outcome = protocol::answer(body, &mut at, &mut reply);
    let mut lines = headers(cors_headers, outcome.status);
    if let Some(session) = at.opened.take() {
        for part in [b"Mcp-Session-Id: ".as_slice(), session.as_bytes(), b"\r\n"] {
            lines.extend_from_slice(part);
        }
    }
    let deferred = at.deferred;
    http1::respond_out(out, persistence, &lines, ctx.date, |out| {
        let data = out.data();
        let start = data.len();
        if outcome.is_accepted() {
            return Some(outcome.status); // no body
        }
        data.extend_from_slice(&reply);
        if deferred.is_empty() {
            Some(outcome.status)
        } else {
            // The offsets of deferred replies count from the reply's start.
            for at in deferred.iter_mut() {
                at.offset += start;
            }
            held = Some((data.split_off(start), start));
            None
        }
    });
    crate::buffer::keep(reply);
    held
}

/// The CORS lines for a page from an allowed `origin` (a preflight's when `preflight`,
/// allowing the header fields it asks for: `Mcp-Param-*` names are the tools' own).
fn cross_origin(origin: &str, preflight: bool, requested: Option<&[u8]>, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(b"Access-Control-Allow-Origin: ");
    out.extend_from_slice(origin.as_bytes());
    out.extend_from_slice(b"\r\nVary: Origin\r\n");
    if preflight {
        out.extend_from_slice(
            b"Access-Control-Allow-Methods: POST, GET, OPTIONS\r\n\
              Access-Control-Allow-Headers: Content-Type, Accept, Authorization, MCP-Protocol-Version, \
              Mcp-Session-Id, Mcp-Method, Mcp-Name, Last-Event-ID",
        );
        let is_list = |value: &[u8]| {
            value
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b',' | b' '))
        };
        if let Some(requested) = requested.filter(|value| !value.is_empty() && is_list(value)) {
            out.extend_from_slice(b", ");
            out.extend_from_slice(requested);
        }
        out.extend_from_slice(b"\r\nAccess-Control-Max-Age: 600\r\n");
    } else {
        out.extend_from_slice(b"Access-Control-Expose-Headers: Mcp-Session-Id, WWW-Authenticate\r\n");
    }
}
