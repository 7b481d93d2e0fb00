// SPDX-License-Identifier: Apache-2.0
//! Dynamic batching: calls to a batch procedure, sent one item at a time by any number of
//! callers over any connection, worker thread or transport, are queued and run together,
//! one handler call per batch (a model answers 32 inputs at once far faster than 32
//! times one).
//!
//! Each call is deferred ([`crate::Reply::defer_watched`]) and queued; the procedure's own
//! threads (`max_concurrent` of them) take batches off the queue. A batch runs:
//! - at once when `max_size` calls wait;
//! - at the latest `max_wait` after its first call was queued;
//! - at once when the arrival rate says it cannot fill before that: the rate is measured
//!   only from calls that arrive while others wait, so that callers that wait for their
//!   own reply before they send again (one caller, or a few) pay no batching delay; such
//!   a lone call runs on the handler's thread after the receiving turn when the handler
//!   can ([`BatchHandler::run_soon`]), with no switch to a batch thread.
//!
//! A caller whose connection ended while its call waited is dropped before the batch
//! runs, and so is a call whose deadline (its caller's `UCall-Timeout` header or
//! `"timeout"` member) passed while it waited: it is answered `-32000` "Deadline exceeded"
//! (HTTP 504) when its batch is formed, or sooner while the batch threads wait; calls
//! queued behind a running batch hear it when that batch ends. When `max_queue` calls
//! wait, a new call is answered at once with an overload error (`-32000`, HTTP 503) whose
//! `data` says `"executed": false`: a retry is safe.
//!
//! With metrics on, each batch run counts its size, and each of its calls its time in the
//! queue, into the procedure's histograms on the metrics page ([`BatchMeter`]).
//!
//! Above `router` and `defer`, beside `dispatch`: the router sees a batch procedure as
//! one more [`Handler`].

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use crate::defer::{Deferred, Outcome};
use crate::jsonrpc::RpcError;
use crate::metrics::BatchMeter;
use crate::router::{Call, Handler, Params, Reply};

/// How a batch procedure forms its batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// Most calls in one batch; a batch this large runs at once.
    pub max_size: usize,
    /// Longest a call waits for others before its batch runs.
    pub max_wait: Duration,
    /// Batches that may run at the same time (each on a thread of its own).
    pub max_concurrent: usize,
    /// Most calls waiting; past it, calls are answered with an overload error at once.
    pub max_queue: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_size: 32,
            max_wait: Duration::from_millis(5),
            max_concurrent: 1,
            max_queue: 4096,
        }
    }
}

/// Bounds of the batch-size histogram: a batch of `n` calls counts in the first bucket
/// whose bound is at least `n` (the last bucket takes the rest).
pub const SIZE_BUCKETS: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// What a batch procedure has done so far (counters only go up).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Batches run.
    pub batches: u64,
    /// Calls run in them.
    pub calls: u64,
    /// Batches by size: `sizes[i]` counts those of at most `SIZE_BUCKETS[i]` calls (and
    /// more than the bucket before); the last also counts larger ones.
    pub sizes: [u64; SIZE_BUCKETS.len()],
    /// Calls' time in the queue, added up, in microseconds.
    pub queue_wait_us: u64,
    /// The longest time one call waited in the queue, in microseconds.
    pub max_queue_wait_us: u64,
    /// Calls refused because the queue was full.
    pub rejected: u64,
    /// Calls dropped because their caller had gone before the batch ran.
    pub abandoned: u64,
    /// Calls dropped because their deadline passed before the batch ran.
    pub expired: u64,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    calls: AtomicU64,
    sizes: [AtomicU64; SIZE_BUCKETS.len()],
    queue_wait_us: AtomicU64,
    max_queue_wait_us: AtomicU64,
    rejected: AtomicU64,
    abandoned: AtomicU64,
    expired: AtomicU64,
}

/// One queued call.
struct Item {
    params: Option<Box<str>>,
    /// The attachment section of the binary message the call came in (docs/wire.md), kept
    /// with its params where it lies in the receive buffer (`crate::lend`), else copied.
    section: Option<Bytes>,
    /// What the handler kept of the call when it was queued ([`BatchHandler::keep`]).
    kept: Option<Box<dyn Any + Send>>,
    reply: Deferred,
    queued: Instant,
    /// When its caller stops waiting, if it said.
    deadline: Option<Instant>,
}

impl Item {
    fn params(&self) -> Params<'_> {
        Params::new(self.params.as_deref()).with_section(self.section.as_deref())
    }
}

/// The calls of one batch, in the order they were queued. The handler reads each call's
/// params ([`Batch::call`]) and answers them all at once ([`Batch::complete`],
/// [`Batch::fail`]); a call left unanswered (the batch dropped) gets `-32603`.
pub struct Batch {
    method: Arc<str>,
    items: Vec<Item>,
    /// The run this batch holds, given back as it is answered (see [`Slot`]).
    slot: Option<Arc<Slot>>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.release();
    }
}

impl Batch {
    /// Calls in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no call is left (every one was answered early).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The procedure's name.
    #[must_use]
    pub fn method(&self) -> &str {
        &self.method
    }

    /// Call `index` as a procedure would see it (its id is not kept: the reply finds its
    /// caller by itself).
    ///
    /// # Panics
    /// When `index` is out of range.
    #[must_use]
    pub fn call(&self, index: usize) -> Call<'_> {
        Call::new(&self.method, self.items[index].params.as_deref(), Some("null"))
    }

    /// What the handler kept of call `index` when it was queued ([`BatchHandler::keep`]),
    /// taken out (`None` the second time, or when nothing was kept).
    pub fn take_kept(&mut self, index: usize) -> Option<Box<dyn Any + Send>> {
        self.items.get_mut(index).and_then(|item| item.kept.take())
    }

    /// Every call's params (with the attachments of a binary message), in order.
    pub fn params(&self) -> impl Iterator<Item = Params<'_>> {
        self.items.iter().map(Item::params)
    }

    /// Call `index`'s params, with the attachments of a binary message.
    ///
    /// # Panics
    /// When `index` is out of range.
    #[must_use]
    pub fn params_at(&self, index: usize) -> Params<'_> {
        self.items[index].params()
    }

    /// Call `index`'s attachment section, shared: views of it may outlive the batch.
    #[must_use]
    pub fn section_at(&self, index: usize) -> Option<&Bytes> {
        self.items.get(index).and_then(|item| item.section.as_ref())
    }

    /// Answer some calls now with their own error (params that do not bind, say) and take
    /// them out of the batch; the others keep their order.
    pub fn refuse(&mut self, mut refused: Vec<(usize, RpcError)>) {
        refused.sort_by_key(|(index, _)| std::cmp::Reverse(*index));
        for (index, error) in refused {
            if index < self.items.len() {
                self.items.remove(index).reply.error(error);
            }
        }
    }

    /// Answer every call with `error` (the handler failed as a whole).
    pub fn fail(mut self, error: &RpcError) {
        self.release();
        for item in std::mem::take(&mut self.items) {
            item.reply.error(error.clone());
        }
    }

    /// Give the batch's run back before its callers hear.
    fn release(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.release();
        }
    }

    /// Answer each call with its outcome, in order. Outcomes of another count than the
    /// calls answer every call `-32603` (and say so in the server's log): nobody can tell
    /// which result was meant for whom.
    pub fn complete(mut self, outcomes: Vec<Outcome>) {
        if outcomes.len() != self.items.len() {
            let error = self.wrong_length(outcomes.len());
            self.fail(&error);
            return;
        }
        self.release();
        for (item, outcome) in std::mem::take(&mut self.items).into_iter().zip(outcomes) {
            item.reply.complete(outcome);
        }
    }

    /// As [`Batch::complete`], serializing each result.
    pub fn complete_json<T: Serialize>(self, results: Vec<Result<T, RpcError>>) {
        let outcomes = results
            .into_iter()
            .map(|result| {
                result.and_then(|value| {
                    serde_json::to_vec(&value)
                        .map_err(|e| RpcError::internal(format!("Internal error: result cannot be serialized: {e}")))
                })
            })
            .collect();
        self.complete(outcomes);
    }

    #[cold]
    #[inline(never)]
    fn wrong_length(&self, got: usize) -> RpcError {
        let message = format!(
            "batch procedure '{}' returned {got} results for {} calls",
            self.method,
            self.items.len()
        );
        log::error!(target: crate::logs::TARGET, "{message}");
        RpcError::internal(format!("Internal error: {message}"))
    }
}

/// Runs the batches of one batch procedure.
///
/// Closures `Fn(Batch)` implement it. The handler must answer (or drop) the batch; it may
/// keep it and answer later from another thread (an event loop), which lets the next
/// batch start meanwhile.
pub trait BatchHandler: Send + Sync + 'static {
    /// Run one batch.
    fn run(&self, batch: Batch);

    /// What to keep of a call, due by `deadline`, when it is queued, for the batch's run
    /// ([`Batch::take_kept`]): its context, say, which the call no longer has by then. Called
    /// on the thread that serves the call's connection. Nothing by default.
    fn keep(&self, call: &Call<'_>, deadline: Option<Instant>) -> Option<Box<dyn Any + Send>> {
        let _ = (call, deadline);
        None
    }

    /// A call found the queue idle (nothing else waiting, a run free, no arrival rate that
    /// would fill a batch): run `here` soon after the receiving thread's turn, on a thread
    /// of the handler's, so that a lone caller pays no thread switch.
    ///
    /// # Errors
    /// `here` given back (the default): a batch thread runs the call.
    fn run_soon(&self, here: RunHere) -> Result<(), RunHere> {
        Err(here)
    }
}

/// The calls queued for a batch procedure, run as one batch by the thread that takes them
/// ([`BatchHandler::run_soon`]): calls queued meanwhile (a JSON-RPC batch's) join them.
pub struct RunHere(Arc<Queue>);

impl RunHere {
    /// Run what is queued now as one batch, here; nothing when a batch thread took it.
    pub fn run(self) {
        let (queue, mut state) = (&self.0, lock(&self.0.state));
        queue.expire(&mut state);
        if state.items.is_empty() || state.running >= queue.options.max_concurrent {
            drop(state);
            queue.changed.notify_one(); // a batch thread takes them when a run is free
            return;
        }
        let batch = queue.take(state);
        queue.run(batch);
    }
}

impl<F> BatchHandler for F
where
    F: Fn(Batch) + Send + Sync + 'static,
{
    fn run(&self, batch: Batch) {
        self(batch);
    }
}

struct State {
    items: std::collections::VecDeque<Item>,
    closed: bool,
    /// When the last call was queued.
    last_arrival: Option<Instant>,
    /// Mean gap between calls that arrived while others waited (an exponential average, in
    /// seconds); `None` until one did.
    gap: Option<f64>,
    /// Threads waiting for calls (they need a wake when a call comes).
    idle: usize,
    /// Calls waiting that have a deadline (none: no sweep for expired calls).
    deadlines: usize,
    /// Batches running now (answered ones no longer count).
    running: usize,
}

struct Queue {
    method: Arc<str>,
    options: BatchOptions,
    handler: Box<dyn BatchHandler>,
    state: Mutex<State>,
    changed: Condvar,
    counters: Counters,
    /// The histograms on the metrics page, once a server serving with metrics on has it.
    meter: OnceLock<Arc<BatchMeter>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One of the `max_concurrent` runs, held by a batch from when it is taken off the queue
/// until it is answered or its handler returns, whichever comes first (an `async`
/// handler answers later, from its event loop, and the next batch may start meanwhile).
struct Slot {
    queue: Arc<Queue>,
    /// Whether the batch had calls (an empty one says nothing of how long a run takes).
    ran: bool,
    released: AtomicBool,
}

impl Slot {
    fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut state = lock(&self.queue.state);
        state.running -= 1;
        // A thread may wait for this run to end (max_concurrent) with calls queued.
        let wake = !state.items.is_empty() && state.idle > 0;
        drop(state);
        if wake {
            self.queue.changed.notify_all();
        }
    }
}

/// Weight of the newest gap in the average: a change of load shows within a few calls.
const GAP_WEIGHT: f64 = 0.125;

impl Queue {
    fn push(self: &Arc<Self>, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        // Outside the lock: other callers queue meanwhile.
        let kept = self.handler.keep(call, reply.deadline());
        let mut state = lock(&self.state);
        if state.closed {
            return Err(RpcError::http(503, "Server stopping").with_data(&serde_json::json!({ "executed": false })));
        }
        if state.items.len() >= self.options.max_queue {
            drop(state);
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(overloaded(&self.method, self.options.max_queue));
        }
        let deferred = reply.defer_watched()?;
        // The call's deadline (its caller's; batch procedures take none of their own).
        let deadline = deferred.deadline();
        let now = Instant::now();
        if !state.items.is_empty() {
            // Only calls that find others waiting tell how fast a batch fills: a caller that
            // waits for its reply before sending again always finds the queue empty.
            if let Some(last) = state.last_arrival {
                let gap = now.saturating_duration_since(last).as_secs_f64();
                state.gap = Some(state.gap.map_or(gap, |mean| mean + GAP_WEIGHT * (gap - mean)));
            }
        }
        state.last_arrival = Some(now);
        state.items.push_back(Item {
            params: call.params().raw().map(Box::from),
            section: call.params().section().map(crate::lend::keep),
            kept,
            reply: deferred,
            queued: now,
            deadline,
        });
        if state.items.back().is_some_and(|item| item.deadline.is_some()) {
            state.deadlines += 1;
        }
        let len = state.items.len();
        // Alone, with a run free and no rate that fills a batch: run where it was received.
        let lone = len == 1 && state.running < self.options.max_concurrent && !self.fills(&state, len, now);
        // A thread waits either for a first call or for a batch to fill: wake it for those.
        let wake = state.idle > 0 && (len == 1 || len == self.options.max_size);
        drop(state);
        if lone && self.handler.run_soon(RunHere(Arc::clone(self))).is_ok() {
            return Ok(());
        }
        if wake {
            self.changed.notify_one();
        }
        Ok(())
    }

    /// Whether the calls a batch of `len` still misses would arrive, at the rate seen,
    /// before the first call queued has waited `max_wait`.
    fn fills(&self, state: &State, len: usize, now: Instant) -> bool {
        let first = state.items.front().map_or(now, |item| item.queued);
        let left = (first + self.options.max_wait).saturating_duration_since(now);
        let missing = self.options.max_size.saturating_sub(len) as f64;
        !left.is_zero() && state.gap.is_some_and(|gap| gap * missing <= left.as_secs_f64())
    }

    /// A batch thread's life: take batches and run them until the queue is closed and empty.
    fn serve(self: &Arc<Self>) {
        while let Some(batch) = self.next_batch() {
            self.run(batch);
        }
    }

    /// Run one batch taken off the queue (`running` counts it); its run is given back when
    /// it is answered or when the handler returns.
    fn run(self: &Arc<Self>, mut batch: Batch) {
        let slot = Arc::new(Slot {
            queue: Arc::clone(self),
            ran: !batch.is_empty(),
            released: AtomicBool::new(false),
        });
        if slot.ran {
            batch.slot = Some(Arc::clone(&slot));
            let method = Arc::clone(&self.method);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.handler.run(batch))) {
                // The batch was dropped while unwinding: each call got -32603.
                let what = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("panic");
                log::error!(target: crate::logs::TARGET, "batch procedure '{method}' panicked: {what}");
            }
        }
        slot.release();
    }

    /// Wait for the next batch: `None` once closed and drained.
    fn next_batch(&self) -> Option<Batch> {
        let mut state = lock(&self.state);
        // When this batch began to wait for more calls, and how many it had then.
        let mut waiting: Option<(Instant, usize)> = None;
        loop {
            let earliest = self.expire(&mut state);
            if state.items.is_empty() {
                if state.closed {
                    return None;
                }
                state.idle += 1;
                state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                state.idle -= 1;
                continue;
            }
            let len = state.items.len();
            let first = state.items.front().map_or_else(Instant::now, |item| item.queued);
            let now = Instant::now();
            let left = (first + self.options.max_wait).saturating_duration_since(now);
            if state.running >= self.options.max_concurrent {
                // The batches allowed run (an answered one no longer counts): wait for one.
                state.idle += 1;
                state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                state.idle -= 1;
                continue;
            }
            if len >= self.options.max_size || state.closed {
                break;
            }
            if !self.fills(&state, len, now) {
                if let Some((since, had)) = waiting {
                    // It did not fill: the rate seen while it waited replaces the estimate,
                    // so that a lone caller after a burst waits once, not at every call.
                    let arrived = len.saturating_sub(had);
                    let waited = now.saturating_duration_since(since).as_secs_f64();
                    state.gap = (arrived > 0).then(|| waited / arrived as f64);
                }
                break;
            }
            waiting.get_or_insert((now, len));
            state.idle += 1;
            // Woken at the earliest deadline too, to answer that call at once.
            let wait = earliest.map_or(left, |at| left.min(at.saturating_duration_since(now)));
            state = self
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.idle -= 1;
        }
        Some(self.take(state))
    }

    /// Take the next batch off the queue (`running` counts it).
    fn take(&self, mut state: MutexGuard<'_, State>) -> Batch {
        let take = state.items.len().min(self.options.max_size);
        let taken: Vec<Item> = state.items.drain(..take).collect();
        let with_deadline = taken.iter().filter(|item| item.deadline.is_some()).count();
        state.deadlines = state.deadlines.saturating_sub(with_deadline);
        state.running += 1;
        let more = !state.items.is_empty() && state.idle > 0;
        drop(state);
        if more {
            // Another thread may start on the rest (max_concurrent > 1).
            self.changed.notify_one();
        }
        self.admit(taken)
    }

    /// Answer the waiting calls whose deadline has passed, and take them out of the queue;
    /// the earliest deadline of those left. Reads the clock only while a call waiting has
    /// a deadline.
    fn expire(&self, state: &mut State) -> Option<Instant> {
        if state.deadlines == 0 {
            return None;
        }
        let now = Instant::now();
        let deadlines = || state.items.iter().filter_map(|item| item.deadline);
        if deadlines().all(|at| at > now) {
            return deadlines().min();
        }
        let mut earliest: Option<Instant> = None;
        for item in std::mem::take(&mut state.items) {
            match item.deadline {
                Some(at) if at <= now => {
                    state.deadlines = state.deadlines.saturating_sub(1);
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    item.reply.error_now(RpcError::deadline_exceeded());
                }
                deadline => {
                    if let Some(at) = deadline {
                        earliest = Some(earliest.map_or(at, |e| e.min(at)));
                    }
                    state.items.push_back(item);
                }
            }
        }
        earliest
    }

    /// Count the batch, and answer the calls whose caller has gone or whose deadline has
    /// passed.
    fn admit(&self, taken: Vec<Item>) -> Batch {
        let now = Instant::now();
        let mut items = Vec::with_capacity(taken.len());
        let (mut waited, mut longest) = (0u64, 0u64);
        let meter = self.meter.get();
        for item in taken {
            let nanos = u64::try_from(now.saturating_duration_since(item.queued).as_nanos()).unwrap_or(u64::MAX);
            let wait = nanos / 1000;
            waited = waited.saturating_add(wait);
            longest = longest.max(wait);
            if item.reply.is_abandoned() {
                self.counters.abandoned.fetch_add(1, Ordering::Relaxed);
                item.reply
                    .error(RpcError::internal("Internal error: the caller disconnected"));
            } else if item.deadline.is_some_and(|at| at <= now) || item.reply.is_expired() {
                // Answered already if the deadline watcher came first (then this is dropped).
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                item.reply.error_now(RpcError::deadline_exceeded());
            } else {
                if let Some(meter) = meter {
                    meter.waited(nanos);
                }
                items.push(item);
            }
        }
        let counters = &self.counters;
        counters.queue_wait_us.fetch_add(waited, Ordering::Relaxed);
        counters.max_queue_wait_us.fetch_max(longest, Ordering::Relaxed);
        if !items.is_empty() {
            counters.batches.fetch_add(1, Ordering::Relaxed);
            counters.calls.fetch_add(items.len() as u64, Ordering::Relaxed);
            let bucket = SIZE_BUCKETS
                .iter()
                .position(|&bound| items.len() <= bound)
                .unwrap_or(SIZE_BUCKETS.len() - 1);
            counters.sizes[bucket].fetch_add(1, Ordering::Relaxed);
            if let Some(meter) = meter {
                meter.ran(items.len());
            }
        }
        Batch {
            method: Arc::clone(&self.method),
            items,
            slot: None,
        }
    }

    fn stats(&self) -> BatchStats {
        let c = &self.counters;
        BatchStats {
            batches: c.batches.load(Ordering::Relaxed),
            calls: c.calls.load(Ordering::Relaxed),
            sizes: std::array::from_fn(|i| c.sizes[i].load(Ordering::Relaxed)),
            queue_wait_us: c.queue_wait_us.load(Ordering::Relaxed),
            max_queue_wait_us: c.max_queue_wait_us.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            abandoned: c.abandoned.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
        }
    }
}

#[cold]
#[inline(never)]
fn overloaded(method: &str, max_queue: usize) -> RpcError {
    RpcError::http(
        503,
        format!("Server overloaded: {max_queue} calls of '{method}' already wait"),
    )
    .with_data(&serde_json::json!({ "executed": false, "max_queue": max_queue }))
}

/// A batch procedure: the router's entry that queues calls, and the threads that run
/// the batches. Cloning shares it; once the last clone is dropped (with the router), the
/// threads run what waits and end.
#[derive(Clone)]
pub struct Batcher {
    queue: Arc<Queue>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    started: Arc<AtomicBool>,
    _closer: Arc<Closer>,
}

/// Closes the queue when the last [`Batcher`] goes: the threads hold the queue, not this.
struct Closer(Arc<Queue>);

impl Drop for Closer {
    fn drop(&mut self) {
        lock(&self.0.state).closed = true;
        self.0.changed.notify_all();
    }
}

impl Batcher {
    /// A batch procedure `method` run by `handler`; its threads start with the first call
    /// (or [`Batcher::start`]).
    ///
    /// # Panics
    /// Never: zero sizes are taken as one.
    #[must_use]
    pub fn new(method: &str, options: BatchOptions, handler: impl BatchHandler) -> Self {
        let options = BatchOptions {
            max_size: options.max_size.max(1),
            max_concurrent: options.max_concurrent.max(1),
            max_queue: options.max_queue.max(1),
            ..options
        };
        let queue = Arc::new(Queue {
            method: Arc::from(method),
            options,
            handler: Box::new(handler),
            state: Mutex::new(State {
                items: std::collections::VecDeque::new(),
                closed: false,
                last_arrival: None,
                gap: None,
                idle: 0,
                deadlines: 0,
                running: 0,
            }),
            changed: Condvar::new(),
            counters: Counters::default(),
            meter: OnceLock::new(),
        });
        Batcher {
            _closer: Arc::new(Closer(Arc::clone(&queue))),
            queue,
            threads: Arc::new(Mutex::new(Vec::new())),
            started: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The options in force.
    #[must_use]
    pub fn options(&self) -> &BatchOptions {
        &self.queue.options
    }

    /// Start the batch threads, if not yet started.
    ///
    /// # Errors
    /// When a thread cannot be spawned.
    pub fn start(&self) -> std::io::Result<()> {
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        while threads.len() < self.queue.options.max_concurrent {
            let queue = Arc::clone(&self.queue);
            let name = format!("ucall-batch-{}", threads.len());
            threads.push(std::thread::Builder::new().name(name).spawn(move || queue.serve())?);
        }
        self.started.store(true, Ordering::Release);
        Ok(())
    }

    /// What the procedure has done so far.
    #[must_use]
    pub fn stats(&self) -> BatchStats {
        self.queue.stats()
    }

    /// Calls waiting now.
    #[must_use]
    pub fn queued(&self) -> usize {
        lock(&self.queue.state).items.len()
    }

    /// Take no more calls; the threads run what waits and end. Returns at once.
    pub fn close(&self) {
        lock(&self.queue.state).closed = true;
        self.queue.changed.notify_all();
    }

    /// Close, then wait up to `timeout` for the threads to end; returns whether they have.
    pub fn join(&self, timeout: Duration) -> bool {
        self.close();
        let until = Instant::now() + timeout;
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let (ended, running): (Vec<_>, Vec<_>) = threads.drain(..).partition(JoinHandle::is_finished);
            *threads = running;
            ended.into_iter().for_each(|thread| drop(thread.join()));
            if threads.is_empty() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Handler for Batcher {
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        if !self.started.load(Ordering::Acquire) {
            self.start()
                .map_err(|e| RpcError::internal(format!("Internal error: cannot start the batch thread: {e}")))?;
        }
        self.queue.push(call, reply)
    }

    /// Counts into the first server's metrics that asks (a procedure serves one server).
    fn meter_batches(&self, meter: &mut dyn FnMut(usize) -> Arc<BatchMeter>) {
        let _ = self.queue.meter.get_or_init(|| meter(self.queue.options.max_size));
    }
}

/// A batch procedure that answers with values: `procedure` gets the batch's calls and
/// returns one result per call (an error for one caller only), or one error for all.
pub(crate) fn values<F, R>(procedure: F) -> impl BatchHandler
where
    F: Fn(&[Call<'_>]) -> Result<Vec<Result<R, RpcError>>, RpcError> + Send + Sync + 'static,
    R: Serialize,
{
    move |batch: Batch| {
        let calls: Vec<Call<'_>> = (0..batch.len()).map(|i| batch.call(i)).collect();
        let results = procedure(&calls);
        drop(calls);
        match results {
            Ok(results) => batch.complete_json(results),
            Err(error) => batch.fail(&error),
        }
    }
}
