// SPDX-License-Identifier: Apache-2.0
//! `GET /metrics`: what the server has done, in the Prometheus text format (0.0.4).
//!
//! Counted on the hot path with relaxed atomics only, in slots fixed when serving starts:
//! one per registered procedure (names the server does not know share the one `other`
//! slot, so no client can grow the label set), one per transport. Nothing is locked or
//! allocated per call; the page is rendered, with `prometheus-client`, only when scraped.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::date::monotonic_nanos;
use crate::jsonrpc::codes::{is_server_error, ErrorCode};
use crate::jsonrpc::RpcError;

/// The `Content-Type` of the page (the Prometheus text format, version 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The label of every method name the server does not know.
pub const OTHER: &str = "other";

/// Latency bucket bounds in seconds, gRPC's defaults (5 ms to 10 s) with four below them
/// for calls measured in microseconds.
pub const DEFAULT_BUCKETS: [f64; 16] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Where the metrics page is served, the latency histogram's buckets, and what the host
/// adds to the page.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    /// The page's path; `None` turns metrics off (nothing is counted then). Default `/metrics`.
    pub path: Option<String>,
    /// Upper bounds of the latency histogram's buckets, in seconds: finite, positive and
    /// strictly ascending (`+Inf` is implied). Default [`DEFAULT_BUCKETS`].
    pub buckets: Vec<f64>,
    /// The host's own metrics, appended to the page on each scrape. Default none.
    pub extra: Option<ExtraMetrics>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            path: Some("/metrics".into()),
            buckets: DEFAULT_BUCKETS.to_vec(),
            extra: None,
        }
    }
}

impl MetricsConfig {
    /// Whether the buckets are usable: each finite and positive, each above the one before.
    ///
    /// # Errors
    /// A message naming the first bucket that is not.
    pub fn check(&self) -> Result<(), String> {
        let mut last = 0.0;
        for &bound in &self.buckets {
            if !bound.is_finite() || bound <= 0.0 {
                return Err(format!(
                    "metrics bucket {bound}: bounds must be finite and above 0 seconds"
                ));
            }
            if bound <= last {
                return Err(format!("metrics bucket {bound} after {last}: bounds must ascend"));
            }
            last = bound;
        }
        Ok(())
    }
}

/// The host's own metrics, in the Prometheus text format (0.0.4), written after the
/// server's on each scrape: a Python server's `prometheus_client` registry, for example.
/// Called on the thread that serves the scrape; names must not clash with `ucall_*`.
#[derive(Clone)]
pub struct ExtraMetrics(Arc<dyn Fn(&mut String) + Send + Sync>);

impl ExtraMetrics {
    /// Metrics that `write` appends to the page, whole families, each line ending in `\n`.
    pub fn new(write: impl Fn(&mut String) + Send + Sync + 'static) -> Self {
        ExtraMetrics(Arc::new(write))
    }
}

impl fmt::Debug for ExtraMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExtraMetrics(..)")
    }
}

impl PartialEq for ExtraMetrics {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// How a call ended, as the `code` label says it: `ok`, or the class of its JSON-RPC error
/// (the classes of the one code table, `jsonrpc::codes`).
const CODES: [&str; 9] = [
    "ok",
    "parse_error",
    "invalid_request",
    "method_not_found",
    "invalid_params",
    "internal_error",
    "server_error",
    "application_error",
    "client_error",
];

/// The `code` label's index for a call that failed with `error`. A server-defined code
/// given a 4xx status (an auth middleware's 401 or 403, an application's 404) is the
/// caller's fault: `client_error`, so that dashboards do not show refused callers as
/// server failures.
fn code_class(error: &RpcError) -> usize {
    let code = error.code();
    match ErrorCode::from_code(code) {
        Some(ErrorCode::ParseError) => 1,
        Some(ErrorCode::InvalidRequest) => 2,
        Some(ErrorCode::MethodNotFound) => 3,
        Some(ErrorCode::InvalidParams) => 4,
        Some(ErrorCode::InternalError) => 5,
        None if is_server_error(code) && error.http_status().is_some_and(|s| (400..500).contains(&s)) => 8,
        None if is_server_error(code) => 6,
        None => 7,
    }
}

/// How a connection speaks, once its first bytes tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTP/1.1 (REST-style calls included).
    Http,
    /// Raw TCP: JSON texts one after another.
    Tcp,
    /// WebSocket, after an HTTP upgrade.
    WebSocket,
}

impl Transport {
    const ALL: [Transport; 3] = [Transport::Http, Transport::Tcp, Transport::WebSocket];

    fn label(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Tcp => "tcp",
            Transport::WebSocket => "websocket",
        }
    }
}

/// Requests refused before any call ran, by the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not JSON (`-32700`).
    ParseError,
    /// JSON, but not a request (`-32600`): an invalid element or an empty batch.
    InvalidRequest,
    /// A limit was hit: request or head too large, batch too large.
    Limit,
    /// A malformed or refused HTTP request (a 4xx other than a limit).
    BadHttp,
    /// A request not received in time (header or idle time-out mid-request).
    Timeout,
    /// A call over a rate limit (`crate::limit`), refused before it ran.
    RateLimited,
    /// A connection from a peer address that holds `max_connections_per_peer` already.
    PeerConnections,
}

impl Refusal {
    const ALL: [Refusal; 7] = [
        Refusal::ParseError,
        Refusal::InvalidRequest,
        Refusal::Limit,
        Refusal::BadHttp,
        Refusal::Timeout,
        Refusal::RateLimited,
        Refusal::PeerConnections,
    ];

    fn label(self) -> &'static str {
        match self {
            Refusal::ParseError => "parse_error",
            Refusal::InvalidRequest => "invalid_request",
            Refusal::Limit => "limit",
            Refusal::BadHttp => "bad_http",
            Refusal::Timeout => "timeout",
            Refusal::RateLimited => "rate_limited",
            Refusal::PeerConnections => "max_connections_per_peer",
        }
    }
}

/// One method's counters. Aligned to a cache line so that workers counting different
/// methods do not contend for one.
#[repr(align(64))]
struct MethodStats {
    /// Calls deferred and not yet completed.
    in_flight: AtomicI64,
    /// Calls ended, by [`CODES`] index.
    handled: [AtomicU64; CODES.len()],
    /// Latency: calls per bucket (not cumulative), the last one `+Inf`.
    buckets: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

#[derive(Default)]
#[repr(align(64))]
struct TransportStats {
    opened: AtomicU64,
    closed: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// One batch procedure's histograms: calls per batch, and each call's
/// time in the queue until its batch ran. Made when serving starts ([`Metrics::batch_meter`]);
/// the procedure's batch threads count into it once per batch, with relaxed atomics.
#[derive(Debug)]
pub struct BatchMeter {
    /// Bounds of the size buckets: 1, 2, 4, ... and the procedure's `max_size` last.
    size_bounds: Box<[u64]>,
    /// Batches per size bucket (not cumulative), the last one `+Inf`.
    sizes: Box<[AtomicU64]>,
    /// Calls in all batches.
    calls: AtomicU64,
    /// The latency buckets' bounds ([`MetricsConfig::buckets`]), in nanoseconds.
    wait_bounds_nanos: Box<[u64]>,
    /// Calls per queue-wait bucket (not cumulative), the last one `+Inf`.
    waits: Box<[AtomicU64]>,
    wait_sum_nanos: AtomicU64,
}

impl BatchMeter {
    fn new(max_size: usize, wait_bounds_nanos: &[u64]) -> Self {
        let max = max_size.max(1) as u64;
        let mut size_bounds: Vec<u64> = std::iter::successors(Some(1u64), |b| b.checked_mul(2))
            .take_while(|&b| b < max)
            .collect();
        size_bounds.push(max);
        BatchMeter {
            sizes: (0..=size_bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            size_bounds: size_bounds.into_boxed_slice(),
            calls: AtomicU64::new(0),
            wait_bounds_nanos: wait_bounds_nanos.into(),
            waits: (0..=wait_bounds_nanos.len()).map(|_| AtomicU64::new(0)).collect(),
            wait_sum_nanos: AtomicU64::new(0),
        }
    }

    /// A batch of `calls` calls ran (count each call's wait with [`BatchMeter::waited`]).
    pub fn ran(&self, calls: usize) {
        let calls = calls as u64;
        let bucket = bucket_of(&self.size_bounds, calls);
        self.sizes[bucket].fetch_add(1, Relaxed);
        self.calls.fetch_add(calls, Relaxed);
    }

    /// A call of a batch that ran had waited `nanos` in the queue.
    pub fn waited(&self, nanos: u64) {
        self.waits[bucket_of(&self.wait_bounds_nanos, nanos)].fetch_add(1, Relaxed);
        self.wait_sum_nanos.fetch_add(nanos, Relaxed);
    }
}

/// The bucket of `value`: the first whose bound is at least `value`, or the `+Inf` one after
/// them. From the smallest bound up: most calls land in the first buckets, which a scan
/// reaches sooner than a binary search.
fn bucket_of(bounds: &[u64], value: u64) -> usize {
    bounds.iter().position(|&bound| value <= bound).unwrap_or(bounds.len())
}

/// The counters of one server, shared by all its workers.
pub struct Metrics {
    path: Box<str>,
    /// Method labels by slot; the slot after the last is [`OTHER`].
    names: Box<[Box<str>]>,
    methods: Box<[MethodStats]>,
    bounds_nanos: Box<[u64]>,
    bounds_seconds: Box<[f64]>,
    refused: [AtomicU64; Refusal::ALL.len()],
    accepted: AtomicU64,
    transports: [TransportStats; Transport::ALL.len()],
    /// The batch procedures' histograms, by method slot, in slot order.
    batches: Vec<(u32, Arc<BatchMeter>)>,
    /// The engine and its threads, set when serving starts.
    engine: OnceLock<(&'static str, usize)>,
    extra: Option<ExtraMetrics>,
}

impl Metrics {
    /// Counters for the methods `names` (slot `i` is `names[i]`), served at `config.path`;
    /// `None` when metrics are off.
    #[must_use]
    pub fn new(config: &MetricsConfig, names: Vec<Box<str>>) -> Option<Self> {
        let path = config.path.as_deref()?;
        // Checked when the server binds (`MetricsConfig::check`); kept usable here anyway.
        let mut bounds: Vec<f64> = config
            .buckets
            .iter()
            .copied()
            .filter(|b| b.is_finite() && *b > 0.0)
            .collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        // Seconds to whole nanoseconds: the bounds are at least a nanosecond apart in practice.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bounds_nanos: Box<[u64]> = bounds.iter().map(|b| (b * 1e9).round() as u64).collect();
        let methods = (0..=names.len())
            .map(|_| MethodStats {
                in_flight: AtomicI64::new(0),
                handled: Default::default(),
                buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum_nanos: AtomicU64::new(0),
            })
            .collect();
        Some(Metrics {
            path: path.into(),
            names: names.into_boxed_slice(),
            methods,
            bounds_nanos,
            bounds_seconds: bounds.into_boxed_slice(),
            refused: Default::default(),
            accepted: AtomicU64::new(0),
            transports: Default::default(),
            batches: Vec::new(),
            engine: OnceLock::new(),
            extra: config.extra.clone(),
        })
    }

    /// The histograms of the batch procedure in `slot`, which forms batches of at most
    /// `max_size` calls (made before serving starts, once per batch procedure).
    pub fn batch_meter(&mut self, slot: u32, max_size: usize) -> Arc<BatchMeter> {
        let meter = Arc::new(BatchMeter::new(max_size, &self.bounds_nanos));
        let at = self.batches.partition_point(|(other, _)| *other < slot);
        self.batches.insert(at, (slot, Arc::clone(&meter)));
        meter
    }

    /// Whether `target` (query ignored) is the metrics page.
    #[must_use]
    pub fn is_page(&self, target: &str) -> bool {
        target.split_once('?').map_or(target, |(path, _)| path) == &*self.path
    }

    /// The slot counting calls to names the server does not know.
    #[must_use]
    pub fn other(&self) -> u32 {
        u32::try_from(self.names.len()).unwrap_or(u32::MAX)
    }

    /// The time a call starts, for [`Metrics::handled`]: nanoseconds of the monotonic clock.
    #[must_use]
    pub fn now(&self) -> u64 {
        monotonic_nanos()
    }

    /// A call to the method in `slot` ended (`Ok`, or its error) after starting at
    /// `started` (from [`Metrics::now`]).
    pub fn handled(&self, slot: u32, code: Result<(), &RpcError>, started: u64) {
        self.handled_at(slot, code, started, monotonic_nanos());
    }

    /// As [`Metrics::handled`], for a call that ended at `ended` (a reading of the clock
    /// the caller shares with the request log).
    pub fn handled_at(&self, slot: u32, code: Result<(), &RpcError>, started: u64, ended: u64) {
        let nanos = ended.saturating_sub(started);
        let stats = self.stats(slot);
        let class = code.map_or_else(code_class, |()| 0);
        stats.handled[class].fetch_add(1, Relaxed);
        stats.buckets[bucket_of(&self.bounds_nanos, nanos)].fetch_add(1, Relaxed);
        stats.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// A call to an unknown method was answered `-32601` (not timed: no handler ran).
    pub fn unknown_method(&self) {
        let stats = self.stats(self.other());
        stats.handled[3].fetch_add(1, Relaxed); // method_not_found
        stats.buckets[0].fetch_add(1, Relaxed);
    }

    /// A call to the method in `slot` deferred its reply ([`Metrics::completed`] follows).
    pub fn deferred(&self, slot: u32) {
        self.stats(slot).in_flight.fetch_add(1, Relaxed);
    }

    /// A deferred call to the method in `slot` completed.
    pub fn completed(&self, slot: u32, code: Result<(), &RpcError>, started: u64) {
        self.completed_at(slot, code, started, monotonic_nanos());
    }

    /// As [`Metrics::completed`], for a call that ended at `ended`.
    pub fn completed_at(&self, slot: u32, code: Result<(), &RpcError>, started: u64, ended: u64) {
        self.stats(slot).in_flight.fetch_sub(1, Relaxed);
        self.handled_at(slot, code, started, ended);
    }

    /// A request was refused before any call ran.
    pub fn refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Relaxed);
    }

    /// A connection was accepted.
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Relaxed);
    }

    /// A connection turned out to speak `transport` (a WebSocket was HTTP first).
    pub fn opened(&self, transport: Transport) {
        self.transport(transport).opened.fetch_add(1, Relaxed);
    }

    /// A connection that spoke `transport` closed (or, HTTP, upgraded to WebSocket).
    pub fn closed(&self, transport: Transport) {
        self.transport(transport).closed.fetch_add(1, Relaxed);
    }

    /// `bytes` were received over `transport`.
    pub fn received(&self, transport: Transport, bytes: usize) {
        self.transport(transport).bytes_in.fetch_add(bytes as u64, Relaxed);
    }

    /// `bytes` were sent over `transport`.
    pub fn sent(&self, transport: Transport, bytes: usize) {
        self.transport(transport).bytes_out.fetch_add(bytes as u64, Relaxed);
    }

    /// Say which engine serves, with how many threads (once, when serving starts).
    pub fn set_engine(&self, engine: &'static str, threads: usize) {
        let _ = self.engine.set((engine, threads));
    }

    fn stats(&self, slot: u32) -> &MethodStats {
        let last = self.methods.len() - 1;
        &self.methods[(slot as usize).min(last)]
    }

    fn transport(&self, transport: Transport) -> &TransportStats {
        &self.transports[transport as usize]
    }

    /// The page, in the Prometheus text format.
    #[must_use]
    pub fn render(self: &Arc<Self>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Page(Arc::clone(self))));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
        if let Some(extra) = &self.extra {
            let ours = text.len();
            (extra.0)(&mut text);
            if text.len() > ours && !text.ends_with('\n') {
                text.push('\n');
            }
        }
        text
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("path", &self.path)
            .field("methods", &self.names.len())
            .finish_non_exhaustive()
    }
}

/// What one scrape reads.
#[derive(Debug)]
struct Page(Arc<Metrics>);

impl Page {
    fn method_labels(&self) -> impl Iterator<Item = (&str, &MethodStats)> {
        let names = self.0.names.iter().map(AsRef::as_ref).chain([OTHER]);
        names.zip(self.0.methods.iter())
    }
}

/// A counter or gauge family: one value per label set.
fn family<L, V>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result
where
    L: prometheus_client::encoding::EncodeLabelSet,
    V: Into<i64>,
{
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let value: i64 = value.into();
        let sample = metric.encode_family(&labels)?;
        if kind == MetricType::Counter {
            ConstCounter::new(value.max(0).unsigned_abs()).encode(sample)?;
        } else {
            ConstGauge::new(value).encode(sample)?;
        }
    }
    Ok(())
}

#[allow(clippy::cast_possible_wrap)]
fn count(value: &AtomicU64) -> i64 {
    value.load(Relaxed) as i64
}

impl Page {
    /// The batch procedures' two histograms.
    fn encode_batches(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let m = &*self.0;
        let name = |slot: u32| m.names.get(slot as usize).map_or(OTHER, AsRef::as_ref);
        let mut buckets = Vec::new();
        let mut histogram = encoder.encode_descriptor(
            "ucall_batch_size",
            "Calls per batch run, by batch procedure.",
            None,
            MetricType::Histogram,
        )?;
        for (slot, meter) in &m.batches {
            buckets.clear();
            #[allow(clippy::cast_precision_loss)]
            let bounds = meter.size_bounds.iter().map(|&b| b as f64).chain([f64::INFINITY]);
            buckets.extend(bounds.zip(meter.sizes.iter().map(|n| n.load(Relaxed))));
            let batches = buckets.iter().map(|(_, n)| n).sum();
            #[allow(clippy::cast_precision_loss)]
            let calls = meter.calls.load(Relaxed) as f64;
            histogram
                .encode_family(&[("method", name(*slot))])?
                .encode_histogram::<NoLabelSet>(calls, batches, &buckets, None)?;
        }
        let mut histogram = encoder.encode_descriptor(
            "ucall_batch_queue_wait_seconds",
            "Time a call of a batch procedure waited in its queue until its batch ran.",
            None,
            MetricType::Histogram,
        )?;
        for (slot, meter) in &m.batches {
            buckets.clear();
            let bounds = m.bounds_seconds.iter().copied().chain([f64::INFINITY]);
            buckets.extend(bounds.zip(meter.waits.iter().map(|n| n.load(Relaxed))));
            let calls = buckets.iter().map(|(_, n)| n).sum();
            #[allow(clippy::cast_precision_loss)]
            let sum = meter.wait_sum_nanos.load(Relaxed) as f64 / 1e9;
            histogram
                .encode_family(&[("method", name(*slot))])?
                .encode_histogram::<NoLabelSet>(sum, calls, &buckets, None)?;
        }
        Ok(())
    }
}

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let m = &*self.0;
        let handled = self.method_labels().flat_map(|(method, stats)| {
            CODES
                .iter()
                .zip(&stats.handled)
                .filter(|(_, n)| n.load(Relaxed) > 0)
                .map(move |(code, n)| ([("method", method), ("code", code)], count(n)))
        });
        family(
            &mut encoder,
            "ucall_calls_handled",
            "Calls answered (or, notifications, run), by method and outcome: ok or the JSON-RPC error class.",
            MetricType::Counter,
            handled,
        )?;
        let started = self.method_labels().map(|(method, stats)| {
            let handled: i64 = stats.handled.iter().map(count).sum();
            ([("method", method)], handled + stats.in_flight.load(Relaxed).max(0))
        });
        family(
            &mut encoder,
            "ucall_calls_started",
            "Calls started, by method (unknown names under method=\"other\").",
            MetricType::Counter,
            started,
        )?;
        let in_flight = self
            .method_labels()
            .map(|(method, stats)| ([("method", method)], stats.in_flight.load(Relaxed).max(0)));
        family(
            &mut encoder,
            "ucall_calls_in_flight",
            "Calls whose reply was deferred and has not come yet, by method.",
            MetricType::Gauge,
            in_flight,
        )?;
        let mut histogram = encoder.encode_descriptor(
            "ucall_call_duration_seconds",
            "Time from a call's start to its reply, by method.",
            None,
            MetricType::Histogram,
        )?;
        let mut buckets = Vec::with_capacity(m.bounds_seconds.len() + 1);
        for (method, stats) in self.method_labels() {
            buckets.clear();
            let bounds = m.bounds_seconds.iter().copied().chain([f64::INFINITY]);
            buckets.extend(bounds.zip(stats.buckets.iter().map(|n| n.load(Relaxed))));
            let calls = buckets.iter().map(|(_, n)| n).sum();
            #[allow(clippy::cast_precision_loss)]
            let sum = stats.sum_nanos.load(Relaxed) as f64 / 1e9;
            histogram
                .encode_family(&[("method", method)])?
                .encode_histogram::<NoLabelSet>(sum, calls, &buckets, None)?;
        }
        if !m.batches.is_empty() {
            self.encode_batches(&mut encoder)?;
        }
        let refused = Refusal::ALL
            .iter()
            .map(|why| ([("reason", why.label())], count(&m.refused[*why as usize])));
        family(
            &mut encoder,
            "ucall_requests_refused",
            "Requests refused before any call ran, by reason.",
            MetricType::Counter,
            refused,
        )?;
        family(
            &mut encoder,
            "ucall_connections_accepted",
            "Connections accepted (and admitted under max_connections).",
            MetricType::Counter,
            [([] as [(&str, &str); 0], count(&m.accepted))],
        )?;
        let by_transport = |read: fn(&TransportStats) -> i64| {
            Transport::ALL
                .iter()
                .map(move |t| ([("transport", t.label())], read(m.transport(*t))))
        };
        family(
            &mut encoder,
            "ucall_connections_opened",
            "Connections that spoke each transport (a WebSocket counts as HTTP until its upgrade).",
            MetricType::Counter,
            by_transport(|t| count(&t.opened)),
        )?;
        family(
            &mut encoder,
            "ucall_connections_open",
            "Connections open now, by transport.",
            MetricType::Gauge,
            by_transport(|t| (count(&t.opened) - count(&t.closed)).max(0)),
        )?;
        family(
            &mut encoder,
            "ucall_received_bytes",
            "Bytes read from sockets, by transport (TLS records as received).",
            MetricType::Counter,
            by_transport(|t| count(&t.bytes_in)),
        )?;
        family(
            &mut encoder,
            "ucall_sent_bytes",
            "Bytes written to sockets, by transport (TLS records as sent).",
            MetricType::Counter,
            by_transport(|t| count(&t.bytes_out)),
        )?;
        if let Some((engine, threads)) = m.engine.get() {
            let threads = threads.to_string();
            let info = [("engine", *engine), ("threads", threads.as_str())];
            encoder
                .encode_descriptor(
                    "ucall_engine",
                    "The engine serving, and its threads.",
                    None,
                    MetricType::Info,
                )?
                .encode_info(&info)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_slots_and_render() {
        let config = MetricsConfig::default();
        let mut metrics = Metrics::new(&config, vec!["sum".into(), "a\"b".into()]).expect("on");
        let batches = metrics.batch_meter(1, 3);
        let metrics = Arc::new(metrics);
        batches.ran(3);
        batches.waited(2_000_000);
        batches.waited(3_000_000);
        batches.waited(20_000_000_000);
        let started = metrics.now();
        metrics.handled(0, Ok(()), started);
        metrics.handled(0, Err(&RpcError::new(-32602, "bad")), started);
        metrics.handled(1, Err(&RpcError::new(-32050, "down")), started);
        metrics.handled(1, Err(&RpcError::new(7, "no")), started);
        // An auth middleware's refusals are the caller's, not the server's.
        metrics.handled(1, Err(&RpcError::http(401, "a key is required")), started);
        metrics.handled(1, Err(&RpcError::http(403, "not valid")), started);
        metrics.handled(1, Err(&RpcError::http(503, "stopping")), started);
        metrics.unknown_method();
        metrics.deferred(0);
        metrics.refused(Refusal::Limit);
        metrics.opened(Transport::Tcp);
        metrics.received(Transport::Tcp, 10);
        let text = metrics.render();
        for line in [
            "ucall_calls_handled_total{method=\"sum\",code=\"ok\"} 1",
            "ucall_calls_handled_total{method=\"sum\",code=\"invalid_params\"} 1",
            "ucall_calls_handled_total{method=\"a\\\"b\",code=\"server_error\"} 2",
            "ucall_calls_handled_total{method=\"a\\\"b\",code=\"client_error\"} 2",
            "ucall_calls_handled_total{method=\"a\\\"b\",code=\"application_error\"} 1",
            "ucall_calls_handled_total{method=\"other\",code=\"method_not_found\"} 1",
            "ucall_calls_started_total{method=\"sum\"} 3",
            "ucall_calls_in_flight{method=\"sum\"} 1",
            "ucall_call_duration_seconds_count{method=\"sum\"} 2",
            "ucall_call_duration_seconds_bucket{method=\"sum\",le=\"+Inf\"} 2",
            "ucall_requests_refused_total{reason=\"limit\"} 1",
            "ucall_connections_open{transport=\"tcp\"} 1",
            "ucall_received_bytes_total{transport=\"tcp\"} 10",
            // Sizes 1, 2, then max_size (3); waits in the latency buckets.
            "ucall_batch_size_bucket{method=\"a\\\"b\",le=\"2\"} 0",
            "ucall_batch_size_bucket{method=\"a\\\"b\",le=\"3\"} 1",
            "ucall_batch_size_sum{method=\"a\\\"b\"} 3.0",
            "ucall_batch_queue_wait_seconds_bucket{method=\"a\\\"b\",le=\"0.0025\"} 1",
            "ucall_batch_queue_wait_seconds_bucket{method=\"a\\\"b\",le=\"0.005\"} 2",
            "ucall_batch_queue_wait_seconds_bucket{method=\"a\\\"b\",le=\"10\"} 2",
            "ucall_batch_queue_wait_seconds_count{method=\"a\\\"b\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("ucall_batch_size_count{method=\"sum\"}"), "{text}");
        assert!(metrics.is_page("/metrics?x") && !metrics.is_page("/metricsx"));
        assert!(Metrics::new(&MetricsConfig { path: None, ..config }, Vec::new()).is_none());
    }
}
