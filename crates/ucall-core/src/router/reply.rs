// SPDX-License-Identifier: Apache-2.0
//! [`Reply`]: where a handler writes its result, straight into the connection's output
//! buffer, its binary values as attachments when the caller accepts them; and how it
//! defers or streams its answer.

use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;

use crate::defer::{Deferred, Meter, Target};
use crate::jsonrpc::attachment::Dtype;
use crate::jsonrpc::section::{self, Element, Section};
use crate::jsonrpc::RpcError;
use crate::request_log::Seed;

/// Where a handler writes its result: straight into the connection's output buffer.
///
/// A handler that cannot answer at once calls [`Reply::defer`] and completes the
/// returned [`Deferred`] later, from any thread.
pub struct Reply<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    deferral: Option<(Target<'o>, &'o mut u64)>,
    deferred: Option<u64>,
    /// Carried by a deferred reply, for the metrics.
    meter: Option<Meter>,
    /// What a deferred reply's request log line needs, when the log is on.
    seed: Option<&'o Seed<'o>>,
    /// The call's id when it may stream its result ([`Reply::stream`]).
    stream_id: Option<&'o str>,
    /// A stream's items may carry attachments (when the caller accepts binary replies).
    stream_attachments: bool,
    /// When the caller stops waiting, if the call has a deadline.
    deadline: Option<Instant>,
    /// The message's attachments, when the caller accepts binary replies.
    attachments: Option<&'o mut Section>,
    /// How many of them came before this call's.
    attachments_before: usize,
    /// Nanoseconds spent writing results so far, when a span times the call
    /// ([`Reply::time_writing`]); `None` otherwise.
    writing_ns: Option<u64>,
    /// The call is a notification: no reply is sent, so no result is built.
    unwanted: bool,
}

impl<'o> Reply<'o> {
    pub(crate) fn new(out: &'o mut Vec<u8>, deferral: Option<(Target<'o>, &'o mut u64)>) -> Self {
        let start = out.len();
        Reply {
            out,
            start,
            deferral,
            deferred: None,
            meter: None,
            seed: None,
            stream_id: None,
            stream_attachments: false,
            deadline: None,
            attachments: None,
            attachments_before: 0,
            writing_ns: None,
            unwanted: false,
        }
    }

    /// The call is a notification (JSON-RPC 2.0 §4.1): its result is never sent, so the
    /// ways of writing one skip the work (a large result costs nothing to drop).
    pub(crate) fn set_unwanted(&mut self, unwanted: bool) {
        self.unwanted = unwanted;
    }

    /// Whether a result written here is sent: `false` for a notification, whose result
    /// [`Reply::json`], [`Reply::bytes`] and the like skip, and a handler writing through
    /// [`Reply::buffer`] may skip too (what it writes is dropped).
    #[must_use]
    pub fn wants_result(&self) -> bool {
        !self.unwanted
    }

    /// Count the time [`Reply::json`] spends serializing results, for a span that reports
    /// the time spent writing the reply ([`Reply::writing_ns`]).
    #[cfg(feature = "tracing")]
    pub(crate) fn time_writing(&mut self) {
        self.writing_ns = Some(0);
    }

    /// The nanoseconds spent serializing the result into the reply, when timed.
    #[must_use]
    pub fn writing_ns(&self) -> Option<u64> {
        self.writing_ns
    }

    /// Binary values of the result go into `attachments` (the caller accepts binary
    /// replies); `None`: in their plain JSON form.
    pub(crate) fn set_attachments(&mut self, attachments: Option<&'o mut Section>) {
        self.attachments_before = attachments.as_ref().map_or(0, |a| a.count());
        self.attachments = attachments;
    }

    /// Drop what this call attached: its result is replaced.
    #[inline]
    fn forget_attachments(&mut self) {
        if let Some(attachments) = self.attachments.as_deref_mut() {
            attachments.truncate(self.attachments_before);
        }
    }

    /// The call must be answered by `deadline` (see [`Reply::deadline`]).
    pub(crate) fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// When the caller stops waiting, if the call has a deadline: the earlier of its
    /// procedure's time limit ([`crate::ServerBuilder::timeout`]) and its caller's
    /// ([`crate::Context::timeout`]), counted from the call's arrival. At that time the
    /// caller gets `-32000` "Deadline exceeded" (HTTP 504): at once for a deferred reply
    /// (which is dropped if it comes later), or when the handler returns for one that
    /// answers inline (its late result is dropped).
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Let the call stream its result: a single call with an id, on a transport that
    /// carries items; with `attachments`, items that name attachments.
    pub(crate) fn allow_streaming(&mut self, id: &'o str, attachments: bool) {
        self.stream_id = Some(id);
        self.stream_attachments = attachments;
    }

    /// The connection's streamed calls under way, where known.
    pub(crate) fn streams(&self) -> Option<&crate::streaming::Streams> {
        let (target, _) = self.deferral.as_ref()?;
        target.presence.map(crate::defer::Presence::streams)
    }

    /// Count the call under `meter` should it defer its reply.
    pub(crate) fn set_meter(&mut self, meter: Option<Meter>) {
        self.meter = meter;
    }

    /// Keep what the call's request log line needs should it defer its reply.
    pub(crate) fn set_seed(&mut self, seed: Option<&'o Seed<'o>>) {
        self.seed = seed;
    }

    /// Answer later: the returned handle completes the call from any thread, and replies
    /// on the connection still leave in request order. Anything written to this `Reply`
    /// is discarded.
    ///
    /// # Errors
    /// `-32603` where deferring is not available (a session driven without an engine).
    pub fn defer(&mut self) -> Result<Deferred, RpcError> {
        self.defer_as(false, self.deadline)
    }

    /// As [`Reply::defer`], for a call that waits before it runs (queued for a batch):
    /// the handle also tells whether the caller has gone meanwhile
    /// ([`Deferred::is_abandoned`]).
    ///
    /// # Errors
    /// `-32603` where deferring is not available.
    pub fn defer_watched(&mut self) -> Result<Deferred, RpcError> {
        self.defer_as(true, self.deadline)
    }

    /// Whether [`Reply::defer`] can work here: an engine drives the session (it may still
    /// refuse the call when the server is overloaded).
    #[must_use]
    pub fn can_defer(&self) -> bool {
        self.deferral.is_some()
    }

    /// Stream the result: the returned handle sends items ([`Deferred::send_item`]), from
    /// any thread, and then completes the call with its final reply as
    /// [`Reply::defer`]'s does. It knows when the caller has gone
    /// ([`crate::StreamError::Gone`]). Wire format: `crate::streaming`.
    ///
    /// # Errors
    /// `-32600` when the call cannot stream (in a batch, a notification, over HTTP/1.0 or
    /// a REST-style URL); `-32603` where deferring is not available.
    pub fn stream(&mut self) -> Result<Deferred, RpcError> {
        let Some(id) = self.stream_id else {
            return Err(not_streamable());
        };
        // A stream has no deadline: it lasts while its caller reads, and stops when it goes.
        // Its items and final reply carry attachments where its transport frames them in
        // the stream and the caller accepts them (docs/wire.md §3).
        let deferred = self.defer_as(true, None)?;
        let binary = deferred.accepts_attachments() && self.stream_attachments;
        let mut deferred = deferred.with_binary(binary);
        let credit = deferred.make_streamed();
        if let Some(streams) = self.streams() {
            streams.register(id, &credit);
        }
        Ok(deferred)
    }

    fn defer_as(&mut self, watch: bool, deadline: Option<Instant>) -> Result<Deferred, RpcError> {
        let Some((target, next_slot)) = self.deferral.as_mut() else {
            return Err(RpcError::internal("Internal error: this server cannot defer replies"));
        };
        if let Some(overloaded) = target.sink.refuse_pending() {
            return Err(overloaded);
        }
        let slot = **next_slot;
        **next_slot += 1;
        let target = *target;
        self.deferred = Some(slot);
        self.out.truncate(self.start);
        self.forget_attachments();
        let binary = self.attachments.is_some();
        let note = self.seed.map(Seed::keep);
        Ok(Deferred::new(target, slot, self.meter, note, watch, deadline)
            .with_binary(binary)
            .with_unwanted(self.unwanted))
    }

    /// The slot of the deferred reply, if [`Reply::defer`] was called.
    pub(crate) fn deferred(&self) -> Option<u64> {
        self.deferred
    }

    /// Whether a result has been written.
    #[must_use]
    pub fn is_written(&self) -> bool {
        self.out.len() > self.start
    }

    /// Serialize `value` as the result, replacing anything written before.
    ///
    /// # Errors
    /// `-32603` when `value` cannot be serialized (for example a map with non-string keys).
    pub fn json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), RpcError> {
        if self.unwanted {
            return Ok(());
        }
        if self.writing_ns.is_some() {
            return self.json_timed(value);
        }
        self.json_untimed(value)
    }

    #[cold]
    #[inline(never)]
    fn json_timed<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), RpcError> {
        let started = crate::date::monotonic_nanos();
        let outcome = self.json_untimed(value);
        let spent = crate::date::monotonic_nanos().saturating_sub(started);
        self.writing_ns = self.writing_ns.map(|before| before.saturating_add(spent));
        outcome
    }

    fn json_untimed<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), RpcError> {
        self.out.truncate(self.start);
        self.forget_attachments();
        serde_json::to_writer(&mut *self.out, value).map_err(|e| {
            self.out.truncate(self.start);
            RpcError::internal(format!("Internal error: result cannot be serialized: {e}"))
        })
    }

    /// Use `json`, which must be one valid JSON text, as the result.
    ///
    /// # Errors
    /// `-32603` when `json` is not valid JSON; nothing is written then.
    pub fn raw(&mut self, json: &str) -> Result<(), RpcError> {
        if self.unwanted {
            return Ok(());
        }
        if serde_json::from_str::<serde::de::IgnoredAny>(json).is_err() {
            return Err(RpcError::internal(
                "Internal error: the procedure replied with invalid JSON",
            ));
        }
        self.raw_trusted(json.trim());
        Ok(())
    }

    /// Use `json` as the result without checking it. The caller guarantees that it is one
    /// valid JSON text; anything else corrupts the reply stream.
    pub fn raw_trusted(&mut self, json: &str) {
        if self.unwanted {
            return;
        }
        self.out.truncate(self.start);
        self.forget_attachments();
        self.out.extend_from_slice(json.as_bytes());
    }

    /// Whether binary values of the result travel as attachments (the caller accepts
    /// binary replies, docs/wire.md §3); else they are sent in their plain JSON form.
    #[must_use]
    pub fn accepts_attachments(&self) -> bool {
        self.attachments.is_some()
    }

    /// Answer with `data` as the result, replacing anything written before: an attachment
    /// sent from `data`'s own memory for a caller that accepts binary replies, else a
    /// base64 string (docs/wire.md §2).
    pub fn bytes(&mut self, data: impl Into<Bytes>) {
        if self.unwanted {
            return;
        }
        self.out.truncate(self.start);
        self.forget_attachments();
        self.append_bytes(data);
    }

    /// Answer with an array of `shape` elements of `dtype`, `data` in C order and
    /// little-endian, replacing anything written before: an attachment for a caller that
    /// accepts binary replies, else the base64 of its `.npy` form.
    ///
    /// # Errors
    /// `-32603` when `data`'s length is not the shape's element count times the dtype's
    /// size; nothing is written then.
    pub fn array(&mut self, dtype: Dtype, shape: &[usize], data: impl Into<Bytes>) -> Result<(), RpcError> {
        if self.unwanted {
            return Ok(());
        }
        self.out.truncate(self.start);
        self.forget_attachments();
        self.append_array(dtype, shape, data)
    }

    /// [`Reply::array`] of a vector of numbers, sent from the vector's own memory.
    ///
    /// # Errors
    /// As [`Reply::array`].
    pub fn array_of<T: Element>(&mut self, shape: &[usize], data: Vec<T>) -> Result<(), RpcError> {
        self.array(T::DTYPE, shape, section::typed_bytes(data))
    }

    /// Append `data` as one value at the end of the result being written through
    /// [`Reply::buffer`] (a member of an object, an element of an array), as
    /// [`Reply::bytes`] writes it.
    pub fn append_bytes(&mut self, data: impl Into<Bytes>) {
        if self.unwanted {
            return;
        }
        section::write_bytes(self.out, self.start, self.attachments.as_deref_mut(), data.into());
    }

    /// Append an array as one value at the end of the result being written through
    /// [`Reply::buffer`], as [`Reply::array`] writes it.
    ///
    /// # Errors
    /// As [`Reply::array`].
    pub fn append_array(&mut self, dtype: Dtype, shape: &[usize], data: impl Into<Bytes>) -> Result<(), RpcError> {
        if self.unwanted {
            return Ok(());
        }
        section::write_array(
            self.out,
            self.start,
            self.attachments.as_deref_mut(),
            dtype,
            shape,
            data.into(),
        )
        .map_err(|problem| RpcError::internal(format!("Internal error: {problem}")))
    }

    /// The buffer itself, for serializers that write JSON directly (keep it one valid JSON text).
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.out
    }

    /// [`Reply::buffer`] and, when the caller accepts binary replies, the section whose
    /// attachments the result's placeholders name: for serializers that write binary values
    /// themselves ([`crate::jsonrpc::section::write_bytes`] and `write_array`).
    pub fn buffer_and_attachments(&mut self) -> (&mut Vec<u8>, Option<&mut Section>) {
        (self.out, self.attachments.as_deref_mut())
    }
}

/// The error a call that cannot stream is answered with.
fn not_streamable() -> RpcError {
    RpcError::new(
        crate::jsonrpc::ErrorCode::InvalidRequest.code(),
        "Invalid Request: this method streams its result; call it alone and with an id \
         (not in a batch, not as a notification, not over HTTP/1.0 or a REST-style URL)",
    )
}
