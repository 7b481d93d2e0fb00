// SPDX-License-Identifier: Apache-2.0
//! `ucall_config_t`: the published configuration struct, plus fields appended at its end.

use std::ffi::{c_char, CStr};
use std::os::fd::BorrowedFd;
use std::time::Duration;

use ucall_core::{ClientKey, Config, Cors, Discovery, EngineKind, EventLog, McpSettings, RequestLog, TlsConfig};

use crate::ffi::{array_arg, c_str_arg};
use crate::log::{LogFormat, Logger};
use crate::tls::Chain;

/// Configuration for `ucall_init()`. Zero (or NULL) in a field means "the default";
/// `ucall_init()` writes the values in force back into the struct, on success and on
/// failure alike (as far as it got).
///
/// Start from a zeroed struct (`ucall_config_t config = {0};` in C, `ucall_config_t
/// config{};` in C++) so that fields a program does not know about keep their defaults.
///
/// The first fields, up to `ssl_certificates_count`, are UCall's published layout,
/// unchanged; the fields after them are additions (docs/c-api.md, "Configuration").
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct ucall_config_t {
    /// Address to listen on: an IP address or a host name (the first address it resolves
    /// to). Default `"127.0.0.1"`: loopback only; pass `"0.0.0.0"` or `"::"` to listen on
    /// every interface. The string is read during `ucall_init()` only.
    pub hostname: *const c_char,
    /// TCP port. Default 8545. See `ephemeral_port` to let the system pick a free one.
    pub port: u16,
    /// Submission queue depth of the io_uring engine. Default 4096. The poll engine does
    /// not use it; it is accepted and written back for programs that set it.
    pub queue_depth: u16,
    /// Most procedures `ucall_add_procedure()` accepts. Default 128.
    pub max_callbacks: u16,
    /// Serving threads: each of `0 .. max_threads - 1` must be driven by exactly one
    /// thread calling `ucall_take_calls(server, i)`, since the kernel spreads connections
    /// over all of them. Default 1.
    pub max_threads: u16,
    /// Where the server writes its log lines (start, serving, stop, misuse, failed
    /// accepts, a worker that stops, and the core's records as the event `log` with a
    /// `level` and a `message`: limits hit, TLS failures, a failing batch procedure).
    /// 0 or a negative value: no logs (written back as -1). Nothing ever goes to stderr.
    /// The descriptor stays the caller's: it is never closed.
    pub logs_file_descriptor: i32,
    /// `"human"` (default) for lines of text or `"json"` for one JSON object per line.
    pub logs_format: *const c_char,
    /// Most requests in one JSON-RPC batch. Default 1024.
    pub max_batch_size: u16,
    /// Most connections open at once, over all threads; more are closed on accept.
    /// Default 10000.
    pub max_concurrent_connections: u32,
    /// Longest time in microseconds a connection may sit without progress (idle
    /// keep-alive, stalled body, unread replies) before it is closed. Default 60 s.
    pub max_lifetime_micro_seconds: u32,
    /// Exchanges served on one connection before it is closed cleanly: each HTTP request,
    /// raw TCP JSON text or WebSocket message counts once (a batch is one, a notification
    /// too). The last HTTP reply says `Connection: close`, a WebSocket gets a Close frame
    /// with 1000 after its last reply, and the connection closes once its replies are
    /// flushed. 0 (default) or `UINT32_MAX`: no limit, written back as `UINT32_MAX`.
    pub max_lifetime_exchanges: u32,
    /// Serve TLS (1.2 and 1.3, ALPN `http/1.1`) on `port`, or on `ssl_port` beside a
    /// plaintext `port`; HTTP, raw TCP and WebSocket all run over it. Needs
    /// `ssl_private_key_path` and at least one file in `ssl_certificates_paths`. A file
    /// that is missing or unusable fails `ucall_init()` naming it (`ucall_last_error()`).
    /// TLS runs on either engine.
    pub use_ssl: bool,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1) of the first certificate.
    /// Read only when `use_ssl` is true.
    pub ssl_private_key_path: *const c_char,
    /// PEM files whose certificates, in order, make the chain sent to clients: the
    /// server's certificate first, then the intermediates (one file may hold them all).
    /// Read only when `use_ssl` is true, during `ucall_init()`.
    pub ssl_certificates_paths: *mut *const c_char,
    /// Number of entries in `ssl_certificates_paths`.
    pub ssl_certificates_count: usize,

    // ----- additions, after the published layout -----
    /// Engine: `"auto"` (default: the best that runs here), `"poll"` (epoll/kqueue) or
    /// `"uring"` (io_uring). The environment variable `UCALL_ENGINE` overrides it. Written
    /// back as the engine in force, a static string.
    pub engine: *const c_char,
    /// When true, `port` is ignored and the system picks a free port, which is written
    /// back into `port` (tests, and servers that announce their port).
    pub ephemeral_port: bool,
    /// Largest request body (HTTP) or JSON text (raw TCP) in bytes. Default 64 MiB.
    pub max_body_bytes: usize,
    /// Largest HTTP request head in bytes (at least 64). Default 16 KiB.
    pub max_header_bytes: usize,
    /// Longest time in microseconds to receive a request head, from its first byte.
    /// Default 10 s.
    pub header_timeout_micro_seconds: u32,
    /// On stop, how long in microseconds in-flight requests may take before connections
    /// are cut. Default 5 s.
    pub shutdown_timeout_micro_seconds: u32,
    /// Mutual TLS: a PEM bundle of the certificate authorities that client certificates
    /// must chain to; every client must then present one. NULL (default): no client
    /// certificate is asked for. Read only when `use_ssl` is true.
    pub ssl_client_ca_path: *const c_char,
    /// TLS on a port of its own: `port` stays plaintext and TLS listens on this port too.
    /// 0 (default): TLS on `port` itself. Written back as the TLS port in force when it is
    /// separate (see `ssl_ephemeral_port`), left 0 otherwise. Read only when `use_ssl` is true.
    pub ssl_port: u16,
    /// When true (with `use_ssl`), TLS gets a port of its own that the system picks,
    /// written back into `ssl_port`.
    pub ssl_ephemeral_port: bool,
    /// How the server describes itself, as JSON: `{"title": "...", "version": "...",
    /// "description": "...", "rpc_discover": true, "openrpc_path": "/openrpc.json",
    /// "openapi_path": "/openapi.json", "docs_path": "/docs"}`, each member optional and a
    /// path `null` to turn it off. NULL (default): all of it on, with those paths.
    pub discovery: *const c_char,
    /// CORS, so that pages from other origins can call the server from a browser: the
    /// allowed origins, comma-separated, as browsers send them
    /// (`"https://app.example.com,http://localhost:3000"`), or `"*"` for any. NULL
    /// (default): CORS is off, `OPTIONS` requests get 405. Read during `ucall_init()` only.
    pub cors_allowed_origins: *const c_char,
    /// CORS: the methods a preflight allows, comma-separated, or `"*"`. NULL: `"GET, POST"`.
    pub cors_allowed_methods: *const c_char,
    /// CORS: the request headers a preflight allows, comma-separated, or `"*"` (which does
    /// not cover `Authorization`). NULL: `"Content-Type"`.
    pub cors_allowed_headers: *const c_char,
    /// CORS: seconds a browser may cache a preflight's answer. 0 (default): not said.
    pub cors_max_age_seconds: u32,
    /// Path of the liveness probe (`GET` answers 200 `{"status":"alive"}`). NULL (default):
    /// `"/healthz"`; `""`: off.
    pub healthz_path: *const c_char,
    /// Path of the readiness probe (`GET` answers 200 `{"status":"serving"}`, or 503 while
    /// the server stops). NULL (default): `"/readyz"`; `""`: off.
    pub readyz_path: *const c_char,
    /// When true, the readiness probe answers 404 rather than 503 when not ready (for
    /// HAProxy's `http-check disable-on-404`).
    pub readyz_not_found: bool,
    /// Path of the Prometheus metrics page (`GET` answers the text format: calls by method
    /// and outcome, latency, connections and bytes by transport). NULL (default):
    /// `"/metrics"`; `""`: off, and nothing is counted.
    pub metrics_path: *const c_char,
    /// The request log: when true, every call also gets a line on `logs_file_descriptor`,
    /// in `logs_format`: `"human"` writes logfmt (`time=2026-11-27T10:01:02.345Z
    /// peer=127.0.0.1:40312 transport=http method="sum" id=1 code=0 status=200
    /// duration_us=12 bytes_in=45 bytes_out=38`), `"json"` one object per line with the
    /// same keys (docs/operations.md, "Request log"). Each serving thread writes its
    /// lines once per turn, in whole lines. False (default): off, at the cost of one
    /// branch per call. Written back as false when there is no `logs_file_descriptor`.
    pub log_requests: bool,
    /// Upper bounds in seconds of the latency histogram's buckets: finite, above 0 and
    /// ascending; `+Inf` is implied. NULL (default): gRPC's, 100 µs to 10 s. Read during
    /// `ucall_init()` only.
    pub metrics_buckets: *const f64,
    /// How many bounds `metrics_buckets` holds.
    pub metrics_buckets_count: usize,
    /// Also listen on this Unix domain socket (a file path, at most 107 bytes), beside
    /// `port`: HTTP, raw TCP and WebSocket are served over it as over the port, in
    /// plaintext (TLS stays on TCP). A socket file left by a server that died is
    /// replaced; a path where a server answers, or that is not a socket, fails
    /// `ucall_init()`. The file is removed when the server stops. Calls over it have no
    /// peer address. NULL (default): none. Read during `ucall_init()` only.
    pub unix_socket_path: *const c_char,
    /// Permission bits of the Unix socket's file (`0660`: owner and group may connect).
    /// 0 (default): as the process's umask leaves them.
    pub unix_socket_mode: u32,
    /// Also serve the procedures as Model Context Protocol tools (Streamable HTTP, on
    /// the same port; docs/mcp.md), set as JSON: `{"path": "/mcp", "allowed_origins":
    /// ["https://app.example.com"], "name": "...", "version": "...", "instructions":
    /// "...", "page_size": 100}`, each member optional (`"{}"`: all defaults). NULL
    /// (default): no MCP endpoint. Read during `ucall_init()` only.
    pub mcp: *const c_char,
    /// Calls each client may make over all procedures: `"100/s"`, `"6000/min"` (also `h`,
    /// `d`), in bursts of up to the count. A call past it is refused before its callback
    /// runs: HTTP 429 with `Retry-After`, or the JSON-RPC error -32029 whose `data` has
    /// `retry_after_ms` and `"executed": false`; counted in `/metrics`. NULL (default): no
    /// limit. `ucall_set_procedure_rate_limit()` limits one procedure besides. Read during
    /// `ucall_init()` only.
    pub rate_limit: *const c_char,
    /// What tells clients apart for the rate limits: `"peer"` (the peer's IP address, the
    /// default), `"bearer"` (the token of `Authorization: Bearer`) or `"header:<name>"`
    /// (that header's value, as `"header:X-API-Key"`); a call without the header or token
    /// is keyed by its address. NULL: `"peer"`.
    pub rate_limit_key: *const c_char,
    /// Proxies whose `X-Forwarded-For` names the client, for the rate limits: addresses
    /// or networks, comma-separated (`"10.0.0.0/8,::1"`). NULL (default): none.
    pub trusted_proxies: *const c_char,
    /// Most connections open at once from one peer IP address; more are closed on
    /// accept. 0 (default): no cap beyond `max_concurrent_connections`.
    pub max_connections_per_peer: u32,
    /// Over TLS, every HTTP reply tells browsers to use HTTPS only for this many seconds
    /// (`Strict-Transport-Security: max-age=...`, RFC 6797; never said over plaintext, as
    /// the RFC requires). 0 (default): not said. Needs `use_ssl`.
    pub hsts_max_age_seconds: u64,
}

const DEFAULT_PORT: u16 = 8545;
const DEFAULT_QUEUE_DEPTH: u16 = 4096;
const DEFAULT_MAX_CALLBACKS: u16 = 128;
const DEFAULT_THREADS: u16 = 1;

/// Static strings written back into the config.
pub(crate) const HOST_DEFAULT: &CStr = c"127.0.0.1";
pub(crate) const FORMAT_HUMAN: &CStr = c"human";
pub(crate) const FORMAT_JSON: &CStr = c"json";
const ENGINE_POLL: &CStr = c"poll";
const ENGINE_URING: &CStr = c"uring";
const ENGINE_AUTO: &CStr = c"auto";

/// The configuration read from a `ucall_config_t`, with defaults applied.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) core: Config,
    pub(crate) max_callbacks: usize,
    pub(crate) logs: Option<(i32, LogFormat)>,
    /// With TLS: the certificate chain `core.tls` names, kept until the server is bound.
    pub(crate) tls_chain: Option<Chain>,
    /// How the server describes itself (`config.discovery`).
    pub(crate) discovery: Discovery,
    /// The MCP endpoint (`config.mcp`), when asked for.
    pub(crate) mcp: Option<McpSettings>,
}

fn micros(value: u32, default: Duration) -> Duration {
    if value == 0 {
        default
    } else {
        Duration::from_micros(u64::from(value))
    }
}

fn text_field<'a>(field: &str, ptr: *const c_char) -> Result<Option<&'a str>, String> {
    // SAFETY: `ucall_init`'s contract: string fields are NULL or NUL-terminated strings
    // that stay unchanged during the call.
    match unsafe { c_str_arg(ptr) } {
        None => Ok(None),
        Some(text) => text
            .to_str()
            .map(Some)
            .map_err(|_| format!("config.{field} is not valid UTF-8")),
    }
}

impl ucall_config_t {
    /// Read the fields, applying defaults, and write the defaults back.
    pub(crate) fn settings(&mut self) -> Result<Settings, String> {
        let mut core = Config {
            // The engine in force goes to `logs_file_descriptor` ("listening"), the only
            // place this library logs to: nothing on stderr.
            quiet: true,
            ..Config::default()
        };
        match text_field("hostname", self.hostname)? {
            Some(host) => host.clone_into(&mut core.host),
            None => {
                core.host = HOST_DEFAULT.to_str().unwrap_or_default().into();
                self.hostname = HOST_DEFAULT.as_ptr();
            }
        }
        if self.ephemeral_port {
            core.port = 0;
        } else {
            if self.port == 0 {
                self.port = DEFAULT_PORT;
            }
            core.port = self.port;
        }
        if self.queue_depth == 0 {
            self.queue_depth = DEFAULT_QUEUE_DEPTH;
        }
        if self.max_callbacks == 0 {
            self.max_callbacks = DEFAULT_MAX_CALLBACKS;
        }
        if self.max_threads == 0 {
            self.max_threads = DEFAULT_THREADS;
        }
        core.threads = usize::from(self.max_threads);
        let format = self.log_format()?;
        self.logs_format = match format {
            LogFormat::Human => FORMAT_HUMAN.as_ptr(),
            LogFormat::Json => FORMAT_JSON.as_ptr(),
        };
        let logs = self.log_target(format);
        if logs.is_none() {
            self.logs_file_descriptor = -1;
            self.log_requests = false;
        }
        if let Some((fd, format)) = logs.filter(|_| self.log_requests) {
            core.request_log = Some(request_log(fd, format)?);
        }
        // The engines' events (a failed accept, a worker that stops) go to the same log,
        // or nowhere: this library writes nothing to stderr.
        let logger = Logger::new(logs);
        core.events = EventLog::new(move |event, error| logger.event(event, &[("error", error)]));
        if self.max_batch_size == 0 {
            self.max_batch_size = u16::try_from(core.limits.max_batch).unwrap_or(u16::MAX);
        }
        core.limits.max_batch = usize::from(self.max_batch_size);
        if self.max_concurrent_connections == 0 {
            self.max_concurrent_connections = u32::try_from(core.max_connections).unwrap_or(u32::MAX);
        }
        core.max_connections = self.max_concurrent_connections as usize;
        core.idle_timeout = micros(self.max_lifetime_micro_seconds, core.idle_timeout);
        self.max_lifetime_micro_seconds = saturating_micros(core.idle_timeout);
        core.limits.max_exchanges_per_connection = match self.max_lifetime_exchanges {
            0 | u32::MAX => None,
            exchanges => Some(exchanges),
        };
        self.max_lifetime_exchanges = core.limits.max_exchanges_per_connection.unwrap_or(u32::MAX);
        core.engine = match text_field("engine", self.engine)? {
            None => EngineKind::Auto,
            Some(name) => {
                EngineKind::parse(name).ok_or_else(|| format!("config.engine: {name:?} is not auto, poll or uring"))?
            }
        };
        if self.max_body_bytes == 0 {
            self.max_body_bytes = core.limits.max_body_bytes;
        }
        core.limits.max_body_bytes = self.max_body_bytes;
        if self.max_header_bytes == 0 {
            self.max_header_bytes = core.limits.max_head_bytes;
        }
        core.limits.max_head_bytes = self.max_header_bytes;
        core.header_timeout = micros(self.header_timeout_micro_seconds, core.header_timeout);
        self.header_timeout_micro_seconds = saturating_micros(core.header_timeout);
        core.shutdown_timeout = micros(self.shutdown_timeout_micro_seconds, core.shutdown_timeout);
        self.shutdown_timeout_micro_seconds = saturating_micros(core.shutdown_timeout);
        core.limits.cors = self.cors()?;
        if self.hsts_max_age_seconds != 0 {
            if !self.use_ssl {
                return Err("config.hsts_max_age_seconds is said over TLS only: set use_ssl".into());
            }
            core.limits.hsts_max_age = Some(self.hsts_max_age_seconds);
        }
        let tls_chain = if self.use_ssl {
            let (tls, chain) = self.tls()?;
            core.tls = Some(tls);
            Some(chain)
        } else {
            None
        };
        let path = |field: &str, ptr: *const c_char, default: Option<String>| -> Result<Option<String>, String> {
            Ok(match text_field(field, ptr)? {
                None => default,
                Some("") => None,
                Some(path) if path.starts_with('/') => Some(path.into()),
                Some(path) => return Err(format!("config.{field}: {path:?} does not start with '/'")),
            })
        };
        core.health.healthz = path("healthz_path", self.healthz_path, core.health.healthz.take())?;
        core.health.readyz = path("readyz_path", self.readyz_path, core.health.readyz.take())?;
        core.health.not_ready_404 = self.readyz_not_found;
        core.metrics.path = path("metrics_path", self.metrics_path, core.metrics.path.take())?;
        // SAFETY: `ucall_init`'s contract: `metrics_buckets` is NULL or holds
        // `metrics_buckets_count` numbers, unchanged during the call.
        if let Some(buckets) = unsafe { array_arg(self.metrics_buckets, self.metrics_buckets_count) } {
            core.metrics.buckets = buckets.to_vec();
            core.metrics
                .check()
                .map_err(|e| format!("config.metrics_buckets: {e}"))?;
        }
        match text_field("unix_socket_path", self.unix_socket_path)? {
            Some("") => return Err("config.unix_socket_path is empty: give a path, or NULL for none".into()),
            Some(path) => {
                core.unix_socket = Some(path.into());
                core.unix_socket_mode = (self.unix_socket_mode != 0).then_some(self.unix_socket_mode);
            }
            None if self.unix_socket_mode != 0 => {
                return Err("config.unix_socket_mode needs unix_socket_path, the socket's path".into());
            }
            None => {}
        }
        self.rate_limits(&mut core)?;
        let discovery = match text_field("discovery", self.discovery)? {
            Some(json) => Discovery::from_json(json).map_err(|e| format!("config.discovery: {e}"))?,
            None => Discovery::default(),
        };
        let mcp = match text_field("mcp", self.mcp)? {
            Some(json) => Some(McpSettings::from_json(json).map_err(|e| format!("config.mcp: {e}"))?),
            None => None,
        };
        Ok(Settings {
            core,
            max_callbacks: usize::from(self.max_callbacks),
            logs,
            tls_chain,
            discovery,
            mcp,
        })
    }

    /// The rate limits and the per-peer connection cap.
    fn rate_limits(&self, core: &mut Config) -> Result<(), String> {
        if let Some(rate) = text_field("rate_limit", self.rate_limit)? {
            core.rate_limit.rate = Some(rate.parse().map_err(|e| format!("config.rate_limit: {e}"))?);
        }
        if let Some(key) = text_field("rate_limit_key", self.rate_limit_key)? {
            core.rate_limit.key = ClientKey::parse(key).map_err(|e| format!("config.rate_limit_key: {e}"))?;
            if matches!(core.rate_limit.key, ClientKey::Middleware) {
                // Keyed by Python middleware (`ctx.limit_by`): here nothing would admit calls.
                return Err(
                    "config.rate_limit_key: \"middleware\" needs the Python front end's middleware; \
                     use \"peer\", \"bearer\" or \"header:<name>\""
                        .into(),
                );
            }
        }
        if let Some(proxies) = text_field("trusted_proxies", self.trusted_proxies)? {
            for proxy in proxies.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let proxy = proxy.parse().map_err(|e| format!("config.trusted_proxies: {e}"))?;
                core.rate_limit.trusted_proxies.push(proxy);
            }
        }
        core.max_connections_per_peer =
            (self.max_connections_per_peer != 0).then_some(self.max_connections_per_peer as usize);
        Ok(())
    }

    /// The CORS rules, when `cors_allowed_origins` is set.
    fn cors(&self) -> Result<Option<Cors>, String> {
        let list = |text: &str| -> Vec<String> {
            text.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect()
        };
        let Some(origins) = text_field("cors_allowed_origins", self.cors_allowed_origins)? else {
            return Ok(None);
        };
        let mut cors = Cors::new(list(origins));
        if let Some(methods) = text_field("cors_allowed_methods", self.cors_allowed_methods)? {
            cors = cors.allow_methods(list(methods));
        }
        if let Some(headers) = text_field("cors_allowed_headers", self.cors_allowed_headers)? {
            cors = cors.allow_headers(list(headers));
        }
        if self.cors_max_age_seconds > 0 {
            cors = cors.max_age(self.cors_max_age_seconds);
        }
        Ok(Some(cors))
    }

    fn log_format(&self) -> Result<LogFormat, String> {
        match text_field("logs_format", self.logs_format)? {
            None | Some("human") => Ok(LogFormat::Human),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(format!(
                "config.logs_format: {other:?} is neither \"human\" nor \"json\""
            )),
        }
    }

    /// Where to log in `format`: `logs_file_descriptor` when positive.
    fn log_target(&self, format: LogFormat) -> Option<(i32, LogFormat)> {
        (self.logs_file_descriptor > 0).then_some((self.logs_file_descriptor, format))
    }

    /// Where `ucall_init` logs why it failed, whatever field failed: as configured, in the
    /// human format when `logs_format` itself is what failed.
    pub(crate) fn failure_log(&self) -> Logger {
        Logger::new(self.log_target(self.log_format().unwrap_or(LogFormat::Human)))
    }

    /// The TLS settings, with the certificate files checked and their chain made.
    fn tls(&mut self) -> Result<(TlsConfig, Chain), String> {
        // SAFETY: `ucall_init`'s contract: `ssl_certificates_paths` is NULL or holds
        // `ssl_certificates_count` pointers, unchanged during the call.
        let entries = unsafe { array_arg(self.ssl_certificates_paths.cast_const(), self.ssl_certificates_count) };
        let entries = entries.unwrap_or_default();
        if entries.is_empty() {
            return Err(
                "config.use_ssl: no certificate file: set ssl_certificates_paths and ssl_certificates_count".into(),
            );
        }
        let mut paths = Vec::new();
        for (index, &entry) in entries.iter().enumerate() {
            let field = format!("ssl_certificates_paths[{index}]");
            paths.push(text_field(&field, entry)?.ok_or_else(|| format!("config.{field} is NULL"))?);
        }
        let key = text_field("ssl_private_key_path", self.ssl_private_key_path)?.ok_or_else(|| {
            "config.use_ssl: ssl_private_key_path is NULL; TLS needs the PEM file of the private key".to_owned()
        })?;
        let client_ca = text_field("ssl_client_ca_path", self.ssl_client_ca_path)?;
        let port = if self.ssl_ephemeral_port {
            Some(0)
        } else {
            (self.ssl_port != 0).then_some(self.ssl_port)
        };
        if port.is_some_and(|tls| tls == self.port) && !self.ephemeral_port {
            return Err(format!(
                "config.ssl_port: {} is also config.port; leave ssl_port 0 to serve TLS on port",
                self.port
            ));
        }
        let chain = Chain::from_files(&paths)?;
        let mut tls = TlsConfig::new(chain.path(), key);
        tls.client_ca = client_ca.map(Into::into);
        tls.port = port;
        Ok((tls, chain))
    }

    /// Write back what binding settled: the engine and the ports in force (`ssl_port`
    /// only when TLS has a port of its own).
    pub(crate) fn write_back_bound(&mut self, engine: EngineKind, port: u16, separate_tls_port: Option<u16>) {
        self.engine = match engine {
            EngineKind::Poll => ENGINE_POLL.as_ptr(),
            EngineKind::Uring => ENGINE_URING.as_ptr(),
            EngineKind::Auto => ENGINE_AUTO.as_ptr(),
        };
        self.port = port;
        if self.use_ssl {
            self.ssl_port = separate_tls_port.unwrap_or(0);
        }
    }
}

/// The request log on the caller's descriptor `fd`, in `format`: the core writes to a
/// duplicate of it, so that the caller keeps theirs to close when they like.
fn request_log(fd: i32, format: LogFormat) -> Result<RequestLog, String> {
    let format = match format {
        LogFormat::Human => ucall_core::LogFormat::Text,
        LogFormat::Json => ucall_core::LogFormat::Json,
    };
    // SAFETY: `fd` is the caller's positive `logs_file_descriptor`, open for the duration
    // of `ucall_init` (its contract); it is only duplicated here, at once, and a
    // descriptor that is not open makes the duplication fail (EBADF), reported as such.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    RequestLog::to_fd(borrowed, format)
        .map_err(|e| format!("config.log_requests: cannot use logs_file_descriptor {fd}: {e}"))
}

fn saturating_micros(duration: Duration) -> u32 {
    u32::try_from(duration.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> ucall_config_t {
        ucall_config_t {
            hostname: std::ptr::null(),
            port: 0,
            queue_depth: 0,
            max_callbacks: 0,
            max_threads: 0,
            logs_file_descriptor: 0,
            logs_format: std::ptr::null(),
            max_batch_size: 0,
            max_concurrent_connections: 0,
            max_lifetime_micro_seconds: 0,
            max_lifetime_exchanges: 0,
            use_ssl: false,
            ssl_private_key_path: std::ptr::null(),
            ssl_certificates_paths: std::ptr::null_mut(),
            ssl_certificates_count: 0,
            engine: std::ptr::null(),
            ephemeral_port: false,
            max_body_bytes: 0,
            max_header_bytes: 0,
            header_timeout_micro_seconds: 0,
            shutdown_timeout_micro_seconds: 0,
            ssl_client_ca_path: std::ptr::null(),
            ssl_port: 0,
            ssl_ephemeral_port: false,
            discovery: std::ptr::null(),
            cors_allowed_origins: std::ptr::null(),
            cors_allowed_methods: std::ptr::null(),
            cors_allowed_headers: std::ptr::null(),
            cors_max_age_seconds: 0,
            healthz_path: std::ptr::null(),
            readyz_path: std::ptr::null(),
            readyz_not_found: false,
            metrics_path: std::ptr::null(),
            log_requests: false,
            metrics_buckets: std::ptr::null(),
            metrics_buckets_count: 0,
            unix_socket_path: std::ptr::null(),
            unix_socket_mode: 0,
            mcp: std::ptr::null(),
            rate_limit: std::ptr::null(),
            rate_limit_key: std::ptr::null(),
            trusted_proxies: std::ptr::null(),
            max_connections_per_peer: 0,
            hsts_max_age_seconds: 0,
        }
    }

    #[test]
    fn health_paths_default_move_and_turn_off() {
        let mut config = zeroed();
        let health = config.settings().expect("defaults").core.health;
        assert_eq!(health, ucall_core::HealthPaths::default());
        config.healthz_path = c"".as_ptr();
        config.readyz_path = c"/ready".as_ptr();
        config.readyz_not_found = true;
        let health = config.settings().expect("paths").core.health;
        assert_eq!(
            (health.healthz, health.readyz.as_deref(), health.not_ready_404),
            (None, Some("/ready"), true)
        );
        config.readyz_path = c"ready".as_ptr();
        assert!(config.settings().is_err_and(|e| e.contains("readyz_path")));
    }

    #[test]
    fn metrics_path_defaults_moves_and_turns_off() {
        let mut config = zeroed();
        let path = |config: &mut ucall_config_t| config.settings().map(|s| s.core.metrics.path);
        assert_eq!(path(&mut config), Ok(Some("/metrics".into())));
        config.metrics_path = c"/stats".as_ptr();
        assert_eq!(path(&mut config), Ok(Some("/stats".into())));
        config.metrics_path = c"".as_ptr();
        assert_eq!(path(&mut config), Ok(None));
        config.metrics_path = c"stats".as_ptr();
        assert!(path(&mut config).is_err_and(|e| e.contains("metrics_path")));
    }

    #[test]
    fn metrics_buckets_default_or_are_checked() {
        let mut config = zeroed();
        let buckets = |config: &mut ucall_config_t| config.settings().map(|s| s.core.metrics.buckets);
        assert_eq!(buckets(&mut config), Ok(ucall_core::metrics::DEFAULT_BUCKETS.to_vec()));
        let given = [0.001, 0.5];
        config.metrics_buckets = given.as_ptr();
        config.metrics_buckets_count = given.len();
        assert_eq!(buckets(&mut config), Ok(given.to_vec()));
        let backwards = [0.5, 0.001];
        config.metrics_buckets = backwards.as_ptr();
        let error = buckets(&mut config).expect_err("refused");
        assert!(
            error.starts_with("config.metrics_buckets: ") && error.contains("ascend"),
            "{error}"
        );
    }

    #[test]
    fn mcp_is_off_unless_asked_and_bad_settings_are_refused() {
        let mut config = zeroed();
        assert_eq!(config.settings().unwrap().mcp, None);
        config.mcp = c"{}".as_ptr();
        assert_eq!(config.settings().unwrap().mcp, Some(McpSettings::default()));
        config.mcp = c"{\"path\": \"/tools\"}".as_ptr();
        assert_eq!(
            config.settings().unwrap().mcp.map(|mcp| mcp.path),
            Some("/tools".into())
        );
        config.mcp = c"{\"path\": \"tools\"}".as_ptr();
        assert!(config.settings().unwrap_err().contains("config.mcp"));
    }

    #[test]
    fn cors_is_off_unless_origins_are_given() {
        let mut config = zeroed();
        assert_eq!(config.settings().unwrap().core.limits.cors, None);
        config.cors_allowed_origins = c" https://a.example , http://localhost:3000,".as_ptr();
        let expected = Cors::new(["https://a.example", "http://localhost:3000"]);
        assert_eq!(config.settings().unwrap().core.limits.cors, Some(expected.clone()));
        config.cors_allowed_methods = c"POST".as_ptr();
        config.cors_allowed_headers = c"content-type,x-request-id".as_ptr();
        config.cors_max_age_seconds = 600;
        let expected = expected
            .allow_methods(["POST"])
            .allow_headers(["content-type", "x-request-id"])
            .max_age(600);
        assert_eq!(config.settings().unwrap().core.limits.cors, Some(expected));
        config.cors_allowed_origins = c"\xff".as_ptr();
        assert!(config
            .settings()
            .unwrap_err()
            .contains("cors_allowed_origins is not valid UTF-8"));
    }

    #[test]
    fn zero_means_default_and_defaults_are_written_back() {
        let mut config = zeroed();
        let settings = config.settings().unwrap();
        assert_eq!(settings.core.port, 8545);
        assert_eq!(config.port, 8545);
        assert_eq!(config.max_threads, 1);
        assert_eq!(settings.core.threads, 1);
        assert_eq!(config.max_callbacks, 128);
        assert_eq!(config.max_batch_size, 1024);
        assert_eq!(config.max_concurrent_connections, 10_000);
        assert_eq!(config.max_lifetime_micro_seconds, 60_000_000);
        assert_eq!(config.max_lifetime_exchanges, u32::MAX);
        assert_eq!(settings.core.limits.max_exchanges_per_connection, None);
        assert_eq!(config.logs_file_descriptor, -1);
        assert_eq!(config.header_timeout_micro_seconds, 10_000_000);
        assert_eq!(config.max_body_bytes, 64 << 20);
        // SAFETY: written back as pointers to static NUL-terminated strings.
        unsafe {
            assert_eq!(CStr::from_ptr(config.hostname), c"127.0.0.1");
            assert_eq!(CStr::from_ptr(config.logs_format), c"human");
        }
        assert!(settings.logs.is_none());
    }

    #[test]
    fn max_lifetime_exchanges_maps_onto_the_core_limit() {
        for (given, in_force, written_back) in [(0, None, u32::MAX), (u32::MAX, None, u32::MAX), (7, Some(7), 7)] {
            let mut config = zeroed();
            config.max_lifetime_exchanges = given;
            let settings = config.settings().unwrap();
            assert_eq!(settings.core.limits.max_exchanges_per_connection, in_force, "{given}");
            assert_eq!(config.max_lifetime_exchanges, written_back, "{given}");
        }
    }

    #[test]
    fn tls_needs_its_files_and_a_port_of_its_own() {
        let mut config = zeroed();
        config.use_ssl = true;
        config.ssl_private_key_path = c"key.pem".as_ptr();
        assert!(config.settings().unwrap_err().contains("no certificate file"));
        let mut with_null = [std::ptr::null(), c"cert.pem".as_ptr()];
        config.ssl_certificates_paths = with_null.as_mut_ptr();
        config.ssl_certificates_count = 2;
        assert!(config
            .settings()
            .unwrap_err()
            .contains("ssl_certificates_paths[0] is NULL"));
        let mut missing = [c"/nonexistent/ucall/leaf.pem".as_ptr(), c"cert.pem".as_ptr()];
        config.ssl_certificates_paths = missing.as_mut_ptr();
        let error = config.settings().unwrap_err();
        assert!(
            error.contains("ssl_certificates_paths[0] = /nonexistent/ucall/leaf.pem"),
            "{error}"
        );
        config.ssl_private_key_path = std::ptr::null();
        assert!(config.settings().unwrap_err().contains("ssl_private_key_path is NULL"));
        config.ssl_private_key_path = c"key.pem".as_ptr();
        config.port = 9443;
        config.ssl_port = 9443;
        assert!(config
            .settings()
            .unwrap_err()
            .contains("ssl_port: 9443 is also config.port"));
        // Without use_ssl, the TLS fields are not read at all.
        config.use_ssl = false;
        assert!(config.settings().unwrap().core.tls.is_none());
    }

    #[test]
    fn hsts_is_said_over_tls_only() {
        let mut config = zeroed();
        assert_eq!(config.settings().unwrap().core.limits.hsts_max_age, None);
        config.hsts_max_age_seconds = 31_536_000;
        let error = config.settings().unwrap_err();
        assert!(error.contains("hsts_max_age_seconds is said over TLS only"), "{error}");
    }

    #[test]
    fn log_requests_needs_a_descriptor() {
        let mut config = zeroed();
        config.log_requests = true;
        assert!(config.settings().expect("defaults").core.request_log.is_none());
        assert!(!config.log_requests, "written back as off without a descriptor");
        config.log_requests = true;
        config.logs_file_descriptor = 2; // duplicated, not written to here
        config.logs_format = c"json".as_ptr();
        let log = config.settings().expect("stderr").core.request_log;
        assert_eq!(log.map(|log| log.format()), Some(ucall_core::LogFormat::Json));
        assert!(config.log_requests);
        assert!(
            zeroed().settings().expect("defaults").core.request_log.is_none(),
            "off by default"
        );
    }

    #[test]
    fn unix_socket_path_and_mode() {
        let mut config = zeroed();
        let socket =
            |config: &mut ucall_config_t| config.settings().map(|s| (s.core.unix_socket, s.core.unix_socket_mode));
        assert_eq!(socket(&mut config), Ok((None, None)));
        config.unix_socket_path = c"/run/api.sock".as_ptr();
        assert_eq!(socket(&mut config), Ok((Some("/run/api.sock".into()), None)));
        config.unix_socket_mode = 0o660;
        assert_eq!(socket(&mut config), Ok((Some("/run/api.sock".into()), Some(0o660))));
        config.unix_socket_path = c"".as_ptr();
        assert!(socket(&mut config).is_err_and(|e| e.contains("unix_socket_path is empty")));
        config.unix_socket_path = std::ptr::null();
        assert!(socket(&mut config).is_err_and(|e| e.contains("needs unix_socket_path")));
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let mut config = zeroed();
        config.logs_format = c"xml".as_ptr();
        assert!(config.settings().unwrap_err().contains("logs_format"));
        let mut config = zeroed();
        config.engine = c"fastest".as_ptr();
        assert!(config.settings().unwrap_err().contains("engine"));
    }
}
