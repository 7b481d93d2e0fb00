// SPDX-License-Identifier: Apache-2.0
//! Binding the server a [`ServerBuilder`] describes, running it, and the running server's
//! handle and stopper. The configuration and what the workers share live in
//! [`crate::engine`], below this.

mod builder;

pub use builder::ServerBuilder;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::engine::{self, Shared, TlsShared, Worker};
pub use crate::engine::{Config, EngineKind, EventLog};
use crate::error::Error;
use crate::health::{Readiness, ReadyState};
use crate::limit::ClientKey;
use crate::router::Router;

impl ServerBuilder {
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
        if matches!(config.rate_limit.key, ClientKey::Middleware) && !self.router.keyed_limits_held() {
            return Err(Error::config(
                "rate limit key Middleware needs a front end whose middleware admits the calls \
                 (Router::keyed_limits); a Rust server keys its own with ClientKey::Custom",
            ));
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
            bound: Bound {
                readiness: Arc::clone(router.readiness()),
                shared,
                local_addr,
            },
            router,
            workers,
            engine: engine.kind,
            engine_fallback: engine.fallback,
        };
        if !server.bound.shared.config.quiet {
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
    bound: Bound,
    /// Frozen and handed to the workers when serving starts.
    router: Router,
    workers: Vec<Worker>,
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
        self.bound.local_addr
    }

    /// The address TLS listens on: the server's own, or its separate TLS port.
    #[must_use]
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.bound.tls_addr()
    }

    /// The Unix domain socket the server also listens on, when configured.
    #[must_use]
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.bound.unix_socket()
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
        let tls = self.bound.shared.tls.as_ref();
        let scheme = if tls.is_some_and(|tls| tls.separate.is_none()) {
            "https"
        } else {
            "http"
        };
        let unix = self.bound.unix_suffix();
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
            self.bound.local_addr,
            self.engine.name(),
            if threads == 1 { "" } else { "s" },
        )
    }

    /// A handle that stops the server from any thread, also while [`Server::run`] blocks.
    #[must_use]
    pub fn stopper(&self) -> Stopper {
        self.bound.stopper()
    }

    /// The readiness `GET /readyz` reports: mark the server draining, add a check.
    #[must_use]
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.bound.readiness
    }

    /// The configuration in force (thread count resolved).
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.bound.shared.config
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
        let (shared, local_addr) = (&self.bound.shared, self.bound.local_addr);
        let speaks_tls = shared.tls.as_ref().is_some_and(|tls| tls.separate.is_none());
        self.router.publish(local_addr, speaks_tls);
        self.router.start_metrics(&shared.config.metrics);
        self.router.start_limits(&shared.config.rate_limit);
        self.router.set_request_log(shared.config.request_log.clone());
        let router = Arc::new(std::mem::take(&mut self.router));
        if let Some(metrics) = router.metrics() {
            metrics.set_engine(self.engine.name(), self.workers.len());
        }
        if log::log_enabled!(target: crate::logs::SERVER_TARGET, log::Level::Info) {
            let (threads, procedures) = (self.workers.len(), router.names().count());
            log::info!(
                target: crate::logs::SERVER_TARGET,
                "serving on {local_addr}{} (engine {}, {threads} thread{}, {procedures} procedure{})",
                self.bound.unix_suffix(),
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
        (self.bound.stopper(), self.workers)
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
            bound: self.bound,
            threads,
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
    bound: Bound,
    threads: Vec<JoinHandle<()>>,
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
        self.bound.local_addr
    }

    /// The port the server listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.bound.local_addr.port()
    }

    /// The address TLS listens on: the server's own, or its separate TLS port.
    #[must_use]
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.bound.tls_addr()
    }

    /// The Unix domain socket the server also listens on, when configured.
    #[must_use]
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.bound.unix_socket()
    }

    /// Connections open now.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.bound.shared.connections.load(Ordering::Relaxed)
    }

    /// A handle that can stop the server from another thread.
    #[must_use]
    pub fn stopper(&self) -> Stopper {
        self.bound.stopper()
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
        log::log!(target: crate::logs::SERVER_TARGET, level, "stopped serving on {}: {counts}", self.bound.local_addr);
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

/// What a bound server and its running handle both hold: what the workers share, the
/// readiness, and the address.
struct Bound {
    shared: Arc<Shared>,
    readiness: Arc<Readiness>,
    local_addr: SocketAddr,
}

impl Bound {
    fn tls_addr(&self) -> Option<SocketAddr> {
        let tls = self.shared.tls.as_ref()?;
        Some(match &tls.separate {
            Some(bound) => *bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            None => self.local_addr,
        })
    }

    fn unix_socket(&self) -> Option<&std::path::Path> {
        self.shared.config.unix_socket.as_deref()
    }

    /// ` and unix:PATH` when the server also listens on a Unix socket, for the lines
    /// that say where it serves.
    fn unix_suffix(&self) -> String {
        self.unix_socket()
            .map_or(String::new(), |path| format!(" and unix:{}", path.display()))
    }

    fn stopper(&self) -> Stopper {
        Stopper {
            shared: Arc::clone(&self.shared),
            readiness: Arc::clone(&self.readiness),
        }
    }
}
