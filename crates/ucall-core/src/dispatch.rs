// SPDX-License-Identifier: Apache-2.0
//! Running the calls of one message (a request or a batch): each is looked up in the
//! router, its handler run (a panic becomes `-32603`), and its reply appended in request
//! order; a deferred reply's place is noted for the session to hold.
//!
//! Above `router` and `defer`, below `session`: the codec (`jsonrpc`) knows nothing of
//! handlers.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::context::Context;
use crate::defer::{Meter, Target};
use crate::jsonrpc::message::{self, Element, Envelope, ParseError, Request};
use crate::jsonrpc::{as_text, write_error, write_parse_error, write_rpc_error, ErrorCode, RpcError};
use crate::metrics::{Metrics, Refusal};
use crate::router::{Call, Cancel, Handler, Reply, Router};
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
}

/// What running a handler produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invoked {
    /// The result was appended.
    Done,
    /// The handler deferred; the result will come with this slot.
    Deferred(u64),
}

/// Process one JSON text (a request or a batch), appending the reply to `out`.
///
/// Replies that handlers defer are not written: their places are listed in
/// `scratch.deferred` (offsets into `out`), for the session to hold until they complete.
pub fn process(
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
    // One UTF-8 check up front (§ "-32700 ... including invalid UTF-8"); the parser then
    // works on `str` and every slice it hands out is text already.
    let Some(text) = as_text(text) else {
        return parse_error(router, out);
    };
    if !message::is_batch(text.as_bytes()) {
        return match message::parse_request(text) {
            Ok(envelope) => {
                let status = &mut scratch.http_status;
                if answer(
                    &envelope,
                    context,
                    router,
                    deferrals,
                    &mut scratch.deferred,
                    status,
                    out,
                ) {
                    Outcome::Replied
                } else {
                    Outcome::Silent
                }
            }
            Err(ParseError) => parse_error(router, out),
        };
    }
    scratch.elements.clear();
    if message::parse_batch(text, &mut scratch.elements).is_err() {
        return parse_error(router, out);
    }
    // §6: "If the batch rpc call itself fails to be recognized as an valid JSON or as an
    // Array with at least one value, the response from the Server MUST be a single
    // Response object."
    if scratch.elements.is_empty() {
        refused(router, Refusal::InvalidRequest);
        write_error(
            out,
            None,
            ErrorCode::InvalidRequest.code(),
            "Invalid Request: empty batch",
            None,
        );
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
        write_error(out, None, ErrorCode::InvalidRequest.code(), &message, None);
        return Outcome::Replied;
    }
    let opening = out.len();
    out.push(b'[');
    // A batch's reply is one message: its calls cannot stream.
    let streams = std::mem::replace(&mut deferrals.streams, false);
    let mut replies = 0usize;
    for element in &scratch.elements {
        let comma_at = out.len();
        if replies > 0 {
            out.push(b',');
        }
        let envelope = element.envelope(text);
        if answer(
            &envelope,
            context,
            router,
            deferrals,
            &mut scratch.deferred,
            &mut None,
            out,
        ) {
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

/// Answer one element; returns whether a reply was appended. An error that names an HTTP
/// status leaves it in `status`.
fn answer(
    envelope: &Envelope<'_>,
    context: &Context<'_>,
    router: &Router,
    deferrals: &mut Deferrals<'_>,
    deferred: &mut Vec<DeferredAt>,
    status: &mut Option<u16>,
    out: &mut Vec<u8>,
) -> bool {
    match envelope {
        Envelope::Invalid { id, reason } => {
            refused(router, Refusal::InvalidRequest);
            let message = format!("Invalid Request: {reason}");
            write_error(out, *id, ErrorCode::InvalidRequest.code(), &message, None);
            true
        }
        Envelope::Request(request) => call(request, context, router, deferrals, deferred, status, out),
    }
}

fn call(
    request: &Request<'_>,
    context: &Context<'_>,
    router: &Router,
    deferrals: &mut Deferrals<'_>,
    deferred: &mut Vec<DeferredAt>,
    status: &mut Option<u16>,
    out: &mut Vec<u8>,
) -> bool {
    let start = out.len();
    let id = request.id;
    let outcome = match router.find(&request.method) {
        Some(found) => {
            out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            out.extend_from_slice(id.unwrap_or("null").as_bytes());
            out.extend_from_slice(b",\"result\":");
            // A `"timeout"` member tightens the deadline the message came with (a header's).
            let bounded;
            let context = match (request.timeout, context.timeout()) {
                (None, _) => context,
                (Some(own), shared) => {
                    bounded = context.with_timeout(Some(shared.map_or(own, |shared| shared.min(own))));
                    &bounded
                }
            };
            let call = Call::new(&request.method, request.params, id).with_context(context);
            run(found, &call, router.metrics(), deferrals, out)
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
    if id.is_none() {
        // §4.1: "The Server MUST NOT reply to a Notification".
        out.truncate(start);
        return false;
    }
    match outcome {
        Ok(Invoked::Done) => out.push(b'}'),
        Ok(Invoked::Deferred(slot)) => {
            out.truncate(start);
            deferred.push(DeferredAt {
                offset: start,
                slot,
                id: id.map(Box::from),
            });
        }
        Err(error) => {
            out.truncate(start);
            write_rpc_error(out, id, &error);
            *status = error.http_status();
        }
    }
    true
}

/// Run the handler `found` by [`Router::find`] as [`invoke`] does, counted in `metrics`
/// (when on) under its slot: how it ended and how long it took, or, when it defers, once
/// its completion reaches the worker.
///
/// # Errors
/// As [`invoke`].
pub fn run(
    (handler, slot): (&dyn Handler, u32),
    call: &Call<'_>,
    metrics: Option<&std::sync::Arc<Metrics>>,
    deferrals: &mut Deferrals<'_>,
    out: &mut Vec<u8>,
) -> Result<Invoked, RpcError> {
    let metered = metrics.map(|metrics| {
        let meter = Meter {
            method: slot,
            started: metrics.now(),
        };
        (&**metrics, meter)
    });
    invoke_metered(handler, call, deferrals, metered, out)
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
    invoke_metered(handler, call, deferrals, None, out)
}

fn invoke_metered(
    handler: &dyn Handler,
    call: &Call<'_>,
    deferrals: &mut Deferrals<'_>,
    metered: Option<(&Metrics, Meter)>,
    out: &mut Vec<u8>,
) -> Result<Invoked, RpcError> {
    let start = out.len();
    let mut reply = Reply::new(out, deferrals.target.map(|target| (target, &mut *deferrals.next_slot)));
    reply.set_meter(metered.map(|(_, meter)| meter));
    if let Some(id) = call.id().filter(|_| deferrals.streams) {
        reply.allow_streaming(id);
    }
    let result = catch_unwind(AssertUnwindSafe(|| handler.handle(call, &mut reply)))
        .unwrap_or_else(|panic| Err(panicked(&panic, call.method())));
    let deferred = reply.deferred();
    // Counted here, before the outcome is built: counting after it cost a copy of the
    // result (100 instructions a call).
    match result {
        Ok(()) => {
            if let Some(slot) = deferred {
                out.truncate(start);
                if let Some((metrics, meter)) = metered {
                    metrics.deferred(meter.method);
                }
                return Ok(Invoked::Deferred(slot));
            }
            if out.len() == start {
                out.extend_from_slice(b"null");
            }
            if let Some((metrics, meter)) = metered {
                metrics.handled(meter.method, Ok(()), meter.started);
            }
            Ok(Invoked::Done)
        }
        Err(error) => {
            if let Some((metrics, meter)) = metered {
                metrics.handled(meter.method, Err(error.code()), meter.started);
            }
            out.truncate(start);
            Err(error)
        }
    }
}

/// Count a request refused before any call ran.
fn refused(router: &Router, why: Refusal) {
    if let Some(metrics) = router.metrics() {
        metrics.refused(why);
    }
}

#[cold]
#[inline(never)]
fn parse_error(router: &Router, out: &mut Vec<u8>) -> Outcome {
    refused(router, Refusal::ParseError);
    write_parse_error(out);
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
