// SPDX-License-Identifier: Apache-2.0
//! Deferred replies: a procedure may answer later, from any thread.
//!
//! A handler calls [`crate::Reply::defer`] and gets a [`Deferred`]; it can hand that to a
//! thread pool, an event loop or another service, and complete it when the result is
//! known. The reply's place in the connection's output is held meanwhile, so replies
//! still leave in request order. Completions travel to the connection's worker through its
//! [`Sink`], which wakes the worker.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::Serialize;

use crate::cancellation::Cancellation;
use crate::context::Liveness;
use crate::deadline::{self, Expire};
use crate::jsonrpc::attachment::Dtype;
use crate::jsonrpc::section::{self, Section};
use crate::jsonrpc::RpcError;
use crate::request_log::Pending;
use crate::streaming::{Credit, StreamError, Streams, CANCELLED};

/// What a deferred call produced: the result's JSON text, or an error.
pub type Outcome = Result<Vec<u8>, RpcError>;

/// A finished deferred call on its way back to its connection.
#[derive(Debug)]
pub struct Completion {
    /// The connection's slot in its worker.
    pub conn: usize,
    /// The connection's generation, so that a reused slot is not answered by mistake.
    pub generation: u64,
    /// Which deferred call of that connection.
    pub slot: u64,
    /// The result.
    pub outcome: Outcome,
    /// The result's attachments (docs/wire.md), named by placeholders in it.
    pub attachments: Section,
    /// What the metrics count the call under, and when it started: set when the metrics
    /// or the request log are on.
    pub meter: Option<Meter>,
    /// The call's request log line so far, when the log is on.
    pub note: Option<Box<Pending>>,
    /// `Some` for an item of a streamed reply (`outcome` is its JSON), not the call's end:
    /// the credit its producer took, given back once the item is on its way
    /// (see [`crate::streaming`]).
    pub item: Option<Arc<Credit>>,
}

/// A deferred call's method (its slot in `crate::metrics::Metrics`) and when it started:
/// the worker counts the call when its completion arrives, whether or not its connection
/// is still open.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    /// The method's slot.
    pub method: u32,
    /// When the call started (`crate::metrics::Metrics::now`).
    pub started: u64,
}

/// Most deferred calls one worker awaits at once, over all its connections. Past it, no
/// connection of the worker reads its next request until some complete: many clients
/// pipelining into slow procedures could otherwise make the server queue millions of calls,
/// each holding memory (a Python server under such load grew from 27 MB to 480 MB), and a
/// new call would wait behind all of them.
pub const MAX_AWAITED: usize = 16384;

/// A worker that awaits this many deferred calls is busy: each of its connections then
/// reads its next request only while fewer than [`BUSY_SHARE`] of its messages await
/// replies. Below it, a connection may have a deep pipeline awaited (up to its session's
/// own cap), which is what makes pipelining fast; 64 clients pipelining 32 calls each stay below it.
pub const BUSY_FROM: usize = MAX_AWAITED / 4;

/// A connection's share of a busy worker, in messages (a batch is one). Small, so that
/// under many pipelining clients the calls queued at once stay near [`BUSY_FROM`] and a
/// newcomer's call waits for those, not for [`MAX_AWAITED`]; and so that a client that
/// pipelined a thousand calls and hung up costs a few of them before the failed write of
/// their replies ends it (docs/design.md, "Deferred replies").
pub const BUSY_SHARE: usize = 4;

/// One worker's queue of completions, and how to wake the worker.
pub struct Sink {
    queue: Mutex<Vec<Completion>>,
    wake: Box<dyn Fn() + Send + Sync>,
    /// The worker's own thread completes calls between two turns and delivers what is
    /// queued at the start of its next turn: completions need not wake it (see
    /// [`WakeHold`]). Read and written under `queue`'s lock.
    held: AtomicBool,
    /// `queue` holds completions. Set under its lock; read without it, so that the
    /// worker's every turn (which drains) takes no lock when nothing was deferred.
    queued: AtomicBool,
    /// Deferred calls made on the worker whose completions it has not drained yet, and
    /// streamed items queued. The worker's thread defers and drains; a streamed reply's
    /// producer adds its items from any thread.
    awaited: AtomicUsize,
    /// Past this many awaited calls a new call is refused (see [`Sink::bounded`]).
    max_pending: usize,
}

impl Sink {
    /// A sink that calls `wake` after each completion is queued.
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Arc<Self> {
        Self::bounded(wake, None)
    }

    /// As [`Sink::new`], refusing a call that would defer past `max_pending` awaited
    /// calls (`Config::max_pending_calls`): [`crate::Reply::defer`] answers it at once
    /// with an overload error that is safe to retry. Without a bound, [`MAX_AWAITED`]
    /// holds the worker's connections back instead.
    pub fn bounded(wake: impl Fn() + Send + Sync + 'static, max_pending: Option<usize>) -> Arc<Self> {
        Arc::new(Sink {
            queue: Mutex::new(Vec::new()),
            wake: Box::new(wake),
            held: AtomicBool::new(false),
            queued: AtomicBool::new(false),
            awaited: AtomicUsize::new(0),
            max_pending: max_pending.unwrap_or(usize::MAX),
        })
    }

    /// The overload error for a call that would go past the bound, or `None`.
    pub(crate) fn refuse_pending(&self) -> Option<RpcError> {
        (self.awaited() >= self.max_pending).then(|| pending_full(self.max_pending))
    }

    /// Move every queued completion into `into`; returns how many deferred calls the
    /// worker still awaits after them (see `engine::turn_wait`).
    pub fn drain(&self, into: &mut Vec<Completion>) -> usize {
        // A push still under way is announced by its own wake, or, while held, found by
        // the holder's next turn: its release takes the lock after the push.
        if !self.queued.load(Ordering::Acquire) {
            return self.awaited();
        }
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let awaited = self.awaited.fetch_sub(queue.len(), Ordering::Relaxed) - queue.len();
        into.append(&mut queue);
        self.queued.store(false, Ordering::Relaxed);
        awaited
    }

    /// Deferred calls the worker awaits now (see [`Sink::is_full`]).
    pub(crate) fn awaited(&self) -> usize {
        self.awaited.load(Ordering::Relaxed)
    }

    /// Whether the worker awaits [`MAX_AWAITED`] deferred calls: its connections read no
    /// further requests until some complete.
    pub fn is_full(&self) -> bool {
        self.awaited() >= MAX_AWAITED
    }

    /// Queue `completion`, waking the worker if nobody else will; with `always`, wake it
    /// even while completions are held (see [`Deferred::error_now`]).
    fn push(&self, completion: Completion, always: bool) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        // A non-empty queue was announced by the push that filled it and has not been
        // drained yet (draining takes everything under this lock): one wake is enough.
        let wake = always || (queue.is_empty() && !self.held.load(Ordering::Relaxed));
        queue.push(completion);
        self.queued.store(true, Ordering::Release);
        drop(queue);
        if wake {
            (self.wake)();
        }
    }
}

/// Lets the thread that turns a worker complete calls between turns without waking the
/// worker for each group: while held, completions only queue, and the worker delivers
/// them at the start of its next turn (every turn does, before it waits).
///
/// The holder must either turn the worker next, or release with `wake = true` (it lost
/// the worker to another thread meanwhile), so that nothing queued waits unseen.
#[derive(Clone)]
pub struct WakeHold(pub(crate) Arc<Sink>);

impl WakeHold {
    /// Completions from now on queue without waking the worker.
    pub fn hold(&self) {
        let _queue = self.0.queue.lock().unwrap_or_else(PoisonError::into_inner);
        self.0.held.store(true, Ordering::Relaxed);
    }

    /// Completions wake the worker again. With `wake`, wake it now if any are queued (the
    /// caller will not turn it next); without, the caller turns it next, which delivers
    /// them.
    pub fn release(&self, wake: bool) {
        let queue = self.0.queue.lock().unwrap_or_else(PoisonError::into_inner);
        self.0.held.store(false, Ordering::Relaxed);
        let queued = !queue.is_empty();
        drop(queue);
        if wake && queued {
            (self.0.wake)();
        }
    }
}

/// Where deferred calls of one connection report: its worker's sink and its identity.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The worker's sink.
    pub sink: &'a Arc<Sink>,
    /// The connection's slot.
    pub conn: usize,
    /// The connection's generation.
    pub generation: u64,
    /// Whether the connection is still there, for calls that wait before they run
    /// (see [`Deferred::is_abandoned`]); `None` where nobody tracks it.
    pub presence: Option<&'a Presence>,
    /// The call's own cancellation, for a call that can be cancelled alone.
    pub cancellation: Option<&'a Cancellation>,
}

impl<'a> Target<'a> {
    /// The same target, tracking the connection's presence with `presence`.
    #[must_use]
    pub fn with_presence(self, presence: &'a Presence) -> Self {
        Target {
            presence: Some(presence),
            ..self
        }
    }

    /// The same target, for a call that `cancellation` cancels alone.
    #[must_use]
    pub fn with_cancellation(self, cancellation: &'a Cancellation) -> Self {
        Target {
            cancellation: Some(cancellation),
            ..self
        }
    }
}

/// Whether one connection's caller is still there (its [`Liveness`], which deferred calls
/// that asked and the calls' context watch), and its streamed calls under way.
#[derive(Debug, Default)]
pub struct Presence(Liveness, Streams);

impl Presence {
    fn watch(&self) -> Arc<AtomicBool> {
        self.0.watch()
    }

    /// The connection's streamed calls under way, for `ucall.cancel`.
    pub(crate) fn streams(&self) -> &Streams {
        &self.1
    }

    /// The caller's presence, for the calls' context.
    #[must_use]
    pub fn liveness(&self) -> &Liveness {
        &self.0
    }

    /// The caller is gone: every call watching this connection is abandoned.
    pub fn gone(&self) {
        self.0.gone();
    }
}

/// A reply promised by a procedure, to be completed once, from any thread.
///
/// Dropping it without completing answers `-32603`, so that no caller waits forever.
/// `-32000`, HTTP 503 (with `Retry-After`): nothing ran, so a retry is safe.
#[cold]
#[inline(never)]
fn pending_full(max_pending: usize) -> RpcError {
    RpcError::http(
        503,
        format!("Server overloaded: {max_pending} calls already wait for their replies"),
    )
    .with_data(&serde_json::json!({ "executed": false, "max_pending_calls": max_pending }))
}

#[must_use = "a deferred reply must be completed; dropping it answers -32603"]
pub struct Deferred {
    /// Where the completion goes; `None` once it has gone.
    to: Option<To>,
    /// When the caller stops waiting, if the call has a deadline.
    deadline: Option<Instant>,
    /// The connection's presence, when the call asked to watch it.
    pub(crate) present: Option<Arc<AtomicBool>>,
    /// The call's own cancellation, when it can be cancelled alone and asked to watch.
    cancellation: Option<Cancellation>,
    /// The credit of a streamed reply's items (see [`crate::streaming`]); `None` otherwise.
    pub(crate) stream: Option<Arc<Credit>>,
    /// The caller accepts binary replies: binary values go as attachments.
    binary: bool,
    /// The call is a notification: its result is never sent, so none is built.
    unwanted: bool,
}

/// Where a deferred call's completion goes, and what it carries besides its outcome.
struct Return {
    sink: Arc<Sink>,
    conn: usize,
    generation: u64,
    slot: u64,
    meter: Option<Meter>,
    note: Option<Box<Pending>>,
}

impl Return {
    fn send(self, outcome: Outcome, attachments: Section, always_wake: bool) {
        let completion = Completion {
            conn: self.conn,
            generation: self.generation,
            slot: self.slot,
            outcome,
            attachments,
            meter: self.meter,
            note: self.note,
            item: None,
        };
        self.sink.push(completion, always_wake);
    }
}

/// A deferred call's way back: its own, or, with a deadline, shared with the deadline
/// watcher ([`crate::deadline`]), and whoever takes it first answers.
enum To {
    Own(Return),
    Raced(Arc<Race>),
}

/// The way back of a call with a deadline, until the call or its deadline takes it.
struct Race(Mutex<Option<Return>>);

impl Race {
    fn take(&self) -> Option<Return> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl Expire for Race {
    /// At the deadline the caller hears at once: the worker is woken even while its
    /// completions are held, since the thread that holds them may be running the call.
    fn expire(&self) {
        if let Some(back) = self.take() {
            back.send(Err(RpcError::deadline_exceeded()), Section::new(), true);
        }
    }
}

impl Deferred {
    pub(crate) fn new(
        target: Target<'_>,
        slot: u64,
        meter: Option<Meter>,
        note: Option<Box<Pending>>,
        watch: bool,
        deadline: Option<Instant>,
    ) -> Self {
        target.sink.awaited.fetch_add(1, Ordering::Relaxed);
        let back = Return {
            sink: Arc::clone(target.sink),
            conn: target.conn,
            generation: target.generation,
            slot,
            meter,
            note,
        };
        let to = match deadline {
            None => To::Own(back),
            Some(at) => {
                let race = Arc::new(Race(Mutex::new(Some(back))));
                let watched: Arc<dyn Expire> = race.clone();
                deadline::watch(at, Arc::downgrade(&watched));
                To::Raced(race)
            }
        };
        Deferred {
            to: Some(to),
            deadline,
            present: if watch {
                target.presence.map(Presence::watch)
            } else {
                None
            },
            cancellation: target.cancellation.filter(|_| watch).cloned(),
            stream: None,
            binary: false,
            unwanted: false,
        }
    }

    /// The same reply, to a caller that accepts binary replies when `binary`.
    pub(crate) fn with_binary(mut self, binary: bool) -> Self {
        self.binary = binary;
        self
    }

    /// The same reply, for a notification when `unwanted` (see [`Deferred::wants_result`]).
    pub(crate) fn with_unwanted(mut self, unwanted: bool) -> Self {
        self.unwanted = unwanted;
        self
    }

    /// Whether a result given here is sent: `false` for a notification, whose result
    /// [`Deferred::json`], [`Deferred::bytes`] and the like do not build (the call still
    /// completes); a binding that converts results itself may skip that too.
    #[must_use]
    pub fn wants_result(&self) -> bool {
        !self.unwanted
    }

    /// Whether binary values of the result travel as attachments (the caller accepts
    /// binary replies, docs/wire.md §3); else [`Deferred::bytes`] and [`Deferred::array`]
    /// send them in their plain JSON form.
    #[must_use]
    pub fn accepts_attachments(&self) -> bool {
        self.binary
    }

    /// Answer with `data` as the result: an attachment for a caller that accepts binary
    /// replies, else a base64 string.
    pub fn bytes(self, data: impl Into<bytes::Bytes>) {
        if self.unwanted {
            return self.finish(Ok(Vec::new()), false);
        }
        let mut attachments = Section::new();
        let mut json = Vec::with_capacity(64);
        let writer = self.binary.then_some(&mut attachments);
        section::write_bytes(&mut json, 0, writer, data.into());
        self.complete_attached(json, attachments);
    }

    /// Answer with an array of `shape` elements of `dtype`, `data` in C order and
    /// little-endian: an attachment for a caller that accepts binary replies, else the
    /// base64 of its `.npy` form. `-32603` when `data` does not have the shape's length.
    pub fn array(self, dtype: Dtype, shape: &[usize], data: impl Into<bytes::Bytes>) {
        if self.unwanted {
            return self.finish(Ok(Vec::new()), false);
        }
        let mut attachments = Section::new();
        let mut json = Vec::with_capacity(128);
        let writer = self.binary.then_some(&mut attachments);
        match section::write_array(&mut json, 0, writer, dtype, shape, data.into()) {
            Ok(()) => self.complete_attached(json, attachments),
            Err(problem) => self.error(RpcError::internal(format!("Internal error: {problem}"))),
        }
    }

    /// Answer with `result`, a JSON text whose placeholders name `attachments` (written
    /// with [`crate::jsonrpc::section::write_bytes`] and `write_array` from offset 0 of
    /// `result`, given [`Deferred::accepts_attachments`]).
    pub fn complete_attached(mut self, result: Vec<u8>, attachments: Section) {
        self.send_attached(Ok(result), attachments, false);
    }

    /// Queue one item of a streamed reply (its JSON text) for the connection; the caller
    /// holds one of the stream's credits, which the worker gives back.
    pub(crate) fn push_item(&self, credit: &Arc<Credit>, json: Vec<u8>, attachments: Section) {
        // A streamed reply has no deadline: its way back is its own until it ends.
        let Some(To::Own(back)) = &self.to else {
            credit.give_back();
            return;
        };
        // Counted as awaited until drained, as every completion is (`Sink::drain`).
        back.sink.awaited.fetch_add(1, Ordering::Relaxed);
        // Woken even while the worker's completions are held: an item leaves at once, also
        // when its generator runs on the thread that turns the worker.
        let completion = Completion {
            conn: back.conn,
            generation: back.generation,
            slot: back.slot,
            outcome: Ok(json),
            attachments,
            meter: None,
            note: None,
            item: Some(Arc::clone(credit)),
        };
        back.sink.push(completion, true);
    }

    /// Whether the caller is known to be gone (its connection ended, or it cancelled this
    /// call): its reply would reach nobody. Always `false` for a reply made without
    /// watching ([`crate::Reply::defer_watched`]).
    #[must_use]
    pub fn is_abandoned(&self) -> bool {
        self.present.as_ref().is_some_and(|flag| !flag.load(Ordering::Relaxed))
            || self.cancellation.as_ref().is_some_and(Cancellation::is_cancelled)
    }

    /// When the caller stops waiting: the call's deadline (its procedure's time limit or
    /// its caller's, see [`crate::Reply::deadline`]), if it has one.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the deadline has answered the caller already ("Deadline exceeded"): an
    /// answer now is dropped, so the work may stop.
    #[must_use]
    pub fn is_expired(&self) -> bool {
        match &self.to {
            Some(To::Raced(race)) => race.0.lock().unwrap_or_else(PoisonError::into_inner).is_none(),
            _ => false,
        }
    }

    /// Answer with `value`, serialized to JSON (`-32603` if it cannot be).
    pub fn json<T: Serialize + ?Sized>(self, value: &T) {
        if self.unwanted {
            return self.finish(Ok(Vec::new()), false);
        }
        let outcome = serde_json::to_vec(value)
            .map_err(|e| RpcError::internal(format!("Internal error: result cannot be serialized: {e}")));
        self.finish(outcome, false);
    }

    /// Answer with `json`, which is checked to be one valid JSON text (`-32603` if not).
    pub fn raw(self, json: &str) {
        if self.unwanted {
            return self.finish(Ok(Vec::new()), false);
        }
        let outcome = match serde_json::from_str::<serde::de::IgnoredAny>(json) {
            Ok(_) => Ok(json.trim().as_bytes().to_vec()),
            Err(_) => Err(RpcError::internal(
                "Internal error: the procedure replied with invalid JSON",
            )),
        };
        self.finish(outcome, false);
    }

    /// Answer with an error.
    pub fn error(self, error: RpcError) {
        self.finish(Err(error), false);
    }

    /// Answer with a result or an error.
    pub fn complete(self, outcome: Outcome) {
        self.finish(outcome, false);
    }

    /// Answer with an error from outside the worker's turns (a deadline passed while the
    /// call waits or runs): the worker is woken even while its completions are held, since
    /// the thread that holds them may be the one running the late call, and the caller
    /// should hear at once.
    pub fn error_now(self, error: RpcError) {
        self.finish(Err(error), true);
    }

    fn finish(mut self, outcome: Outcome, always_wake: bool) {
        self.send(outcome, always_wake);
    }

    /// Send `outcome` back, unless sent already or, with a deadline, unless the deadline
    /// answered first: a late answer is dropped.
    fn send(&mut self, outcome: Outcome, always_wake: bool) {
        self.send_attached(outcome, Section::new(), always_wake);
    }

    fn send_attached(&mut self, outcome: Outcome, attachments: Section, always_wake: bool) {
        let back = match self.to.take() {
            Some(To::Own(back)) => back,
            Some(To::Raced(race)) => match race.take() {
                Some(back) => back,
                None => return,
            },
            None => return,
        };
        back.send(outcome, attachments, always_wake);
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if self.to.is_some() {
            self.send(
                Err(RpcError::internal("Internal error: the procedure dropped its reply")),
                false,
            );
        }
    }
}

/// The final reply of a cancelled stream: `-32800` "Request cancelled"
/// ([`crate::streaming::CANCELLED`]).
#[must_use]
pub fn cancelled() -> RpcError {
    RpcError::new(CANCELLED, "Request cancelled")
}

/// Sending the items of a streamed reply (made with [`crate::Reply::stream`]; see
/// [`crate::streaming`] and docs/streaming.md).
impl Deferred {
    /// Whether this reply carries items before its final reply.
    #[must_use]
    pub fn is_streamed(&self) -> bool {
        self.stream.is_some()
    }

    /// Whether the caller cancelled this streamed call (`ucall.cancel`).
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.stream.as_ref().is_some_and(|credit| credit.is_cancelled())
    }

    /// Send `item`, serialized to JSON, waiting while [`crate::streaming::WINDOW`] items
    /// are on their way.
    ///
    /// # Errors
    /// [`StreamError::Gone`] once the caller has gone and [`StreamError::Cancelled`] once
    /// it cancelled the call (stop producing then); [`StreamError::Invalid`] when `item`
    /// cannot be serialized.
    pub fn send_item<T: Serialize + ?Sized>(&self, item: &T) -> Result<(), StreamError> {
        let json = serde_json::to_vec(item)
            .map_err(|e| StreamError::Invalid(format!("Internal error: an item cannot be serialized: {e}")))?;
        self.send_item_trusted(json)
    }

    /// Send `json`, checked to be one valid JSON text, as the next item (see
    /// [`Deferred::send_item`]).
    ///
    /// # Errors
    /// As [`Deferred::send_item`].
    pub fn send_item_raw(&self, json: &str) -> Result<(), StreamError> {
        if serde_json::from_str::<serde::de::IgnoredAny>(json).is_err() {
            return Err(StreamError::Invalid(
                "Internal error: the procedure streamed invalid JSON".into(),
            ));
        }
        self.send_item_trusted(json.trim().as_bytes().to_vec())
    }

    /// Send `json` as the next item without checking it: the caller guarantees one valid
    /// JSON text. Waits while [`crate::streaming::WINDOW`] items are on their way.
    ///
    /// # Errors
    /// As [`Deferred::send_item`]; [`StreamError::NotStreamed`] for a reply made with
    /// [`crate::Reply::defer`].
    pub fn send_item_trusted(&self, json: Vec<u8>) -> Result<(), StreamError> {
        self.send_item_attached(json, Section::new())
    }

    /// Send `json` (trusted, as [`Deferred::send_item_trusted`]) whose placeholders name
    /// `attachments`, counted from 0 for this item alone: the item then goes as a binary
    /// message of its own (docs/wire.md). Write placeholders only given
    /// [`Deferred::accepts_attachments`].
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn send_item_attached(&self, json: Vec<u8>, attachments: Section) -> Result<(), StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        credit.take(|| !self.is_abandoned(), true)?;
        self.push_item(credit, json, attachments);
        Ok(())
    }

    /// Send `json` (trusted, as [`Deferred::send_item_trusted`]) only if there is room
    /// now; `Ok(false)` (nothing sent) when the window is full. For producers that must
    /// not block (an event loop): they try again later, or wait with
    /// [`Deferred::wait_for_room`] on a thread of their own.
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn try_send_item_trusted(&self, json: Vec<u8>) -> Result<bool, StreamError> {
        self.try_send_item_attached(json, Section::new())
    }

    /// Send `data` as the next item: an attachment where the caller takes one (a binary
    /// message of its own, docs/wire.md), else a base64 string. Waits as
    /// [`Deferred::send_item`] does.
    ///
    /// # Errors
    /// As [`Deferred::send_item`].
    pub fn send_item_bytes(&self, data: impl Into<bytes::Bytes>) -> Result<(), StreamError> {
        let mut attachments = Section::new();
        let mut json = Vec::with_capacity(64);
        section::write_bytes(&mut json, 0, self.binary.then_some(&mut attachments), data.into());
        self.send_item_attached(json, attachments)
    }

    /// Send an array of `shape` elements of `dtype` (`data` in C order, little-endian) as
    /// the next item: an attachment where the caller takes one, else the base64 of its
    /// `.npy` form. Waits as [`Deferred::send_item`] does.
    ///
    /// # Errors
    /// As [`Deferred::send_item`]; [`StreamError::Invalid`] when `data` does not have the
    /// shape's length.
    pub fn send_item_array(
        &self,
        dtype: Dtype,
        shape: &[usize],
        data: impl Into<bytes::Bytes>,
    ) -> Result<(), StreamError> {
        let mut attachments = Section::new();
        let mut json = Vec::with_capacity(128);
        let writer = self.binary.then_some(&mut attachments);
        section::write_array(&mut json, 0, writer, dtype, shape, data.into())
            .map_err(|problem| StreamError::Invalid(format!("Internal error: {problem}")))?;
        self.send_item_attached(json, attachments)
    }

    /// [`Deferred::try_send_item_trusted`] for an item with `attachments` (see
    /// [`Deferred::send_item_attached`]).
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn try_send_item_attached(&self, json: Vec<u8>, attachments: Section) -> Result<bool, StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        if !credit.take(|| !self.is_abandoned(), false)? {
            return Ok(false);
        }
        self.push_item(credit, json, attachments);
        Ok(true)
    }

    /// Whether an item could be sent now without waiting.
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn has_room(&self) -> Result<bool, StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        credit.check(|| !self.is_abandoned())?;
        Ok(credit.has_room())
    }

    /// Wait up to `timeout` for room for one more item; whether there is.
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn wait_for_room(&self, timeout: std::time::Duration) -> Result<bool, StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        credit.wait_for_room(|| !self.is_abandoned(), timeout)
    }

    /// Make this reply a stream; its credit, for [`Streams::register`].
    pub(crate) fn make_streamed(&mut self) -> Arc<Credit> {
        let credit = Credit::new();
        self.stream = Some(Arc::clone(&credit));
        credit
    }
}
