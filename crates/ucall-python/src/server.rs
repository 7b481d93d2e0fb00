// SPDX-License-Identifier: Apache-2.0
//! `NativeServer`: the core server driven from Python.
//!
//! Every call is deferred and run by the lane's turner after its turn (see
//! [`crate::runtime`]), unless its params are large: then it runs at once, in the turn.
//! Params are bound, the function called and the result serialized with the GIL held;
//! everything else runs without it.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyRuntimeWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyType};

use ucall_core::{
    Call, Config, Cors, Deferred, EngineKind, Handler, Reply, RpcError, Server, ServerBuilder, TlsConfig,
};

use crate::convert::{self, write_json};
use crate::params::{ParamSpec, Plan};
use crate::runtime::{self, Runtime};

/// Python objects every procedure of one server needs.
pub struct Hooks {
    /// `encode(obj) -> plain JSON value`, for result types the writer does not know.
    encode: Py<PyAny>,
    /// `ucall.RPCError`: raising it sends that error.
    rpc_error: Py<PyType>,
    /// `describe(exc, traceback) -> str`: the text of a failed handler's traceback (debug mode).
    describe: Option<Py<PyAny>>,
    /// `submit([(coroutine, reply), ...])`: start coroutines on the server's asyncio loop.
    submit: Option<Py<PyAny>>,
    /// Quick calls in a row before a procedure is trusted to run on a pinned turner (1000
    /// unless a test asks for fewer, so that a busy host, which breaks streaks, still lets
    /// one finish).
    trust_after: u32,
}

/// One Python function behind a method name.
pub struct Procedure {
    func: Py<PyAny>,
    plan: Plan,
    hooks: Arc<Hooks>,
    is_async: bool,
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

/// How long `stop` waits past `shutdown_timeout` for the workers' last replies to leave.
const STOP_SLACK: Duration = Duration::from_secs(1);

/// The router's entry for a procedure: defers the call to the lane's next group, or runs
/// it at once when its params are large (see [`runtime::ParamsText::RUN_AT_ONCE_FROM`]).
struct Entry(Arc<Procedure>);

impl Handler for Entry {
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        let params = call.params().raw();
        if runtime::ParamsText::is_large(params) && self.0.runs_at_once() && runtime::turn_queued_nothing() {
            return Python::attach(|py| self.0.run_at_once(py, params, reply.buffer()));
        }
        let Ok(deferred) = reply.defer() else {
            // Driven without an engine (in-memory sessions): answer inline.
            return Python::attach(|py| self.0.invoke(py, params, reply.buffer()));
        };
        let job = runtime::Job {
            procedure: Arc::clone(&self.0),
            params: params.map(runtime::ParamsText::new),
            reply: deferred,
        };
        if let Err(job) = runtime::collect(job) {
            Python::attach(|py| {
                if let Some(started) = job.procedure.run(
                    py,
                    job.params.as_ref().map(runtime::ParamsText::as_str),
                    job.reply,
                    None,
                ) {
                    if let Some(submit) = &self.0.hooks.submit {
                        let _ = PyList::new(py, [started]).and_then(|list| submit.bind(py).call1((list,)));
                    }
                }
            });
        }
        Ok(())
    }
}

impl Procedure {
    /// Bind and call; the function's return value.
    fn call<'py>(&self, py: Python<'py>, params: Option<&str>) -> Result<Bound<'py, PyAny>, RpcError> {
        let (args, kwargs) = self.plan.bind(py, params)?;
        self.func
            .bind(py)
            .call(args, kwargs.as_ref())
            .map_err(|e| self.hooks.error(py, &e))
    }

    /// Bind, call, serialize the result into `out`.
    fn invoke(&self, py: Python<'_>, params: Option<&str>, out: &mut Vec<u8>) -> Result<(), RpcError> {
        let result = self.call(py, params)?;
        self.hooks.serialize(&result, out)
    }

    /// Whether this procedure is an `async def` (its calls start coroutines and return).
    pub fn is_async(&self) -> bool {
        self.is_async
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
    fn runs_at_once(&self) -> bool {
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
        params: Option<&str>,
        reply: Deferred,
        timed: Option<u64>,
    ) -> Option<Bound<'py, PyAny>> {
        match timed {
            Some(switches_at_group_start) => {
                self.timing(switches_at_group_start, params, || self.run_deferred(py, params, reply))
            }
            None => self.run_deferred(py, params, reply),
        }
    }

    /// Run a call of large params during the turn that parsed it, writing its reply into
    /// `out`; timed, so that a call that turns out slow withdraws the trust it relied on.
    fn run_at_once(&self, py: Python<'_>, params: Option<&str>, out: &mut Vec<u8>) -> Result<(), RpcError> {
        self.timing(voluntary_switches(), params, || self.invoke(py, params, out))
    }

    /// Run `call` (of `params`), and keep [`Procedure::trusted`] and
    /// [`Procedure::runs_at_once`] up to date with how long it took.
    fn timing<T>(&self, switches_at_group_start: u64, params: Option<&str>, call: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = call();
        let bytes = u32::try_from(params.map_or(0, str::len)).unwrap_or(u32::MAX);
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

    fn run_deferred<'py>(&self, py: Python<'py>, params: Option<&str>, reply: Deferred) -> Option<Bound<'py, PyAny>> {
        match self.call(py, params) {
            Err(error) => reply.error(error),
            Ok(result) if self.is_async && self.hooks.submit.is_some() && is_awaitable(&result) => {
                let reply = DeferredReply {
                    deferred: Mutex::new(Some(reply)),
                    hooks: Arc::clone(&self.hooks),
                };
                return Bound::new(py, reply)
                    .and_then(|reply| PyTuple::new(py, [result, reply.into_any()]))
                    .map(Bound::into_any)
                    .ok();
            }
            Ok(result) => {
                let mut out = Vec::with_capacity(32);
                reply.complete(self.hooks.serialize(&result, &mut out).map(|()| out));
            }
        }
        None
    }
}

fn is_awaitable(obj: &Bound<'_, PyAny>) -> bool {
    obj.hasattr("__await__").unwrap_or(false)
}

/// The reply of an `async def` call, completed when its task finishes.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct DeferredReply {
    deferred: Mutex<Option<Deferred>>,
    hooks: Arc<Hooks>,
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
                deferred.error(self.hooks.error(py, &PyErr::from_value(exception)));
            }
            Ok(_) => match task.call_method0("result") {
                Ok(result) => {
                    let mut out = Vec::with_capacity(32);
                    deferred.complete(self.hooks.serialize(&result, &mut out).map(|()| out));
                }
                Err(e) => deferred.error(self.hooks.error(py, &e)),
            },
            Err(e) => deferred.error(self.hooks.error(py, &e)),
        }
    }
}

impl DeferredReply {
    /// Answer with the error `error` (the coroutine could not be started).
    pub fn fail(&self, py: Python<'_>, error: &PyErr) {
        if let Some(deferred) = self.deferred.lock().unwrap_or_else(PoisonError::into_inner).take() {
            deferred.error(self.hooks.error(py, error));
        }
    }
}

impl Hooks {
    /// Serialize a handler's result into `out`.
    fn serialize(&self, result: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<(), RpcError> {
        let start = out.len();
        write_json(result, Some(self.encode.bind(result.py())), out).map_err(|e| {
            out.truncate(start);
            RpcError::internal(format!("Internal error: result cannot be serialized: {}", e.0))
        })
    }

    /// The JSON-RPC error for an exception raised by a handler.
    #[cold]
    #[inline(never)]
    fn error(&self, py: Python<'_>, error: &PyErr) -> RpcError {
        let value = error.value(py);
        if value.is_instance(self.rpc_error.bind(py).as_any()).unwrap_or(false) {
            let code = value
                .getattr("code")
                .and_then(|c| c.extract::<i32>())
                .unwrap_or(ucall_core::ErrorCode::InternalError.code());
            let message = value
                .getattr("message")
                .map_or_else(|_| value.to_string(), |m| m.to_string());
            let rpc = RpcError::new(code, message);
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

enum State {
    Configuring(ServerBuilder),
    Running {
        runtime: Arc<Runtime>,
        /// The configured `shutdown_timeout`: how long `stop` lets calls in flight finish.
        grace: Duration,
        port: u16,
        tls_port: Option<u16>,
        engine: EngineKind,
        /// Why `auto` took poll, when it fell back.
        engine_fallback: Option<String>,
    },
    Stopped,
}

/// A UCall server whose procedures are Python functions.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NativeServer {
    state: Mutex<State>,
    hooks: Arc<Hooks>,
    max_threads: usize,
}

fn engine(name: &str) -> PyResult<EngineKind> {
    EngineKind::parse(name)
        .ok_or_else(|| PyValueError::new_err(format!("engine {name:?}: expected auto, poll or uring")))
}

fn secs(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{what} must be a positive number of seconds")))
}

#[pymethods]
impl NativeServer {
    /// Configure a server; nothing is bound until `start`.
    #[new]
    #[pyo3(signature = (
        host, port, threads, engine_name, encode, rpc_error, describe=None, submit=None, *,
        max_threads=64, max_body_bytes=None, max_head_bytes=None, max_batch=None, max_connections=None,
        header_timeout=None, idle_timeout=None, shutdown_timeout=None,
        tls_cert=None, tls_key=None, tls_client_ca=None, tls_port=None, quiet=false,
        trust_after=1000, cors_origins=None, cors_methods=None, cors_headers=None, cors_max_age=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        host: String,
        port: u16,
        threads: usize,
        engine_name: &str,
        encode: Py<PyAny>,
        rpc_error: Py<PyType>,
        describe: Option<Py<PyAny>>,
        submit: Option<Py<PyAny>>,
        max_threads: usize,
        max_body_bytes: Option<usize>,
        max_head_bytes: Option<usize>,
        max_batch: Option<usize>,
        max_connections: Option<usize>,
        header_timeout: Option<f64>,
        idle_timeout: Option<f64>,
        shutdown_timeout: Option<f64>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
        tls_client_ca: Option<std::path::PathBuf>,
        tls_port: Option<u16>,
        quiet: bool,
        trust_after: u32,
        cors_origins: Option<Vec<String>>,
        cors_methods: Option<Vec<String>>,
        cors_headers: Option<Vec<String>>,
        cors_max_age: Option<u32>,
    ) -> PyResult<Self> {
        let mut config = Config {
            host,
            port,
            threads,
            engine: engine(engine_name)?,
            quiet,
            ..Config::default()
        };
        if let Some(v) = max_body_bytes {
            config.limits.max_body_bytes = v;
        }
        if let Some(v) = max_head_bytes {
            config.limits.max_head_bytes = v;
        }
        if let Some(v) = max_batch {
            config.limits.max_batch = v;
        }
        if let Some(v) = max_connections {
            config.max_connections = v;
        }
        if let Some(v) = header_timeout {
            config.header_timeout = secs(v, "header_timeout")?;
        }
        if let Some(v) = idle_timeout {
            config.idle_timeout = secs(v, "idle_timeout")?;
        }
        if let Some(v) = shutdown_timeout {
            config.shutdown_timeout = secs(v, "shutdown_timeout")?;
        }
        if let Some(origins) = cors_origins {
            let mut cors = Cors::new(origins);
            if let Some(methods) = cors_methods {
                cors = cors.allow_methods(methods);
            }
            if let Some(headers) = cors_headers {
                cors = cors.allow_headers(headers);
            }
            if let Some(seconds) = cors_max_age {
                cors = cors.max_age(seconds);
            }
            config.limits.cors = Some(cors);
        }
        match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => {
                let mut tls = TlsConfig::new(cert, key);
                tls.client_ca = tls_client_ca;
                tls.port = tls_port;
                config.tls = Some(tls);
            }
            (None, None) => {}
            _ => {
                return Err(PyValueError::new_err(
                    "TLS needs both a certificate chain and a private key",
                ))
            }
        }
        Ok(NativeServer {
            state: Mutex::new(State::Configuring(Server::builder().config(config))),
            hooks: Arc::new(Hooks {
                encode,
                rpc_error,
                describe,
                submit,
                trust_after: trust_after.max(1),
            }),
            max_threads,
        })
    }

    /// Register `func` under `name` with its parameter plan (see `ucall._signature`).
    #[pyo3(signature = (name, func, params, ignore_extra, is_async=false))]
    fn add(
        &self,
        py: Python<'_>,
        name: &str,
        func: Py<PyAny>,
        params: Vec<ParamSpec>,
        ignore_extra: bool,
        is_async: bool,
    ) -> PyResult<()> {
        let plan = Plan::new(py, params, ignore_extra)?;
        let procedure = Entry(Arc::new(Procedure {
            func,
            plan,
            hooks: Arc::clone(&self.hooks),
            is_async,
            quick_streak: AtomicU32::new(0),
            slow: AtomicBool::new(false),
            proven: AtomicBool::new(false),
        }));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let State::Configuring(builder) = std::mem::replace(&mut *state, State::Stopped) else {
            return Err(PyRuntimeError::new_err(
                "procedures must be registered before the server starts",
            ));
        };
        *state = State::Configuring(builder.handler(name, procedure));
        Ok(())
    }

    /// Bind and serve on background threads; returns the port.
    fn start(&self, py: Python<'_>) -> PyResult<u16> {
        // The lock is never held while the GIL is released: a thread holding the GIL may
        // be waiting for it.
        let builder = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, State::Stopped) {
                State::Configuring(builder) => builder,
                other => {
                    *state = other;
                    return Err(PyRuntimeError::new_err("the server was already started"));
                }
            }
        };
        let server = builder.bind().map_err(|e| PyOSError::new_err(e.to_string()))?;
        let port = server.local_addr().port();
        let tls_port = server.tls_addr().map(|addr| addr.port());
        let engine = server.engine();
        let engine_fallback = server.engine_fallback().map(str::to_owned);
        let grace = server.config().shutdown_timeout;
        let (stopper, workers) = server.into_workers();
        let submit = self.hooks.submit.as_ref().map(|s| s.clone_ref(py));
        // An io_uring worker is tied to the thread that first drives it.
        let pinned = engine == EngineKind::Uring;
        let runtime = py
            .detach(|| Runtime::start(stopper, workers, self.max_threads, pinned, submit))
            .map_err(|e| PyOSError::new_err(format!("cannot start the server's threads: {e}")))?;
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = State::Running {
            runtime,
            grace,
            port,
            tls_port,
            engine,
            engine_fallback,
        };
        Ok(port)
    }

    /// Wait until every worker has finished (`True`) or `timeout` seconds have passed
    /// (`False`), with the GIL released.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let Some(runtime) = self.runtime() else { return Ok(true) };
        let timeout = timeout.map(|t| secs(t.max(0.0), "timeout")).transpose()?;
        Ok(py.detach(|| runtime.wait(timeout)))
    }

    /// Stop gracefully: calls in flight finish, then the workers end. Waits for them, up to
    /// `shutdown_timeout` and a second more: a handler still running then (it never
    /// returns, or sleeps longer) is left to finish on its own thread, with a warning,
    /// rather than keep the process from exiting. A signal whose handler raises (a second
    /// Ctrl-C) ends the wait at once with its exception.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let state = std::mem::replace(
            &mut *self.state.lock().unwrap_or_else(PoisonError::into_inner),
            State::Stopped,
        );
        let State::Running { runtime, grace, .. } = state else {
            return Ok(());
        };
        runtime.begin_stop();
        let give_up_at = Instant::now() + grace + STOP_SLACK;
        loop {
            let running = py.detach(|| runtime.join_ended(Duration::from_millis(100)));
            if running == 0 {
                return Ok(());
            }
            py.check_signals()?;
            if Instant::now() >= give_up_at {
                let message = format!(
                    "ucall: stopped; {running} thread(s) still running a handler after shutdown_timeout were left to finish"
                );
                PyErr::warn(
                    py,
                    &py.get_type::<PyRuntimeWarning>(),
                    &std::ffi::CString::new(message)?,
                    1,
                )?;
                return Ok(());
            }
        }
    }

    /// Whether the server is serving.
    #[getter]
    fn running(&self) -> bool {
        self.runtime().is_some()
    }

    /// The bound port (`None` before `start`).
    #[getter]
    fn port(&self) -> Option<u16> {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { port, .. } => Some(*port),
            _ => None,
        }
    }

    /// The port of the separate TLS listener, when one was asked for (`tls_port`).
    #[getter]
    fn tls_port(&self) -> Option<u16> {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { tls_port, .. } => *tls_port,
            _ => None,
        }
    }

    /// The engine in use (`None` before `start`).
    #[getter]
    fn engine(&self) -> Option<&'static str> {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { engine, .. } => Some(engine.name()),
            _ => None,
        }
    }

    /// Why `auto` serves with poll where io_uring was wanted (`None` when it did not fall
    /// back, or before `start`).
    #[getter]
    fn engine_fallback(&self) -> Option<String> {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { engine_fallback, .. } => engine_fallback.clone(),
            _ => None,
        }
    }

    /// Event-loop turns taken so far, over all workers.
    #[getter]
    fn cycles(&self) -> u64 {
        self.runtime().map_or(0, |r| r.cycles())
    }
}

impl NativeServer {
    fn runtime(&self) -> Option<Arc<Runtime>> {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { runtime, .. } => Some(Arc::clone(runtime)),
            _ => None,
        }
    }
}

/// Serialize `obj` as JSON text with the writer procedures use (for tests and the client).
#[pyfunction]
#[pyo3(signature = (obj, encode=None))]
pub fn dumps(py: Python<'_>, obj: &Bound<'_, PyAny>, encode: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    let _ = py;
    let mut out = Vec::new();
    write_json(obj, encode, &mut out).map_err(|e| PyValueError::new_err(format!("cannot serialize {}", e.0)))?;
    String::from_utf8(out).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Parse JSON text with the reader procedures use (big integers stay exact).
#[pyfunction]
pub fn loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return Err(PyValueError::new_err("invalid JSON"));
    }
    convert::to_python(py, text)
}
