// SPDX-License-Identifier: Apache-2.0
//! WebSocket after an HTTP upgrade (RFC 6455): frames in, one request or batch per
//! message, one text frame per reply. Under the binary-message subprotocol a binary
//! message is a binary message of docs/wire.md §3.3: prefix, JSON text, attachments.

use super::{attached, Calls, Context, MessageKind, Step};
use crate::buffer::OutBuf;
use crate::context::Transport;
use crate::dispatch::Outcome;
use crate::jsonrpc;
use crate::jsonrpc::section::Section;
use crate::wire;
use crate::ws;

/// A WebSocket connection's state: the message being reassembled and the frame being
/// received.
#[derive(Debug, Default)]
pub(super) struct WebSocket {
    /// The message being reassembled (unmasked) and its opcode.
    message: Vec<u8>,
    opcode: Option<ws::Opcode>,
    /// The size of the frame being received, header included, once its header is in; 0
    /// otherwise.
    frame_len: usize,
    /// The binary-message subprotocol was selected at the upgrade.
    binary: bool,
}

impl WebSocket {
    /// A connection just upgraded; `binary`: under the binary-message subprotocol.
    pub(super) fn new(binary: bool) -> Self {
        WebSocket {
            binary,
            ..WebSocket::default()
        }
    }

    /// Whether no data message is partly received.
    pub(super) fn is_between_messages(&self) -> bool {
        self.opcode.is_none()
    }

    pub(super) fn holds_buffers(&self) -> bool {
        self.message.capacity() > 0
    }

    /// Between messages: the next one is reassembled from nothing.
    pub(super) fn release_buffers(&mut self) {
        self.message = Vec::new();
    }

    /// The size of the frame being received, header included, once its header is in.
    pub(super) fn frame_wanted(&self) -> usize {
        self.frame_len
    }

    /// One WebSocket frame (RFC 6455 §5): control frames answered at once, data frames
    /// reassembled into messages, each message one JSON-RPC request or batch.
    pub(super) fn step(
        &mut self,
        calls: &mut Calls,
        rest: &[u8],
        out: &mut OutBuf,
        ctx: &mut Context<'_>,
    ) -> (usize, Step) {
        let header = match ws::read_header(rest, ctx.limits.max_body_bytes) {
            ws::Header::Partial => return (0, Step::NeedMore),
            ws::Header::Fail(code) => return (0, ws_fail(out, code)),
            ws::Header::Frame(header) => header,
        };
        let total = header.header_len + header.payload_len;
        if rest.len() < total {
            self.frame_len = total;
            return (0, Step::NeedMore);
        }
        self.frame_len = 0;
        let payload = &rest[header.header_len..total];
        let step = match header.opcode {
            ws::Opcode::Ping | ws::Opcode::Close => {
                let mut control = Vec::with_capacity(payload.len());
                ws::unmask_into(payload, header.mask, &mut control);
                let data = out.data();
                let start = data.len();
                if header.opcode == ws::Opcode::Ping {
                    // §5.5.3: a Pong with the Ping's application data.
                    ws::frame(ws::Opcode::Pong, &control, data);
                    let end = data.len();
                    out.commit(start..end);
                    Step::Progressed
                } else {
                    // The client is leaving: calls still under way answer nobody.
                    calls.presence.gone();
                    // §5.5.1: answer a Close with a Close, then close the connection.
                    let code = ws::close_reply(&control);
                    ws::frame(ws::Opcode::Close, &code.to_be_bytes(), data);
                    let end = data.len();
                    out.commit(start..end);
                    Step::Close
                }
            }
            ws::Opcode::Pong => Step::Progressed,
            ws::Opcode::Text | ws::Opcode::Binary if self.opcode.is_some() => {
                return (0, ws_fail(out, ws::close::PROTOCOL_ERROR));
            }
            ws::Opcode::Continuation if self.opcode.is_none() => {
                return (0, ws_fail(out, ws::close::PROTOCOL_ERROR));
            }
            data_opcode => {
                if data_opcode != ws::Opcode::Continuation {
                    self.opcode = Some(data_opcode);
                }
                if self.message.len() + payload.len() > ctx.limits.max_body_bytes {
                    return (0, ws_fail(out, ws::close::MESSAGE_TOO_BIG));
                }
                ws::unmask_into(payload, header.mask, &mut self.message);
                if header.fin {
                    let opcode = self.opcode.take();
                    if opcode == Some(ws::Opcode::Text) && jsonrpc::as_text(&self.message).is_none() {
                        return (0, ws_fail(out, ws::close::INVALID_PAYLOAD));
                    }
                    let binary = self.binary && opcode == Some(ws::Opcode::Binary);
                    return (total, self.answer(calls, binary, out, ctx));
                }
                Step::Progressed
            }
        };
        (total, step)
    }

    /// Reply to the reassembled message as one text frame (nothing for notifications);
    /// after the connection's last exchange, a Close frame follows (1000, or 1001 when the
    /// server is shutting down).
    fn answer(&mut self, calls: &mut Calls, binary: bool, out: &mut OutBuf, ctx: &mut Context<'_>) -> Step {
        self.reply(calls, binary, out, ctx);
        if calls.count_exchange(ctx) {
            let code = if ctx.draining {
                ws::close::GOING_AWAY
            } else {
                ws::close::NORMAL
            };
            let data = out.data();
            let start = data.len();
            ws::frame(ws::Opcode::Close, &code.to_be_bytes(), data);
            let end = data.len();
            out.commit(start..end);
            return Step::Close;
        }
        Step::Progressed
    }

    fn reply(&mut self, calls: &mut Calls, binary: bool, out: &mut OutBuf, ctx: &mut Context<'_>) {
        let mut message = std::mem::take(&mut self.message);
        if !binary {
            reply_text(calls, &message, out, ctx);
        } else {
            match wire::split_message(&message) {
                Ok((text, section)) => reply_binary(calls, text, section, out, ctx),
                Err(malformed) => {
                    let data = out.data();
                    let start = reserve_ws_header(data);
                    jsonrpc::write_error(
                        data,
                        None,
                        jsonrpc::ErrorCode::ParseError.code(),
                        malformed.message(),
                        None,
                    );
                    commit_ws_text(out, start);
                }
            }
        }
        message.clear();
        self.message = message;
    }
}

/// Answer a text message with one text frame (none for notifications): no binary work.
fn reply_text(calls: &mut Calls, text: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) {
    let data = out.data();
    let reserved = data.len();
    let start = reserve_ws_header(data);
    let outcome = calls.run_text(Transport::WebSocket, text, (None, None), data, ctx);
    let deferred = &mut ctx.scratch.jsonrpc.deferred;
    if !deferred.is_empty() {
        calls.hold(out, (reserved, start), MessageKind::WebSocket, deferred, None);
    } else if outcome != Outcome::Silent {
        commit_ws_text(out, start);
    } else {
        out.data().truncate(reserved);
    }
}

/// Answer the JSON text of a binary message whose attachment section is `section`: in
/// one binary message when the reply has attachments, room for its prefix kept before
/// the reply (docs/wire.md §3.3).
#[inline(never)]
fn reply_binary(calls: &mut Calls, text: &[u8], section: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) {
    let data = out.data();
    let reserved = data.len();
    reserve_ws_header(data);
    let start = attached::reserve_prefix(data);
    let mut attachments = Section::new();
    let parts = (Some(section), Some(&mut attachments));
    let outcome = calls.run_text(Transport::WebSocket, text, parts, data, ctx);
    let deferred = &mut ctx.scratch.jsonrpc.deferred;
    if !deferred.is_empty() {
        calls.hold(
            out,
            (reserved, start),
            MessageKind::WebSocket,
            deferred,
            Some(attachments),
        );
    } else if outcome != Outcome::Silent {
        attached::commit_ws_reply(out, start, attachments);
    } else {
        out.data().truncate(reserved);
    }
}

/// Fail the WebSocket connection (§7.1.7): a Close frame with `code`, then close.
#[cold]
fn ws_fail(out: &mut OutBuf, code: u16) -> Step {
    let data = out.data();
    let start = data.len();
    ws::frame(ws::Opcode::Close, &code.to_be_bytes(), data);
    let end = data.len();
    out.commit(start..end);
    Step::Close
}

/// Reserve room for a WebSocket frame header at the end of `data`, so that the message
/// can be written in place before its length is known; returns where the message starts.
pub(super) fn reserve_ws_header(data: &mut Vec<u8>) -> usize {
    data.resize(data.len() + ws::MAX_HEADER, 0);
    data.len()
}

/// Queue the message written (and attached) since `start` (see [`reserve_ws_header`]) as
/// a text frame, its header in the room reserved before it.
pub(super) fn commit_ws_text(out: &mut OutBuf, start: usize) {
    commit_ws(out, start, ws::Opcode::Text);
}

/// Queue the message written (and attached) since `start` as one frame of `opcode`, its
/// header in the room (at least [`ws::MAX_HEADER`] bytes) before it.
#[inline]
pub(super) fn commit_ws(out: &mut OutBuf, start: usize, opcode: ws::Opcode) {
    let attached = out.attached_since(start);
    let data = out.data();
    let mut room = [0u8; ws::MAX_HEADER];
    let used = ws::write_header(&mut room, opcode, data.len() - start + attached);
    data[start - used..start].copy_from_slice(&room[ws::MAX_HEADER - used..]);
    let end = data.len();
    out.commit(start - used..end);
}
