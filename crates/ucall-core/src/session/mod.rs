// SPDX-License-Identifier: Apache-2.0
//! One connection's protocol state, sans-I/O: bytes in, reply bytes out.
//!
//! The first non-whitespace byte picks the protocol for the connection's lifetime: an
//! uppercase ASCII letter, as every HTTP method starts (RFC 9110 §9), is HTTP/1.1; anything
//! else is a raw TCP stream of JSON texts.

mod attached;
mod held;
mod http;
mod mcp;
mod streamed;
mod tcp;
mod websocket;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::buffer::OutBuf;
use crate::context::{Context as CallContext, Transport as CallTransport};
use crate::defer::{Outcome as Completed, Presence, Sink, Target, BUSY_FROM, BUSY_SHARE};
use crate::discover::mcp::ToolReply;
use crate::dispatch::{self, DeferredAt};
use crate::http1::cors::Cors;
use crate::http1::{self, Method, Persistence, Status};
use crate::jsonrpc::section::Section;
use crate::metrics::Transport;
use crate::router::Router;
use crate::streaming::{Credit, OUTPUT_ROOM};
use crate::ws;
use held::render;
use http::{respond_rejection, Http};
use streamed::Lines;
use tcp::Stream;
use websocket::WebSocket;

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
    /// Over TLS, every HTTP reply says `Strict-Transport-Security: max-age=<seconds>`
    /// (RFC 6797): browsers then use HTTPS only for that long. `None` (the default): not said.
    pub hsts_max_age: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 64 << 20,
            max_head_bytes: 16 << 10,
            max_batch: 1024,
            max_exchanges_per_connection: None,
            cors: None,
            hsts_max_age: None,
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

impl Scratch {
    /// The worker's request log lines not yet written.
    pub(crate) fn lines(&mut self) -> &mut crate::request_log::Lines {
        &mut self.jsonrpc.lines
    }

    /// The connection input about to be fed, which its binary messages' calls may keep
    /// bytes of (`crate::lend`), until [`Scratch::input_fed`].
    pub(crate) fn feeding_input(&mut self, input: &[u8]) {
        self.jsonrpc.lend.open(input);
    }

    /// The input offered by [`Scratch::feeding_input`] was fed up to `consumed`: drain it,
    /// or hand it to the calls still holding bytes of it.
    pub(crate) fn input_fed(&mut self, input: &mut Vec<u8>, consumed: usize) {
        self.jsonrpc.lend.close(input, consumed);
    }
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
    /// HTTP: a streamed reply's head and first items have gone; the reply ends as the
    /// last chunk of its body.
    streamed: bool,
    /// The caller accepts a binary reply: the attachments of the calls answered so far
    /// (the deferred ones' join them as they are rendered). `None`: a plain JSON reply.
    attachments: Option<Section>,
}

#[derive(Debug, Clone, Copy)]
enum MessageKind {
    Stream,
    /// A reply over HTTP; to a `HEAD` ([`Method::Head`]), the head alone.
    Http(Persistence, Lines, Method),
    WebSocket,
}

#[derive(Debug)]
struct PendingSlot {
    at: usize,
    slot: u64,
    /// The request's raw id; `None` for a REST call (the bare result is the body).
    id: Option<Box<str>>,
    /// An MCP `tools/call`: its result is wrapped, its items are progress notifications.
    tool: Option<Box<ToolReply>>,
    outcome: Option<Completed>,
    /// The attachments its result names, from offset 0.
    attachments: Section,
}

/// What one [`Session::feed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes used up; the caller drops them.
    pub consumed: usize,
    /// Close the connection once the output is flushed.
    pub close: bool,
}

/// The connection's protocol, with the state only that protocol has.
#[derive(Debug)]
enum Protocol {
    /// Nothing but whitespace received yet.
    Unknown,
    Http(Http),
    /// Raw TCP: JSON texts one after another.
    Stream(Stream),
    /// After an HTTP upgrade (RFC 6455).
    WebSocket(WebSocket),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Progressed,
    NeedMore,
    Close,
    /// HTTP: the upgrade to WebSocket was answered; the next byte is a frame's. `binary`:
    /// the binary-message subprotocol was selected (docs/wire.md §3.3).
    Upgrade {
        binary: bool,
    },
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Session {
    protocol: Protocol,
    closing: bool,
    calls: Calls,
}

/// What every protocol keeps of its calls: deferred replies awaited, and exchanges counted.
#[derive(Debug, Default)]
struct Calls {
    next_slot: u64,
    next_hole: u64,
    /// Messages awaiting deferred replies, in arrival order. Slots are numbered as calls
    /// defer, so the first slots of these messages ascend: a completion finds its message
    /// by binary search, and completions in request order take the front.
    pending: VecDeque<PendingMessage>,
    /// Exchanges so far (see [`Limits::max_exchanges_per_connection`]).
    exchanges: u32,
    /// The peer's address, when the engine was asked for it.
    peer: Option<SocketAddr>,
    /// TLS carries the connection.
    tls: bool,
    /// The subject of the client's TLS certificate, once the handshake has told.
    tls_subject: Option<Box<str>>,
    /// The HTTP request head of the call under way (for WebSocket, the upgrade's), kept
    /// only when the router asks ([`Router::keeps_head`]).
    head: Vec<u8>,
    /// Whether the caller is still there, for calls queued for a batch and streamed
    /// replies (goes down when the session is dropped with its connection).
    presence: Presence,
    /// Credits of streamed items placed while the output was long: given back once it
    /// has drained ([`Session::give_back_credits`]).
    owed: Vec<Arc<Credit>>,
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
            calls: Calls::default(),
        }
    }

    /// A new connection's state, from `peer` (when the engine knows it), over TLS or not.
    #[must_use]
    pub fn with_origin(peer: Option<SocketAddr>, tls: bool) -> Self {
        let mut session = Self::new();
        session.calls.peer = peer;
        session.calls.tls = tls;
        session
    }

    /// The subject of the client's TLS certificate (mutual TLS), for the calls' context.
    pub fn set_tls_subject(&mut self, subject: Option<Box<str>>) {
        self.calls.tls_subject = subject;
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
            let calls = &mut self.calls;
            let (used, step) = match &mut self.protocol {
                Protocol::Unknown => match rest.iter().position(|c| !c.is_ascii_whitespace()) {
                    Some(i) if rest[i].is_ascii_uppercase() => {
                        self.protocol = Protocol::Http(Http::default());
                        opened(ctx, None, Transport::Http);
                        (0, Step::Progressed)
                    }
                    Some(_) => {
                        self.protocol = Protocol::Stream(Stream::default());
                        opened(ctx, None, Transport::Tcp);
                        (0, Step::Progressed)
                    }
                    None => (0, Step::NeedMore),
                },
                Protocol::Http(http) => http.step(calls, rest, out, ctx),
                Protocol::Stream(stream) => stream.step(calls, rest, out, ctx),
                Protocol::WebSocket(websocket) => websocket.step(calls, rest, out, ctx),
            };
            consumed += used;
            match step {
                Step::Progressed => {}
                Step::NeedMore => break,
                Step::Close => self.closing = true,
                Step::Upgrade { binary } => {
                    self.protocol = Protocol::WebSocket(WebSocket::new(binary));
                    opened(ctx, Some(Transport::Http), Transport::WebSocket);
                }
            }
        }
        Progress {
            consumed,
            close: self.closing,
        }
    }

    /// The transport the connection speaks, once its first bytes told.
    #[must_use]
    pub fn transport(&self) -> Option<Transport> {
        match &self.protocol {
            Protocol::Unknown => None,
            Protocol::Http(_) => Some(Transport::Http),
            Protocol::Stream(_) => Some(Transport::Tcp),
            Protocol::WebSocket(_) => Some(Transport::WebSocket),
        }
    }

    /// Whether no request is partly received (given that no input is buffered).
    #[must_use]
    pub fn is_between_requests(&self) -> bool {
        match &self.protocol {
            Protocol::Unknown => true,
            Protocol::Http(http) => http.is_between_requests(),
            Protocol::Stream(stream) => !stream.in_text(),
            Protocol::WebSocket(websocket) => websocket.is_between_messages(),
        }
    }

    /// Whether it holds buffers that an idle connection can give back ([`Session::release_buffers`]).
    #[must_use]
    pub fn holds_buffers(&self) -> bool {
        self.calls.pending.capacity() > 0
            || match &self.protocol {
                Protocol::Unknown | Protocol::Stream(_) => false,
                Protocol::Http(http) => http.holds_buffers(),
                Protocol::WebSocket(websocket) => websocket.holds_buffers(),
            }
    }

    /// Give back the buffers kept between requests; only when between requests with no
    /// reply awaited (an idle connection), since a message under way lives in them.
    pub fn release_buffers(&mut self) {
        if !self.is_between_requests() || self.has_pending() {
            return;
        }
        self.calls.pending = VecDeque::new();
        match &mut self.protocol {
            Protocol::Unknown | Protocol::Stream(_) => {}
            Protocol::Http(http) => http.release_buffers(),
            Protocol::WebSocket(websocket) => websocket.release_buffers(),
        }
    }

    /// How many bytes, counted from the first one not yet consumed, the message being
    /// received needs in all, when its framing says so (an HTTP `Content-Length` body, a
    /// WebSocket frame); 0 when unknown. Engines make room for it at once instead of
    /// growing the input, and copying it, step by step.
    #[must_use]
    pub fn input_wanted(&self) -> usize {
        match &self.protocol {
            Protocol::Http(http) => http.body_wanted(),
            Protocol::WebSocket(websocket) => websocket.frame_wanted(),
            Protocol::Stream(stream) => stream.message_wanted(),
            Protocol::Unknown => 0,
        }
    }

    /// Whether the connection closes because the client asked for it (`Connection:
    /// close`, or HTTP/1.0 without keep-alive): such a client sends nothing after that
    /// request (RFC 9112 §9.6).
    #[must_use]
    pub fn close_was_asked(&self) -> bool {
        self.closing && matches!(&self.protocol, Protocol::Http(http) if http.close_asked())
    }

    /// Whether an HTTP request head is being received (the header time-out applies).
    #[must_use]
    pub fn is_reading_head(&self) -> bool {
        match &self.protocol {
            Protocol::Unknown => true,
            Protocol::Http(http) => http.is_between_requests(),
            Protocol::Stream(_) | Protocol::WebSocket(_) => false,
        }
    }

    /// Whether replies are awaited from deferred calls.
    #[must_use]
    pub fn has_pending(&self) -> bool {
        !self.calls.pending.is_empty()
    }

    /// Whether so many replies are awaited that no further request is read for now: by
    /// this session ([`MAX_PENDING_MESSAGES`] messages, or [`BUSY_SHARE`] while its
    /// `worker` awaits [`BUSY_FROM`] calls), or by its `worker`, whose sink then is full
    /// ([`crate::defer::MAX_AWAITED`] calls).
    #[must_use]
    pub fn is_saturated(&self, worker: Option<&Sink>) -> bool {
        let pending = self.calls.pending.len();
        pending >= MAX_PENDING_MESSAGES
            || worker.is_some_and(|sink| sink.is_full() || (pending >= BUSY_SHARE && sink.awaited() >= BUSY_FROM))
    }

    /// A deferred call finished: put its reply in place, and once its message is whole,
    /// queue the message's reply. Returns `false` for a slot this session does not await
    /// (a notification, or a call whose handler failed after deferring).
    pub fn complete(&mut self, slot: u64, outcome: Completed, out: &mut OutBuf, date: &[u8]) -> bool {
        self.complete_attached(slot, outcome, Section::new(), out, date)
    }

    /// [`Session::complete`] for a result that names `attachments` (docs/wire.md).
    pub fn complete_attached(
        &mut self,
        slot: u64,
        outcome: Completed,
        attachments: Section,
        out: &mut OutBuf,
        date: &[u8],
    ) -> bool {
        let Some((index, at)) = self.calls.find(slot) else {
            return false;
        };
        let message = &mut self.calls.pending[index];
        message.slots[at].outcome = Some(outcome);
        message.slots[at].attachments = attachments;
        message.awaited -= 1;
        if message.awaited == 0 {
            let message = self
                .calls
                .pending
                .remove(index)
                .expect("invariant: the index was found above");
            render(message, out, date);
        }
        true
    }

    /// The output has drained to `pending` bytes: give back the credits of streamed items
    /// held while it was long, so that their producers go on. Inlined: the engines call
    /// it after every send, and almost always nothing is owed (a call cost 16 instructions
    /// per request in callgrind).
    #[inline]
    pub fn give_back_credits(&mut self, pending: usize) {
        if !self.calls.owed.is_empty() && pending <= OUTPUT_ROOM {
            for credit in self.calls.owed.drain(..) {
                credit.give_back();
            }
        }
    }

    /// Called when a client took too long: queue the reply it gets, if any, before closing.
    pub fn time_out(&mut self, out: &mut OutBuf, date: &[u8]) {
        if let (Protocol::Http(http), false) = (&self.protocol, self.closing) {
            let reject = http1::reject(Status::RequestTimeout, "request not received in time");
            // The engine counts the time-out (it sees every one, this reply or not).
            respond_rejection(out, None, date, reject, http.refusal_headers());
        }
        self.closing = true;
    }

    /// The server is shutting down and this connection is between requests: queue its
    /// goodbye, if its protocol has one (WebSocket: Close 1001, "going away"). Returns
    /// whether one was queued; the connection should then close once it is sent.
    pub fn going_away(&mut self, out: &mut OutBuf) -> bool {
        if !matches!(self.protocol, Protocol::WebSocket(_)) || self.closing {
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
        if !matches!(self.protocol, Protocol::Http(_)) || self.closing {
            return false;
        }
        let Some(last) = self.calls.pending.back_mut() else {
            return false;
        };
        if let MessageKind::Http(persistence, _, _) = &mut last.kind {
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
        match &mut self.protocol {
            Protocol::Stream(stream) => {
                if !self.closing {
                    stream.end_of_input(&mut self.calls, rest, out, ctx);
                }
            }
            // An HTTP or WebSocket client that stops sending has closed: calls still queued
            // for a batch are dropped rather than run for nobody.
            Protocol::Http(_) | Protocol::WebSocket(_) => self.calls.presence.gone(),
            Protocol::Unknown => {}
        }
        self.closing = true;
    }
}

/// Count a connection as speaking `now` (and no longer `before`).
fn opened(ctx: &Context<'_>, before: Option<Transport>, now: Transport) {
    if let Some(metrics) = ctx.router.metrics() {
        if let Some(before) = before {
            metrics.closed(before);
        }
        metrics.opened(now);
    }
}

impl Calls {
    /// The pending message (its index) and slot (its index in the message) awaiting
    /// `slot`, if any.
    fn find(&self, slot: u64) -> Option<(usize, usize)> {
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
            self.pending
                .partition_point(|m| m.slots[0].slot <= slot)
                .checked_sub(1)?
        };
        let message = &self.pending[index];
        let at = message.slots.binary_search_by_key(&slot, |s| s.slot).ok()?;
        message.slots[at].outcome.is_none().then_some((index, at))
    }

    /// Keep the request head `head` for the calls' context, when the router asks or
    /// `wanted` says the request itself needs it.
    fn keep_head(&mut self, head: &[u8], router: &Router, wanted: bool) {
        if wanted || router.keeps_head() {
            self.head.clear();
            self.head.extend_from_slice(head);
        } else if !self.head.is_empty() {
            self.head.clear(); // an earlier request's, kept for itself only
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

    /// Run the calls of one text of raw TCP or WebSocket, appending the reply to `data`;
    /// `section` is the attachment section of the binary message the text came in, and
    /// `attachments` where binary results go (both `None` for a plain text, which then
    /// does no binary work).
    #[inline(always)]
    fn run_text(
        &mut self,
        transport: CallTransport,
        text: &[u8],
        (section, attachments): (Option<&[u8]>, Option<&mut Section>),
        data: &mut Vec<u8>,
        ctx: &mut Context<'_>,
    ) -> dispatch::Outcome {
        let binary = section.is_some();
        let head: &[u8] = if transport == CallTransport::WebSocket {
            &self.head
        } else {
            &[]
        };
        let mut context = CallContext::new(transport, self.tls, self.peer, head)
            .with_tls_subject(self.tls_subject.as_deref())
            .with_liveness(self.presence.liveness())
            .with_section(section)
            .with_binary_replies(binary);
        context.received_now_if(ctx.router.times_calls());
        let mut deferrals = dispatch::Deferrals {
            target: ctx.defer.map(|target| target.with_presence(&self.presence)),
            next_slot: &mut self.next_slot,
            streams: true,
            stream_attachments: true,
            attachments,
        };
        let mut message = dispatch::Message {
            context: &context,
            router: ctx.router,
            max_batch: ctx.limits.max_batch,
            deferrals: &mut deferrals,
        };
        message.process(text, &mut ctx.scratch.jsonrpc, data)
    }

    /// Hold the message written to `out.data()[start..]`: its deferred replies (listed in
    /// `deferred`) come later, and a hole keeps its place in the output meanwhile. The
    /// room from `reserved` to `start` (kept for a binary message's prefix) goes too;
    /// `attachments`: those of the calls answered so far, for a binary reply.
    fn hold(
        &mut self,
        out: &mut OutBuf,
        (reserved, start): (usize, usize),
        kind: MessageKind,
        deferred: &mut Vec<DeferredAt>,
        attachments: Option<Section>,
    ) {
        let text = out.data().split_off(start);
        out.data().truncate(reserved);
        self.hold_text(out, (text, start), kind, Vec::new(), deferred, attachments);
    }

    /// Like [`Calls::hold`] for a message whose `text` was taken out already, `base` being
    /// the offset it had, which the offsets in `deferred` count from.
    fn hold_text(
        &mut self,
        out: &mut OutBuf,
        (text, base): (Vec<u8>, usize),
        kind: MessageKind,
        headers: Vec<u8>,
        deferred: &mut Vec<DeferredAt>,
        attachments: Option<Section>,
    ) {
        let slots: Vec<PendingSlot> = deferred
            .drain(..)
            .map(|d| PendingSlot {
                at: d.offset - base,
                slot: d.slot,
                id: d.id,
                tool: d.tool,
                outcome: None,
                attachments: Section::new(),
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
            streamed: false,
            attachments,
        });
    }
}
