// SPDX-License-Identifier: Apache-2.0
//! One connection's protocol state, sans-I/O: bytes in, reply bytes out.
//!
//! The first non-whitespace byte picks the protocol for the connection's lifetime: an
//! uppercase ASCII letter, as every HTTP method starts (RFC 9110 §9), is HTTP/1.1; anything
//! else is a raw TCP stream of JSON texts.

use std::collections::VecDeque;

use crate::buffer::{self, OutBuf};
use crate::defer::{Outcome as Completed, Sink, Target, BUSY_FROM, BUSY_SHARE};
use crate::dispatch::{self, Deferrals, DeferredAt, Invoked, Outcome};
use crate::http1::chunked::{ChunkError, ChunkedDecoder};
use crate::http1::cors::{self, Cors};
use crate::http1::{self, rest, Framing, HeadStatus, Method, Persistence, Reject, RequestHead, Status};
use crate::jsonrpc::{self, ErrorCode, RpcError};
use crate::router::{Call, Router};
use crate::stream::{Frame, Framer};
use crate::ws;

/// Protocol limits and rules (a subset of the server configuration).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body (HTTP) or JSON text (raw TCP), in bytes.
    pub max_body_bytes: usize,
    /// Largest HTTP request head (and chunked trailer section), in bytes.
    pub max_head_bytes: usize,
    /// Most requests in one batch.
    pub max_batch: usize,
    /// Exchanges served on one connection before it is closed: each HTTP request, raw TCP
    /// JSON text or WebSocket message (a batch is one) counts once, answered or not. The
    /// last reply over HTTP says `Connection: close`, a WebSocket gets a Close frame with
    /// 1000 after it, and the connection closes once its replies are flushed; requests the
    /// client sent beyond it are not read. `None` (the default): no limit.
    pub max_exchanges_per_connection: Option<u32>,
    /// Cross-origin requests from browsers (CORS); `None` (the default): none are allowed
    /// and `OPTIONS` gets 405.
    pub cors: Option<Cors>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 64 << 20,
            max_head_bytes: 16 << 10,
            max_batch: 1024,
            max_exchanges_per_connection: None,
            cors: None,
        }
    }
}

/// Buffers reused across requests and connections of one worker.
#[derive(Default)]
pub struct Scratch {
    jsonrpc: dispatch::Scratch,
    name: Vec<u8>,
    params: Vec<u8>,
    decoded: Vec<u8>,
}

/// What a session needs from its worker.
pub struct Context<'a> {
    /// The procedures.
    pub router: &'a Router,
    /// The limits in force.
    pub limits: &'a Limits,
    /// The current HTTP date (29 bytes, refreshed once a second by the worker).
    pub date: &'a [u8],
    /// Reused buffers.
    pub scratch: &'a mut Scratch,
    /// Where this connection's deferred replies report; `None` where deferring is unavailable.
    pub defer: Option<Target<'a>>,
    /// The server is shutting down: each reply is its connection's last (HTTP replies say
    /// `Connection: close`, WebSocket sends Close 1001, raw TCP closes after the reply).
    pub draining: bool,
}

impl<'a> Context<'a> {
    /// The serving worker's sink, where deferring is available (see
    /// [`Session::is_saturated`]).
    #[must_use]
    pub fn worker(&self) -> Option<&'a Sink> {
        self.defer.map(|target| &**target.sink)
    }
}

/// Most messages of one connection whose replies may be awaited at once; beyond it the
/// session reads no further requests until some complete.
const MAX_PENDING_MESSAGES: usize = 1024;

/// A message whose reply waits for deferred calls: its text so far with the places where
/// the deferred replies go, and the hole it fills in the output.
#[derive(Debug)]
struct PendingMessage {
    hole: u64,
    kind: MessageKind,
    text: Vec<u8>,
    /// HTTP: header lines the reply's head carries (CORS).
    headers: Vec<u8>,
    /// In ascending slot order (slots are numbered as calls defer).
    slots: Vec<PendingSlot>,
    /// Slots still without an outcome.
    awaited: usize,
}

#[derive(Debug, Clone, Copy)]
enum MessageKind {
    Stream,
    Http(Persistence),
    WebSocket,
}

#[derive(Debug)]
struct PendingSlot {
    at: usize,
    slot: u64,
    /// The request's raw id; `None` for a REST call (the bare result is the body).
    id: Option<Box<str>>,
    outcome: Option<Completed>,
}

/// What one [`Session::feed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes used up; the caller drops them.
    pub consumed: usize,
    /// Close the connection once the output is flushed.
    pub close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Unknown,
    Http,
    Stream,
    /// After an HTTP upgrade (RFC 6455).
    WebSocket,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Progressed,
    NeedMore,
    Close,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Session {
    protocol: Protocol,
    closing: bool,
    /// HTTP: `Some` while the body of this head is awaited.
    pending_head: Option<RequestHead>,
    target: String,
    chunked: ChunkedDecoder,
    body: Vec<u8>,
    framer: Framer,
    next_slot: u64,
    next_hole: u64,
    /// Messages awaiting deferred replies, in arrival order. Slots are numbered as calls
    /// defer, so the first slots of these messages ascend: a completion finds its message
    /// by binary search, and completions in request order take the front.
    pending: VecDeque<PendingMessage>,
    /// WebSocket: the message being reassembled (unmasked) and its opcode.
    ws_message: Vec<u8>,
    ws_opcode: Option<ws::Opcode>,
    /// WebSocket: the size of the frame being received, header included, once its header
    /// is in; 0 otherwise.
    ws_frame_len: usize,
    /// Exchanges so far (see [`Limits::max_exchanges_per_connection`]).
    exchanges: u32,
    /// The last HTTP request asked to close the connection after its reply.
    close_asked: bool,
    /// HTTP: the CORS header lines for the reply to the current request.
    cors_headers: Vec<u8>,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A new connection's state.
    #[must_use]
    pub fn new() -> Self {
        Session {
            protocol: Protocol::Unknown,
            closing: false,
            pending_head: None,
            target: String::new(),
            chunked: ChunkedDecoder::default(),
            body: Vec::new(),
            framer: Framer::default(),
            next_slot: 0,
            next_hole: 0,
            pending: VecDeque::new(),
            ws_message: Vec::new(),
            ws_opcode: None,
            ws_frame_len: 0,
            exchanges: 0,
            close_asked: false,
            cors_headers: Vec::new(),
        }
    }

    /// Count one exchange; whether it is the last this connection may have (the limit is
    /// reached, or the server is shutting down).
    fn count_exchange(&mut self, ctx: &Context<'_>) -> bool {
        self.exchanges = self.exchanges.saturating_add(1);
        ctx.draining
            || ctx
                .limits
                .max_exchanges_per_connection
                .is_some_and(|max| self.exchanges >= max)
    }

    /// Consume complete requests from `input`, appending their replies to `out`.
    ///
    /// Stops early once `out` holds more than `out_budget` bytes (the caller resumes after
    /// flushing), so a client that sends without reading cannot grow the output unbounded.
    pub fn feed(&mut self, input: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>, out_budget: usize) -> Progress {
        let mut consumed = 0;
        let worker = ctx.worker();
        while !self.closing && consumed < input.len() && out.pending() <= out_budget && !self.is_saturated(worker) {
            let rest = &input[consumed..];
            let (used, step) = match self.protocol {
                Protocol::Unknown => {
                    match rest.iter().position(|c| !c.is_ascii_whitespace()) {
                        Some(i) if rest[i].is_ascii_uppercase() => self.protocol = Protocol::Http,
                        Some(_) => self.protocol = Protocol::Stream,
                        None => {}
                    }
                    (
                        0,
                        if self.protocol == Protocol::Unknown {
                            Step::NeedMore
                        } else {
                            Step::Progressed
                        },
                    )
                }
                Protocol::Http => self.step_http(rest, out, ctx),
                Protocol::Stream => self.step_stream(rest, out, ctx),
                Protocol::WebSocket => self.step_websocket(rest, out, ctx),
            };
            consumed += used;
            match step {
                Step::Progressed => {}
                Step::NeedMore => break,
                Step::Close => self.closing = true,
            }
        }
        Progress {
            consumed,
            close: self.closing,
        }
    }

    /// Whether no request is partly received (given that no input is buffered).
    #[must_use]
    pub fn is_between_requests(&self) -> bool {
        self.pending_head.is_none() && !self.framer.in_text() && self.ws_opcode.is_none()
    }

    /// How many bytes, counted from the first one not yet consumed, the message being
    /// received needs in all, when its framing says so (an HTTP `Content-Length` body, a
    /// WebSocket frame); 0 when unknown. Engines make room for it at once instead of
    /// growing the input, and copying it, step by step.
    #[must_use]
    pub fn input_wanted(&self) -> usize {
        match (self.protocol, &self.pending_head) {
            (Protocol::Http, Some(head)) => match head.framing {
                Framing::Length(length) => length,
                _ => 0,
            },
            (Protocol::WebSocket, _) => self.ws_frame_len,
            _ => 0,
        }
    }

    /// Whether the connection closes because the client asked for it (`Connection:
    /// close`, or HTTP/1.0 without keep-alive): such a client sends nothing after that
    /// request (RFC 9112 §9.6).
    #[must_use]
    pub fn close_was_asked(&self) -> bool {
        self.closing && self.close_asked
    }

    /// Whether an HTTP request head is being received (the header time-out applies).
    #[must_use]
    pub fn is_reading_head(&self) -> bool {
        matches!(self.protocol, Protocol::Unknown | Protocol::Http) && self.pending_head.is_none()
    }

    /// Whether replies are awaited from deferred calls.
    #[must_use]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether so many replies are awaited that no further request is read for now: by
    /// this session ([`MAX_PENDING_MESSAGES`] messages, or [`BUSY_SHARE`] while its
    /// `worker` awaits [`BUSY_FROM`] calls), or by its `worker`, whose sink then is full
    /// ([`crate::defer::MAX_AWAITED`] calls).
    #[must_use]
    pub fn is_saturated(&self, worker: Option<&Sink>) -> bool {
        let pending = self.pending.len();
        pending >= MAX_PENDING_MESSAGES
            || worker.is_some_and(|sink| sink.is_full() || (pending >= BUSY_SHARE && sink.awaited() >= BUSY_FROM))
    }

    /// A deferred call finished: put its reply in place, and once its message is whole,
    /// queue the message's reply. Returns `false` for a slot this session does not await
    /// (a notification, or a call whose handler failed after deferring).
    pub fn complete(&mut self, slot: u64, outcome: Completed, out: &mut OutBuf, date: &[u8]) -> bool {
        // Calls mostly complete in request order: the first message's. Otherwise the last
        // message whose first slot is at most `slot` is the only one that can hold it
        // (deep pipelines await a thousand messages; a scan per completion was a third of
        // the Python server's time).
        let in_first = self
            .pending
            .front()
            .and_then(|m| m.slots.last())
            .is_some_and(|last| slot <= last.slot);
        let index = if in_first {
            0
        } else {
            match self.pending.partition_point(|m| m.slots[0].slot <= slot).checked_sub(1) {
                Some(index) => index,
                None => return false,
            }
        };
        let message = &mut self.pending[index];
        let Ok(at) = message.slots.binary_search_by_key(&slot, |s| s.slot) else {
            return false;
        };
        let pending_slot = &mut message.slots[at];
        if pending_slot.outcome.is_some() {
            return false;
        }
        pending_slot.outcome = Some(outcome);
        message.awaited -= 1;
        if message.awaited == 0 {
            let message = self
                .pending
                .remove(index)
                .expect("invariant: the index was found above");
            render(message, out, date);
        }
        true
    }

    /// Hold the message written to `out.data()[start..]`: its deferred replies (listed in
    /// `deferred`) come later, and a hole keeps its place in the output meanwhile.
    fn hold(&mut self, out: &mut OutBuf, start: usize, kind: MessageKind, deferred: &mut Vec<DeferredAt>) {
        let text = out.data().split_off(start);
        self.hold_text(out, text, start, kind, Vec::new(), deferred);
    }

    /// Like [`Session::hold`] for a message whose `text` was taken out already; `base` is
    /// the offset it had, which the offsets in `deferred` count from.
    fn hold_text(
        &mut self,
        out: &mut OutBuf,
        text: Vec<u8>,
        base: usize,
        kind: MessageKind,
        headers: Vec<u8>,
        deferred: &mut Vec<DeferredAt>,
    ) {
        let slots: Vec<PendingSlot> = deferred
            .drain(..)
            .map(|d| PendingSlot {
                at: d.offset - base,
                slot: d.slot,
                id: d.id,
                outcome: None,
            })
            .collect();
        debug_assert!(
            slots.first().is_some_and(|first| self
                .pending
                .back()
                .and_then(|last| last.slots.last())
                .is_none_or(|last| last.slot < first.slot))
                && slots.windows(2).all(|pair| pair[0].slot < pair[1].slot),
            "a held message has slots, in order, numbered after those held before"
        );
        let hole = self.next_hole;
        self.next_hole += 1;
        out.push_hole(hole);
        self.pending.push_back(PendingMessage {
            hole,
            kind,
            text,
            headers,
            awaited: slots.len(),
            slots,
        });
    }

    /// Called when a client took too long: queue the reply it gets, if any, before closing.
    pub fn time_out(&mut self, out: &mut OutBuf, date: &[u8]) {
        if self.protocol == Protocol::Http && !self.closing {
            let reject = http1::reject(Status::RequestTimeout, "request not received in time");
            respond_rejection(out, date, reject);
        }
        self.closing = true;
    }

    /// The server is shutting down and this connection is between requests: queue its
    /// goodbye, if its protocol has one (WebSocket: Close 1001, "going away"). Returns
    /// whether one was queued; the connection should then close once it is sent.
    pub fn going_away(&mut self, out: &mut OutBuf) -> bool {
        if self.protocol != Protocol::WebSocket || self.closing {
            return false;
        }
        let data = out.data();
        let start = data.len();
        ws::frame(ws::Opcode::Close, &ws::close::GOING_AWAY.to_be_bytes(), data);
        let end = data.len();
        out.commit(start..end);
        self.closing = true;
        true
    }

    /// The server is shutting down, and this HTTP connection awaits deferred replies with
    /// no further request received: the last of them is its last reply (it says
    /// `Connection: close`, RFC 9112 9.6) and nothing more is read. Returns whether the
    /// connection now closes once those replies are sent.
    pub fn last_reply_closes(&mut self) -> bool {
        if self.protocol != Protocol::Http || self.closing {
            return false;
        }
        let Some(last) = self.pending.back_mut() else {
            return false;
        };
        if let MessageKind::Http(persistence) = &mut last.kind {
            *persistence = Persistence::Close;
        }
        self.closing = true;
        true
    }

    /// The peer will send nothing more (TCP half-close), and the input fed so far has been
    /// consumed as far as it can be; `rest` is what is left of it. Over raw TCP, a bare
    /// word (`42`, `null`) ends with the input and is answered as any text; any other text
    /// cut short can never be completed: it is answered `-32700` (id `null`). The session
    /// closes either way.
    pub fn end_of_input(&mut self, rest: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) {
        if self.protocol == Protocol::Stream && !self.closing {
            if let Some(range) = self.framer.finish(rest) {
                self.answer_text(&rest[range], out, ctx);
                self.closing = true;
                return;
            }
        }
        if self.protocol == Protocol::Stream && !self.closing && self.framer.in_text() {
            let data = out.data();
            let start = data.len();
            jsonrpc::write_error(
                data,
                None,
                ErrorCode::ParseError.code(),
                "Parse error: the input ended inside a JSON text",
                None,
            );
            data.push(b'\n');
            let end = data.len();
            out.commit(start..end);
        }
        self.closing = true;
    }

    fn step_stream(&mut self, rest: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> (usize, Step) {
        match self.framer.next(rest, ctx.limits.max_body_bytes) {
            Frame::Complete(range) => {
                let step = self.answer_text(&rest[range.clone()], out, ctx);
                (range.end, step)
            }
            Frame::Incomplete { skip } => (skip, Step::NeedMore),
            Frame::Invalid => {
                let data = out.data();
                let start = data.len();
                jsonrpc::write_error(
                    data,
                    None,
                    ErrorCode::ParseError.code(),
                    "Parse error: not the start of a JSON text",
                    None,
                );
                data.push(b'\n');
                let end = data.len();
                out.commit(start..end);
                (0, Step::Close)
            }
            Frame::TooLarge => {
                let data = out.data();
                let start = data.len();
                let message = format!("Invalid Request: request exceeds {} bytes", ctx.limits.max_body_bytes);
                crate::logs::throttled(
                    &crate::logs::REQUEST_REFUSED,
                    log::Level::Warn,
                    format_args!(
                        "request refused: more than max_body_bytes = {}",
                        ctx.limits.max_body_bytes
                    ),
                );
                jsonrpc::write_error(data, None, ErrorCode::InvalidRequest.code(), &message, None);
                data.push(b'\n');
                let end = data.len();
                out.commit(start..end);
                (0, Step::Close)
            }
        }
    }

    /// Answer one raw TCP text with one reply line (none for notifications).
    fn answer_text(&mut self, text: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> Step {
        self.framer.reset();
        let data = out.data();
        let start = data.len();
        let mut deferrals = Deferrals {
            target: ctx.defer,
            next_slot: &mut self.next_slot,
        };
        let scratch = &mut ctx.scratch.jsonrpc;
        let outcome = dispatch::process(text, ctx.router, ctx.limits.max_batch, scratch, &mut deferrals, data);
        if outcome != Outcome::Silent {
            one_line(&mut data[start..]);
            data.push(b'\n');
        }
        if scratch.deferred.is_empty() {
            let end = data.len();
            out.commit(start..end);
        } else {
            self.hold(out, start, MessageKind::Stream, &mut ctx.scratch.jsonrpc.deferred);
        }
        let last = self.count_exchange(ctx);
        if outcome == Outcome::ParseError || last {
            Step::Close
        } else {
            Step::Progressed
        }
    }

    fn step_http(&mut self, rest: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> (usize, Step) {
        let Some(head) = self.pending_head else {
            return match http1::parse_head(
                rest,
                ctx.limits.max_head_bytes,
                ctx.limits.max_body_bytes,
                &mut self.target,
            ) {
                HeadStatus::Partial => (0, Step::NeedMore),
                HeadStatus::Rejected(reject) => {
                    respond_rejection(out, ctx.date, reject);
                    (0, Step::Close)
                }
                HeadStatus::Complete(head, used) if head.websocket_key.is_some() => {
                    let key = head.websocket_key.unwrap_or_default();
                    out.push(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n");
                    out.push(b"Sec-WebSocket-Accept: ");
                    out.push(ws::accept_key(&key).as_bytes());
                    out.push(b"\r\n\r\n");
                    self.protocol = Protocol::WebSocket;
                    (used, Step::Progressed)
                }
                HeadStatus::Complete(head, used) => {
                    self.cors_headers.clear();
                    match &ctx.limits.cors {
                        Some(cors) => cross_origin(cors, &head, rest, &mut self.cors_headers),
                        None if head.method == Method::Options => {
                            let reject = http1::reject(Status::MethodNotAllowed, "only GET and POST are served");
                            respond_rejection(out, ctx.date, reject);
                            return (0, Step::Close);
                        }
                        None => {}
                    }
                    let body_bytes = rest.len() - used;
                    match head.framing {
                        Framing::None => return (used, self.answer_http(&head, &[], out, ctx)),
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
                (length, self.answer_http(&head, &rest[..length], out, ctx))
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
                        let step = self.answer_http(&head, &body, out, ctx);
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
                        respond_rejection(out, ctx.date, reject);
                        (0, Step::Close)
                    }
                }
            }
            Framing::Length(_) | Framing::None => (0, Step::NeedMore),
        }
    }

    /// One WebSocket frame (RFC 6455 §5): control frames answered at once, data frames
    /// reassembled into messages, each message one JSON-RPC request or batch.
    fn step_websocket(&mut self, rest: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> (usize, Step) {
        let header = match ws::read_header(rest, ctx.limits.max_body_bytes) {
            ws::Header::Partial => return (0, Step::NeedMore),
            ws::Header::Fail(code) => return (0, self.ws_fail(out, code)),
            ws::Header::Frame(header) => header,
        };
        let total = header.header_len + header.payload_len;
        if rest.len() < total {
            self.ws_frame_len = total;
            return (0, Step::NeedMore);
        }
        self.ws_frame_len = 0;
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
                    // §5.5.1: answer a Close with a Close, then close the connection.
                    let code = ws::close_reply(&control);
                    ws::frame(ws::Opcode::Close, &code.to_be_bytes(), data);
                    let end = data.len();
                    out.commit(start..end);
                    Step::Close
                }
            }
            ws::Opcode::Pong => Step::Progressed,
            ws::Opcode::Text | ws::Opcode::Binary if self.ws_opcode.is_some() => {
                return (0, self.ws_fail(out, ws::close::PROTOCOL_ERROR));
            }
            ws::Opcode::Continuation if self.ws_opcode.is_none() => {
                return (0, self.ws_fail(out, ws::close::PROTOCOL_ERROR));
            }
            data_opcode => {
                if data_opcode != ws::Opcode::Continuation {
                    self.ws_opcode = Some(data_opcode);
                }
                if self.ws_message.len() + payload.len() > ctx.limits.max_body_bytes {
                    return (0, self.ws_fail(out, ws::close::MESSAGE_TOO_BIG));
                }
                ws::unmask_into(payload, header.mask, &mut self.ws_message);
                if header.fin {
                    let opcode = self.ws_opcode.take();
                    if opcode == Some(ws::Opcode::Text) && jsonrpc::as_text(&self.ws_message).is_none() {
                        return (0, self.ws_fail(out, ws::close::INVALID_PAYLOAD));
                    }
                    return (total, self.answer_websocket(out, ctx));
                }
                Step::Progressed
            }
        };
        (total, step)
    }

    /// Reply to the reassembled message as one text frame (nothing for notifications);
    /// after the connection's last exchange, a Close frame follows (1000, or 1001 when the
    /// server is shutting down).
    fn answer_websocket(&mut self, out: &mut OutBuf, ctx: &mut Context<'_>) -> Step {
        self.reply_websocket(out, ctx);
        if self.count_exchange(ctx) {
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

    fn reply_websocket(&mut self, out: &mut OutBuf, ctx: &mut Context<'_>) {
        let message = std::mem::take(&mut self.ws_message);
        let data = out.data();
        let reserved = data.len();
        let start = reserve_ws_header(data);
        let mut deferrals = Deferrals {
            target: ctx.defer,
            next_slot: &mut self.next_slot,
        };
        let scratch = &mut ctx.scratch.jsonrpc;
        let outcome = dispatch::process(
            &message,
            ctx.router,
            ctx.limits.max_batch,
            scratch,
            &mut deferrals,
            data,
        );
        self.ws_message = message;
        self.ws_message.clear();
        if !ctx.scratch.jsonrpc.deferred.is_empty() {
            let text = out.data().split_off(start);
            out.data().truncate(reserved);
            self.hold_text(
                out,
                text,
                start,
                MessageKind::WebSocket,
                Vec::new(),
                &mut ctx.scratch.jsonrpc.deferred,
            );
            return;
        }
        if outcome == Outcome::Silent {
            out.data().truncate(reserved);
            return;
        }
        commit_ws_text(out, start);
    }

    /// Fail the WebSocket connection (§7.1.7): a Close frame with `code`, then close.
    #[cold]
    fn ws_fail(&mut self, out: &mut OutBuf, code: u16) -> Step {
        let data = out.data();
        let start = data.len();
        ws::frame(ws::Opcode::Close, &code.to_be_bytes(), data);
        let end = data.len();
        out.commit(start..end);
        Step::Close
    }

    fn answer_http(&mut self, head: &RequestHead, body: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> Step {
        self.close_asked = !head.keep_alive;
        let keep_alive = head.keep_alive && !self.count_exchange(ctx);
        let persistence = match (keep_alive, head.minor_version) {
            (false, _) => Persistence::Close,
            (true, 0) => Persistence::KeepAliveLegacy,
            (true, _) => Persistence::KeepAlive,
        };
        if head.method == Method::Options {
            // A CORS preflight: the headers say it all (none when refused, which the browser
            // reads as a refusal).
            http1::respond_out(out, persistence, &self.cors_headers, ctx.date, |_| {
                Some(Status::NoContent)
            });
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        let scratch = &mut *ctx.scratch;
        let target = self.target.as_str();
        // The self-description documents (`/openrpc.json`, `/openapi.json`, `/docs`).
        if let Some(page) = ctx.router.page(target).filter(|_| head.method == Method::Get) {
            http1::respond_typed(
                out,
                persistence,
                &self.cors_headers,
                ctx.date,
                page.content_type,
                |out| {
                    out.data().extend_from_slice(page.body);
                    Some(Status::Ok)
                },
            );
            return if keep_alive { Step::Progressed } else { Step::Close };
        }
        let is_jsonrpc = head.method == Method::Post && (is_root(target) || looks_like_jsonrpc(body));
        let mut deferrals = Deferrals {
            target: ctx.defer,
            next_slot: &mut self.next_slot,
        };
        // A reply that waits for deferred calls is taken out whole, with where it began.
        let mut held: Option<(Vec<u8>, usize)> = None;
        http1::respond_out(out, persistence, &self.cors_headers, ctx.date, |out| {
            let data = out.data();
            let start = data.len();
            let status = if is_jsonrpc {
                match dispatch::process(
                    body,
                    ctx.router,
                    ctx.limits.max_batch,
                    &mut scratch.jsonrpc,
                    &mut deferrals,
                    data,
                ) {
                    Outcome::Silent => Status::NoContent,
                    Outcome::Replied | Outcome::ParseError => {
                        scratch.jsonrpc.http_status.map_or(Status::Ok, Status::from_code)
                    }
                }
            } else {
                rest_call(head.method, target, body, ctx.router, scratch, &mut deferrals, data)
            };
            if scratch.jsonrpc.deferred.is_empty() {
                Some(status)
            } else {
                held = Some((data.split_off(start), start));
                None
            }
        });
        if let Some((text, base)) = held {
            let headers = std::mem::take(&mut self.cors_headers);
            self.hold_text(
                out,
                text,
                base,
                MessageKind::Http(persistence),
                headers,
                &mut ctx.scratch.jsonrpc.deferred,
            );
        }
        if keep_alive {
            Step::Progressed
        } else {
            Step::Close
        }
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

/// Run a REST-style call, writing the bare result (or an error object) as the body.
fn rest_call(
    method: Method,
    target: &str,
    body: &[u8],
    router: &Router,
    scratch: &mut Scratch,
    deferrals: &mut Deferrals<'_>,
    data: &mut Vec<u8>,
) -> Status {
    scratch.jsonrpc.deferred.clear();
    let Some(query) = rest::split_target(target, &mut scratch.name) else {
        return rest_error(
            data,
            &RpcError::new(
                ErrorCode::InvalidRequest.code(),
                "Invalid Request: the path is not valid UTF-8",
            ),
        );
    };
    let name = std::str::from_utf8(&scratch.name).unwrap_or_default();
    let Some(handler) = router.get(name) else {
        return rest_error(data, &RpcError::method_not_found(name));
    };
    // GET, or a POST with no body (`curl -X POST '/sum?a=1&b=2'`): the query's params.
    let params = if method == Method::Get || body.iter().all(u8::is_ascii_whitespace) {
        if method == Method::Post && query.is_empty() {
            None
        } else if rest::query_to_params(query, &mut scratch.decoded, &mut scratch.params) {
            Some(std::str::from_utf8(&scratch.params).unwrap_or("{}"))
        } else {
            let error = RpcError::invalid_params("Invalid params: the query is not valid UTF-8");
            return rest_error(data, &error);
        }
    } else {
        match jsonrpc::as_text(body).filter(|text| jsonrpc::message::is_json(text)) {
            Some(text) if text.trim_start().starts_with('{') => Some(text.trim()),
            Some(_) => {
                let error = RpcError::invalid_params("Invalid params: the body must be a JSON object of named params");
                return rest_error(data, &error);
            }
            _ => {
                let error = RpcError::new(ErrorCode::ParseError.code(), "Parse error: the body is not valid JSON");
                return rest_error(data, &error);
            }
        }
    };
    let call = Call::new(name, params, Some("null"));
    match dispatch::invoke(handler, &call, deferrals, data) {
        Ok(Invoked::Done) => Status::Ok,
        Ok(Invoked::Deferred(slot)) => {
            scratch.jsonrpc.deferred.push(DeferredAt {
                offset: data.len(),
                slot,
                id: None,
            });
            Status::Ok
        }
        Err(error) => rest_error(data, &error),
    }
}

/// Write a REST-style call's error object; the status its error names, else its code's
/// (the one table, `jsonrpc::codes`).
fn rest_error(data: &mut Vec<u8>, error: &RpcError) -> Status {
    jsonrpc::write_error_object(data, error.code(), error.message(), error.data());
    Status::from_code(error.rest_status())
}

#[cold]
#[inline(never)]
fn respond_rejection(out: &mut OutBuf, date: &[u8], reject: Reject) {
    // Limits hit are worth a warning; malformed requests are the client's own business.
    let level = match reject.status {
        Status::PayloadTooLarge | Status::HeadersTooLarge | Status::UriTooLong | Status::RequestTimeout => {
            log::Level::Warn
        }
        _ => log::Level::Debug,
    };
    crate::logs::throttled(
        &crate::logs::REQUEST_REFUSED,
        level,
        format_args!("request refused: {}", reject.message()),
    );
    http1::respond(out, Persistence::Close, date, |data| {
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

/// Keep a raw TCP reply on one line. Procedures may pass raw JSON through (an echoed
/// argument keeps the caller's formatting); in valid JSON a CR or LF byte can only be
/// insignificant whitespace (strings hold them escaped), so a space replaces it.
fn one_line(reply: &mut [u8]) {
    // memchr: a reply echoing megabytes has no line break to find, and finds none fast.
    let mut at = 0;
    while let Some(found) = memchr::memchr2(b'\n', b'\r', &reply[at..]) {
        at += found;
        reply[at] = b' ';
        at += 1;
    }
}

/// Write a held message's reply, now that every deferred call in it has finished,
/// straight into the output. A large result is not copied: its buffer is attached to the
/// output (over raw TCP, where a reply must be made one line, it is copied once).
fn render(message: PendingMessage, out: &mut OutBuf, date: &[u8]) {
    let PendingMessage {
        hole,
        kind,
        text,
        headers,
        slots,
        ..
    } = message;
    out.fill(hole, |out| match kind {
        MessageKind::Stream => {
            let start = out.data().len();
            write_completed(&text, slots, out, false);
            let data = out.data();
            // The held text ends with the reply's own newline; the rest must be one line.
            let end = data.len();
            one_line(&mut data[start..end.saturating_sub(1).max(start)]);
            out.commit(start..end);
        }
        MessageKind::WebSocket => {
            let start = reserve_ws_header(out.data());
            write_completed(&text, slots, out, true);
            commit_ws_text(out, start);
        }
        MessageKind::Http(persistence) => http1::respond_out(out, persistence, &headers, date, |out| {
            Some(write_completed(&text, slots, out, true))
        }),
    });
}

/// Reserve room for a WebSocket frame header at the end of `data`, so that the message
/// can be written in place before its length is known; returns where the message starts.
fn reserve_ws_header(data: &mut Vec<u8>) -> usize {
    data.resize(data.len() + ws::MAX_HEADER, 0);
    data.len()
}

/// Queue the message written (and attached) since `start` (see [`reserve_ws_header`]) as
/// a text frame, its header in the room reserved before it.
fn commit_ws_text(out: &mut OutBuf, start: usize) {
    let attached = out.attached_since(start);
    let data = out.data();
    let mut room = [0u8; ws::MAX_HEADER];
    let used = ws::write_header(&mut room, ws::Opcode::Text, data.len() - start + attached);
    data[start - used..start].copy_from_slice(&room[ws::MAX_HEADER - used..]);
    let end = data.len();
    out.commit(start - used..end);
}

/// Results at least this large are attached to the output rather than copied into it.
const ATTACH_MIN: usize = 64 << 10;

/// Write a held message's `text` with each slot's outcome in its place; the HTTP status
/// a REST-style error calls for, or the one a single call's error names. With `attach`, large results are attached (see
/// [`OutBuf::attach`]) rather than copied; either way their buffers are kept for reuse.
fn write_completed(text: &[u8], slots: Vec<PendingSlot>, out: &mut OutBuf, attach: bool) -> Status {
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
        match (slot.id, outcome) {
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
                    status = Status::from_code(named);
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

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn one_line_blanks_every_line_break() {
        let mut reply = b"{\"a\":\r\n[1,\n2]}".to_vec();
        reply.extend(std::iter::repeat_n(b' ', 100));
        reply.extend_from_slice(b"\n\r");
        one_line(&mut reply);
        assert!(!reply.contains(&b'\n') && !reply.contains(&b'\r'));
        assert_eq!(&reply[..15], b"{\"a\":  [1, 2]} ");
    }
}
