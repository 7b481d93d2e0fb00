// SPDX-License-Identifier: Apache-2.0
//! A held message's reply (one whose calls deferred), written once every call in it has
//! finished: the completed results in their places, framed for the message's transport, a
//! binary message when the caller accepts one and a result has attachments.

use super::attached::{self, commit_tcp_reply, commit_ws_reply};
use super::http::rest_error;
use super::tcp::one_line;
use super::websocket::{commit_ws_text, reserve_ws_header};
use super::{mcp, MessageKind, PendingMessage, PendingSlot};
use crate::buffer::{self, OutBuf};
use crate::http1::{self, Status};
use crate::jsonrpc;
use crate::jsonrpc::section::Section;

/// Write a held message's reply, now that every deferred call in it has finished,
/// straight into the output. A large result is not copied: its buffer is attached to the
/// output (over raw TCP, where a reply must be made one line, it is copied once).
pub(super) fn render(message: PendingMessage, out: &mut OutBuf, date: &[u8]) {
    let PendingMessage {
        hole,
        kind,
        text,
        headers,
        slots,
        streamed,
        attachments,
        ..
    } = message;
    let respond = |method, persistence| http1::Respond {
        method,
        persistence,
        headers: &headers,
        date,
    };
    out.fill(hole, |out| match (kind, attachments) {
        (MessageKind::Stream, Some(mut section)) => {
            let json_start = attached::reserve_prefix(out.data());
            write_completed(&text, slots, out, false, Some(&mut section));
            commit_tcp_reply(out, json_start, section);
        }
        (MessageKind::WebSocket, Some(mut section)) => {
            reserve_ws_header(out.data());
            let json_start = attached::reserve_prefix(out.data());
            write_completed(&text, slots, out, true, Some(&mut section));
            commit_ws_reply(out, json_start, section);
        }
        (MessageKind::Http(persistence, _, method), Some(mut section)) if !streamed => {
            respond(method, persistence).with(out, b"application/json", |out| {
                let json_start = out.data().len();
                let status = write_completed(&text, slots, out, true, Some(&mut section));
                Some((status, attached::finish_http(out, json_start, section)))
            });
        }
        (MessageKind::Stream, _) => {
            let start = out.data().len();
            write_completed(&text, slots, out, false, None);
            let data = out.data();
            // The held text ends with the reply's own newline; the rest must be one line.
            let end = data.len();
            one_line(&mut data[start..end.saturating_sub(1).max(start)]);
            out.commit(start..end);
        }
        (MessageKind::WebSocket, _) => {
            let start = reserve_ws_header(out.data());
            write_completed(&text, slots, out, true, None);
            commit_ws_text(out, start);
        }
        (MessageKind::Http(_, lines, _), mut section) if streamed => {
            // The final reply is the body's last line or event (docs/streaming.md), a
            // binary message in a binary stream when its result has attachments; a
            // cancelled MCP call's stream ends without one. (A result has attachments only
            // where the stream may carry them: HTTP that accepts a binary stream.)
            let mut reply = OutBuf::new();
            write_completed(&text, slots, &mut reply, false, section.as_mut());
            let reply = std::mem::take(reply.data());
            let start = out.data().len();
            if !reply.is_empty() {
                lines.write_chunk(out, reply, section);
            }
            out.data().extend_from_slice(http1::LAST_CHUNK);
            let end = out.data().len();
            out.commit(start..end);
        }
        (MessageKind::Http(persistence, _, _), _) if slots.iter().any(|slot| slot.tool.is_some()) => {
            // An MCP reply: its status (a hook's 401) is known once it is written, and
            // decides its header lines.
            let batch = !text.is_empty();
            let mut body = OutBuf::new();
            let status = write_completed(&text, slots, &mut body, false, None);
            let mut body = std::mem::take(body.data());
            if batch {
                // Looked at once written: a cancellation may come while they are.
                mcp::drop_cancelled(&mut body);
            }
            let headers = mcp::headers(&headers, status);
            if body.is_empty() {
                // Every request in it was cancelled: no response goes, and a request's
                // POST is answered with JSON or an event stream, so an empty stream.
                http1::respond_typed(out, persistence, &headers, date, b"text/event-stream", |_| {
                    Some(Status::Ok)
                });
            } else {
                http1::respond_out(out, persistence, &headers, date, |out| {
                    out.data().extend_from_slice(&body);
                    Some(status)
                });
            }
        }
        (MessageKind::Http(persistence, _, method), _) => {
            respond(method, persistence).to(out, b"application/json", |out| {
                Some(write_completed(&text, slots, out, true, None))
            });
        }
    });
}

/// Results at least this large are attached to the output rather than copied into it.
const ATTACH_MIN: usize = 64 << 10;

/// Write a held message's `text` with each slot's outcome in its place; the HTTP status
/// a REST-style error calls for, or the one a single call's error names. With `attach`,
/// large results are attached (see
/// [`OutBuf::attach`]) rather than copied; either way their buffers are kept for reuse.
///
/// With `attachments` (the caller accepts a binary reply), each result's attachments join
/// them, its placeholders rewritten for their place in the message's section.
fn write_completed(
    text: &[u8],
    slots: Vec<PendingSlot>,
    out: &mut OutBuf,
    attach: bool,
    mut attachments: Option<&mut Section>,
) -> Status {
    let mut status = Status::Ok;
    // A single call's reply is its one slot, with no text around it; a batch's has `[`.
    let single = text.is_empty();
    let mut copied = 0;
    for slot in slots {
        out.data().extend_from_slice(&text[copied..slot.at]);
        copied = slot.at;
        let outcome = slot
            .outcome
            .expect("invariant: rendered only once every slot is filled");
        let data = out.data();
        if let (Some(tool), Some(id)) = (&slot.tool, &slot.id) {
            if tool.is_cancelled() {
                // No response: nothing for a single call, a placeholder in a batch
                // (taken out by `mcp::drop_cancelled`).
                if !single {
                    data.extend_from_slice(b"null");
                }
                if let Ok(result) = outcome {
                    buffer::keep(result);
                }
                continue;
            }
            let named = tool.write(data, id, outcome.as_ref().map(Vec::as_slice));
            if let Some(named) = named.filter(|_| single) {
                status = Status::from_code(named);
            }
            if let Ok(result) = outcome {
                buffer::keep(result);
            }
            continue;
        }
        match (slot.id, outcome) {
            (Some(id), Ok(result)) if !slot.attachments.is_empty() && attachments.is_some() => {
                jsonrpc::write_result_opening(data, &id);
                if let Some(section) = attachments.as_deref_mut() {
                    section.append_rebased(slot.attachments, &result, data);
                }
                data.push(b'}');
            }
            (id, Ok(result)) if attach && result.len() >= ATTACH_MIN => {
                if let Some(id) = &id {
                    jsonrpc::write_result_opening(data, id);
                }
                out.attach(result);
                if id.is_some() {
                    out.data().push(b'}');
                }
            }
            (Some(id), Ok(result)) => {
                jsonrpc::write_result(data, &id, &result);
                buffer::keep(result);
            }
            (Some(id), Err(error)) => {
                jsonrpc::write_rpc_error(data, Some(&id), &error);
                if let Some(named) = error.http_status().filter(|_| single) {
                    status = Status::of_error(named, error.retry_after());
                }
            }
            (None, Ok(result)) => {
                data.extend_from_slice(&result);
                buffer::keep(result);
            }
            (None, Err(error)) => status = rest_error(data, &error),
        }
    }
    out.data().extend_from_slice(&text[copied..]);
    status
}
