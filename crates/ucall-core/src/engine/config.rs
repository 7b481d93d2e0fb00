// SPDX-License-Identifier: Apache-2.0
//! What a server can be told: the engine to use, the limits, the time-outs, TLS, and
//! where the engines report what they cannot return as an error.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::health::HealthPaths;
use crate::limit::RateLimit;
use crate::metrics::MetricsConfig;
use crate::request_log::RequestLog;
use crate::session::Limits;
use crate::tls::TlsConfig;

/// Which engine moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineKind {
    /// The best engine that works here (overridden by `UCALL_ENGINE=poll|uring|auto`).
    #[default]
    Auto,
    /// epoll (Linux) or kqueue (macOS, BSD) through mio.
    Poll,
    /// io_uring (Linux 5.19+).
    Uring,
}

impl EngineKind {
    /// Parse `auto`, `poll` or `uring`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(EngineKind::Auto),
            "poll" | "epoll" | "posix" => Some(EngineKind::Poll),
            "uring" | "io_uring" => Some(EngineKind::Uring),
            _ => None,
        }
    }

    /// The engine's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Auto => "auto",
            EngineKind::Poll => "poll",
            EngineKind::Uring => "uring",
        }
    }
}

/// Everything a server can be told. Each limit has a safe default.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; a host name is resolved (first address wins). Default `127.0.0.1`.
    pub host: String,
    /// Port; `0` picks a free one (see [`crate::Server::local_addr`]). Default `8545`.
    pub port: u16,
    /// Worker threads, each with its own listener; `0` means one per core.
    pub threads: usize,
    /// Engine choice.
    pub engine: EngineKind,
    /// Request size and batch limits.
    pub limits: Limits,
    /// Most connections open at once, over all threads; more are closed on accept.
    pub max_connections: usize,
    /// Most connections open at once from one peer IP address; more are closed on accept
    /// (counted in `/metrics` as refused, `reason="max_connections_per_peer"`). `None`
    /// (default): no cap beyond `max_connections`. Unix socket connections are not counted.
    pub max_connections_per_peer: Option<usize>,
    /// Calls each client may make (see [`crate::limit`]): refused past it, before they
    /// run, with HTTP 429 and `Retry-After`, or JSON-RPC error -32029 with
    /// `data.retry_after_ms` and `data.executed: false`. Default: no limit.
    pub rate_limit: RateLimit,
    /// Most calls awaiting a deferred reply (Python procedures, `Reply::defer`) per worker
    /// thread; a call past it is answered at once with `-32000`, HTTP 503 and
    /// `data.executed: false`, safe to retry. `None` (default): no refusal, and past
    /// 16,384 such calls the worker reads no new requests until some complete.
    pub max_pending_calls: Option<usize>,
    /// Longest time to receive a request head, from its first byte (slow-header defence).
    pub header_timeout: Duration,
    /// Longest time a connection may sit without progress (idle keep-alive, stalled body,
    /// unread replies).
    pub idle_timeout: Duration,
    /// On shutdown, how long in-flight requests may take before connections are cut.
    pub shutdown_timeout: Duration,
    /// TLS: certificate material, and whether it takes the port or a port of its own.
    pub tls: Option<TlsConfig>,
    /// Also listen on this Unix domain socket, beside the TCP port: HTTP, raw TCP and
    /// WebSocket are served over it as over the port, in plaintext (TLS stays on TCP).
    /// A socket file left by a server that died is replaced; a path where a server
    /// answers, or that is not a socket, is refused. The file is removed at stop. Calls
    /// over it have no peer address ([`crate::Context::peer`] is `None`). `None` (default): none.
    pub unix_socket: Option<PathBuf>,
    /// Permission bits of the Unix socket's file (`0o660`: owner and group may connect);
    /// `None` (default): as the process's umask leaves them.
    pub unix_socket_mode: Option<u32>,
    /// `uring` engine only: a kernel thread polls each ring's submission queue
    /// (`IORING_SETUP_SQPOLL`), saving the submit system call at the cost of a busy CPU
    /// while traffic flows (it sleeps after a second without). Off by default.
    pub sqpoll: bool,
    /// Do not log the start-up line (the engine in force) on stderr. Errors that stop a
    /// worker are still reported, through `events`.
    pub quiet: bool,
    /// Join the listeners that other processes of this user keep on the port
    /// (`SO_REUSEPORT`) instead of refusing a port in use: worker processes of one server
    /// share its port this way, and the kernel spreads connections between them. Off by default.
    pub share_port: bool,
    /// Where the health probes are served (`/healthz`, `/readyz`), or not.
    pub health: HealthPaths,
    /// Where `GET /metrics` (Prometheus text format) is served, or not, and its latency buckets.
    pub metrics: MetricsConfig,
    /// The request log: one line per call (see [`crate::request_log`]). `None` (the
    /// default): off, at the cost of one branch per call.
    pub request_log: Option<RequestLog>,
    /// Where the engines report what they cannot return as an error: a failed accept, a
    /// worker that stops. Default: a line on stderr.
    pub events: EventLog,
}

/// Receives the events the engines cannot return as an error: `(event, error)`, with
/// `event` one of `"accept failed"` (at most one a second per server), `"worker stopped"`,
/// `"buffers leaked"` and `"certificate warning"` (at start: the TLS certificate is X.509 v1,
/// expired or not valid yet, and is served all the same).
///
/// The default sends each event to the `log` facade (target `ucall`; `accept failed` and
/// `worker stopped` at error level, the others at warn) when the host installed a logger,
/// else writes `ucall: <event>: <error>` to stderr; a front end with a log of its own (the
/// C API, which must not write to stderr) passes [`EventLog::new`].
#[derive(Clone, Default)]
pub struct EventLog(Option<Arc<EventSink>>);

/// What [`EventLog::new`] takes: `(event, error)`.
type EventSink = dyn Fn(&str, &str) + Send + Sync;

impl EventLog {
    /// Send every event to `sink` instead of stderr.
    pub fn new(sink: impl Fn(&str, &str) + Send + Sync + 'static) -> Self {
        EventLog(Some(Arc::new(sink)))
    }

    pub(crate) fn report(&self, event: &str, error: &str) {
        match &self.0 {
            Some(sink) => sink(event, error),
            None if log::max_level() != log::LevelFilter::Off => {
                log::log!(target: crate::logs::TARGET, crate::logs::event_level(event), "{event}: {error}");
            }
            None => eprintln!("ucall: {event}: {error}"),
        }
    }
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "EventLog(custom)"
        } else {
            "EventLog(stderr)"
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8545,
            threads: 0,
            engine: EngineKind::Auto,
            limits: Limits::default(),
            max_connections: 10_000,
            max_connections_per_peer: None,
            rate_limit: RateLimit::default(),
            max_pending_calls: None,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(5),
            tls: None,
            unix_socket: None,
            unix_socket_mode: None,
            sqpoll: false,
            quiet: false,
            share_port: false,
            health: HealthPaths::default(),
            metrics: MetricsConfig::default(),
            request_log: None,
            events: EventLog::default(),
        }
    }
}
