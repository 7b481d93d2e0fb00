// SPDX-License-Identifier: Apache-2.0
//! Method name → handler, and the views a handler works with: [`Call`] to read the
//! request (its [`Params`] come from `params`), [`Reply`] to write the result straight
//! into the connection's output buffer.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod reply;

use rustc_hash::FxHashMap;

use serde::Deserialize;

use crate::context::{self, Context};
use crate::discover::mcp::{McpSettings, McpTools};
use crate::discover::{Catalog, Discovery, MethodDoc, Page, DISCOVER_METHOD};
use crate::health::{Health, HealthPaths, Probe, Readiness};
use crate::jsonrpc::RpcError;
use crate::limit::{ClientKey, Limiter, Rate, RateLimit};
use crate::metrics::{BatchMeter, Metrics, MetricsConfig, Refusal};
pub use crate::params::Params;
use crate::request_log::RequestLog;
pub use reply::Reply;

/// A procedure: reads its call, writes its result into `reply` or returns an error.
///
/// Closures `Fn(&Call, &mut Reply) -> Result<(), RpcError>` implement it; most users
/// register with [`crate::ServerBuilder::procedure`], which serializes a returned value.
pub trait Handler: Send + Sync + 'static {
    /// Run one call. Leaving `reply` empty answers `null`.
    ///
    /// # Errors
    /// The error is sent to the caller as the JSON-RPC error object.
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError>;

    /// A batch procedure (one that forms batches of calls) counts its batches into the meter that
    /// `meter(max_size)` makes; other procedures have none and ignore it. Called once,
    /// when serving starts with metrics on.
    fn meter_batches(&self, meter: &mut dyn FnMut(usize) -> Arc<BatchMeter>) {
        let _ = meter;
    }
}

impl<F> Handler for F
where
    F: Fn(&Call<'_>, &mut Reply<'_>) -> Result<(), RpcError> + Send + Sync + 'static,
{
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        self(call, reply)
    }
}

/// Runs around every call (a middleware): sees the call (method, params, context), and
/// either rejects it with an error or runs `next`, the procedure (or the next hook),
/// doing what it likes before and after.
///
/// Closures `Fn(&Call, &mut Reply, &dyn Handler) -> Result<(), RpcError>` implement it;
/// register with [`crate::ServerBuilder::hook`]. A server without hooks pays nothing:
/// procedures are wrapped once, when serving starts.
pub trait Hook: Send + Sync + 'static {
    /// Run around one call.
    ///
    /// # Errors
    /// The error is sent to the caller as the JSON-RPC error object (with its HTTP status
    /// over HTTP: [`RpcError::http`]`(401, ..)` answers 401).
    fn around(&self, call: &Call<'_>, reply: &mut Reply<'_>, next: &dyn Handler) -> Result<(), RpcError>;
}

impl<F> Hook for F
where
    F: Fn(&Call<'_>, &mut Reply<'_>, &dyn Handler) -> Result<(), RpcError> + Send + Sync + 'static,
{
    fn around(&self, call: &Call<'_>, reply: &mut Reply<'_>, next: &dyn Handler) -> Result<(), RpcError> {
        self(call, reply, next)
    }
}

/// A procedure with a hook around it.
struct Hooked {
    hook: Arc<dyn Hook>,
    inner: Arc<dyn Handler>,
}

impl Handler for Hooked {
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        self.hook.around(call, reply, &*self.inner)
    }

    fn meter_batches(&self, meter: &mut dyn FnMut(usize) -> Arc<BatchMeter>) {
        self.inner.meter_batches(meter);
    }
}

/// The table of procedures, shared read-only by every worker thread.
///
/// Keyed with FxHash: clients only look names up, never insert, so a faster hash than
/// SipHash gives up no flooding defence.
#[derive(Clone, Default)]
pub struct Router {
    /// The procedures by slot (the order of first registration), each with its name.
    procedures: Vec<(Box<str>, Procedure)>,
    /// Each name's slot in `procedures`.
    slots: FxHashMap<Box<str>, u32>,
    /// What the procedures take and return, and the documents built from it.
    catalog: Catalog,
    /// The health probes and the readiness they report.
    health: Health,
    /// The counters, once serving starts with metrics on.
    metrics: Option<Arc<Metrics>>,
    /// Keep each call's peer address and request head (see [`Router::keep_context`]).
    keeps_context: bool,
    /// Time each call from its request's reading (see [`Router::time_calls`]).
    times_calls: bool,
    /// Run hooks around every call, the first outermost; applied when serving starts.
    hooks: Vec<Arc<dyn Hook>>,
    /// Where each call gets a line, when the request log is on.
    request_log: Option<RequestLog>,
    /// Procedures' time limits, by name; applied when serving starts.
    timeouts: Vec<(Box<str>, Duration)>,
    /// Serve the procedures as MCP tools, so set (`None`: no MCP endpoint).
    mcp_settings: Option<McpSettings>,
    /// The MCP tools, once serving starts with MCP on.
    mcp: Option<Arc<McpTools>>,
    /// Procedures' rate limits, by name; applied when serving starts.
    rate_limits: Vec<(Box<str>, Rate)>,
    /// The rate limits in force, once serving starts with any.
    limiter: Option<Arc<Limiter>>,
    /// The rate limits a front end's middleware admits calls through
    /// ([`ClientKey::Middleware`]), once serving starts with any.
    keyed_limits: Arc<OnceLock<KeyedLimits>>,
}

/// Rate limits for a front end whose middleware names each call's client
/// ([`ClientKey::Middleware`]): dispatch leaves such calls alone, and the front end admits
/// each one here, once, before it runs.
pub struct KeyedLimits {
    limiter: Arc<Limiter>,
    slots: FxHashMap<Box<str>, u32>,
    metrics: Option<Arc<Metrics>>,
}

impl KeyedLimits {
    /// Admit a call to `method` from the client `key` names (`None`: its peer address),
    /// or refuse it with the over-limit error, counted in the metrics as dispatch counts it.
    ///
    /// # Errors
    /// The over-limit error (HTTP 429, `-32029`, `data.retry_after_ms`, `executed: false`).
    pub fn admit(&self, method: &str, key: Option<&str>, context: &Context<'_>) -> Result<(), RpcError> {
        let Some(&slot) = self.slots.get(method) else {
            return Ok(());
        };
        self.limiter.admit_as(slot, key, context).map_err(|refused| {
            if let Some(metrics) = &self.metrics {
                metrics.refused(Refusal::RateLimited);
            }
            refused.error()
        })
    }
}

/// A registered handler and its slot in the metrics (numbered as first registered).
#[derive(Clone)]
struct Procedure {
    handler: Arc<dyn Handler>,
    /// Longest a call may take, if bounded ([`Router::set_timeout`]).
    timeout: Option<Duration>,
}

/// A procedure found by name ([`Router::find`]).
#[derive(Clone, Copy)]
pub struct Found<'a> {
    /// Its handler.
    pub handler: &'a dyn Handler,
    /// Its slot in the metrics.
    pub slot: u32,
    /// Longest a call may take, if bounded.
    pub timeout: Option<Duration>,
    /// The rate limits to admit the call through, when any are in force.
    pub limiter: Option<&'a Limiter>,
}

impl Router {
    /// An empty table.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `handler` under `name`, replacing any earlier one.
    pub fn insert(&mut self, name: &str, handler: Arc<dyn Handler>) {
        let procedure = Procedure { handler, timeout: None };
        match self.slots.get(name) {
            Some(&slot) => {
                if let Some((_, earlier)) = self.procedures.get_mut(slot as usize) {
                    *earlier = procedure;
                }
            }
            None => {
                let slot = u32::try_from(self.procedures.len()).unwrap_or(u32::MAX);
                self.slots.insert(name.into(), slot);
                self.procedures.push((name.into(), procedure));
            }
        }
    }

    /// The handler registered under `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&dyn Handler> {
        self.find(name).map(|found| found.handler)
    }

    /// The handler registered under `name`, with its slot in the metrics and its time limit.
    #[must_use]
    pub fn find(&self, name: &str) -> Option<Found<'_>> {
        self.found(*self.slots.get(name)?)
    }

    /// As [`Router::find`], trying the slot `last` first and leaving there the slot found:
    /// calls that repeat a method pay one string comparison instead of a hash lookup (70
    /// instructions a call; callers keep `last` per worker).
    pub(crate) fn find_after(&self, name: &str, last: &mut u32) -> Option<Found<'_>> {
        if self
            .procedures
            .get(*last as usize)
            .is_some_and(|(known, _)| **known == *name)
        {
            return self.found(*last);
        }
        let slot = *self.slots.get(name)?;
        *last = slot;
        self.found(slot)
    }

    fn found(&self, slot: u32) -> Option<Found<'_>> {
        self.procedures.get(slot as usize).map(|(_, p)| Found {
            handler: p.handler.as_ref(),
            slot,
            timeout: p.timeout,
            limiter: self.limiter.as_deref(),
        })
    }

    /// Limit the calls of the procedure `name` (registered before or after) to `rate` per
    /// client, besides the server's limit (see [`crate::limit`]).
    pub fn set_rate_limit(&mut self, name: &str, rate: Rate) {
        self.rate_limits.retain(|(earlier, _)| &**earlier != name);
        self.rate_limits.push((name.into(), rate));
    }

    /// Put the rate limits in force: the server's, `config`, and each procedure's.
    /// Called once, when serving starts (after [`Router::publish`]).
    pub fn start_limits(&mut self, config: &RateLimit) {
        let mut methods = vec![None; self.procedures.len()];
        for (name, rate) in &self.rate_limits {
            if let Some(&slot) = self.slots.get(&**name) {
                methods[slot as usize] = Some(*rate);
            }
        }
        self.limiter = Limiter::new(config, methods).map(Arc::new);
        if matches!(config.key, ClientKey::Middleware) {
            // The front end admits these calls once its middleware has keyed them.
            if let Some(limiter) = self.limiter.take() {
                let keyed = KeyedLimits {
                    limiter,
                    slots: self.slots.clone(),
                    metrics: self.metrics.clone(),
                };
                let _ = self.keyed_limits.set(keyed);
            }
        }
        // Keyed by a header, or by an address a proxy forwarded: the head is needed.
        self.keeps_context |= self.limiter.as_ref().is_some_and(|limiter| limiter.reads_head());
    }

    /// Bound the calls of the procedure `name` (registered before or after) to `timeout`:
    /// at its deadline the caller gets "Deadline exceeded" (see [`Reply::deadline`]).
    pub fn set_timeout(&mut self, name: &str, timeout: Duration) {
        self.timeouts.retain(|(earlier, _)| &**earlier != name);
        self.timeouts.push((name.into(), timeout));
    }

    /// Count calls to the procedures registered now, and serve the counts at
    /// `config.path` (none when it is `None`). Called once, when serving starts.
    pub fn start_metrics(&mut self, config: &MetricsConfig) {
        let names: Vec<Box<str>> = self.procedures.iter().map(|(name, _)| name.clone()).collect();
        let mut metrics = Metrics::new(config, names);
        if let Some(metrics) = &mut metrics {
            for (slot, (_, procedure)) in (0u32..).zip(&self.procedures) {
                procedure
                    .handler
                    .meter_batches(&mut |max_size| metrics.batch_meter(slot, max_size));
            }
        }
        self.metrics = metrics.map(Arc::new);
    }

    /// The counters, once serving has started with metrics on.
    #[must_use]
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// Keep each call's peer address and request head for [`Call::context`]: a server
    /// that never reads them does not pay for copying them.
    pub fn keep_context(&mut self) {
        self.keeps_context = true;
    }

    /// Whether calls carry their peer address and request head.
    #[must_use]
    pub fn keeps_context(&self) -> bool {
        self.keeps_context
    }

    /// Time each call from the reading of its request, for spans that report the time it
    /// spent queued ([`crate::Context::waited_until`]); a server that does not ask reads
    /// no clock for it.
    pub fn time_calls(&mut self) {
        self.times_calls = true;
    }

    /// Whether calls are timed from their request's reading ([`Router::time_calls`]).
    #[must_use]
    pub fn times_calls(&self) -> bool {
        self.times_calls
    }

    /// Whether connections need their peer's address: for the calls' context, the
    /// request log or the rate limits.
    #[must_use]
    pub fn keeps_peer(&self) -> bool {
        self.keeps_context || self.request_log.is_some() || self.limiter.is_some()
    }

    /// Whether calls carry their request head: for the calls' context, or the request
    /// log (which names the caller's trace id, read from the head's `traceparent`).
    #[must_use]
    pub fn keeps_head(&self) -> bool {
        self.keeps_context || self.request_log.is_some()
    }

    /// Log every call to `log` (or none, with `None`).
    pub fn set_request_log(&mut self, log: Option<RequestLog>) {
        self.request_log = log;
    }

    /// Where each call gets a line, when the request log is on.
    #[must_use]
    pub fn request_log(&self) -> Option<&RequestLog> {
        self.request_log.as_ref()
    }

    /// Run `hook` around every call (inside the hooks added before it). Hooks see each
    /// call's context, so adding one keeps it ([`Router::keep_context`]).
    pub fn add_hook(&mut self, hook: Arc<dyn Hook>) {
        self.hooks.push(hook);
        self.keeps_context = true;
    }

    /// Names of every registered procedure.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.procedures.iter().map(|(name, _)| &**name)
    }
}

/// Answers [`crate::streaming::CANCEL_METHOD`] where no procedure has that name (not in
/// the table, so that every other lookup stays as it was): cancels the streamed call named
/// by its `id` param on the same connection; answers whether one was under way.
pub(crate) struct Cancel;

impl Handler for Cancel {
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        // The id's text as sent (the params are valid JSON already).
        let id = call
            .params()
            .raw_at(0, "id")
            .ok_or_else(|| RpcError::missing_param("id"))?;
        let found = reply.streams().is_some_and(|streams| streams.cancel(id.trim()));
        reply.json(&found)
    }
}

/// Answers `rpc.discover` with the OpenRPC document.
struct Discover(Arc<str>);

impl Handler for Discover {
    fn handle(&self, _: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        reply.raw_trusted(&self.0);
        Ok(())
    }
}

/// Self-description: the router carries the descriptions until serving starts.
impl Router {
    /// Describe the procedure `doc.name` (registered before or after).
    pub fn describe(&mut self, doc: MethodDoc) {
        self.catalog.describe(doc);
    }

    /// Set where and whether the server describes itself.
    pub fn set_discovery(&mut self, discovery: Discovery) {
        self.catalog.set_settings(discovery);
    }

    /// Where and whether the server describes itself.
    #[must_use]
    pub fn discovery(&self) -> &Discovery {
        self.catalog.settings()
    }

    /// Build the documents from the procedures registered now, for a server reached at
    /// `addr` (`https` when `tls`), and answer `rpc.discover` unless a procedure of that
    /// name is registered. Called once, when serving starts.
    pub fn publish(&mut self, addr: SocketAddr, tls: bool) {
        let mcp_path = self.mcp_settings.as_ref().map(|settings| settings.path.as_str());
        let openrpc = self
            .catalog
            .publish(self.procedures.iter().map(|(name, _)| &**name), addr, tls, mcp_path);
        if let Some(openrpc) = openrpc.filter(|_| self.get(DISCOVER_METHOD).is_none()) {
            self.insert(DISCOVER_METHOD, Arc::new(Discover(openrpc)));
        }
        self.mcp = self.mcp_settings.clone().map(|settings| {
            let names = self.procedures.iter().map(|(name, _)| &**name);
            Arc::new(self.catalog.mcp_tools(names, settings))
        });

        for (name, timeout) in &self.timeouts {
            let slot = self.slots.get(&**name).map(|&slot| slot as usize);
            if let Some((_, procedure)) = slot.and_then(|slot| self.procedures.get_mut(slot)) {
                procedure.timeout = Some(*timeout);
            }
        }

        // Each procedure gets its hooks once, here, so that a call's lookup stays one.
        for hook in std::mem::take(&mut self.hooks).iter().rev() {
            for (_, procedure) in &mut self.procedures {
                let inner = Arc::clone(&procedure.handler);
                procedure.handler = Arc::new(Hooked {
                    hook: Arc::clone(hook),
                    inner,
                });
            }
        }
    }

    /// The document served at `target` (query ignored), if any.
    #[must_use]
    pub fn page(&self, target: &str) -> Option<Page<'_>> {
        self.catalog.page(target)
    }

    /// Serve the procedures as Model Context Protocol tools at `settings.path` (`None`:
    /// not at all). The tools are described when serving starts.
    pub fn set_mcp(&mut self, settings: Option<McpSettings>) {
        self.mcp_settings = settings;
    }

    /// The MCP tools, once serving has started with MCP on.
    #[must_use]
    pub fn mcp(&self) -> Option<&McpTools> {
        self.mcp.as_deref()
    }

    /// Whether `target` (query ignored) is the MCP endpoint.
    #[must_use]
    pub fn is_mcp_path(&self, target: &str) -> bool {
        self.mcp.as_deref().is_some_and(|mcp| {
            let path = target.split_once('?').map_or(target, |(path, _)| path);
            path == mcp.settings.path
        })
    }

    /// Serve the health probes at `paths`.
    pub fn set_health_paths(&mut self, paths: HealthPaths) {
        self.health.set_paths(paths);
    }

    /// The rate limits a front end's middleware admits calls through, set when serving
    /// starts with [`ClientKey::Middleware`] and a limit in force (shared: clone it before).
    /// A server keyed by middleware binds only when a front end holds a clone.
    #[must_use]
    pub fn keyed_limits(&self) -> &Arc<OnceLock<KeyedLimits>> {
        &self.keyed_limits
    }

    /// Whether a front end holds [`Router::keyed_limits`] to admit calls through.
    pub(crate) fn keyed_limits_held(&self) -> bool {
        Arc::strong_count(&self.keyed_limits) > 1
    }

    /// The server's readiness, shared with the front end (draining, checks).
    #[must_use]
    pub fn readiness(&self) -> &Arc<Readiness> {
        self.health.readiness()
    }

    /// The health probe served at `target` (query ignored), if any; `stopping` when the
    /// server is shutting down.
    #[must_use]
    pub fn probe(&self, target: &str, stopping: bool) -> Option<Probe> {
        self.health.probe(target, stopping)
    }
}

/// One call as the handler sees it: borrowed from the request bytes.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    method: &'a str,
    params: Params<'a>,
    id: Option<&'a str>,
    context: &'a Context<'a>,
}

impl<'a> Call<'a> {
    /// A view of one call (the server builds these; tests may too).
    #[must_use]
    pub fn new(method: &'a str, params: Option<&'a str>, id: Option<&'a str>) -> Self {
        Call {
            method,
            params: Params::new(params),
            id,
            context: &context::NONE,
        }
    }

    /// The same call, arrived as `context` says.
    #[must_use]
    pub fn with_context(self, context: &'a Context<'a>) -> Self {
        Call { context, ..self }
    }

    /// How the call reached the server: transport, TLS, peer address and header fields
    /// (the last two when kept: [`crate::ServerBuilder::keep_context`]).
    #[must_use]
    pub fn context(&self) -> &'a Context<'a> {
        self.context
    }

    /// The method name.
    #[must_use]
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The raw `id` text as sent, or `None` for a notification.
    #[must_use]
    pub fn id(&self) -> Option<&'a str> {
        self.id
    }

    /// Whether no reply will be sent (a notification, JSON-RPC 2.0 §4.1).
    #[must_use]
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// The parameters.
    #[must_use]
    pub fn params(&self) -> Params<'a> {
        self.params.with_section(self.context.section())
    }

    /// Parameter `name` when params are an object, else the one at `position`: the usual
    /// way to read an argument that callers may pass either way.
    ///
    /// `T` may borrow from the request (`&str`, `&RawValue`), but a `&str` cannot hold a
    /// string with escapes (`"a\"b"`, `"\u00e9"`): take `String` or `Cow<str>` for text
    /// that may have them.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing or has the wrong type.
    pub fn get<T: Deserialize<'a>>(&self, position: usize, name: &str) -> Result<T, RpcError> {
        self.params().get(position, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_params_by_name_or_position() {
        let named = Call::new("sum", Some(r#"{"b": 2, "a": -1, "s": "x\"y"}"#), Some("1"));
        assert_eq!(named.get::<i64>(0, "a").unwrap(), -1);
        assert_eq!(named.get::<i64>(1, "b").unwrap(), 2);
        assert_eq!(named.get::<String>(2, "s").unwrap(), "x\"y");
        let positional = Call::new("sum", Some("[10, 20.5]"), Some("1"));
        assert_eq!(positional.get::<i64>(0, "a").unwrap(), 10);
        assert_eq!(positional.get::<f64>(1, "b").unwrap(), 20.5);
        assert_eq!(positional.params().len(), 2);
        assert_eq!(named.params().len(), 3);
    }

    #[test]
    fn param_errors_name_the_parameter() {
        let call = Call::new("sum", Some(r#"{"a": 1.5}"#), Some("1"));
        let e = call.get::<i64>(0, "a").unwrap_err();
        assert_eq!(e.code(), -32602);
        assert!(e.message().contains("'a'"), "{}", e.message());
        let e = call.get::<i64>(1, "b").unwrap_err();
        assert!(e.message().contains("missing parameter 'b'"), "{}", e.message());
        let e = call.params().expect_only(&["b"]).unwrap_err();
        assert!(e.message().contains("\"a\""), "{}", e.message());
        assert!(Call::new("x", Some("[1,2,3]"), None)
            .params()
            .expect_only(&["a", "b"])
            .is_err());
        assert!(Call::new("x", None, None).get::<i64>(0, "a").is_err());
        let escaped = Call::new("x", Some(r#"{"s": "a\"b"}"#), None);
        let e = escaped.get::<&str>(0, "s").unwrap_err();
        assert!(e.message().contains("String or Cow<str>"), "{}", e.message());
        assert_eq!(escaped.get::<String>(0, "s").unwrap(), "a\"b");
        let minus_zero = Call::new("x", Some("[-0]"), None);
        assert_eq!(minus_zero.get::<i64>(0, "a").unwrap(), 0, "-0 is an integer in JSON");
        assert!(
            minus_zero.get::<f64>(0, "a").unwrap().is_sign_negative(),
            "a float keeps the sign"
        );
    }

    #[test]
    fn reply_rewrites_and_validates() {
        let mut out = b"prefix".to_vec();
        let mut reply = Reply::new(&mut out, None);
        assert!(!reply.is_written());
        reply.json(&[1, 2]).unwrap();
        reply.json(&0.1_f64).unwrap();
        assert!(reply.raw("{oops").is_err());
        assert_eq!(out, b"prefix0.1");
    }

    fn answers(value: &'static str) -> Arc<dyn Handler> {
        Arc::new(move |_: &Call<'_>, reply: &mut Reply<'_>| reply.raw(value))
    }

    /// The handler `found` writes `expected` (which one was found).
    fn writes(found: Found<'_>, expected: &str) {
        let mut out = Vec::new();
        let mut reply = Reply::new(&mut out, None);
        found.handler.handle(&Call::new("any", None, None), &mut reply).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn finds_by_name_with_or_without_the_last_slot() {
        let mut router = Router::new();
        router.insert("sum", answers("1"));
        router.insert("echo", answers("2"));
        router.insert("sum", answers("3")); // replaced in place: the slot stays
        router.set_timeout("echo", Duration::from_secs(2));
        router.publish("127.0.0.1:1".parse().unwrap(), false);
        assert_eq!(router.names().take(2).collect::<Vec<_>>(), ["sum", "echo"]);

        let mut last = 0;
        let echo = router.find_after("echo", &mut last).unwrap();
        assert_eq!((echo.slot, echo.timeout, last), (1, Some(Duration::from_secs(2)), 1));
        writes(echo, "2");
        // The slot kept is tried first, and a miss falls back to the table.
        writes(router.find_after("echo", &mut last).unwrap(), "2");
        let sum = router.find_after("sum", &mut last).unwrap();
        assert_eq!((sum.slot, sum.timeout, last), (0, None, 0));
        writes(sum, "3");
        // An unknown name finds nothing and leaves the slot; so does one past the table.
        assert!(router.find_after("nope", &mut last).is_none());
        assert_eq!(last, 0);
        let mut past = 99;
        writes(router.find_after("sum", &mut past).unwrap(), "3");
        assert_eq!(past, 0);
        assert_eq!(router.find("echo").map(|found| found.slot), Some(1));
        assert!(router.get("nope").is_none());
    }
}
