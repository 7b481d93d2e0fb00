// SPDX-License-Identifier: Apache-2.0
//! A registered Python function ([`Procedure`]), the Python hooks every procedure of a
//! server shares ([`Hooks`]), and the reply of an `async def` call ([`DeferredReply`]).
//!
//! Both the server (which registers procedures and hands calls to the runtime) and the
//! runtime (which runs them on its threads) use these; neither imports the other for them.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use ucall_core::jsonrpc::section::Section;
use ucall_core::{Deferred, KeyedLimits, Params, Reply, RpcError};

use crate::context::{Context, Owned as CallContext};
use crate::convert::{write_json, write_json_attached};
use crate::params::Plan;

/// Python objects every procedure of one server needs.
pub struct Hooks {
    /// `encode(obj) -> plain JSON value`, for result types the writer does not know.
    pub(crate) encode: Py<PyAny>,
    /// `ucall.RPCError`: raising it sends that error.
    pub(crate) rpc_error: Py<PyType>,
    /// `describe(exc, traceback) -> str`: the text of a failed handler's traceback (debug mode).
    pub(crate) describe: Option<Py<PyAny>>,
    /// `submit([(coroutine, reply), ...])`: start coroutines on the server's asyncio loop.
    pub(crate) submit: Option<Py<PyAny>>,
    /// `log_failure(method, exc, traceback)`: log a handler's exception on the server.
    pub(crate) log_failure: Option<Py<PyAny>>,
    /// `chain(context, func, args, kwargs)`: run a call through the server's middleware.
    pub(crate) middleware: Option<Py<PyAny>>,
    /// `replied(context, reply_ns)`: told, after a call's plain result is written into its
    /// reply, how long that took (tracing, which ends the call's span then).
    pub(crate) replied: Option<Py<PyAny>>,
    /// Quick calls in a row before a procedure is trusted to run on a pinned turner (1000
    /// unless a test asks for fewer, so that a busy host, which breaks streaks, still lets
    /// one finish).
    pub(crate) trust_after: u32,
    /// The rate limits the middleware admits calls through (`ctx.limit_by`), when the
    /// server's `rate_limit_key` is `"middleware"`; filled in when serving starts.
    pub(crate) keyed_limits: Option<Arc<OnceLock<KeyedLimits>>>,
}

/// One Python function behind a method name.
pub struct Procedure {
    /// The method name, for the server's log when a call fails.
    name: Arc<str>,
    func: Py<PyAny>,
    plan: Plan,
    pub(crate) hooks: Arc<Hooks>,
    is_async: bool,
    /// The parameter that takes the call's `ucall.Context`, when the function has one: its
    /// name, and its place among the positional arguments (else it is passed by name).
    context_param: Option<(Py<pyo3::types::PyString>, Option<usize>)>,
    /// Calls in a row that were quick (saturating); see [`Procedure::trusted`].
    quick_streak: AtomicU32,
    /// A call gave up its core while it ran (it may block again): never trusted again.
    slow: AtomicBool,
    /// The streak once reached `trust_after`; see [`Procedure::runs_at_once`].
    proven: AtomicBool,
}

/// A call at least this long is slow, plus [`SLOW_CALL_PER_BYTE`] for each byte of its
/// params.
const SLOW_CALL: Duration = Duration::from_millis(1);
/// Binding large params takes time without blocking anything (decoding a 2 MB base64
/// payload takes about 0.3 ms): 1 ms more per megabyte.
const SLOW_CALL_PER_BYTE: Duration = Duration::from_nanos(1);

/// Times this thread has given up its core by itself (slept, waited for I/O or a lock):
/// `ru_nvcsw`. Being preempted counts elsewhere (`ru_nivcsw`).
pub fn voluntary_switches() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` fills the `rusage` it is given; a zeroed one is valid too.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr());
        usage.assume_init()
    };
    u64::try_from(usage.ru_nvcsw).unwrap_or(0)
}

impl Procedure {
    /// A procedure calling `func` with params bound by `plan`.
    pub fn new(
        name: &str,
        func: Py<PyAny>,
        plan: Plan,
        hooks: Arc<Hooks>,
        is_async: bool,
        context_param: Option<(Py<pyo3::types::PyString>, Option<usize>)>,
    ) -> Self {
        Procedure {
            name: Arc::from(name),
            func,
            plan,
            hooks,
            is_async,
            context_param,
            quick_streak: AtomicU32::new(0),
            slow: AtomicBool::new(false),
            proven: AtomicBool::new(false),
        }
    }

    /// Whether calls carry their context (the function takes a `ucall.Context`, or
    /// middleware runs around it).
    pub fn wants_context(&self) -> bool {
        self.context_param.is_some() || self.hooks.middleware.is_some()
    }

    /// Bind and call; the function's return value, with the `ucall.Context` the call got
    /// (if any).
    #[allow(clippy::type_complexity)]
    fn call<'py>(
        &self,
        py: Python<'py>,
        params: Params<'_>,
        context: Option<Box<CallContext>>,
    ) -> Result<(Bound<'py, PyAny>, Option<Bound<'py, Context>>), RpcError> {
        let context = context
            .map(|context| Bound::new(py, Context::new(context, self.hooks.keyed_limits.clone())))
            .transpose()
            .map_err(|e| self.hooks.error(py, &e, &self.name))?;
        let kept = context.clone();
        let bound = self.plan.bind(py, params);
        let called = match (&self.hooks.middleware, context) {
            // Middleware runs first (an unauthenticated caller learns nothing of the
            // params); a binding error is raised where the function would have run.
            (Some(chain), Some(context)) => match bound {
                Ok((args, kwargs)) => self
                    .with_context(py, &context, args, kwargs)
                    .and_then(|(args, kwargs)| chain.bind(py).call1((context, self.func.bind(py), args, kwargs))),
                Err(error) => self
                    .hooks
                    .exception(py, &error)
                    .and_then(|exception| chain.bind(py).call1((context, py.None(), exception, py.None()))),
            },
            (_, context) => {
                let (args, kwargs) = bound?;
                match context {
                    Some(context) => self.with_context(py, &context, args, kwargs),
                    None => Ok((args, kwargs)),
                }
                .and_then(|(args, kwargs)| self.func.bind(py).call(args, kwargs.as_ref()))
            }
        };
        called
            .map(|result| (result, kept))
            .map_err(|e| self.hooks.error(py, &e, &self.name))
    }

    /// Write `result` with `write`; with tracing on, tell `replied` how long it took.
    fn replying<T>(&self, context: Option<&Bound<'_, Context>>, write: impl FnOnce() -> T) -> T {
        let (Some(replied), Some(context)) = (&self.hooks.replied, context) else {
            return write();
        };
        let started = Instant::now();
        let written = write();
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Err(error) = replied.bind(context.py()).call1((context, spent)) {
            error.write_unraisable(context.py(), None);
        }
        written
    }

    /// The arguments with `context` in the place of the function's context parameter, if
    /// it has one.
    fn with_context<'py>(
        &self,
        py: Python<'py>,
        context: &Bound<'py, Context>,
        mut args: Bound<'py, PyTuple>,
        mut kwargs: Option<Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<(Bound<'py, PyTuple>, Option<Bound<'py, pyo3::types::PyDict>>)> {
        let Some((name, at)) = &self.context_param else {
            return Ok((args, kwargs));
        };
        match at {
            // The binder filled every positional parameter, so its place exists.
            Some(at) => {
                let mut all: Vec<Bound<'_, PyAny>> = args.iter().collect();
                all.insert((*at).min(all.len()), context.clone().into_any());
                args = PyTuple::new(py, all)?;
            }
            None => kwargs
                .get_or_insert_with(|| pyo3::types::PyDict::new(py))
                .set_item(name.bind(py), context)?,
        }
        Ok((args, kwargs))
    }

    /// Bind, call, serialize the result into `reply` (its binary values as attachments,
    /// when the caller accepts binary replies): the inline paths' answer.
    pub(crate) fn invoke(
        &self,
        py: Python<'_>,
        params: Params<'_>,
        context: Option<Box<CallContext>>,
        reply: &mut Reply<'_>,
    ) -> Result<(), RpcError> {
        let (result, context) = self.call(py, params, context)?;
        self.replying(context.as_ref(), || {
            if !reply.wants_result() {
                // A notification's: never sent, so not converted either.
                return Ok(());
            }
            let (out, section) = reply.buffer_and_attachments();
            self.hooks.serialize_attached(&result, out, section)
        })
    }

    /// Whether this procedure is an `async def` (its calls start coroutines and return).
    pub fn is_async(&self) -> bool {
        self.is_async
    }

    /// Never run this procedure's calls on a pinned turner, however quick they have been:
    /// a streamed reply waits for its reader, and the turner must go on meanwhile.
    pub fn never_trust(&self) {
        self.slow.store(true, Ordering::Relaxed);
    }

    /// Whether this procedure's calls have all been quick for a while, so that a pinned
    /// worker's thread may run them itself.
    pub fn trusted(&self) -> bool {
        self.quick_streak.load(Ordering::Relaxed) >= self.hooks.trust_after && !self.slow.load(Ordering::Relaxed)
    }

    /// Whether a call with large params may run during the turn that parsed it: the
    /// procedure was trusted once and no call has given up its core since. Unlike
    /// [`Procedure::trusted`], a call that was only preempted or computed for long does
    /// not take this back: the call would run on this thread right after the turn anyway,
    /// and on a busy machine the streak would rarely last.
    pub(crate) fn runs_at_once(&self) -> bool {
        !self.is_async && self.proven() && !self.slow.load(Ordering::Relaxed)
    }

    /// Whether the streak of quick calls has ever reached `trust_after`.
    pub fn proven(&self) -> bool {
        self.proven.load(Ordering::Relaxed)
    }

    /// Run one deferred call and complete its reply. For an `async def` procedure, returns
    /// `(coroutine, reply)` to be started on the asyncio loop instead.
    ///
    /// `timed`: measure the call for trust (which calls: `Runtime::times`; reading the
    /// clock costs more than the rest of a quick call's bookkeeping), with the thread's
    /// [`voluntary_switches`] when its group started.
    pub fn run<'py>(
        &self,
        py: Python<'py>,
        params: Params<'_>,
        context: Option<Box<CallContext>>,
        reply: Answer,
        timed: Option<u64>,
    ) -> Option<Bound<'py, PyAny>> {
        match timed {
            Some(switches_at_group_start) => self.timing(switches_at_group_start, params, || {
                self.run_deferred(py, params, context, reply)
            }),
            None => self.run_deferred(py, params, context, reply),
        }
    }

    /// Run a call of large params during the turn that parsed it, answering into `reply`;
    /// timed, so that a call that turns out slow withdraws the trust it relied on.
    pub(crate) fn run_at_once(
        &self,
        py: Python<'_>,
        params: Params<'_>,
        context: Option<Box<CallContext>>,
        reply: &mut Reply<'_>,
    ) -> Result<(), RpcError> {
        self.timing(voluntary_switches(), params, || self.invoke(py, params, context, reply))
    }

    /// Run `call` (of `params`), and keep [`Procedure::trusted`] and
    /// [`Procedure::runs_at_once`] up to date with how long it took.
    fn timing<T>(&self, switches_at_group_start: u64, params: Params<'_>, call: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = call();
        let bytes = u32::try_from(crate::params::size(params)).unwrap_or(u32::MAX);
        if started.elapsed() >= SLOW_CALL + SLOW_CALL_PER_BYTE * bytes {
            // A call that slept or waited (I/O, a lock) gave up its core, and may block
            // again: never trusted again. One that only lost the core to another process,
            // or computed for long, starts its streak over, so that a busy machine does
            // not take the quick path from a quick procedure for good.
            if voluntary_switches() != switches_at_group_start {
                self.slow.store(true, Ordering::Relaxed);
            }
            self.quick_streak.store(0, Ordering::Relaxed);
        } else if self.quick_streak.load(Ordering::Relaxed) < self.hooks.trust_after
            && self.quick_streak.fetch_add(1, Ordering::Relaxed) + 1 == self.hooks.trust_after
        {
            self.proven.store(true, Ordering::Relaxed);
        }
        out
    }

    fn run_deferred<'py>(
        &self,
        py: Python<'py>,
        params: Params<'_>,
        context: Option<Box<CallContext>>,
        reply: Answer,
    ) -> Option<Bound<'py, PyAny>> {
        if reply.is_past() {
            // Its caller has stopped waiting: the call is not run at all.
            reply.finish(Err(RpcError::deadline_exceeded()));
            return None;
        }
        match self.call(py, params, context) {
            Err(error) => reply.finish(Err(error)),
            // A generator (or async generator) procedure: its items, then its end.
            Ok((result, _)) if reply.is_streamed() => {
                let (deferred, _) = reply.into_deferred()?;
                let hooks: Arc<dyn crate::streaming::StreamHooks> = self.hooks.clone();
                return crate::streaming::drive(py, &hooks, &self.name, result, deferred);
            }
            Ok((result, _)) if self.is_async && self.hooks.submit.is_some() && is_awaitable(&result) => {
                let Some((deferred, seconds)) = reply.into_deferred() else {
                    let _ = result.call_method0("close"); // past its deadline: never started
                    return None;
                };
                let reply = DeferredReply {
                    deferred: Mutex::new(Some(deferred)),
                    hooks: Arc::clone(&self.hooks),
                    method: Arc::clone(&self.name),
                };
                let seconds = seconds.into_pyobject(py).ok()?;
                return Bound::new(py, reply)
                    .and_then(|reply| PyTuple::new(py, [result, reply.into_any(), seconds.into_any()]))
                    .map(Bound::into_any)
                    .ok();
            }
            Ok((result, context)) => self.replying(context.as_ref(), || reply.0.finish_with(&self.hooks, &result)),
        }
        None
    }
}

/// Where a call's outcome goes: its reply, which, with a deadline, the core answers at
/// the deadline if the call has not (a result after that is dropped: see
/// [`ucall_core::Reply::deadline`]).
pub struct Answer(Deferred);

impl Answer {
    /// The call's `reply`.
    pub fn new(reply: Deferred) -> Self {
        Answer(reply)
    }

    /// Whether the call streams its result (it has no deadline then).
    fn is_streamed(&self) -> bool {
        self.0.is_streamed()
    }

    fn is_past(&self) -> bool {
        self.0.deadline().is_some_and(|deadline| Instant::now() >= deadline)
    }

    fn finish(self, outcome: ucall_core::defer::Outcome) {
        self.0.complete(outcome);
    }

    /// The reply for an `async def` call, with the seconds left until its deadline;
    /// `None` when the deadline has answered it already.
    fn into_deferred(self) -> Option<(Deferred, Option<f64>)> {
        if self.0.is_expired() {
            return None;
        }
        let left = self
            .0
            .deadline()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()).as_secs_f64());
        Some((self.0, left))
    }
}

/// Completing a deferred reply with a handler's result.
trait FinishWith {
    /// Answer with `result`, its binary values as attachments when the caller accepts them.
    fn finish_with(self, hooks: &Hooks, result: &Bound<'_, PyAny>);
}

impl FinishWith for Deferred {
    fn finish_with(self, hooks: &Hooks, result: &Bound<'_, PyAny>) {
        if !self.wants_result() {
            // A notification's: never sent, so not converted either.
            return self.complete(Ok(Vec::new()));
        }
        let mut out = Vec::with_capacity(32);
        if !self.accepts_attachments() {
            self.complete(hooks.serialize(result, &mut out).map(|()| out));
            return;
        }
        let mut section = Section::new();
        match hooks.serialize_attached(result, &mut out, Some(&mut section)) {
            Ok(()) => self.complete_attached(out, section),
            Err(error) => self.error(error),
        }
    }
}

pub(crate) fn is_awaitable(obj: &Bound<'_, PyAny>) -> bool {
    obj.hasattr("__await__").unwrap_or(false)
}

/// The reply of an `async def` call, completed when its task finishes.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct DeferredReply {
    deferred: Mutex<Option<Deferred>>,
    hooks: Arc<Hooks>,
    method: Arc<str>,
}

#[pymethods]
impl DeferredReply {
    /// Complete the reply from a finished `asyncio.Task` (a done-callback).
    fn settle(&self, py: Python<'_>, task: &Bound<'_, PyAny>) {
        let Some(deferred) = self.deferred.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        if task
            .call_method0("cancelled")
            .and_then(|c| c.is_truthy())
            .unwrap_or(false)
        {
            deferred.error(RpcError::internal("Internal error: the call was cancelled"));
            return;
        }
        match task.call_method0("exception") {
            Ok(exception) if !exception.is_none() => {
                deferred.error(self.hooks.error(py, &PyErr::from_value(exception), &self.method));
            }
            Ok(_) => match task.call_method0("result") {
                Ok(result) => deferred.finish_with(&self.hooks, &result),
                Err(e) => deferred.error(self.hooks.error(py, &e, &self.method)),
            },
            Err(e) => deferred.error(self.hooks.error(py, &e, &self.method)),
        }
    }
}

impl DeferredReply {
    /// Answer with the error `error` (the coroutine could not be started).
    pub fn fail(&self, py: Python<'_>, error: &PyErr) {
        if let Some(deferred) = self.deferred.lock().unwrap_or_else(PoisonError::into_inner).take() {
            deferred.error(self.hooks.error(py, error, &self.method));
        }
    }
}

impl crate::streaming::StreamHooks for Hooks {
    fn serialize(
        &self,
        value: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
        section: Option<&mut Section>,
    ) -> Result<(), RpcError> {
        Hooks::serialize_attached(self, value, out, section)
    }

    fn error(&self, py: Python<'_>, error: &PyErr, method: &str) -> RpcError {
        Hooks::error(self, py, error, method)
    }

    fn has_loop(&self) -> bool {
        self.submit.is_some()
    }
}

impl Hooks {
    /// `error` as the `ucall.RPCError` a handler would raise for it.
    fn exception<'py>(&self, py: Python<'py>, error: &RpcError) -> PyResult<Bound<'py, PyAny>> {
        let data = match error.data() {
            Some(raw) => crate::convert::to_python(py, raw)?,
            None => py.None().into_bound(py),
        };
        self.rpc_error.bind(py).call1((error.code(), error.message(), data))
    }

    /// Serialize a handler's result into `out`.
    pub(crate) fn serialize(&self, result: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<(), RpcError> {
        self.serialize_attached(result, out, None)
    }

    /// Serialize a handler's result into `out`, its binary values as attachments in
    /// `section` when given (the caller accepts binary replies).
    pub(crate) fn serialize_attached(
        &self,
        result: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
        mut section: Option<&mut Section>,
    ) -> Result<(), RpcError> {
        let start = out.len();
        let attached = section.as_ref().map_or(0, |s| s.count());
        write_json_attached(result, Some(self.encode.bind(result.py())), section.as_deref_mut(), out).map_err(|e| {
            out.truncate(start);
            if let Some(section) = section {
                section.truncate(attached);
            }
            RpcError::internal(format!("Internal error: result cannot be serialized: {}", e.0))
        })
    }

    /// The JSON-RPC error for an exception raised by `method`'s handler. An `RPCError` is
    /// the handler's answer; any other exception is logged with its traceback on the
    /// server (and sent in `data` only in debug mode).
    #[cold]
    #[inline(never)]
    pub(crate) fn error(&self, py: Python<'_>, error: &PyErr, method: &str) -> RpcError {
        let value = error.value(py);
        if value.is_instance(self.rpc_error.bind(py).as_any()).unwrap_or(false) {
            let code = value
                .getattr("code")
                .and_then(|c| c.extract::<i32>())
                .unwrap_or(ucall_core::ErrorCode::InternalError.code());
            let message = value
                .getattr("message")
                .map_or_else(|_| value.to_string(), |m| m.to_string());
            let mut rpc = RpcError::new(code, message);
            // `ucall.HTTPError`: the status to answer HTTP with.
            if let Some(status) = value.getattr("status").ok().and_then(|s| s.extract::<u16>().ok()) {
                rpc = rpc.with_http_status(status);
            }
            // The over-limit error of `ctx.limit_by`: its `Retry-After` goes out too.
            if let Some(seconds) = value.getattr("retry_after").ok().and_then(|s| s.extract::<u16>().ok()) {
                rpc = rpc.with_retry_after(seconds);
            }
            let data = match value.getattr("data") {
                Ok(data) if !data.is_none() => data,
                _ => return rpc,
            };
            let mut json = Vec::new();
            // As for a result: data with no JSON form is the handler's bug, said so rather
            // than dropped without a word.
            if let Err(e) = write_json(&data, Some(self.encode.bind(py)), &mut json) {
                return RpcError::internal(format!(
                    "Internal error: the data of RPCError {code} cannot be serialized: {}",
                    e.0
                ));
            }
            return String::from_utf8(json)
                .ok()
                .and_then(|j| rpc.clone().with_raw_data(&j))
                .unwrap_or(rpc);
        }
        if let Some(log_failure) = &self.log_failure {
            // A failing logger (a handler of the user's that raises) must not fail the reply.
            if let Err(e) = log_failure.bind(py).call1((method, value, error.traceback(py))) {
                e.write_unraisable(py, None);
            }
        }
        let kind = value
            .get_type()
            .name()
            .map_or_else(|_| "Exception".into(), |n| n.to_string());
        let text = value.to_string();
        let message = if text.is_empty() {
            format!("Internal error: {kind}")
        } else {
            format!("Internal error: {kind}: {text}")
        };
        let rpc = RpcError::internal(message);
        match &self.describe {
            Some(describe) => match describe
                .bind(py)
                .call1((value, error.traceback(py)))
                .and_then(|t| t.extract::<String>())
            {
                Ok(trace) => rpc.with_data(&trace),
                Err(_) => rpc,
            },
            None => rpc,
        }
    }
}
