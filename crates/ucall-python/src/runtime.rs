// SPDX-License-Identifier: Apache-2.0
//! Who runs the Python handlers, and on which thread.
//!
//! Each core worker is a *lane* driven by one thread at a time, its *turner*. A turn of the
//! event loop runs with the GIL released; every call it parses is deferred and queued on the
//! lane. After the turn the turner takes the GIL once and runs the queued calls (a group),
//! each completing its deferred reply; the core keeps replies in request order.
//!
//! A handler that blocks (sleep, I/O, a lock) must not stall the lane: a monitor thread
//! watches the turner, and when one call has run for [`BLOCKED_TICKS`] of its 1 ms
//! ticks off a core (asleep, waiting), or for [`COMPUTING_TICKS`] on one, it starts a new
//! turner for the lane. The new turner takes over the event loop and the rest
//! of the queue; the old thread finishes its call and exits. Quick handlers never pay for
//! a thread switch. An idle server's monitor sleeps until a group starts.
//!
//! Engines whose workers must stay on one thread (io_uring rings set up for a single
//! issuer) are *pinned*: the turner hands each group to the lane's executor threads, which
//! run it with the GIL. When an executor's call blocks (by the same rule), the monitor
//! wakes an idle executor, or starts one when none is idle, once per blocked call. Work
//! goes to the executor that went idle last, so surplus ones stay idle, and one left idle
//! for [`EXECUTOR_IDLE`] exits while another one waits for work (one always stays free
//! unless all are blocked). A procedure whose calls have all been quick for a while is trusted:
//! the turner runs its calls itself, saving two thread switches per group. A slow call (1 ms or more) that gave
//! up its core (slept, waited) withdraws the trust for good; one that was only preempted
//! or computed for long makes the procedure earn it again (see `Procedure::run`).
//!
//! A call with large params (64 KiB or more) of a procedure once trusted, none of whose
//! calls has given up its core, runs at once, in the turn that parsed it, when no call of
//! that turn is queued before it: copying its params out to wait for the group would cost
//! more than taking the GIL (`Entry::handle`).
//!
//! `async def` handlers are started in the group like any other; the coroutines they
//! return are handed to the server's asyncio loop in one batch, and each completes its
//! deferred reply when it finishes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyList;

use ucall_core::{Params, RunHere, Stopper, WakeHold, Worker};

use crate::procedure::{voluntary_switches, Answer, DeferredReply, Procedure};

/// A call seen running for this many monitor ticks (about 2 ms) counts as blocked.
const BLOCKED_TICKS: u32 = 2;
/// It counts only when its thread is also seen off a core at this many ticks in a row: one
/// look can catch a computing thread in a moment's wait (a page brought in, a lock in the
/// allocator), and handing its lane over costs a thread.
const OFF_CORE_LOOKS: u32 = 2;
/// A call still on a core (computing, or only waiting for one on a busy machine) is not
/// blocked: a new turner could not run Python while it holds the GIL. The lane is handed
/// over only after this many ticks, so that a long computation still lets the other
/// calls in at the GIL's switches.
const COMPUTING_TICKS: u32 = 50;
/// `Lane::busy` when no call runs.
const IDLE: u64 = u64::MAX;
/// How often the monitor looks while calls are running.
const MONITOR_TICK: Duration = Duration::from_millis(1);
/// Idle ticks before the monitor sleeps until the next group (an idle server uses no CPU).
const MONITOR_LINGER: u32 = 100;
/// A pinned lane's spare executor exits after this long without work.
const EXECUTOR_IDLE: Duration = Duration::from_secs(2);
/// Executor tags start here, apart from turner epochs.
const FIRST_EXECUTOR_TAG: u64 = 1 << 48;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a lane's group runs: a call, or a batch procedure's lone call
/// (`ucall_core::BatchHandler::run_soon`), run here rather than on a batch thread.
pub enum Work {
    Call(Job),
    Batch(RunHere),
}

/// A call waiting for the GIL: its procedure, its params text and its promised reply.
pub struct Job {
    pub procedure: Arc<Procedure>,
    pub params: Option<ParamsText>,
    /// The call's context, for a procedure that takes it.
    pub context: Option<Box<crate::context::Owned>>,
    pub reply: Answer,
}

/// A call's params, copied out of the connection's input to wait for the GIL. Large ones
/// (a base64 payload) go into a buffer the process kept from an earlier call
/// (`ucall_core::buffer::take_kept`), and back once the call has run: fresh megabytes
/// each call cost more in page faults than the call itself.
pub struct ParamsText {
    text: String,
    /// A binary message's attachment section: where it lies in the connection's input
    /// when the connection can lend it, else a copy (`ucall_core::lend::keep`). Attachment
    /// params view it in place ([`ParamsText::lend`]).
    section: Option<ucall_core::Bytes>,
}

impl ParamsText {
    /// Params at least this long make a call of a trusted procedure run at once, during
    /// the turn (`Entry::handle`): copying them out to wait for the group costs more than
    /// taking the GIL. For the same reason such calls are always timed for trust.
    pub const RUN_AT_ONCE_FROM: usize = 64 * 1024;

    /// Whether `params` are long enough to run at once (see [`Self::RUN_AT_ONCE_FROM`]).
    pub fn is_large(params: Params<'_>) -> bool {
        crate::params::size(params) >= Self::RUN_AT_ONCE_FROM
    }

    /// A copy of `params` (text and section) to run later; `None` without params.
    pub fn of(params: Params<'_>) -> Option<Self> {
        let text = params.raw()?;
        let mut buffer = ucall_core::buffer::take_or_allocate(text.len());
        buffer.extend_from_slice(text.as_bytes());
        // SAFETY: `buffer` holds exactly the bytes of `text`, a `str`.
        let text = unsafe { String::from_utf8_unchecked(buffer) };
        Some(ParamsText {
            text,
            section: params.section().map(ucall_core::lend::keep),
        })
    }

    /// Run `f` on the params as [`ParamsText::view`] gives them, their section lent
    /// (`ucall_core::lend::shared`): the attachments bound from it view it in place.
    pub fn lend<T>(params: Option<&ParamsText>, f: impl FnOnce(Params<'_>) -> T) -> T {
        let section = params.and_then(|p| p.section.as_ref());
        ucall_core::lend::shared(section, || f(Self::view(params)))
    }

    /// The params as the binding reads them (absent for `None`).
    pub fn view(params: Option<&ParamsText>) -> Params<'_> {
        match params {
            Some(params) => Params::new(Some(&params.text)).with_section(params.section.as_deref()),
            None => Params::new(None),
        }
    }
}

impl Drop for ParamsText {
    fn drop(&mut self) {
        ucall_core::buffer::keep(std::mem::take(&mut self.text).into_bytes());
    }
}

/// This thread's kernel id (one system call per thread).
fn thread_id() -> i32 {
    thread_local! {
        static TID: i32 = {
            // SAFETY: gettid has no preconditions.
            unsafe { libc::syscall(libc::SYS_gettid) as i32 }
        };
    }
    TID.with(|tid| *tid)
}

/// Whether thread `tid` of this process is on a core or waiting for one (state `R`),
/// rather than sleeping or waiting for I/O, a lock or a time-out. False when unknown.
fn is_on_core(tid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold any byte.
    stat.rfind(')')
        .and_then(|end| stat[end + 1..].split_ascii_whitespace().next())
        .is_some_and(|state| state == "R")
}

thread_local! {
    /// Calls deferred during the current turn on this thread.
    static COLLECTED: RefCell<Option<Vec<Work>>> = const { RefCell::new(None) };
}

/// Whether this thread is a turner and no call of its current turn is queued yet, so that
/// a call run at once does not overtake one parsed before it.
pub fn turn_queued_nothing() -> bool {
    COLLECTED.with(|collected| collected.borrow().as_ref().is_some_and(Vec::is_empty))
}

/// Queue `job` for the group after the current turn. Returns it back when this thread is
/// not a turner (the caller then runs it inline).
// The job goes back by value, once per call that is not queued: boxing it would allocate
// on every call instead of moving some 130 bytes on the rare one.
#[allow(clippy::result_large_err)]
pub fn collect(job: Job) -> Result<(), Job> {
    collect_work(Work::Call(job)).map_err(|work| match work {
        Work::Call(job) => job,
        Work::Batch(_) => unreachable!("given a call"),
    })
}

/// Queue a batch procedure's lone call for the group after the current turn; given back
/// when this thread is not a turner (a batch thread runs it then).
pub fn collect_batch(here: RunHere) -> Result<(), RunHere> {
    collect_work(Work::Batch(here)).map_err(|work| match work {
        Work::Batch(here) => here,
        Work::Call(_) => unreachable!("given a batch"),
    })
}

#[allow(clippy::result_large_err)]
fn collect_work(work: Work) -> Result<(), Work> {
    COLLECTED.with(|collected| match collected.borrow_mut().as_mut() {
        Some(jobs) => {
            jobs.push(work);
            Ok(())
        }
        None => Err(work),
    })
}

struct Lane {
    worker: Mutex<Option<Worker>>,
    jobs: Mutex<VecDeque<Work>>,
    /// Bumped each time a new turner takes the lane over.
    epoch: AtomicU64,
    /// The tag of the thread running a call of this lane's group, or [`IDLE`]. Read by
    /// the monitor with `calls`: no clock is read on the hot path.
    busy: AtomicU64,
    /// Calls started on this lane so far: a value the monitor sees unchanged for
    /// [`BLOCKED_TICKS`] ticks while `busy` is set means one call has blocked.
    calls: AtomicU64,
    /// The kernel's id of the thread running the current group's calls.
    busy_tid: AtomicI32,
    /// Threads serving this lane now (the turner and blocked ones, or the executors).
    threads: AtomicUsize,
    /// Pinned lanes: executors waiting for a group, the last to wait on top (changed with
    /// `jobs` locked). Work goes to the top one, so that under steady load the same few
    /// executors run it and the ones below go unused for [`EXECUTOR_IDLE`] and exit: woken
    /// in turn (a condition variable's order), every spare ever started got work often
    /// enough to stay, and under a mixed load on a busy host their number climbed from 6
    /// to 27, each with memory of its own in the allocator.
    idle: Mutex<Vec<Thread>>,
    /// Pinned lanes: the blocked call already helped (its number in `calls`), so that each
    /// blocked call gets one more executor. Keyed by call, not by executor: the executor
    /// that blocked outlives the spare it got when that spare idles out, and keyed by it,
    /// its every later blocking call would go without help.
    helped: AtomicU64,
    /// Pinned lanes: the worker has finished; executors exit once the queue is empty.
    done: AtomicBool,
    /// The turner completes its group's calls without waking the worker: it turns next,
    /// and every turn delivers what is queued before waiting.
    hold: WakeHold,
}

/// The running server's threads.
pub struct Runtime {
    lanes: Vec<Lane>,
    stopper: Stopper,
    stopping: AtomicBool,
    monitor: OnceLock<Thread>,
    monitor_parked: AtomicBool,
    handles: Mutex<Vec<JoinHandle<()>>>,
    finished: Mutex<usize>,
    finished_changed: Condvar,
    cycles: AtomicU64,
    /// Most threads per lane running Python.
    max_threads: usize,
    /// Workers must stay on their first thread: groups go to executor threads.
    pinned: bool,
    next_tag: AtomicU64,
    /// `submit(list of (coroutine, reply))` on the asyncio loop, for `async def` handlers.
    submit: Option<Py<PyAny>>,
}

impl Runtime {
    /// Start a turner per worker and the monitor.
    ///
    /// # Errors
    /// When a thread cannot be spawned (what was started is stopped again).
    pub fn start(
        stopper: Stopper,
        workers: Vec<Worker>,
        max_threads: usize,
        pinned: bool,
        submit: Option<Py<PyAny>>,
    ) -> std::io::Result<Arc<Runtime>> {
        let runtime = Arc::new(Runtime {
            lanes: workers
                .into_iter()
                .map(|worker| Lane {
                    hold: worker.wake_hold(),
                    worker: Mutex::new(Some(worker)),
                    jobs: Mutex::new(VecDeque::new()),
                    epoch: AtomicU64::new(0),
                    busy: AtomicU64::new(IDLE),
                    calls: AtomicU64::new(0),
                    busy_tid: AtomicI32::new(0),
                    threads: AtomicUsize::new(0),
                    idle: Mutex::new(Vec::new()),
                    helped: AtomicU64::new(u64::MAX),
                    done: AtomicBool::new(false),
                })
                .collect(),
            stopper,
            stopping: AtomicBool::new(false),
            monitor: OnceLock::new(),
            monitor_parked: AtomicBool::new(false),
            handles: Mutex::new(Vec::new()),
            finished: Mutex::new(0),
            finished_changed: Condvar::new(),
            cycles: AtomicU64::new(0),
            max_threads: max_threads.max(1),
            pinned,
            next_tag: AtomicU64::new(FIRST_EXECUTOR_TAG),
            submit,
        });
        let monitor = {
            let runtime = Arc::clone(&runtime);
            std::thread::Builder::new()
                .name("ucall-monitor".into())
                .spawn(move || runtime.monitor())
        };
        let started = monitor.and_then(|monitor| {
            let _ = runtime.monitor.set(monitor.thread().clone());
            lock(&runtime.handles).push(monitor);
            (0..runtime.lanes.len()).try_for_each(|index| {
                runtime.spawn_turner(index, 0)?;
                if pinned {
                    runtime.spawn_executor(index)?;
                }
                Ok(())
            })
        });
        if let Err(e) = started {
            // No call has come in yet: every thread started ends at once.
            runtime.begin_stop();
            while runtime.join_ended(Duration::from_secs(1)) > 0 {}
            return Err(e);
        }
        Ok(runtime)
    }

    fn spawn_turner(self: &Arc<Self>, index: usize, epoch: u64) -> std::io::Result<()> {
        let runtime = Arc::clone(self);
        if !self.pinned {
            self.lanes[index].threads.fetch_add(1, Ordering::SeqCst);
        }
        let spawned = std::thread::Builder::new()
            .name(format!("ucall-worker-{index}"))
            .spawn(move || runtime.drive(index, epoch));
        match spawned {
            Ok(handle) => {
                self.keep_handle(handle);
                Ok(())
            }
            Err(e) => {
                if !self.pinned {
                    self.lanes[index].threads.fetch_sub(1, Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }

    /// Keep `handle` for [`Runtime::join_ended`], joining the threads that have ended
    /// meanwhile (turners taken over, idle executors). An ended thread that nobody joins
    /// keeps its stack and its descriptor: one more after every takeover.
    fn keep_handle(&self, handle: JoinHandle<()>) {
        lock(&self.handles).push(handle);
        self.reap();
    }

    /// Join the kept threads that have ended; returns how many still run.
    fn reap(&self) -> usize {
        let ended: Vec<JoinHandle<()>> = {
            let mut handles = lock(&self.handles);
            let (ended, running): (Vec<_>, Vec<_>) = handles.drain(..).partition(JoinHandle::is_finished);
            *handles = running;
            ended
        };
        for thread in ended {
            let _ = thread.join();
        }
        lock(&self.handles).len()
    }

    fn spawn_executor(self: &Arc<Self>, index: usize) -> std::io::Result<()> {
        let runtime = Arc::clone(self);
        let tag = self.next_tag.fetch_add(1, Ordering::SeqCst);
        self.lanes[index].threads.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(format!("ucall-python-{index}"))
            .spawn(move || runtime.execute(index, tag));
        match spawned {
            Ok(handle) => {
                self.keep_handle(handle);
                Ok(())
            }
            Err(e) => {
                self.lanes[index].threads.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// A pinned lane's executor: run the groups its turner queues.
    fn execute(self: Arc<Self>, index: usize, tag: u64) {
        let lane = &self.lanes[index];
        let me = std::thread::current();
        Python::attach(|py| {
            py.detach(|| {
                while Self::wait_for_work(lane, &me) {
                    self.run_group(lane, tag, false);
                }
                lane.threads.fetch_sub(1, Ordering::SeqCst);
            });
        });
    }

    /// Wait on the lane's idle stack until calls are queued: true then, false when this
    /// executor should exit (the lane is done, or it has had no work for [`EXECUTOR_IDLE`]
    /// while another executor waits too; one still blocked, a long sleep, would leave the
    /// next calls nobody to run them).
    fn wait_for_work(lane: &Lane, me: &Thread) -> bool {
        let since = Instant::now();
        loop {
            {
                let jobs = lock(&lane.jobs);
                let mut idle = lock(&lane.idle);
                // Still listed: not handed work (a time-out, or a wake meant for before).
                idle.retain(|thread| thread.id() != me.id());
                if !jobs.is_empty() {
                    return true;
                }
                if lane.done.load(Ordering::SeqCst) {
                    return false;
                }
                if since.elapsed() >= EXECUTOR_IDLE && !idle.is_empty() {
                    return false;
                }
                idle.push(me.clone());
            }
            std::thread::park_timeout(EXECUTOR_IDLE.saturating_sub(since.elapsed()).max(MONITOR_TICK));
        }
    }

    /// Wake the pinned lane's executor that waited last, if calls are queued and one waits.
    /// Returns whether one was woken.
    fn wake_executor(lane: &Lane) -> bool {
        let next = {
            let jobs = lock(&lane.jobs);
            if jobs.is_empty() {
                return false;
            }
            lock(&lane.idle).pop()
        };
        next.map(|thread| thread.unpark()).is_some()
    }

    /// A turner's life: turn, run the group, again; until the lane finishes or another
    /// thread takes it over.
    fn drive(self: Arc<Self>, index: usize, epoch: u64) {
        let lane = &self.lanes[index];
        // One Python thread state for the thread's life; the GIL is released while turning.
        Python::attach(|py| {
            py.detach(|| loop {
                let alive = {
                    let mut worker = lock(&lane.worker);
                    if lane.epoch.load(Ordering::SeqCst) != epoch {
                        break;
                    }
                    let Some(running) = worker.as_mut() else { break };
                    // Queued calls are this thread's to run right after the turn, unless
                    // the lane is pinned: then they are the executors', and a turner that
                    // did not wait would spin, taking the core from them.
                    let wait = if self.pinned || lock(&lane.jobs).is_empty() {
                        None
                    } else {
                        Some(Duration::ZERO)
                    };
                    COLLECTED.with(|c| *c.borrow_mut() = Some(Vec::new()));
                    let alive = running.turn(wait);
                    let mut jobs = COLLECTED.with(|c| c.borrow_mut().take()).unwrap_or_default();
                    self.cycles.fetch_add(1, Ordering::Relaxed);
                    if self.pinned {
                        // Procedures proven quick run here, at once; the rest go to executors.
                        let (quick, others): (Vec<Work>, Vec<Work>) = jobs
                            .into_iter()
                            .partition(|work| matches!(work, Work::Call(job) if job.procedure.trusted()));
                        jobs = others;
                        if !quick.is_empty() {
                            // This thread turns the worker next (pinned lanes never hand
                            // their turner over): its completions need no wake.
                            lane.hold.hold();
                            self.run_inline(quick);
                            lane.hold.release(false);
                        }
                    }
                    if !jobs.is_empty() {
                        lock(&lane.jobs).extend(jobs);
                    }
                    if !alive {
                        *worker = None;
                    }
                    alive
                };
                if self.pinned {
                    // Not while a call of the lane runs: its executor takes the queue next,
                    // and the monitor wakes another if that call blocks. Woken on every
                    // turn, the idle executors took turns at waiting for the GIL, and none
                    // stayed idle long enough to exit.
                    if lane.busy.load(Ordering::SeqCst) == IDLE {
                        Self::wake_executor(lane);
                    }
                } else {
                    lane.hold.hold();
                    self.run_group(lane, epoch, true);
                    // Taken over while a call blocked: the new turner must hear of these.
                    lane.hold.release(lane.epoch.load(Ordering::SeqCst) != epoch);
                }
                if !alive {
                    if self.pinned {
                        lane.done.store(true, Ordering::SeqCst);
                        // With the queue locked: an executor checks `done` and then lists
                        // itself under it, so none is listed after this.
                        let _jobs = lock(&lane.jobs);
                        for thread in lock(&lane.idle).drain(..) {
                            thread.unpark();
                        }
                    }
                    *lock(&self.finished) += 1;
                    self.finished_changed.notify_all();
                    break;
                }
            });
        });
        if !self.pinned {
            lane.threads.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Run the lane's queued calls with the GIL taken once. A turner (`turner`) stops
    /// early when another thread has taken the lane over meanwhile (it was blocked).
    /// `tag` identifies the thread to the monitor: a turner's epoch or an executor's tag.
    fn run_group(&self, lane: &Lane, tag: u64, turner: bool) {
        if lock(&lane.jobs).is_empty() {
            return;
        }
        Python::attach(|py| {
            let mut started: Option<Bound<'_, PyList>> = None;
            // Read once the GIL is held (waiting for it is no call's doing), before the
            // first call timed.
            let mut switches_at_start = None;
            lane.busy_tid.store(thread_id(), Ordering::SeqCst);
            loop {
                let Some(work) = lock(&lane.jobs).pop_front() else {
                    break;
                };
                lane.busy.store(tag, Ordering::SeqCst);
                lane.calls.fetch_add(1, Ordering::SeqCst);
                if self.monitor_parked.swap(false, Ordering::SeqCst) {
                    if let Some(monitor) = self.monitor.get() {
                        monitor.unpark();
                    }
                }
                if !matches!(&work, Work::Call(job) if job.procedure.is_async()) {
                    // A plain call may block: the coroutines started before it go to the
                    // loop now, not after it (they waited out a blocking call's sleep).
                    if let Some(list) = started.take() {
                        self.submit_coroutines(py, &list);
                    }
                }
                let job = match work {
                    Work::Call(job) => job,
                    // Watched as a call is: a batch that blocks hands the lane over.
                    Work::Batch(here) => {
                        here.run();
                        if turner && lane.epoch.load(Ordering::SeqCst) != tag {
                            break;
                        }
                        continue;
                    }
                };
                let timed = self
                    .times(&job)
                    .then(|| *switches_at_start.get_or_insert_with(voluntary_switches));
                let Job {
                    procedure,
                    params,
                    context,
                    reply,
                } = job;
                let coroutine = ParamsText::lend(params.as_ref(), |params| {
                    procedure.run(py, params, context, reply, timed)
                });
                if let Some(coroutine) = coroutine {
                    let list = started.get_or_insert_with(|| PyList::empty(py));
                    let _ = list.append(coroutine);
                }
                if turner && lane.epoch.load(Ordering::SeqCst) != tag {
                    break;
                }
            }
            let _ = lane
                .busy
                .compare_exchange(tag, IDLE, Ordering::SeqCst, Ordering::SeqCst);
            if let Some(list) = started {
                self.submit_coroutines(py, &list);
            }
        });
    }

    /// Whether `job` is timed for trust: on a pinned lane every call (its turner runs the
    /// trusted ones itself); elsewhere, where trust serves only the calls that run at once,
    /// every call until the procedure has earned it, then the large ones (so that one that
    /// blocks withdraws it).
    fn times(&self, job: &Job) -> bool {
        self.pinned || !job.procedure.proven() || ParamsText::is_large(ParamsText::view(job.params.as_ref()))
    }

    /// A pinned turner runs calls of procedures proven quick itself, with the GIL taken once.
    fn run_inline(&self, jobs: Vec<Work>) {
        Python::attach(|py| {
            let mut started: Option<Bound<'_, PyList>> = None;
            let timed = Some(voluntary_switches());
            for work in jobs {
                let Job {
                    procedure,
                    params,
                    context,
                    reply,
                } = match work {
                    Work::Call(job) => job,
                    Work::Batch(here) => {
                        here.run(); // not partitioned here (never trusted), but runs if met
                        continue;
                    }
                };
                if let Some(coroutine) = ParamsText::lend(params.as_ref(), |params| {
                    procedure.run(py, params, context, reply, timed)
                }) {
                    let list = started.get_or_insert_with(|| PyList::empty(py));
                    let _ = list.append(coroutine);
                }
            }
            if let Some(list) = started {
                self.submit_coroutines(py, &list);
            }
        });
    }

    fn submit_coroutines(&self, py: Python<'_>, list: &Bound<'_, PyList>) {
        let Some(submit) = &self.submit else { return };
        if let Err(e) = submit.bind(py).call1((list,)) {
            // The loop is gone (the server is stopping): every reply answers -32603.
            for item in list.iter() {
                if let Ok(reply) = item
                    .get_item(1)
                    .and_then(|r| r.cast_into::<DeferredReply>().map_err(Into::into))
                {
                    reply.get().fail(py, &e);
                }
            }
        }
    }

    /// Watch the turners while calls run; sleep while none does.
    fn monitor(self: Arc<Self>) {
        let mut idle_ticks = 0;
        // Per lane: the call count last seen, for how many ticks it has not moved, and at
        // how many of the last ticks its thread was off a core.
        let mut seen: Vec<(u64, u32, u32)> = vec![(0, 0, 0); self.lanes.len()];
        // While the server stops, a blocked call still hands its lane over: the worker must
        // go on turning to answer the others and to cut off at `shutdown_timeout`.
        loop {
            let stopping = self.stopping.load(Ordering::SeqCst);
            let mut any_busy = false;
            for (index, lane) in self.lanes.iter().enumerate() {
                let tag = lane.busy.load(Ordering::SeqCst);
                let calls = lane.calls.load(Ordering::SeqCst);
                let (last, ticks, off_core) = &mut seen[index];
                if tag == IDLE || calls != *last {
                    *last = calls;
                    *ticks = 0;
                    *off_core = 0;
                    any_busy |= tag != IDLE;
                    continue;
                }
                any_busy = true;
                *ticks += 1;
                if *ticks < BLOCKED_TICKS {
                    continue;
                }
                if *ticks < COMPUTING_TICKS {
                    if is_on_core(lane.busy_tid.load(Ordering::SeqCst)) {
                        *off_core = 0;
                        continue;
                    }
                    *off_core += 1;
                    if *off_core < OFF_CORE_LOOKS {
                        continue;
                    }
                }
                if self.pinned {
                    // Another executor, once per blocked call, when calls wait for it: an
                    // idle one if any (the turner may be waiting for input, not waking
                    // it), else a new one. A slow call with none waiting needs no thread:
                    // spawning one for each slow call kept 40 threads alive under one
                    // connection of 4 ms calls, each with memory of its own in the
                    // allocator.
                    if lane.helped.load(Ordering::SeqCst) != calls
                        && !lane.done.load(Ordering::SeqCst)
                        && !lock(&lane.jobs).is_empty()
                    {
                        lane.helped.store(calls, Ordering::SeqCst);
                        if !Self::wake_executor(lane) && lane.threads.load(Ordering::SeqCst) < self.max_threads {
                            let _ = self.spawn_executor(index);
                        }
                    }
                    continue;
                }
                if lane.epoch.load(Ordering::SeqCst) != tag
                    || lane.threads.load(Ordering::SeqCst) >= self.max_threads
                    // Held: a turner is turning, so nobody is blocked. Never wait for it.
                    || lane.worker.try_lock().map_or(true, |worker| worker.is_none())
                {
                    continue;
                }
                // Hand the lane to a new turner; the blocked thread exits after its call.
                let next = tag + 1;
                lane.epoch.store(next, Ordering::SeqCst);
                if self.spawn_turner(index, next).is_err() {
                    lane.epoch.store(tag, Ordering::SeqCst);
                }
            }
            // Once every worker has finished, a call still running has nothing to hand over.
            if stopping && (!any_busy || *lock(&self.finished) == self.lanes.len()) {
                return;
            }
            if any_busy || idle_ticks < MONITOR_LINGER {
                // Under steady load groups come and go: keep ticking rather than being
                // woken (a system call) at the start of every group.
                idle_ticks = if any_busy { 0 } else { idle_ticks + 1 };
                std::thread::sleep(MONITOR_TICK);
                continue;
            }
            idle_ticks = 0;
            self.monitor_parked.store(true, Ordering::SeqCst);
            let busy_now = self.lanes.iter().any(|lane| lane.busy.load(Ordering::SeqCst) != IDLE);
            if busy_now || self.stopping.load(Ordering::SeqCst) {
                self.monitor_parked.store(false, Ordering::SeqCst);
                continue;
            }
            std::thread::park();
            self.monitor_parked.store(false, Ordering::SeqCst);
        }
    }

    /// Event-loop turns taken so far.
    pub fn cycles(&self) -> u64 {
        self.cycles.load(Ordering::Relaxed)
    }

    /// Wait until every lane has finished, at most `timeout`. Returns whether they have.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let expected = self.lanes.len();
        let guard = lock(&self.finished);
        let guard = match timeout {
            Some(timeout) => {
                self.finished_changed
                    .wait_timeout_while(guard, timeout, |n| *n < expected)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => self
                .finished_changed
                .wait_while(guard, |n| *n < expected)
                .unwrap_or_else(PoisonError::into_inner),
        };
        *guard >= expected
    }

    /// Begin a graceful stop: the workers finish what is in flight and end (see
    /// [`Runtime::join_ended`]).
    /// What the graceful stop did so far (see [`Stopper::drain_counts`]).
    pub fn drain_counts(&self) -> ucall_core::DrainCounts {
        self.stopper.drain_counts()
    }

    pub fn begin_stop(&self) {
        self.stopper.stop();
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(monitor) = self.monitor.get() {
            monitor.unpark();
        }
    }

    /// Join the threads that have ended, waiting up to `slice` for the others; returns how
    /// many still run. Polled, not joined outright, so that the caller can give up on a
    /// handler that never returns, or on a second Ctrl-C, between slices.
    pub fn join_ended(&self, slice: Duration) -> usize {
        let until = Instant::now() + slice;
        loop {
            let running = self.reap();
            if running == 0 || Instant::now() >= until {
                return running;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
