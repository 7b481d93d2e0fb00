// SPDX-License-Identifier: Apache-2.0
//! The builder users start from, binding, and the running server's handle. The
//! configuration and what the workers share live in [`crate::engine`], below this.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::batch::{BatchOptions, Batcher};
use crate::engine::{self, Shared, TlsShared, Worker};
pub use crate::engine::{Config, EngineKind, EventLog};

use crate::discover::mcp::McpSettings;
use crate::discover::{Discovery, MethodDoc};
use crate::error::Error;
use crate::health::{HealthPaths, Readiness, ReadyState};
use crate::http1::cors::Cors;
use crate::jsonrpc::RpcError;
use crate::limit::{ClientKey, IpNet, Rate};
use crate::router::{Call, Handler, Reply, Router};
use crate::tls::TlsConfig;

/// Builds a [`Server`]: `Server::builder().port(8545).procedure("sum", ...).bind()`.
#[must_use]
pub struct ServerBuilder {
    /// Boxed: the builder moves through every chained call.
    config: Box<Config>,
    pub(crate) router: Router,
}

impl ServerBuilder {
    /// Replace the whole configuration.
    pub fn config(mut self, config: Config) -> Self {
        *self.config = config;
        self
    }

    /// Address to listen on (`127.0.0.1`, `::1`, `0.0.0.0`, a host name).
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.config.host = host.into();
        self
    }

    /// Port; `0` picks a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.config.port = port;
        self
    }

    /// Worker threads; `0` means one per core.
    pub fn threads(mut self, threads: usize) -> Self {
        self.config.threads = threads;
        self
    }

    /// Engine choice.
    pub fn engine(mut self, engine: EngineKind) -> Self {
        self.config.engine = engine;
        self
    }

    /// Largest request body in bytes.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.config.limits.max_body_bytes = bytes;
        self
    }

    /// Largest HTTP request head in bytes.
    pub fn max_head_bytes(mut self, bytes: usize) -> Self {
        self.config.limits.max_head_bytes = bytes;
        self
    }

    /// Most requests in one batch.
    pub fn max_batch(mut self, requests: usize) -> Self {
        self.config.limits.max_batch = requests;
        self
    }

    /// Exchanges (requests, batches or WebSocket messages) served on one connection
    /// before it is closed cleanly; see [`Limits::max_exchanges_per_connection`].
    pub fn max_exchanges_per_connection(mut self, exchanges: u32) -> Self {
        self.config.limits.max_exchanges_per_connection = Some(exchanges);
        self
    }

    /// Let pages from other origins call the server (CORS, off by default): preflight
    /// `OPTIONS` requests are answered and replies carry `Access-Control-Allow-Origin`.
    pub fn cors(mut self, cors: Cors) -> Self {
        self.config.limits.cors = Some(cors);
        self
    }

    /// Over TLS, tell browsers to use HTTPS only for `max_age` (HSTS, RFC 6797: every HTTP
    /// reply says `Strict-Transport-Security: max-age=<seconds>`); off by default, as a
    /// promise about the whole host that its operator makes.
    pub fn hsts(mut self, max_age: std::time::Duration) -> Self {
        self.config.limits.hsts_max_age = Some(max_age.as_secs());
        self
    }

    /// Most connections open at once.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.config.max_connections = connections;
        self
    }

    /// Most calls awaiting a deferred reply per worker thread before new ones are refused
    /// (see [`Config::max_pending_calls`]).
    pub fn max_pending_calls(mut self, calls: usize) -> Self {
        self.config.max_pending_calls = Some(calls);
        self
    }

    /// Longest time to receive a request head.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.config.header_timeout = timeout;
        self
    }

    /// Longest time without progress on a connection.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.idle_timeout = timeout;
        self
    }

    /// Grace period for in-flight requests on shutdown.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.config.shutdown_timeout = timeout;
        self
    }

    /// `uring` engine: poll the submission queue from a kernel thread (`SQPOLL`).
    pub fn sqpoll(mut self, on: bool) -> Self {
        self.config.sqpoll = on;
        self
    }

    /// Where metrics are served, or not (see [`Config::metrics`]).
    pub fn metrics(mut self, metrics: crate::metrics::MetricsConfig) -> Self {
        self.config.metrics = metrics;
        self
    }

    /// Log one line per call to `log` (see [`Config::request_log`]).
    ///
    /// ```no_run
    /// # use ucall_core::{LogFormat, RequestLog, Server};
    /// let log = RequestLog::open("requests.log", LogFormat::Json).expect("a writable file");
    /// let builder = Server::builder().request_log(log);
    /// ```
    pub fn request_log(mut self, log: crate::request_log::RequestLog) -> Self {
        self.config.request_log = Some(log);
        self
    }

    /// Where the health probes are served (see [`Config::health`]).
    pub fn health(mut self, paths: HealthPaths) -> Self {
        self.config.health = paths;
        self
    }

    /// Join other processes' listeners on the port (see [`Config::share_port`]).
    pub fn share_port(mut self, on: bool) -> Self {
        self.config.share_port = on;
        self
    }

    /// Also listen on the Unix domain socket `path`, beside the TCP port (see
    /// [`Config::unix_socket`]).
    ///
    /// ```no_run
    /// # use ucall_core::Server;
    /// let server = Server::builder().port(0).unix_socket("/run/ucall/api.sock").unix_socket_mode(0o660).bind();
    /// ```
    pub fn unix_socket(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config.unix_socket = Some(path.into());
        self
    }

    /// Permission bits of the Unix socket's file (see [`Config::unix_socket_mode`]).
    pub fn unix_socket_mode(mut self, mode: u32) -> Self {
        self.config.unix_socket_mode = Some(mode);
        self
    }

    /// Serve TLS with this certificate material (see [`TlsConfig`] for a port of its own).
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Register a procedure whose returned value is serialized as the result.
    ///
    /// ```
    /// # use ucall_core::Server;
    /// let builder = Server::builder().procedure("sum", |call| {
    ///     Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?)
    /// });
    /// ```
    pub fn procedure<F, R>(self, name: &str, procedure: F) -> Self
    where
        F: Fn(&Call<'_>) -> Result<R, RpcError> + Send + Sync + 'static,
        R: Serialize,
    {
        self.handler(name, move |call: &Call<'_>, reply: &mut Reply<'_>| {
            reply.json(&procedure(call)?)
        })
    }

    /// Register a batch procedure: callers call it one item at a time, and calls from every
    /// connection are grouped into batches (see [`crate::batch`]). `procedure` gets the
    /// batch's calls and returns one result per call (an `Err` answers that caller only),
    /// or one error for all of them.
    ///
    /// ```
    /// # use ucall_core::{BatchOptions, Server};
    /// let builder = Server::builder().batch_procedure("square", BatchOptions::default(), |calls| {
    ///     Ok(calls.iter().map(|call| call.get::<f64>(0, "x").map(|x| x * x)).collect())
    /// });
    /// ```
    pub fn batch_procedure<F, R>(self, name: &str, options: BatchOptions, procedure: F) -> Self
    where
        F: Fn(&[Call<'_>]) -> Result<Vec<Result<R, RpcError>>, RpcError> + Send + Sync + 'static,
        R: Serialize,
    {
        self.handler(name, Batcher::new(name, options, crate::batch::values(procedure)))
    }

    /// Bound the calls of the procedure `name` (registered before or after) to `timeout`,
    /// counted from each call's arrival; a caller may ask for less (`UCall-Timeout`, or
    /// the request's `"timeout"` member), never more. At the deadline the caller gets
    /// `-32000` "Deadline exceeded" (HTTP 504): at once when the procedure deferred its
    /// reply ([`Reply::defer`]; a reply that comes later is dropped, and
    /// [`crate::Deferred::is_expired`] says so to the work that would make it), or when
    /// the procedure returns for one that answers inline (its late result is dropped). A
    /// procedure that works long should defer, so that its caller hears in time.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ucall_core::Server;
    /// let builder = Server::builder()
    ///     .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
    ///     .timeout("sum", Duration::from_millis(250));
    /// ```
    pub fn timeout(mut self, name: &str, timeout: Duration) -> Self {
        self.router.set_timeout(name, timeout);
        self
    }

    /// Limit each client to `rate` calls over all procedures (see [`crate::limit`]): a call
    /// past it is refused before it runs, with HTTP 429 and `Retry-After`, or JSON-RPC
    /// error -32029 whose `data` has `retry_after_ms` and `executed: false`.
    ///
    /// ```
    /// # use ucall_core::{Server, ClientKey};
    /// let builder = Server::builder()
    ///     .rate_limit("100/s".parse().expect("a rate"))
    ///     .rate_limit_key(ClientKey::Header("x-api-key".into()))
    ///     .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
    ///     .procedure_rate_limit("sum", "10/s".parse().expect("a rate"));
    /// ```
    pub fn rate_limit(mut self, rate: Rate) -> Self {
        self.config.rate_limit.rate = Some(rate);
        self
    }

    /// Limit each client's calls of the procedure `name` (registered before or after) to
    /// `rate`, besides the server's limit ([`ServerBuilder::rate_limit`]).
    pub fn procedure_rate_limit(mut self, name: &str, rate: Rate) -> Self {
        self.router.set_rate_limit(name, rate);
        self
    }

    /// What tells clients apart for the rate limits: the peer address by default.
    pub fn rate_limit_key(mut self, key: ClientKey) -> Self {
        self.config.rate_limit.key = key;
        self
    }

    /// Proxies (addresses or networks) whose `X-Forwarded-For` says who the client is,
    /// for the rate limits.
    pub fn trusted_proxies(mut self, proxies: impl IntoIterator<Item = IpNet>) -> Self {
        self.config.rate_limit.trusted_proxies = proxies.into_iter().collect();
        self
    }

    /// Close connections past `connections` open at once from one peer IP address.
    pub fn max_connections_per_peer(mut self, connections: usize) -> Self {
        self.config.max_connections_per_peer = Some(connections);
        self
    }

    /// Register a procedure that writes its result itself through [`Reply`].
    pub fn handler(mut self, name: &str, handler: impl Handler) -> Self {
        self.router.insert(name, Arc::new(handler));
        self
    }

    /// Keep each call's peer address and request header fields for its handler
    /// ([`Call::context`]). Without it a handler still sees the transport and whether TLS
    /// carries the call, and the server copies no request head (and, on io_uring, asks
    /// the kernel for no address: connections are then accepted one per turn).
    ///
    /// ```
    /// # use ucall_core::Server;
    /// let builder = Server::builder().keep_context().procedure("whoami", |call| {
    ///     let context = call.context();
    ///     let agent = context.header("user-agent").map(|v| String::from_utf8_lossy(v).into_owned());
    ///     Ok((context.transport().as_str(), context.peer().map(|a| a.to_string()), agent))
    /// });
    /// ```
    pub fn keep_context(mut self) -> Self {
        self.router.keep_context();
        self
    }

    /// Run `hook` around every call (inside the hooks added before it): it may reject the
    /// call with an error, or run `next` and do what it likes before and after. Adding a
    /// hook keeps each call's context ([`ServerBuilder::keep_context`]).
    ///
    /// ```
    /// # use ucall_core::{Server, RpcError};
    /// let builder = Server::builder()
    ///     .hook(|call, reply, next| match call.context().header("x-api-key") {
    ///         Some(b"s3cret") => next.handle(call, reply),
    ///         _ => Err(RpcError::http(401, "an API key is required")),
    ///     })
    ///     .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?));
    /// ```
    pub fn hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Call<'_>, &mut Reply<'_>, &dyn Handler) -> Result<(), RpcError> + Send + Sync + 'static,
    {
        self.router.add_hook(Arc::new(hook));
        self
    }

    /// Open a `tracing` span around every call (cargo feature `tracing`): named `jsonrpc`,
    /// with the OpenTelemetry conventions' attributes for a JSON-RPC server and the
    /// caller's W3C trace context (`trace_id`, `parent_span_id`); the handler runs inside
    /// it, so its own spans are children. It is a hook ([`ServerBuilder::hook`]): hooks
    /// added after it run inside the span. See docs/operations.md, "Tracing".
    ///
    /// ```
    /// # use ucall_core::Server;
    /// let builder = Server::builder()
    ///     .trace_calls()
    ///     .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?));
    /// ```
    #[cfg(feature = "tracing")]
    pub fn trace_calls(mut self) -> Self {
        self.router.time_calls();
        self.router.add_hook(Arc::new(crate::spans::Spans));
        self
    }

    /// The procedures registered so far, to drive a [`crate::session::Session`] in memory
    /// with the same table a server would use.
    #[must_use]
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Resolve the address, open one listener per thread and return the bound server.
    ///
    /// # Errors
    /// When the configuration is invalid, the address cannot be bound, or the engine
    /// requested cannot run here.
    pub fn bind(self) -> Result<Server, Error> {
        let mut config = *self.config;
        // Set but empty (`UCALL_ENGINE= cmd`) counts as unset, as for most variables.
        if let Some(name) = std::env::var("UCALL_ENGINE").ok().filter(|name| !name.is_empty()) {
            config.engine = EngineKind::parse(&name)
                .ok_or_else(|| Error::config(format!("UCALL_ENGINE={name:?}: expected auto, poll or uring")))?;
        }
        if config.threads == 0 {
            config.threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        }
        if config.limits.max_batch == 0
            || config.limits.max_body_bytes == 0
            || config.limits.max_head_bytes < 64
            || config.limits.max_exchanges_per_connection == Some(0)
            || config.max_pending_calls == Some(0)
            || config.max_connections_per_peer == Some(0)
        {
            return Err(Error::config(
                "limits must be positive (and max_head_bytes at least 64)",
            ));
        }
        config.metrics.check().map_err(Error::config)?;
        if config.unix_socket_mode.is_some_and(|mode| mode > 0o7777) {
            return Err(Error::config("unix_socket_mode takes permission bits, at most 0o7777"));
        }
        if config.unix_socket.is_none() && config.unix_socket_mode.is_some() {
            return Err(Error::config("unix_socket_mode needs unix_socket, the socket's path"));
        }
        let addr = resolve(&config.host, config.port)?;
        if let Some(port) = config.tls.as_ref().and_then(|tls| tls.port) {
            if port != 0 && port == config.port {
                // Both listeners would share the port (SO_REUSEPORT), splitting clients
                // between TLS and plaintext at random.
                return Err(Error::config(format!(
                    "the TLS port {port} is the server's port: give TLS another port, or no port of its own"
                )));
            }
        }
        let tls = match &config.tls {
            None => None,
            Some(tls) => Some(TlsShared {
                config: {
                    let (tls, warnings) = crate::tls::server_config(tls)?;
                    for warning in warnings {
                        config.events.report("certificate warning", &warning);
                    }
                    tls
                },
                separate: tls
                    .port
                    .map(|port| std::sync::Mutex::new(SocketAddr::new(addr.ip(), port))),
            }),
        };
        engine::raise_fd_limit(config.max_connections);
        let engine = engine::select(config.engine)?;
        let shared = Arc::new(Shared::new(config, tls));
        let (workers, local_addr) = engine::bind_workers(&engine, &shared, addr)?;
        log::debug!(target: crate::logs::SERVER_TARGET, "engine {}", engine.describe(shared.config.sqpoll));
        let mut router = self.router;
        router.set_health_paths(shared.config.health.clone());
        let server = Server {
            readiness: Arc::clone(router.readiness()),
            shared,
            router,
            workers,
            local_addr,
            engine: engine.kind,
            engine_fallback: engine.fallback,
        };
        if !server.shared.config.quiet {
            eprintln!("ucall: {}", server.listening_line());
        }
        Ok(server)
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, Error> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::bind(format!("cannot resolve {host:?}"), e))?
        .next()
        .ok_or_else(|| Error::config(format!("{host:?} resolves to no address")))
}

/// A bound server, ready to [`run`](Server::run) or [`spawn`](Server::spawn).
pub struct Server {
    shared: Arc<Shared>,
    /// Frozen and handed to the workers when serving starts.
    router: Router,
    readiness: Arc<Readiness>,
    workers: Vec<Worker>,
    local_addr: SocketAddr,
    engine: EngineKind,
    engine_fallback: Option<String>,
}

impl Server {
    /// Start configuring a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            config: Box::default(),
            router: Router::new(),
        }
    }

    /// The address the server listens on (with the real port when `0` was asked).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address TLS listens on: the server's own, or its separate TLS port.
    #[must_use]
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        tls_addr(&self.shared, self.local_addr)
    }

    /// The Unix domain socket the server also listens on, when configured.
    #[must_use]
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.shared.config.unix_socket.as_deref()
    }

    /// The engine in use (never `Auto`).
    #[must_use]
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// Why `auto` serves with `poll` where `uring` was wanted, e.g. `io_uring is
    /// forbidden here (EPERM), likely by a seccomp filter`; `None` when it did not fall back.
    #[must_use]
    pub fn engine_fallback(&self) -> Option<&str> {
        self.engine_fallback.as_deref()
    }

    /// The start-up line every front end prints on stderr after `ucall: ` (docs/operations.md):
    /// `listening on http://127.0.0.1:8545 (engine uring, 2 threads)`, with `https` where the
    /// port speaks TLS, ` and unix:PATH`, `, TLS on port P` and why `auto` fell back.
    #[must_use]
    pub fn listening_line(&self) -> String {
        let tls = self.shared.tls.as_ref();
        let scheme = if tls.is_some_and(|tls| tls.separate.is_none()) {
            "https"
        } else {
            "http"
        };
        let unix = self
            .unix_socket()
            .map_or(String::new(), |path| format!(" and unix:{}", path.display()));
        let tls_port = match (tls.and(self.tls_addr()), tls.is_some_and(|tls| tls.separate.is_some())) {
            (Some(addr), true) => format!(", TLS on port {}", addr.port()),
            _ => String::new(),
        };
        let threads = self.workers.len();
        let fallback = self
            .engine_fallback()
            .map_or(String::new(), |why| format!("; io_uring unavailable: {why}"));
        format!(
            "listening on {scheme}://{}{unix} (engine {}, {threads} thread{}{tls_port}{fallback})",
            self.local_addr,
            self.engine.name(),
            if threads == 1 { "" } else { "s" },
        )
    }

    /// A handle that stops the server from any thread, also while [`Server::run`] blocks.
    #[must_use]
    pub fn stopper(&self) -> Stopper {
        Stopper {
            shared: Arc::clone(&self.shared),
            readiness: Arc::clone(&self.readiness),
        }
    }

    /// The readiness `GET /readyz` reports: mark the server draining, add a check.
    #[must_use]
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// The configuration in force (thread count resolved).
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The procedures, still open to additions: the socket is bound, but nothing is served
    /// until [`Server::run`], [`Server::spawn`] or [`Server::into_workers`] freezes the
    /// table. Front ends whose users register procedures after binding (the C API's
    /// `ucall_add_procedure` after `ucall_init`) add them here.
    pub fn router_mut(&mut self) -> &mut Router {
        &mut self.router
    }

    /// Freeze the procedures and give every worker the table.
    fn hand_out_router(&mut self) {
        let speaks_tls = self.shared.tls.as_ref().is_some_and(|tls| tls.separate.is_none());
        self.router.publish(self.local_addr, speaks_tls);
        self.router.start_metrics(&self.shared.config.metrics);
        self.router.start_limits(&self.shared.config.rate_limit);
        self.router.set_request_log(self.shared.config.request_log.clone());
        let router = Arc::new(std::mem::take(&mut self.router));
        if let Some(metrics) = router.metrics() {
            metrics.set_engine(self.engine.name(), self.workers.len());
        }
        if log::log_enabled!(target: crate::logs::SERVER_TARGET, log::Level::Info) {
            let (threads, procedures) = (self.workers.len(), router.names().count());
            let unix = (self.shared.config.unix_socket.as_ref())
                .map_or(String::new(), |path| format!(" and unix:{}", path.display()));
            log::info!(
                target: crate::logs::SERVER_TARGET,
                "serving on {}{unix} (engine {}, {threads} thread{}, {procedures} procedure{})",
                self.local_addr,
                self.engine.name(),
                if threads == 1 { "" } else { "s" },
                if procedures == 1 { "" } else { "s" },
            );
        }
        for worker in &mut self.workers {
            worker.set_router(Arc::clone(&router));
        }
    }

    /// Hand the workers to the caller, who drives each from a thread of its own with
    /// [`Worker::turn`] or [`Worker::run`]; the [`Stopper`] ends them all.
    #[must_use]
    pub fn into_workers(mut self) -> (Stopper, Vec<Worker>) {
        self.hand_out_router();
        (
            Stopper {
                shared: self.shared,
                readiness: self.readiness,
            },
            self.workers,
        )
    }

    /// Serve on background threads; the handle stops them.
    ///
    /// # Errors
    /// When a worker thread cannot be spawned.
    pub fn spawn(mut self) -> Result<ServerHandle, Error> {
        self.hand_out_router();
        let mut threads = Vec::with_capacity(self.workers.len());
        for (index, worker) in self.workers.into_iter().enumerate() {
            let thread = std::thread::Builder::new()
                .name(format!("ucall-worker-{index}"))
                .spawn(move || worker.run())
                .map_err(|e| Error::io("cannot spawn a worker thread", e))?;
            threads.push(thread);
        }
        Ok(ServerHandle {
            readiness: self.readiness,
            shared: self.shared,
            threads,
            local_addr: self.local_addr,
        })
    }

    /// Serve until [`ServerHandle::stop`] is called from another handle or SIGINT/SIGTERM
    /// arrives, then shut down gracefully: stop accepting, finish in-flight calls, flush,
    /// close.
    ///
    /// # Errors
    /// When the signal handlers or worker threads cannot be set up.
    pub fn run(self) -> Result<(), Error> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .map_err(|e| Error::io("cannot install signal handlers", e))?;
        let signal_handle = signals.handle();
        let handle = self.spawn()?;
        let stopper = handle.stopper();
        let watcher = std::thread::spawn(move || {
            if signals.forever().next().is_some() {
                stopper.stop();
            }
        });
        handle.join();
        signal_handle.close();
        let _ = watcher.join();
        Ok(())
    }
}

/// A running server. Dropping it stops the server and waits for its threads.
pub struct ServerHandle {
    shared: Arc<Shared>,
    readiness: Arc<Readiness>,
    threads: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
}

/// A cheap, cloneable way to ask a server to stop, usable from any thread.
#[derive(Clone)]
pub struct Stopper {
    shared: Arc<Shared>,
    readiness: Arc<Readiness>,
}

impl Stopper {
    /// Ask the server to shut down gracefully; returns at once.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        engine::wake_all(&self.shared);
    }

    /// Whether [`Stopper::stop`] (or a signal) has asked the server to shut down.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::SeqCst)
    }

    /// What `GET /readyz` answers now (the one readiness rule, [`Readiness::state`]).
    #[must_use]
    pub fn ready_state(&self) -> ReadyState {
        self.readiness.state(self.is_stopping())
    }

    /// The readiness `GET /readyz` reports: mark the server draining, add a check.
    #[must_use]
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// What the graceful stop did so far: calls answered later (deferred replies) that
    /// came while the server stopped, and those left unanswered when their worker closed
    /// its connections (at `shutdown_timeout`, or with their callers gone).
    #[must_use]
    pub fn drain_counts(&self) -> DrainCounts {
        DrainCounts {
            answered: self.shared.drain.answered.load(Ordering::Relaxed),
            unanswered: self.shared.drain.cut_off.load(Ordering::Relaxed),
        }
    }
}

/// What a graceful stop did ([`Stopper::drain_counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainCounts {
    /// Deferred calls whose replies came while the server stopped.
    pub answered: usize,
    /// Deferred calls still unanswered when their connections were closed.
    pub unanswered: usize,
}

impl std::fmt::Display for DrainCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} call(s) answered during the drain, {} left unanswered",
            self.answered, self.unanswered
        )
    }
}

impl ServerHandle {
    /// The address the server listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The port the server listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    /// The address TLS listens on, if TLS is configured.
    #[must_use]
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        tls_addr(&self.shared, self.local_addr)
    }

    /// The Unix domain socket the server also listens on, when configured.
    #[must_use]
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.shared.config.unix_socket.as_deref()
    }

    /// Connections open now.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// A handle that can stop the server from another thread.
    #[must_use]
    pub fn stopper(&self) -> Stopper {
        Stopper {
            shared: Arc::clone(&self.shared),
            readiness: Arc::clone(&self.readiness),
        }
    }

    /// Ask the server to shut down gracefully; returns at once.
    pub fn stop(&self) {
        self.stopper().stop();
    }

    /// Wait until every worker has finished.
    pub fn join(mut self) {
        self.join_threads();
    }

    fn join_threads(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        let counts = self.stopper().drain_counts();
        // Calls cut off are the operator's business: said above info.
        let level = if counts.unanswered > 0 {
            log::Level::Warn
        } else {
            log::Level::Info
        };
        log::log!(target: crate::logs::SERVER_TARGET, level, "stopped serving on {}: {counts}", self.local_addr);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
            self.join_threads();
        }
    }
}

fn tls_addr(shared: &Shared, local_addr: SocketAddr) -> Option<SocketAddr> {
    let tls = shared.tls.as_ref()?;
    Some(match &tls.separate {
        Some(bound) => *bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        None => local_addr,
    })
}

/// Self-description (see [`crate::discover`]).
impl ServerBuilder {
    /// Register a procedure (as [`ServerBuilder::procedure`]) with its description.
    ///
    /// ```
    /// use ucall_core::{MethodDoc, Server};
    /// let builder = Server::builder().described(
    ///     MethodDoc::new("sum").param::<i64>("a").param::<i64>("b").result::<i64>(),
    ///     |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?),
    /// );
    /// ```
    pub fn described<F, R>(mut self, doc: MethodDoc, procedure: F) -> Self
    where
        F: Fn(&Call<'_>) -> Result<R, RpcError> + Send + Sync + 'static,
        R: Serialize,
    {
        let name = doc.name.clone();
        self.router.describe(doc);
        self.procedure(&name, procedure)
    }

    /// Describe a procedure registered under `doc.name` (before or after).
    pub fn describe(mut self, doc: MethodDoc) -> Self {
        self.router.describe(doc);
        self
    }

    /// Where and whether the server describes itself ([`Discovery::off`] for not at all).
    pub fn discovery(mut self, discovery: Discovery) -> Self {
        self.router.set_discovery(discovery);
        self
    }

    /// Serve the procedures as Model Context Protocol tools at `settings.path` (`/mcp`
    /// by default), beside the JSON-RPC endpoint on the same port (docs/mcp.md).
    ///
    /// ```
    /// use ucall_core::{McpSettings, Server};
    /// let builder = Server::builder().mcp(McpSettings::default());
    /// ```
    pub fn mcp(mut self, settings: McpSettings) -> Self {
        self.router.set_mcp(Some(settings));
        self
    }
}
