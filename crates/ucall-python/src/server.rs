// SPDX-License-Identifier: Apache-2.0
//! `NativeServer`: the core server driven from Python.
//!
//! Every call is deferred and run by the lane's turner after its turn (see
//! [`crate::runtime`]), unless its params are large: then it runs at once, in the turn.
//! Params are bound, the function called and the result serialized with the GIL held;
//! everything else runs without it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyRuntimeWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};

use ucall_core::batch::SIZE_BUCKETS;
use ucall_core::metrics::Metrics;
use ucall_core::{
    BatchOptions, Batcher, Call, ClientKey, Config, Cors, Discovery, EngineKind, ExtraMetrics, Handler, HealthPaths,
    IpNet, LogFormat, McpSettings, MethodDoc, MetricsConfig, NotReady, Rate, Readiness, Reply, RequestLog, RpcError,
    Server, ServerBuilder, TlsConfig,
};

use crate::batch::BatchRunner;
use crate::context::Owned as CallContext;
use crate::convert::{self, write_json};
use crate::params::{ParamSpec, Plan};
use crate::procedure::{Answer, Hooks, Procedure};
use crate::runtime::{self, Runtime};

/// How long `stop` waits past `shutdown_timeout` for the workers' last replies to leave.
const STOP_SLACK: Duration = Duration::from_secs(1);

/// The router's entry for a procedure: defers the call to the lane's next group, or runs
/// it at once when its params are large (see [`runtime::ParamsText::RUN_AT_ONCE_FROM`]).
struct Entry(Arc<Procedure>, Streams);

/// Whether a procedure's calls stream their results (a generator function).
#[derive(Clone, Copy)]
struct Streams(bool);

impl Handler for Entry {
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        let params = call.params();
        // The earlier of the procedure's `timeout=` and the caller's (the core's one rule).
        let deadline = reply.deadline();
        // Copied out only for a procedure that takes it: the others pay nothing.
        let context = self
            .0
            .wants_context()
            .then(|| CallContext::of(call, self.0.hooks.middleware.is_some(), deadline));
        if self.1 .0 {
            // Items go out as the generator yields them (`crate::streaming`). A stream has
            // no deadline: it lasts while its caller reads, and stops when it goes.
            let deferred = reply.stream()?;
            return queue(runtime::Job {
                procedure: Arc::clone(&self.0),
                params: runtime::ParamsText::of(params),
                context,
                reply: Answer::new(deferred),
            });
        }
        // A call with a deadline is never run inline: the deadline must be able to answer it.
        if deadline.is_none()
            && runtime::ParamsText::is_large(params)
            && self.0.runs_at_once()
            && runtime::turn_queued_nothing()
        {
            return Python::attach(|py| self.0.run_at_once(py, params, context, reply));
        }
        if !reply.can_defer() {
            // Driven without an engine (in-memory sessions): answer inline.
            return Python::attach(|py| self.0.invoke(py, params, context, reply));
        }
        // Refused at once when too many calls wait (`max_pending_calls`).
        let deferred = reply.defer()?;
        queue(runtime::Job {
            procedure: Arc::clone(&self.0),
            params: runtime::ParamsText::of(params),
            context,
            reply: Answer::new(deferred),
        })
    }
}

/// Hand `job` to the lane's next group, or run it now where there is none.
fn queue(job: runtime::Job) -> Result<(), RpcError> {
    if let Err(job) = runtime::collect(job) {
        Python::attach(|py| {
            let submit = job.procedure.hooks.submit.as_ref().map(|s| s.clone_ref(py));
            let runtime::Job {
                procedure,
                params,
                context,
                reply,
            } = job;
            if let Some(started) = runtime::ParamsText::lend(params.as_ref(), |params| {
                procedure.run(py, params, context, reply, None)
            }) {
                if let Some(submit) = submit {
                    let _ = PyList::new(py, [started]).and_then(|list| submit.bind(py).call1((list,)));
                }
            }
        });
    }
    Ok(())
}

enum State {
    /// Boxed: the builder is large, and the other states small.
    Configuring(Box<ServerBuilder>),
    Running {
        runtime: Arc<Runtime>,
        /// The configured `shutdown_timeout`: how long `stop` lets calls in flight finish.
        grace: Duration,
        port: u16,
        tls_port: Option<u16>,
        engine: EngineKind,
        /// Why `auto` took poll, when it fell back.
        engine_fallback: Option<String>,
        /// The counters `GET /metrics` shows, when on.
        metrics: Option<Arc<Metrics>>,
    },
    Stopped,
}

/// A UCall server whose procedures are Python functions.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NativeServer {
    state: Mutex<State>,
    hooks: Arc<Hooks>,
    max_threads: usize,
    /// What `GET /readyz` and `rpc.health` report (the core's one rule).
    readiness: Arc<Readiness>,
    /// The batch procedures, by name: their counters, and their threads to end at `stop`.
    batchers: Mutex<Vec<(String, Batcher)>>,
}

fn engine(name: &str) -> PyResult<EngineKind> {
    EngineKind::parse(name)
        .ok_or_else(|| PyValueError::new_err(format!("engine {name:?}: expected auto, poll or uring")))
}

/// The request log: appended to the file at `path` (each worker process opens it), or
/// written to a duplicate of the descriptor `fd`; in `format`, `text` by default.
fn request_log(
    path: Option<std::path::PathBuf>,
    fd: Option<i32>,
    format: Option<&str>,
) -> PyResult<Option<RequestLog>> {
    let format = match format {
        None => LogFormat::Text,
        Some(name) => LogFormat::parse(name).ok_or_else(|| {
            PyValueError::new_err(format!("request_log_format must be 'text' or 'json', got {name:?}"))
        })?,
    };
    match (path, fd) {
        (Some(path), _) => RequestLog::open(&path, format)
            .map(Some)
            .map_err(|e| PyOSError::new_err(format!("request_log {}: {e}", path.display()))),
        (None, Some(fd)) if fd >= 0 => {
            // SAFETY: the descriptor is only duplicated here, at once; one that is not open
            // makes the duplication fail (EBADF), raised as OSError.
            let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            RequestLog::to_fd(borrowed, format)
                .map(Some)
                .map_err(|e| PyOSError::new_err(format!("request_log descriptor {fd}: {e}")))
        }
        (None, Some(fd)) => Err(PyValueError::new_err(format!(
            "request_log: {fd} is not a file descriptor"
        ))),
        (None, None) => Ok(None),
    }
}

/// A rate limit as the core reads it (`"100/s"`, `"6000/min"`), or `ValueError` saying why not.
fn rate(text: &str) -> PyResult<Rate> {
    text.parse().map_err(PyValueError::new_err)
}

/// Check rate-limit settings by the core's rules (`ValueError` naming the one at fault):
/// a rate (`"100/s"`), a client key (`"peer"`, `"bearer"`, `"header:<name>"`), proxies.
#[pyfunction]
#[pyo3(signature = (rate=None, key=None, trusted_proxies=None))]
pub(crate) fn check_rate_limit(
    rate: Option<&str>,
    key: Option<&str>,
    trusted_proxies: Option<Vec<String>>,
) -> PyResult<()> {
    if let Some(text) = rate {
        self::rate(text)?;
    }
    if let Some(key) = key {
        ClientKey::parse(key).map_err(PyValueError::new_err)?;
    }
    for proxy in trusted_proxies.unwrap_or_default() {
        proxy.parse::<IpNet>().map_err(PyValueError::new_err)?;
    }
    Ok(())
}

fn secs(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{what} must be a positive number of seconds")))
}

impl NativeServer {
    /// Change the builder, before the server starts.
    fn configure(&self, change: impl FnOnce(ServerBuilder) -> ServerBuilder) -> PyResult<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let State::Configuring(builder) = std::mem::replace(&mut *state, State::Stopped) else {
            return Err(PyRuntimeError::new_err("the server is already started"));
        };
        *state = State::Configuring(Box::new(change(*builder)));
        Ok(())
    }
}

/// The page's tail from `render()` (a Python callable returning the text format), called
/// with the GIL on the thread serving the scrape. A failure is logged, and the page goes
/// out with the server's metrics alone.
fn extra_metrics(render: Py<PyAny>) -> ExtraMetrics {
    ExtraMetrics::new(move |page| {
        Python::attach(
            |py| match render.call0(py).and_then(|text| text.extract::<String>(py)) {
                Ok(text) => page.push_str(&text),
                Err(error) => log::warn!(target: "ucall", "the metrics registry could not be rendered: {error}"),
            },
        );
    })
}

#[pymethods]
impl NativeServer {
    /// Configure a server; nothing is bound until `start`.
    #[new]
    #[pyo3(signature = (
        host, port, threads, engine_name, encode, rpc_error, describe=None, submit=None, *,
        log_failure=None, middleware=None, max_threads=64, max_body_bytes=None, max_head_bytes=None, max_batch=None, max_connections=None, max_pending_calls=None,
        header_timeout=None, idle_timeout=None, shutdown_timeout=None,
        tls_cert=None, tls_key=None, tls_client_ca=None, tls_port=None, quiet=false,
        share_port=false, trust_after=1000, cors_origins=None, cors_methods=None, cors_headers=None, cors_max_age=None,
        hsts_max_age=None, healthz_path=Some("/healthz".to_owned()), readyz_path=Some("/readyz".to_owned()), readyz_not_found=false,
        metrics_path=Some("/metrics".to_owned()), metrics_buckets=None, metrics_extra=None,
        request_log_path=None, request_log_fd=None, request_log_format=None,
        unix_socket=None, unix_socket_mode=None,
        rate_limit=None, rate_limit_key=None, trusted_proxies=None, max_connections_per_peer=None,
        time_calls=false, replied=None,
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
        log_failure: Option<Py<PyAny>>,
        middleware: Option<Py<PyAny>>,
        max_threads: usize,
        max_body_bytes: Option<usize>,
        max_head_bytes: Option<usize>,
        max_batch: Option<usize>,
        max_connections: Option<usize>,
        max_pending_calls: Option<usize>,
        header_timeout: Option<f64>,
        idle_timeout: Option<f64>,
        shutdown_timeout: Option<f64>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
        tls_client_ca: Option<std::path::PathBuf>,
        tls_port: Option<u16>,
        quiet: bool,
        share_port: bool,
        trust_after: u32,
        cors_origins: Option<Vec<String>>,
        cors_methods: Option<Vec<String>>,
        cors_headers: Option<Vec<String>>,
        cors_max_age: Option<u32>,
        hsts_max_age: Option<u64>,
        healthz_path: Option<String>,
        readyz_path: Option<String>,
        readyz_not_found: bool,
        metrics_path: Option<String>,
        metrics_buckets: Option<Vec<f64>>,
        metrics_extra: Option<Py<PyAny>>,
        request_log_path: Option<std::path::PathBuf>,
        request_log_fd: Option<i32>,
        request_log_format: Option<String>,
        unix_socket: Option<std::path::PathBuf>,
        unix_socket_mode: Option<u32>,
        rate_limit: Option<String>,
        rate_limit_key: Option<String>,
        trusted_proxies: Option<Vec<String>>,
        max_connections_per_peer: Option<usize>,
        time_calls: bool,
        replied: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let mut config = Config {
            host,
            port,
            threads,
            engine: engine(engine_name)?,
            quiet,
            share_port,
            unix_socket,
            unix_socket_mode,
            health: HealthPaths {
                healthz: healthz_path,
                readyz: readyz_path,
                not_ready_404: readyz_not_found,
            },
            metrics: MetricsConfig {
                path: metrics_path,
                buckets: metrics_buckets.unwrap_or_else(|| ucall_core::metrics::DEFAULT_BUCKETS.to_vec()),
                extra: metrics_extra.map(extra_metrics),
            },
            ..Config::default()
        };
        config.metrics.check().map_err(PyValueError::new_err)?;
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
        config.max_pending_calls = max_pending_calls;
        config.max_connections_per_peer = max_connections_per_peer;
        config.rate_limit.rate = rate_limit.as_deref().map(rate).transpose()?;
        if let Some(key) = rate_limit_key {
            config.rate_limit.key = ClientKey::parse(&key).map_err(PyValueError::new_err)?;
        }
        for proxy in trusted_proxies.unwrap_or_default() {
            let proxy = proxy.parse::<IpNet>().map_err(PyValueError::new_err)?;
            config.rate_limit.trusted_proxies.push(proxy);
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
        config.limits.hsts_max_age = hsts_max_age;
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
        config.request_log = request_log(request_log_path, request_log_fd, request_log_format.as_deref())?;
        let keyed_by_middleware = matches!(config.rate_limit.key, ClientKey::Middleware);
        let builder = Server::builder().config(config);
        let builder = if time_calls { builder.time_calls() } else { builder };
        let keyed_limits = keyed_by_middleware.then(|| Arc::clone(builder.router().keyed_limits()));
        Ok(NativeServer {
            readiness: Arc::clone(builder.router().readiness()),
            state: Mutex::new(State::Configuring(Box::new(builder))),
            hooks: Arc::new(Hooks {
                encode,
                rpc_error,
                describe,
                submit,
                log_failure,
                middleware,
                replied,
                trust_after: trust_after.max(1),
                keyed_limits,
            }),
            max_threads,
            batchers: Mutex::new(Vec::new()),
        })
    }

    /// Register `func` under `name` with its parameter plan (see `ucall._signature`).
    #[pyo3(signature = (name, func, params, ignore_extra, is_async=false, context=None, timeout=None, streams=false, rate_limit=None))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        py: Python<'_>,
        name: &str,
        func: Py<PyAny>,
        params: Vec<ParamSpec>,
        ignore_extra: bool,
        is_async: bool,
        context: Option<(Py<pyo3::types::PyString>, Option<usize>)>,
        timeout: Option<f64>,
        streams: bool,
        rate_limit: Option<String>,
    ) -> PyResult<()> {
        let plan = Plan::new(py, params, ignore_extra)?;
        let timeout = timeout.map(|t| secs(t, "timeout")).transpose()?;
        let rate_limit = rate_limit.as_deref().map(rate).transpose()?;
        let wants_context = context.is_some() || self.hooks.middleware.is_some();
        let procedure = Entry(
            Arc::new(Procedure::new(
                name,
                func,
                plan,
                Arc::clone(&self.hooks),
                is_async,
                context,
            )),
            Streams(streams),
        );
        if streams {
            procedure.0.never_trust();
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let State::Configuring(builder) = std::mem::replace(&mut *state, State::Stopped) else {
            return Err(PyRuntimeError::new_err(
                "procedures must be registered before the server starts",
            ));
        };
        let mut builder = (*builder).handler(name, procedure);
        if let Some(timeout) = timeout {
            builder = builder.timeout(name, timeout);
        }
        if let Some(rate) = rate_limit {
            builder = builder.procedure_rate_limit(name, rate);
        }
        *state = State::Configuring(Box::new(if wants_context { builder.keep_context() } else { builder }));
        Ok(())
    }

    /// Register the batch procedure `name`: `runner(rows)` gets the bound params of a
    /// batch's calls (one tuple per call, bound by the per-item plan `params`) and returns
    /// one value per call, or an awaitable of that list. With `gate` (the server has
    /// middleware), `gate(contexts)` runs the middleware for each call of a batch first.
    #[pyo3(signature = (name, runner, params, ignore_extra, *, max_size, max_wait, max_concurrent, max_queue, gate=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_batch(
        &self,
        py: Python<'_>,
        name: &str,
        runner: Py<PyAny>,
        params: Vec<ParamSpec>,
        ignore_extra: bool,
        max_size: usize,
        max_wait: f64,
        max_concurrent: usize,
        max_queue: usize,
        gate: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let plan = Plan::new(py, params, ignore_extra)?;
        // The middleware sees each call's context, as around any procedure.
        let keep = gate.is_some();
        let options = BatchOptions {
            max_size,
            max_wait: secs(max_wait, "max_wait")?,
            max_concurrent,
            max_queue,
        };
        let batcher = Batcher::new(
            name,
            options,
            BatchRunner::new(name, runner, plan, Arc::clone(&self.hooks), gate),
        );
        self.configure(|builder| {
            let builder = builder.handler(name, batcher.clone());
            if keep {
                builder.keep_context()
            } else {
                builder
            }
        })?;
        let mut batchers = self.batchers.lock().unwrap_or_else(PoisonError::into_inner);
        batchers.retain(|(earlier, _)| earlier != name);
        batchers.push((name.to_owned(), batcher));
        Ok(())
    }

    /// Each batch procedure's counters: `{name: {"batches": ..., "calls": ..., "sizes":
    /// {bound: count}, "queue_wait_us": ..., "max_queue_wait_us": ..., "rejected": ...,
    /// "abandoned": ..., "expired": ..., "queued": ...}}`.
    fn batch_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let all = PyDict::new(py);
        for (name, batcher) in self.batchers.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let stats = batcher.stats();
            let one = PyDict::new(py);
            one.set_item("batches", stats.batches)?;
            one.set_item("calls", stats.calls)?;
            let sizes = PyDict::new(py);
            for (bound, count) in SIZE_BUCKETS.iter().zip(stats.sizes) {
                sizes.set_item(bound, count)?;
            }
            one.set_item("sizes", sizes)?;
            one.set_item("queue_wait_us", stats.queue_wait_us)?;
            one.set_item("max_queue_wait_us", stats.max_queue_wait_us)?;
            one.set_item("rejected", stats.rejected)?;
            one.set_item("abandoned", stats.abandoned)?;
            one.set_item("expired", stats.expired)?;
            one.set_item("queued", batcher.queued())?;
            all.set_item(name, one)?;
        }
        Ok(all)
    }

    /// Describe a procedure with the JSON form of `ucall_core::MethodDoc` (built by
    /// `ucall._schema`), for `rpc.discover`, `/openrpc.json`, `/openapi.json` and `/docs`.
    fn describe(&self, description: &str) -> PyResult<()> {
        let doc = MethodDoc::from_json(description).map_err(PyValueError::new_err)?;
        self.configure(|builder| builder.describe(doc))
    }

    /// Where and whether the server describes itself: the JSON form of `ucall_core::Discovery`.
    fn discovery(&self, settings: &str) -> PyResult<()> {
        let discovery = Discovery::from_json(settings).map_err(PyValueError::new_err)?;
        self.configure(|builder| builder.discovery(discovery))
    }

    /// Serve the procedures as MCP tools: the JSON form of `ucall_core::McpSettings`.
    fn mcp(&self, settings: &str) -> PyResult<()> {
        let settings = McpSettings::from_json(settings).map_err(PyValueError::new_err)?;
        self.configure(|builder| builder.mcp(settings))
    }

    /// Bind and serve on background threads; returns the port.
    fn start(&self, py: Python<'_>) -> PyResult<u16> {
        // The lock is never held while the GIL is released: a thread holding the GIL may
        // be waiting for it.
        let builder = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, State::Stopped) {
                State::Configuring(builder) => *builder,
                other => {
                    *state = other;
                    return Err(PyRuntimeError::new_err("the server was already started"));
                }
            }
        };
        crate::logs::reload_levels();
        crate::allocator::configure();
        let server = builder.bind().map_err(|e| PyOSError::new_err(e.to_string()))?;
        let port = server.local_addr().port();
        let tls_port = server.tls_addr().map(|addr| addr.port());
        let engine = server.engine();
        let engine_fallback = server.engine_fallback().map(str::to_owned);
        let grace = server.config().shutdown_timeout;
        let (stopper, workers) = server.into_workers();
        let metrics = workers.first().and_then(ucall_core::Worker::metrics);
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
            metrics,
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
    /// Ctrl-C) ends the wait at once with its exception. Returns (calls answered during the
    /// drain, calls left unanswered), or `None` when it was not running.
    fn stop(&self, py: Python<'_>) -> PyResult<Option<(usize, usize)>> {
        let state = std::mem::replace(
            &mut *self.state.lock().unwrap_or_else(PoisonError::into_inner),
            State::Stopped,
        );
        let State::Running { runtime, grace, .. } = state else {
            return Ok(None);
        };
        runtime.begin_stop();
        let give_up_at = Instant::now() + grace + STOP_SLACK;
        let batchers: Vec<Batcher> = self
            .batchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, batcher)| batcher.clone())
            .collect();
        loop {
            let running = py.detach(|| {
                let workers = runtime.join_ended(Duration::from_millis(100));
                // Once the workers have ended nobody waits for a batch: its threads end
                // after the batch in flight.
                let batches = if workers == 0 {
                    batchers.iter().filter(|b| !b.join(Duration::from_millis(100))).count()
                } else {
                    batchers.len()
                };
                workers + batches
            });
            let counts = runtime.drain_counts();
            let counts = Some((counts.answered, counts.unanswered));
            if running == 0 {
                return Ok(counts);
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
                return Ok(counts);
            }
        }
    }

    /// Mark the server draining (`GET /readyz` answers 503, `rpc.health` an error) or
    /// serving again.
    fn set_draining(&self, on: bool) {
        self.readiness.set_draining(on);
    }

    /// Run `check()` on every readiness probe: it returns `None` when ready, else
    /// `(check_name, error_or_None)`.
    fn set_readiness_check(&self, check: Py<PyAny>) {
        self.readiness.set_check(move || {
            Python::attach(|py| {
                let failed = check
                    .bind(py)
                    .call0()
                    .and_then(|answer| answer.extract::<Option<(String, Option<String>)>>());
                match failed {
                    Ok(None) => Ok(()),
                    Ok(Some((check, error))) => Err(NotReady { check, error }),
                    Err(error) => Err(NotReady {
                        check: "readiness".into(),
                        error: Some(error.to_string()),
                    }),
                }
            })
        });
    }

    /// The readiness `GET /readyz` reports: `(ready, its JSON body)`.
    fn ready_state(&self) -> (bool, String) {
        let state = self.readiness.state(self.runtime().is_none());
        (state == ucall_core::ReadyState::Serving, state.to_json())
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

    /// The page `GET /metrics` answers (Prometheus text format), while running with
    /// metrics on.
    fn metrics_text(&self, py: Python<'_>) -> Option<String> {
        let metrics = match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Running { metrics, .. } => metrics.clone(),
            _ => None,
        }?;
        Some(py.detach(|| metrics.render()))
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

/// Parse JSON text (`str`, or UTF-8 `bytes`) with the reader procedures use (big
/// integers stay exact). The clients read every reply with it: the core's validation is
/// SIMD for large texts, a few times faster than `json.loads` on a 2 MB reply.
#[pyfunction]
pub fn loads<'py>(py: Python<'py>, text: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match text.cast::<PyBytes>() {
        Ok(bytes) => convert::from_json(py, bytes.as_bytes()),
        Err(_) => convert::from_json(py, text.cast::<PyString>()?.to_cow()?.as_bytes()),
    }
}
