// SPDX-License-Identifier: Apache-2.0
//! Running the calls of one message (a request or a batch): each is looked up in the
//! router, its handler run (a panic becomes `-32603`), and its reply appended in request
//! order; a deferred reply's place is noted for the session to hold.
//!
//! Above `router` and `defer`, below `session`: the codec (`jsonrpc`) knows nothing of
//! handlers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::context::{Context, Transport};
use crate::date::monotonic_nanos;
use crate::defer::{Meter, Target};
use crate::discover::mcp::ToolReply;
use crate::jsonrpc::message::{self, Element, Envelope, ParseError, Request};
use crate::jsonrpc::section::Section;
use crate::jsonrpc::{self, as_text, scan, write_error, write_parse_error, write_rpc_error, ErrorCode, RpcError};
use crate::limit::{Limiter, Refused};
use crate::metrics::{Metrics, Refusal};
use crate::request_log::{Carrier, Entry, Lines, Pending, RequestLog, Seed};
use crate::router::{Call, Cancel, Found, Handler, Reply, Router};
use crate::streaming::CANCEL_METHOD;

/// What processing one message produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A reply (object or array) was appended.
    Replied,
    /// Nothing is to be sent: notifications only (§4.1, §6).
    Silent,
    /// The message was not JSON: a `-32700` reply was appended.
    ParseError,
}

/// Per-worker state reused from message to message, so that steady state allocates nothing.
#[derive(Default)]
pub struct Scratch {
    elements: Vec<Element>,
    /// Replies of the last message that will come later, in order of their place.
    pub(crate) deferred: Vec<DeferredAt>,
    /// The HTTP status the last message's error named (a single call's only: a batch
    /// answers 200 whatever its calls' errors say).
    pub http_status: Option<u16>,
    /// The seconds after which that error says to retry (HTTP `Retry-After`), if it says.
    pub retry_after: Option<u16>,
    /// The worker's request log lines not yet written (when the log is on).
    pub(crate) lines: Lines,
    /// The router's slot of the last procedure called (see [`Router::find_after`]).
    last_found: u32,
    /// The connection input being fed, lent to the calls of binary messages in it.
    pub(crate) lend: crate::lend::Offer,
}

/// What answering one element leaves besides its reply: the places of deferred replies,
/// the HTTP status its error names (kept for a single call only) and the slot found.
struct Notes<'s> {
    deferred: &'s mut Vec<DeferredAt>,
    /// The status and `Retry-After` of the error, for a single call.
    status: Option<(&'s mut Option<u16>, &'s mut Option<u16>)>,
    last_found: &'s mut u32,
}

/// A deferred reply's place in the message's output.
#[derive(Debug)]
pub(crate) struct DeferredAt {
    /// Offset in the output where the reply goes.
    pub(crate) offset: usize,
    /// The [`crate::Deferred`] slot that will bring it.
    pub(crate) slot: u64,
    /// The request's raw id (`None`: REST, where the bare result goes).
    pub(crate) id: Option<Box<str>>,
    /// An MCP `tools/call`: how its result is wrapped (the MCP adapter sets it).
    pub(crate) tool: Option<Box<ToolReply>>,
}

/// Where handlers of one connection may defer replies to (see [`crate::Deferred`]).
pub struct Deferrals<'a> {
    /// The connection's identity and its worker's sink; `None` when deferring is unavailable.
    pub target: Option<Target<'a>>,
    /// The connection's counter of deferred replies.
    pub next_slot: &'a mut u64,
    /// Whether a single call with an id may stream its result (the transport carries
    /// items: see [`crate::streaming`]); calls in a batch never do.
    pub streams: bool,
    /// Whether a streamed call's items and final reply may carry attachments (given
    /// `attachments`): its transport frames them in the stream (raw TCP, WebSocket under
    /// the binary subprotocol, HTTP that accepts `application/vnd.ucall.binary-stream`).
    pub stream_attachments: bool,
    /// Where results' binary values go when the caller accepts binary replies
    /// (docs/wire.md): the message's attachments. `None`: in their plain JSON form.
    pub attachments: Option<&'a mut Section>,
}

/// What running a handler produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invoked {
    /// The result was appended.
    Done,
    /// The handler deferred; the result will come with this slot.
    Deferred(u64),
}

/// When a handler ran, on the monotonic clock: read once for the metrics and the request
/// log both. Zero while not read.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) started: u64,
    pub(crate) ended: u64,
}

/// The request log of the message under way, when the log is on.
struct Logging<'l> {
    log: &'l RequestLog,
    lines: &'l mut Lines,
    carrier: Carrier,
    /// The size of the call's JSON text.
    bytes_in: usize,
}

impl Logging<'_> {
    fn seed<'a>(&self, context: &Context<'_>, method: &'a str, id: Option<&'a str>) -> Seed<'a> {
        Seed {
            peer: context.peer(),
            transport: context.transport().as_str(),
            method,
            id,
            carrier: self.carrier,
            bytes_in: self.bytes_in,
            trace_id: context.trace().map(|trace| trace.parent.trace_id),
        }
    }

    /// The line of a call that ended with `error` (or not), as `clock` timed it, having
    /// replied `bytes_out` bytes.
    fn line(&mut self, seed: &Seed<'_>, clock: Clock, error: Option<&RpcError>, bytes_out: usize) {
        let code = error.map_or(0, RpcError::code);
        let status = http_status(seed.carrier, seed.id, error);
        let entry = if clock.ended == 0 {
            // No handler ran (an unknown method): no time to speak of.
            seed.entry(monotonic_nanos(), 0, code, status, bytes_out)
        } else {
            let nanos = clock.ended.saturating_sub(clock.started);
            seed.entry(clock.ended, nanos, code, status, bytes_out)
        };
        self.lines.push(self.log, &entry);
    }

    /// The line of a message, or batch element, answered `code` without running a call:
    /// not JSON, not a request, an empty or too large batch.
    #[cold]
    #[inline(never)]
    fn refused(&mut self, context: &Context<'_>, id: Option<&str>, code: i32, bytes_out: usize) {
        let id = Some(id.unwrap_or("null"));
        let entry = Entry {
            ended: monotonic_nanos(),
            peer: context.peer(),
            transport: context.transport().as_str(),
            method: None,
            id,
            code,
            status: http_status(self.carrier, id, None),
            nanos: 0,
            bytes_in: self.bytes_in,
            bytes_out,
            trace_id: None,
        };
        self.lines.push(self.log, &entry);
    }
}

/// The status of the HTTP reply that carries a call with `id` that ended with `error`
/// (if any), as the sessions answer: `None` over raw TCP and WebSocket.
pub(crate) fn http_status(carrier: Carrier, id: Option<&str>, error: Option<&RpcError>) -> Option<u16> {
    match carrier {
        Carrier::Stream => None,
        // §4.1: no reply to a notification; HTTP says so with 204.
        Carrier::Single if id.is_none() => Some(204),
        Carrier::Single => Some(error.and_then(RpcError::http_status).unwrap_or(200)),
        Carrier::Batch(status) => Some(status),
        Carrier::Rest => Some(error.map_or(200, RpcError::rest_status)),
    }
}

/// The line of a deferred call, `pending` its fields so far, that started at `started`
/// and completed at `ended` with `outcome`. Its reply's size is that of the reply the
/// session writes (the result itself is not copied to measure it).
pub(crate) fn log_completed(
    log: &RequestLog,
    lines: &mut Lines,
    pending: &Pending,
    (started, ended): (u64, u64),
    outcome: &Result<Vec<u8>, RpcError>,
) {
    let id = pending.id.as_deref();
    let rest = pending.carrier == Carrier::Rest;
    let measure = &mut lines.measure;
    measure.clear();
    let bytes_out = match (outcome, id) {
        (Ok(result), _) if rest => result.len(),
        (Err(error), _) if rest => {
            jsonrpc::write_error_object(measure, error.code(), error.message(), error.data());
            measure.len()
        }
        (_, None) => 0,
        (Ok(result), Some(id)) => {
            jsonrpc::write_result_opening(measure, id);
            measure.len() + result.len() + 1
        }
        (Err(error), id) => {
            write_rpc_error(measure, id, error);
            measure.len()
        }
    };
    let seed = Seed::of(pending);
    let error = outcome.as_ref().err();
    let status = http_status(pending.carrier, id, error);
    let code = error.map_or(0, RpcError::code);
    let entry = seed.entry(ended, ended.saturating_sub(started), code, status, bytes_out);
    lines.push(log, &entry);
}

/// What the calls of one message run with: built once per message by its session.
/// It borrows the context and the deferrals rather than own them: moving a context into
/// it was a copy per call (some 40 instructions of a small call's 7,400).
pub struct Message<'m, 'a> {
    /// Where the calls come from (transport, peer, the binary message's section, ...).
    pub context: &'m Context<'a>,
    /// The procedures.
    pub router: &'m Router,
    /// The most requests a batch may hold.
    pub max_batch: usize,
    /// Where handlers may defer replies to, and where binary results go.
    pub deferrals: &'m mut Deferrals<'a>,
}

impl Message<'_, '_> {
    /// Process one JSON text (a request or a batch), appending the reply to `out`.
    ///
    /// Replies that handlers defer are not written: their places are listed in
    /// `scratch.deferred` (offsets into `out`), for the session to hold until they complete.
    /// With the request log on, each call gets a line ([`crate::request_log`]).
    ///
    /// Inlined, so that the value is taken apart where the session builds it: the calls
    /// run with its fields as arguments (small calls' instructions stay as they were), lent
    /// a binary message's section around them.
    #[inline(always)]
    pub fn process(&mut self, text: &[u8], scratch: &mut Scratch, out: &mut Vec<u8>) -> Outcome {
        // Only a binary message's calls may keep attachments where they lie (`crate::lend`).
        let lending = self.context.section().is_some_and(|section| scratch.lend.lend(section));
        let outcome = process_text(
            text,
            self.context,
            self.router,
            self.max_batch,
            scratch,
            self.deferrals,
            out,
        );
        if lending {
            scratch.lend.take_back();
        }
        outcome
    }
}

/// The calls of [`Message::process`], its fields apart.
fn process_text(
    text: &[u8],
    context: &Context<'_>,
    router: &Router,
    max_batch: usize,
    scratch: &mut Scratch,
    deferrals: &mut Deferrals<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    scratch.deferred.clear();
    scratch.http_status = None;
    scratch.retry_after = None;
    let http = context.transport() == Transport::Http;
    let mut logging = router.request_log().map(|log| Logging {
        log,
        lines: &mut scratch.lines,
        carrier: if http { Carrier::Single } else { Carrier::Stream },
        bytes_in: text.len(),
    });
    // One UTF-8 check up front (§ "-32700 ... including invalid UTF-8"); the parser then
    // works on `str` and every slice it hands out is text already.
    let Some(text) = as_text(text) else {
        return parse_error(router, logging, context, out);
    };
    if !message::is_batch(text.as_bytes()) {
        return match message::parse_request(text) {
            Ok(envelope) => {
                let mut notes = Notes {
                    deferred: &mut scratch.deferred,
                    status: Some((&mut scratch.http_status, &mut scratch.retry_after)),
                    last_found: &mut scratch.last_found,
                };
                if answer(&envelope, context, router, deferrals, &mut notes, logging.as_mut(), out) {
                    Outcome::Replied
                } else {
                    Outcome::Silent
                }
            }
            Err(ParseError) => parse_error(router, logging, context, out),
        };
    }
    scratch.elements.clear();
    if message::parse_batch(text, &mut scratch.elements).is_err() {
        return parse_error(router, logging, context, out);
    }
    // §6: "If the batch rpc call itself fails to be recognized as an valid JSON or as an
    // Array with at least one value, the response from the Server MUST be a single
    // Response object."
    if scratch.elements.is_empty() {
        refused(router, Refusal::InvalidRequest);
        let start = out.len();
        write_error(
            out,
            None,
            ErrorCode::InvalidRequest.code(),
            "Invalid Request: empty batch",
            None,
        );
        if let Some(logging) = &mut logging {
            logging.refused(context, None, ErrorCode::InvalidRequest.code(), out.len() - start);
        }
        return Outcome::Replied;
    }
    if scratch.elements.len() > max_batch {
        refused(router, Refusal::Limit);
        let message = format!(
            "Invalid Request: batch of {} exceeds the limit of {max_batch}",
            scratch.elements.len()
        );
        static TOO_LARGE: crate::logs::Throttle = crate::logs::Throttle::new();
        crate::logs::throttled(
            &TOO_LARGE,
            log::Level::Warn,
            format_args!(
                "batch refused: {} requests, more than max_batch = {max_batch}",
                scratch.elements.len()
            ),
        );
        let start = out.len();
        write_error(out, None, ErrorCode::InvalidRequest.code(), &message, None);
        if let Some(logging) = &mut logging {
            logging.refused(context, None, ErrorCode::InvalidRequest.code(), out.len() - start);
        }
        return Outcome::Replied;
    }
    // Each element's own text, for its line's `bytes_in`; and, over HTTP, the batch's
    // status: 204 when every element is a notification (no reply is sent).
    let mut raw_elements = logging.as_mut().map(|logging| {
        if http {
            let silent = scratch
                .elements
                .iter()
                .all(|element| matches!(element.envelope(text), Envelope::Request(Request { id: None, .. })));
            logging.carrier = Carrier::Batch(if silent { 204 } else { 200 });
        }
        scan::Elements::new(text)
    });
    let opening = out.len();
    out.push(b'[');
    // A batch's reply is one message: its calls cannot stream.
    let streams = std::mem::replace(&mut deferrals.streams, false);
    let mut replies = 0usize;
    let mut notes = Notes {
        deferred: &mut scratch.deferred,
        status: None,
        last_found: &mut scratch.last_found,
    };
    for element in &scratch.elements {
        let comma_at = out.len();
        if replies > 0 {
            out.push(b',');
        }
        if let Some(logging) = &mut logging {
            logging.bytes_in = raw_elements.as_mut().and_then(Iterator::next).map_or(0, str::len);
        }
        let envelope = element.envelope(text);
        if answer(&envelope, context, router, deferrals, &mut notes, logging.as_mut(), out) {
            replies += 1;
        } else {
            out.truncate(comma_at);
        }
    }
    deferrals.streams = streams;
    if replies == 0 {
        // §6: "If there are no Response objects contained within the Response array as it
        // is to be sent to the client, the server MUST NOT return an empty Array".
        out.truncate(opening);
        return Outcome::Silent;
    }
    out.push(b']');
    Outcome::Replied
}

/// Answer one element; returns whether a reply was appended.
fn answer(
    envelope: &Envelope<'_>,
    context: &Context<'_>,
    router: &Router,
    deferrals: &mut Deferrals<'_>,
    notes: &mut Notes<'_>,
    logging: Option<&mut Logging<'_>>,
    out: &mut Vec<u8>,
) -> bool {
    match envelope {
        Envelope::Invalid { id, reason } => {
            refused(router, Refusal::InvalidRequest);
            let message = format!("Invalid Request: {reason}");
            let start = out.len();
            write_error(out, *id, ErrorCode::InvalidRequest.code(), &message, None);
            if let Some(logging) = logging {
                logging.refused(context, *id, ErrorCode::InvalidRequest.code(), out.len() - start);
            }
            true
        }
        Envelope::Request(request) => call(request, context, router, deferrals, notes, logging, out),
    }
}

fn call(
    request: &Request<'_>,
    context: &Context<'_>,
    router: &Router,
    deferrals: &mut Deferrals<'_>,
    notes: &mut Notes<'_>,
    logging: Option<&mut Logging<'_>>,
    out: &mut Vec<u8>,
) -> bool {
    // Two copies of one body: without the log, the call pays this one branch.
    match logging {
        None => call_as::<false>(request, context, router, deferrals, notes, None, out),
        logging => call_as::<true>(request, context, router, deferrals, notes, logging, out),
    }
}

/// The context of a call whose request has its own members for it: a `"timeout"` member
/// tightens the deadline the message came with (a header's); `"_meta"` may carry the
/// trace context.
#[cold]
#[inline(never)]
fn own_context<'a>(request: &Request<'a>, context: &Context<'a>) -> Context<'a> {
    let context = match (request.timeout, context.timeout()) {
        (None, _) => *context,
        (Some(own), shared) => context.with_timeout(Some(shared.map_or(own, |shared| shared.min(own)))),
    };
    context.with_meta(request.meta)
}

#[inline(always)]
fn call_as<const LOG: bool>(
    request: &Request<'_>,
    context: &Context<'_>,
    router: &Router,
    deferrals: &mut Deferrals<'_>,
    notes: &mut Notes<'_>,
    logging: Option<&mut Logging<'_>>,
    out: &mut Vec<u8>,
) -> bool {
    let start = out.len();
    let attached_before = deferrals.attachments.as_ref().map_or(0, |a| a.count());
    let id = request.id;
    let adjusted;
    let context = if request.timeout.is_none() && request.meta.is_none() {
        context
    } else {
        adjusted = own_context(request, context);
        &adjusted
    };
    let seed = if LOG {
        logging
            .as_ref()
            .map(|logging| logging.seed(context, &request.method, id))
    } else {
        None
    };
    let mut clock = Clock::default();
    let outcome = match router.find_after(&request.method, notes.last_found) {
        Some(found) => {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            out.extend_from_slice(id.unwrap_or("null").as_bytes());
            out.extend_from_slice(b",\"result\":");
            let call = Call::new(&request.method, request.params, id).with_context(context);
            if LOG {
                let (outcome, ran) = run_logged(found, &call, router.metrics(), seed.as_ref(), deferrals, out);
                clock = ran;
                outcome
            } else {
                run(found, &call, router.metrics(), deferrals, out)
            }
        }
        None if &*request.method == CANCEL_METHOD => {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            out.extend_from_slice(id.unwrap_or("null").as_bytes());
            out.extend_from_slice(b",\"result\":");
            let call = Call::new(&request.method, request.params, id).with_context(context);
            invoke(&Cancel, &call, deferrals, out)
        }
        None => {
            if let Some(metrics) = router.metrics() {
                metrics.unknown_method();
            }
            Err(RpcError::method_not_found(&request.method))
        }
    };
    // Only a result written in place carries attachments (§4 of docs/wire.md: errors none).
    if id.is_none() || !matches!(outcome, Ok(Invoked::Done)) {
        if let Some(attachments) = deferrals.attachments.as_deref_mut() {
            attachments.truncate(attached_before);
        }
    }
    let replied = if id.is_none() {
        // §4.1: "The Server MUST NOT reply to a Notification".
        out.truncate(start);
        false
    } else {
        match &outcome {
            Ok(Invoked::Done) => out.push(b'}'),
            Ok(Invoked::Deferred(slot)) => {
                out.truncate(start);
                notes.deferred.push(DeferredAt {
                    offset: start,
                    slot: *slot,
                    id: id.map(Box::from),
                    tool: None,
                });
            }
            Err(error) => {
                out.truncate(start);
                write_rpc_error(out, id, error);
                if let Some((status, retry_after)) = &mut notes.status {
                    **status = error.http_status();
                    **retry_after = error.retry_after();
                }
            }
        }
        true
    };
    // A deferred call's line is written when it completes (it carries its seed).
    if LOG {
        if let (Some(logging), Some(seed)) = (logging, seed) {
            if !matches!(outcome, Ok(Invoked::Deferred(_))) {
                logging.line(&seed, clock, outcome.as_ref().err(), out.len() - start);
            }
        }
    }
    replied
}

/// Run the handler `found` by [`Router::find`] as [`invoke`] does, counted in `metrics`
/// (when on) under its slot: how it ended and how long it took, or, when it defers, once
/// its completion reaches the worker.
///
/// # Errors
/// As [`invoke`].
pub fn run(
    found: Found<'_>,
    call: &Call<'_>,
    metrics: Option<&std::sync::Arc<Metrics>>,
    deferrals: &mut Deferrals<'_>,
    out: &mut Vec<u8>,
) -> Result<Invoked, RpcError> {
    if let Some(limiter) = found.limiter {
        admit(limiter, found.slot, call, metrics)?;
    }
    let metered = metrics.map(|metrics| {
        let meter = Meter {
            method: found.slot,
            started: metrics.now(),
        };
        (Some(&**metrics), meter)
    });
    invoke_metered(found.handler, found.timeout, call, deferrals, metered, None, out).0
}

/// As [`run`], with the request log on: the call is timed whether or not the metrics
/// are on (one clock reading serves both), and a call that defers carries `seed`, its
/// line's fields so far.
pub(crate) fn run_logged(
    found: Found<'_>,
    call: &Call<'_>,
    metrics: Option<&std::sync::Arc<Metrics>>,
    seed: Option<&Seed<'_>>,
    deferrals: &mut Deferrals<'_>,
    out: &mut Vec<u8>,
) -> (Result<Invoked, RpcError>, Clock) {
    if let Some(limiter) = found.limiter {
        if let Err(refused) = admit(limiter, found.slot, call, metrics) {
            return (Err(refused), Clock::default());
        }
    }
    let meter = Meter {
        method: found.slot,
        started: monotonic_nanos(),
    };
    let metrics = metrics.map(|metrics| &**metrics);
    let metered = Some((metrics, meter));
    let (outcome, ended) = invoke_metered(found.handler, found.timeout, call, deferrals, metered, seed, out);
    let clock = Clock {
        started: meter.started,
        ended,
    };
    (outcome, clock)
}

/// Run `handler`, appending its result (`null` when it wrote none) to `out`.
///
/// On error nothing the handler wrote is kept; a panic becomes `-32603`.
///
/// # Errors
/// The handler's error, or `-32603` when it panicked.
pub fn invoke(
    handler: &dyn Handler,
    call: &Call<'_>,
    deferrals: &mut Deferrals<'_>,
    out: &mut Vec<u8>,
) -> Result<Invoked, RpcError> {
    invoke_metered(handler, None, call, deferrals, None, None, out).0
}

/// [`invoke`], timed under `metered` (counted in its metrics when on), within the
/// procedure's time limit `timeout` and its caller's; returns when the handler ended on
/// the monotonic clock (0 when not timed, or deferred).
fn invoke_metered(
    handler: &dyn Handler,
    timeout: Option<Duration>,
    call: &Call<'_>,
    deferrals: &mut Deferrals<'_>,
    metered: Option<(Option<&Metrics>, Meter)>,
    seed: Option<&Seed<'_>>,
    out: &mut Vec<u8>,
) -> (Result<Invoked, RpcError>, u64) {
    let start = out.len();
    let mut reply = Reply::new(out, deferrals.target.map(|target| (target, &mut *deferrals.next_slot)));
    reply.set_meter(metered.map(|(_, meter)| meter));
    reply.set_seed(seed);
    reply.set_attachments(deferrals.attachments.as_deref_mut());
    match call.id() {
        Some(id) if deferrals.streams => reply.allow_streaming(id, deferrals.stream_attachments),
        Some(_) => {}
        // A notification's result is dropped (§4.1): it is not built either.
        None => reply.set_unwanted(true),
    }
    // No clock is read for a call without a deadline.
    let deadline = match (timeout, call.context().timeout()) {
        (None, None) => None,
        (own, caller) => deadline_of(own, caller),
    };
    reply.set_deadline(deadline);
    let mut result = catch_unwind(AssertUnwindSafe(|| handler.handle(call, &mut reply)))
        .unwrap_or_else(|panic| Err(panicked(&panic, call.method())));
    let deferred = reply.deferred();
    if let Some(deadline) = deadline.filter(|_| deferred.is_none()) {
        late(deadline, &mut result);
    }
    // Counted here, before the outcome is built: counting after it cost a copy of the
    // result (100 instructions a call).
    let mut ended = 0;
    match result {
        Ok(()) => {
            if let Some(slot) = deferred {
                out.truncate(start);
                if let Some((Some(metrics), meter)) = metered {
                    metrics.deferred(meter.method);
                }
                return (Ok(Invoked::Deferred(slot)), 0);
            }
            if out.len() == start {
                out.extend_from_slice(b"null");
            }
            if let Some((metrics, meter)) = metered {
                ended = monotonic_nanos();
                if let Some(metrics) = metrics {
                    metrics.handled_at(meter.method, Ok(()), meter.started, ended);
                }
            }
            (Ok(Invoked::Done), ended)
        }
        Err(error) => {
            if let Some((metrics, meter)) = metered {
                ended = monotonic_nanos();
                if let Some(metrics) = metrics {
                    metrics.handled_at(meter.method, Err(&error), meter.started, ended);
                }
            }
            out.truncate(start);
            (Err(error), ended)
        }
    }
}

/// When a call that arrives now must be answered: within the procedure's time limit `own`
/// and its caller's, whichever is shorter; `None` for a budget past what the clock can
/// count (centuries: no deadline in effect).
#[cold]
#[inline(never)]
fn deadline_of(own: Option<Duration>, caller: Option<Duration>) -> Option<Instant> {
    let budget = match (own, caller) {
        (Some(own), Some(caller)) => own.min(caller),
        (own, caller) => own.or(caller)?,
    };
    Instant::now().checked_add(budget)
}

/// A handler that answered inline after its call's deadline: its result is dropped (the
/// caller hears "Deadline exceeded" in its place, in order).
#[cold]
#[inline(never)]
fn late(deadline: Instant, result: &mut Result<(), RpcError>) {
    if Instant::now() >= deadline {
        *result = Err(RpcError::deadline_exceeded());
    }
}

/// Take the call's tokens from the rate limits (`crate::limit`), or refuse it before it
/// runs, counted in `metrics`.
fn admit(
    limiter: &Limiter,
    slot: u32,
    call: &Call<'_>,
    metrics: Option<&std::sync::Arc<Metrics>>,
) -> Result<(), RpcError> {
    match limiter.admit(slot, call.context()) {
        Ok(()) => Ok(()),
        Err(refused) => Err(rate_limited(&refused, metrics)),
    }
}

#[cold]
#[inline(never)]
fn rate_limited(refused: &Refused, metrics: Option<&std::sync::Arc<Metrics>>) -> RpcError {
    if let Some(metrics) = metrics {
        metrics.refused(Refusal::RateLimited);
    }
    refused.error()
}

/// Count a request refused before any call ran.
fn refused(router: &Router, why: Refusal) {
    if let Some(metrics) = router.metrics() {
        metrics.refused(why);
    }
}

#[cold]
#[inline(never)]
fn parse_error(router: &Router, logging: Option<Logging<'_>>, context: &Context<'_>, out: &mut Vec<u8>) -> Outcome {
    refused(router, Refusal::ParseError);
    let start = out.len();
    write_parse_error(out);
    if let Some(mut logging) = logging {
        logging.refused(context, None, ErrorCode::ParseError.code(), out.len() - start);
    }
    Outcome::ParseError
}

#[cold]
#[inline(never)]
fn panicked(payload: &Box<dyn std::any::Any + Send>, method: &str) -> RpcError {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panic");
    RpcError::internal(format!("Internal error: procedure '{method}' failed: {what}"))
}
