// SPDX-License-Identifier: Apache-2.0
//! What users configure before binding: the server's settings, its procedures and their
//! descriptions ([`ServerBuilder`]). Binding it is [`ServerBuilder::bind`], beside the
//! server it makes.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{Config, EngineKind};
use crate::batch::{BatchOptions, Batcher};
use crate::discover::mcp::McpSettings;
use crate::discover::{Discovery, MethodDoc};
use crate::health::HealthPaths;
use crate::http1::cors::Cors;
use crate::jsonrpc::RpcError;
use crate::limit::{ClientKey, IpNet, Rate};
use crate::router::{Call, Handler, Reply, Router};
use crate::tls::TlsConfig;

/// Builds a [`Server`]: `Server::builder().port(8545).procedure("sum", ...).bind()`.
#[must_use]
pub struct ServerBuilder {
    /// Boxed: the builder moves through every chained call.
    pub(super) config: Box<Config>,
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
    pub fn trace_calls(self) -> Self {
        let mut builder = self.time_calls();
        builder.router.add_hook(Arc::new(crate::spans::Spans));
        builder
    }

    /// Timestamp each request as it is read ([`crate::Context::received`]), for spans made
    /// elsewhere (the Python front end's OpenTelemetry spans) that report the time a call
    /// spent queued. [`ServerBuilder::trace_calls`] asks for it; a server that does not
    /// reads no clock for it.
    pub fn time_calls(mut self) -> Self {
        self.router.time_calls();
        self
    }

    /// The procedures registered so far, to drive a [`crate::session::Session`] in memory
    /// with the same table a server would use.
    #[must_use]
    pub fn router(&self) -> &Router {
        &self.router
    }
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
