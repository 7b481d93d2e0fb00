// SPDX-License-Identifier: Apache-2.0
//! One `tracing` span per call (cargo feature `tracing`, [`crate::ServerBuilder::trace_calls`]):
//! a hook that opens an `INFO` span named `jsonrpc` around the procedure, with the
//! OpenTelemetry semantic conventions' attributes for a JSON-RPC server
//! (`otel.kind = "server"`, `otel.name` the method, `rpc.system = "jsonrpc"`, `rpc.method`,
//! `rpc.jsonrpc.version`, `rpc.jsonrpc.request_id`, `rpc.jsonrpc.error_code` when it
//! fails, `network.peer.address`/`port`, `network.protocol.name` the transport) and the
//! caller's W3C trace context as `trace_id` and `parent_span_id` (a layer that exports to
//! OpenTelemetry links the span to its remote parent with them; docs/operations.md).
//!
//! Each span also says where the call's time went: `ucall.queued_ns`, from the session
//! reading the request to the handler starting (behind earlier calls of its connection,
//! its batch, the hooks outside this one); `ucall.handler_ns`, the handler's run; and
//! `ucall.reply_ns`, writing its result into the reply ([`Reply::json`], the
//! serialization of what a [`crate::ServerBuilder::procedure`] returns). Sending the
//! reply is the engine's, after the span, together with the other replies ready.
//!
//! The handler runs inside the span, so the spans it opens are its children. A server
//! that does not ask for spans has no hook and pays nothing; without a subscriber
//! interested in them, a call costs the span's callsite check.

use std::net::SocketAddr;

use crate::context::Context;
use crate::date::monotonic_nanos;
use crate::jsonrpc::RpcError;
use crate::router::{Call, Handler, Hook, Reply};
use crate::trace_context::hex_trace_id;

/// The hook that makes the spans.
#[derive(Debug, Default, Clone, Copy)]
pub struct Spans;

impl Hook for Spans {
    fn around(&self, call: &Call<'_>, reply: &mut Reply<'_>, next: &dyn Handler) -> Result<(), RpcError> {
        let span = tracing::info_span!(
            "jsonrpc",
            otel.kind = "server",
            otel.name = call.method(),
            otel.status_code = tracing::field::Empty,
            rpc.system = "jsonrpc",
            rpc.method = call.method(),
            rpc.jsonrpc.version = "2.0",
            rpc.jsonrpc.request_id = tracing::field::Empty,
            rpc.jsonrpc.error_code = tracing::field::Empty,
            network.protocol.name = call.context().transport().as_str(),
            network.peer.address = tracing::field::Empty,
            network.peer.port = tracing::field::Empty,
            trace_id = tracing::field::Empty,
            parent_span_id = tracing::field::Empty,
            ucall.queued_ns = tracing::field::Empty,
            ucall.handler_ns = tracing::field::Empty,
            ucall.reply_ns = tracing::field::Empty,
        );
        if span.is_disabled() {
            return next.handle(call, reply);
        }
        describe(&span, call.context(), call.id());
        let started = monotonic_nanos();
        if let Some(queued) = call.context().waited_until(started) {
            span.record("ucall.queued_ns", queued);
        }
        reply.time_writing();
        let outcome = span.in_scope(|| next.handle(call, reply));
        let ran = monotonic_nanos().saturating_sub(started);
        let writing = reply.writing_ns().unwrap_or(0).min(ran);
        span.record("ucall.handler_ns", ran - writing);
        span.record("ucall.reply_ns", writing);
        if let Err(error) = &outcome {
            span.record("rpc.jsonrpc.error_code", error.code());
            span.record("otel.status_code", "ERROR");
        }
        outcome
    }
}

/// Record what the context says of the caller, and the request id.
fn describe(span: &tracing::Span, context: &Context<'_>, id: Option<&str>) {
    if let Some(id) = id.filter(|id| *id != "null") {
        // A string id without its quotes, as the conventions show it.
        span.record(
            "rpc.jsonrpc.request_id",
            id.strip_prefix('"').and_then(|id| id.strip_suffix('"')).unwrap_or(id),
        );
    }
    if let Some(peer) = context.peer() {
        let peer: SocketAddr = peer;
        span.record("network.peer.address", tracing::field::display(peer.ip()));
        span.record("network.peer.port", peer.port());
    }
    if let Some(trace) = context.trace() {
        let trace_id = hex_trace_id(&trace.parent.trace_id);
        span.record("trace_id", std::str::from_utf8(&trace_id).unwrap_or_default());
        let header = trace.parent.to_header();
        span.record(
            "parent_span_id",
            std::str::from_utf8(&header[36..52]).unwrap_or_default(),
        );
    }
}
