// SPDX-License-Identifier: Apache-2.0
//! Closed-loop load over gRPC (HTTP/2), for the gRPC servers of `benches/peers/bench.proto`.
//!
//! Same method as [`crate::load`]: every connection keeps `pipeline` calls in flight (as
//! concurrent HTTP/2 streams) and starts a new call as soon as one completes; latency runs
//! from starting a call to having its whole reply. Calls are unary, made with tonic on a
//! single-threaded tokio runtime. The messages are written out with prost's derive instead
//! of generated from the .proto, so no protoc is needed: keep them in step with the file.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hdrhistogram::Histogram;
use serde_json::Value;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use crate::chain::ChainStats;
use crate::load::{cpu_percent, latency_of, process_cpu_time, ErrorCounts, Report};

/// `SumRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SumRequest {
    /// a
    #[prost(int64, tag = "1")]
    pub a: i64,
    /// b
    #[prost(int64, tag = "2")]
    pub b: i64,
}

/// `IntReply`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IntReply {
    /// The result.
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// `Blob`: raw bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Blob {
    /// The payload.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

/// `FibonacciRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FibonacciRequest {
    /// n
    #[prost(uint64, tag = "1")]
    pub n: u64,
}

/// `Complex`, the struct argument of `HashComplex`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Complex {
    /// id
    #[prost(int64, tag = "1")]
    pub id: i64,
    /// name
    #[prost(string, tag = "2")]
    pub name: String,
    /// flag1
    #[prost(bool, tag = "3")]
    pub flag1: bool,
    /// flag2
    #[prost(bool, tag = "4")]
    pub flag2: bool,
    /// 12 bytes
    #[prost(bytes = "vec", tag = "5")]
    pub vals: Vec<u8>,
}

/// `StringReply`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringReply {
    /// The result.
    #[prost(string, tag = "1")]
    pub value: String,
}

/// `Doubles`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Doubles {
    /// The numbers.
    #[prost(double, repeated, tag = "1")]
    pub values: Vec<f64>,
}

/// `DoubleReply`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DoubleReply {
    /// The result.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `Ints`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ints {
    /// The numbers.
    #[prost(uint64, repeated, tag = "1")]
    pub values: Vec<u64>,
}

/// `GenRandIntsRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GenRandIntsRequest {
    /// Smallest value.
    #[prost(uint64, tag = "1")]
    pub min: u64,
    /// Largest value.
    #[prost(uint64, tag = "2")]
    pub max: u64,
    /// How many.
    #[prost(uint64, tag = "3")]
    pub count: u64,
}

/// One call, ready to send: built once from the JSON params of the workload.
#[derive(Debug, Clone)]
pub enum Call {
    /// `Sum`
    Sum(SumRequest),
    /// `Echo`
    Echo(Blob),
    /// `Fibonacci`
    Fibonacci(FibonacciRequest),
    /// `HashComplex`
    HashComplex(Complex),
    /// `StdDev`
    StdDev(Doubles),
    /// `AverageContainer`
    AverageContainer(Ints),
    /// `GenRandInts`
    GenRandInts(GenRandIntsRequest),
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

impl Call {
    /// The call of procedure `method` (JSON-RPC name, as in bench_server) with the params
    /// object the JSON-RPC workloads send; `echo`'s `data` is base64 and goes as raw bytes.
    pub fn from_json(method: &str, params: &Value) -> io::Result<Call> {
        let u = |k: &str| {
            params[k]
                .as_u64()
                .ok_or_else(|| bad(format!("params.{k}: an unsigned integer")))
        };
        let i = |k: &str| params[k].as_i64().ok_or_else(|| bad(format!("params.{k}: an integer")));
        Ok(match method {
            "sum" => Call::Sum(SumRequest { a: i("a")?, b: i("b")? }),
            "echo" => {
                let text = params["data"]
                    .as_str()
                    .ok_or_else(|| bad("params.data: a base64 string"))?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| bad(format!("params.data: {e}")))?;
                Call::Echo(Blob { data })
            }
            "fibonacci" => Call::Fibonacci(FibonacciRequest { n: u("n")? }),
            "hash_complex" => {
                let o = &params["obj"];
                let vals = o["vals"]
                    .as_array()
                    .ok_or_else(|| bad("params.obj.vals: an array"))?
                    .iter()
                    .map(|v| v.as_u64().and_then(|v| u8::try_from(v).ok()))
                    .collect::<Option<Vec<u8>>>()
                    .ok_or_else(|| bad("params.obj.vals: bytes"))?;
                Call::HashComplex(Complex {
                    id: o["id"].as_i64().ok_or_else(|| bad("params.obj.id"))?,
                    name: o["name"].as_str().ok_or_else(|| bad("params.obj.name"))?.to_owned(),
                    flag1: o["flag1"].as_bool().ok_or_else(|| bad("params.obj.flag1"))?,
                    flag2: o["flag2"].as_bool().ok_or_else(|| bad("params.obj.flag2"))?,
                    vals,
                })
            }
            "std_dev" => Call::StdDev(Doubles {
                values: serde_json::from_value(params["values"].clone()).map_err(|e| bad(e.to_string()))?,
            }),
            "average_container" => Call::AverageContainer(Ints {
                values: serde_json::from_value(params["values"].clone()).map_err(|e| bad(e.to_string()))?,
            }),
            "gen_rand_ints" => Call::GenRandInts(GenRandIntsRequest {
                min: u("min")?,
                max: u("max")?,
                count: u("count")?,
            }),
            _ => return Err(bad(format!("no gRPC method for {method:?}"))),
        })
    }
}

/// A reply, reduced to what the checks need.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// An integer result.
    Int(i64),
    /// A string result.
    Text(String),
    /// A floating-point result.
    Float(f64),
    /// A list of integers.
    Ints(Vec<u64>),
    /// Echoed bytes.
    Bytes(Vec<u8>),
}

impl Answer {
    /// Whether the answer is `expected` (a JSON value; floats within a relative 1e-9).
    pub fn matches(&self, expected: &Value) -> bool {
        match self {
            Answer::Int(v) => expected.as_i64() == Some(*v),
            Answer::Text(v) => expected.as_str() == Some(v),
            Answer::Float(v) => expected
                .as_f64()
                .is_some_and(|e| (v - e).abs() <= 1e-9 * e.abs().max(1.0)),
            Answer::Ints(v) => serde_json::from_value::<Vec<u64>>(expected.clone()).is_ok_and(|e| &e == v),
            Answer::Bytes(_) => false,
        }
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// A status other than OK.
    Status,
    /// The connection failed.
    Io,
}

/// One HTTP/2 connection with its tonic client.
#[derive(Clone)]
pub struct Client {
    grpc: tonic::client::Grpc<Channel>,
}

const MAX_MESSAGE: usize = 64 << 20;

impl Client {
    /// Opens one connection to `addr`.
    pub async fn connect(addr: &str) -> io::Result<Client> {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| bad(e.to_string()))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("cannot connect to {addr}: {e}"),
                )
            })?;
        let grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Ok(Client { grpc })
    }

    async fn unary<Q, R>(&mut self, path: &'static str, req: Q) -> Result<(R, usize), CallError>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc.ready().await.map_err(|_| CallError::Io)?;
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        match self
            .grpc
            .unary(tonic::Request::new(req), PathAndQuery::from_static(path), codec)
            .await
        {
            Ok(reply) => {
                let reply = reply.into_inner();
                // The message plus gRPC's 5-byte length prefix.
                let len = reply.encoded_len() + 5;
                Ok((reply, len))
            }
            Err(status) if status.code() == tonic::Code::Unavailable => Err(CallError::Io),
            Err(_) => Err(CallError::Status),
        }
    }

    /// Makes one call; returns the answer and the bytes of the reply message.
    pub async fn call(&mut self, call: &Call) -> Result<(Answer, usize), CallError> {
        Ok(match call.clone() {
            Call::Sum(q) => {
                let (r, n) = self.unary::<_, IntReply>("/ucallbench.Bench/Sum", q).await?;
                (Answer::Int(r.value), n)
            }
            Call::Echo(q) => {
                let (r, n) = self.unary::<_, Blob>("/ucallbench.Bench/Echo", q).await?;
                (Answer::Bytes(r.data), n)
            }
            Call::Fibonacci(q) => {
                let (r, n) = self.unary::<_, IntReply>("/ucallbench.Bench/Fibonacci", q).await?;
                (Answer::Int(r.value), n)
            }
            Call::HashComplex(q) => {
                let (r, n) = self.unary::<_, StringReply>("/ucallbench.Bench/HashComplex", q).await?;
                (Answer::Text(r.value), n)
            }
            Call::StdDev(q) => {
                let (r, n) = self.unary::<_, DoubleReply>("/ucallbench.Bench/StdDev", q).await?;
                (Answer::Float(r.value), n)
            }
            Call::AverageContainer(q) => {
                let (r, n) = self
                    .unary::<_, DoubleReply>("/ucallbench.Bench/AverageContainer", q)
                    .await?;
                (Answer::Float(r.value), n)
            }
            Call::GenRandInts(q) => {
                let (r, n) = self.unary::<_, Ints>("/ucallbench.Bench/GenRandInts", q).await?;
                (Answer::Ints(r.values), n)
            }
        })
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct GrpcConfig {
    /// HOST:PORT.
    pub addr: String,
    /// HTTP/2 connections.
    pub connections: usize,
    /// Calls in flight per connection (concurrent streams).
    pub pipeline: usize,
    /// Measured interval.
    pub duration: Duration,
    /// Load before measuring.
    pub warmup: Duration,
    /// The call to repeat; `None` runs the Sequential chain instead.
    pub call: Option<Call>,
    /// The expected result of `call` (echo compares the bytes instead).
    pub expect: Option<Value>,
}

struct Stats {
    calls: u64,
    bytes: u64,
    chains: u64,
    errors: ErrorCounts,
    hist: Histogram<u64>,
    chain_hist: Histogram<u64>,
}

impl Stats {
    fn new() -> Stats {
        let hist = || Histogram::new_with_bounds(1, 1_000_000_000_000, 3).expect("valid histogram bounds");
        Stats {
            calls: 0,
            bytes: 0,
            chains: 0,
            errors: ErrorCounts::default(),
            hist: hist(),
            chain_hist: hist(),
        }
    }
}

/// The shared clock of a run: replies that complete in `[from, end)` count.
#[derive(Clone, Copy)]
struct Window {
    from: Instant,
    end: Instant,
}

impl Window {
    fn counts(&self, t: Instant) -> bool {
        t >= self.from && t < self.end
    }
}

/// Runs the load on the current thread and reports per-call figures (and chains, for
/// the Sequential scenario).
pub fn run(config: &GrpcConfig) -> io::Result<(Report, Option<ChainStats>)> {
    if config.connections == 0 || config.pipeline == 0 || config.duration.is_zero() {
        return Err(bad("need connections >= 1, pipeline >= 1 and a positive duration"));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut clients = Vec::with_capacity(config.connections);
        for _ in 0..config.connections {
            clients.push(Client::connect(&config.addr).await?);
        }
        let start = Instant::now();
        let window = Window {
            from: start + config.warmup,
            end: start + config.warmup + config.duration,
        };
        let stats = Rc::new(RefCell::new(Stats::new()));
        let local = tokio::task::LocalSet::new();
        for client in clients {
            let streams = if config.call.is_some() { config.pipeline } else { 1 };
            for _ in 0..streams {
                let stats = stats.clone();
                let client = client.clone();
                let config = config.clone();
                local.spawn_local(async move {
                    match &config.call {
                        Some(call) => repeat(client, call, config.expect.as_ref(), window, &stats).await,
                        None => chains(client, window, &stats).await,
                    }
                });
            }
        }
        let sampler = async {
            tokio::time::sleep_until(window.from.into()).await;
            let cpu = process_cpu_time();
            let wall = Instant::now();
            tokio::time::sleep_until(window.end.into()).await;
            (cpu, process_cpu_time(), wall.elapsed())
        };
        let (cpu_before, cpu_after, wall) = local.run_until(sampler).await;
        // Let the calls in flight finish (they no longer count), within a bound.
        let _ = tokio::time::timeout(Duration::from_secs(30), local).await;
        let stats = stats.borrow();
        let elapsed = config.duration.as_secs_f64();
        let cpu_percent = cpu_percent(cpu_before, cpu_after, wall);
        let report = Report {
            requests: stats.calls,
            elapsed,
            requests_per_sec: stats.calls as f64 / elapsed,
            bytes_per_sec: stats.bytes as f64 / elapsed,
            errors: stats.errors,
            connects: config.connections as u64,
            latency: latency_of(&stats.hist),
            cpu_percent,
        };
        let chains = config.call.is_none().then(|| ChainStats {
            chains: stats.chains,
            chains_per_sec: stats.chains as f64 / elapsed,
            latency: latency_of(&stats.chain_hist),
        });
        Ok((report, chains))
    })
}

async fn repeat(mut client: Client, call: &Call, expect: Option<&Value>, window: Window, stats: &RefCell<Stats>) {
    while Instant::now() < window.end {
        let sent = Instant::now();
        let outcome = client.call(call).await;
        let done = Instant::now();
        if !window.counts(done) {
            if outcome.is_err() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            continue;
        }
        let pause = {
            let mut s = stats.borrow_mut();
            s.calls += 1;
            match outcome {
                Ok((answer, bytes)) => {
                    s.bytes += bytes as u64;
                    s.hist.saturating_record((done - sent).as_nanos() as u64);
                    let ok = match (&answer, call) {
                        (Answer::Bytes(got), Call::Echo(sent)) => got == &sent.data,
                        _ => expect.is_none_or(|e| answer.matches(e)),
                    };
                    if !ok {
                        s.errors.expect += 1;
                    }
                    false
                }
                Err(CallError::Status) => {
                    s.errors.status += 1;
                    false
                }
                Err(CallError::Io) => {
                    s.errors.io += 1;
                    true
                }
            }
        };
        if pause {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// rpc.hpp's Sequential, as in [`crate::chain`]: GenRandInts(5, 30, 1000), a Fibonacci
/// per number, then AverageContainer of the results.
async fn chains(mut client: Client, window: Window, stats: &RefCell<Stats>) {
    'chains: while Instant::now() < window.end {
        let chain_start = Instant::now();
        let mut numbers = Vec::new();
        let mut results = Vec::new();
        let mut step = 0;
        while step <= 1001 {
            let call = match step {
                0 => Call::GenRandInts(GenRandIntsRequest {
                    min: 5,
                    max: 30,
                    count: 1000,
                }),
                1..=1000 => Call::Fibonacci(FibonacciRequest { n: numbers[step - 1] }),
                _ => Call::AverageContainer(Ints {
                    values: std::mem::take(&mut results),
                }),
            };
            if Instant::now() >= window.end {
                break 'chains;
            }
            let sent = Instant::now();
            let outcome = client.call(&call).await;
            let done = Instant::now();
            let counted = window.counts(done);
            // None: go on with the chain; Some(pause): start a new chain, after a pause if
            // the connection failed.
            let restart = {
                let mut s = stats.borrow_mut();
                if counted {
                    s.calls += 1;
                }
                match outcome {
                    Ok((answer, bytes)) => {
                        if counted {
                            s.bytes += bytes as u64;
                            s.hist.saturating_record((done - sent).as_nanos() as u64);
                        }
                        match (step, answer) {
                            (0, Answer::Ints(v)) if v.len() == 1000 => {
                                numbers = v;
                                None
                            }
                            (1..=1000, Answer::Int(v)) if v >= 0 => {
                                results.push(v as u64);
                                None
                            }
                            (1001, Answer::Float(_)) => None,
                            _ => {
                                if counted {
                                    s.errors.expect += 1;
                                }
                                Some(false)
                            }
                        }
                    }
                    Err(e) => {
                        if counted {
                            match e {
                                CallError::Status => s.errors.status += 1,
                                CallError::Io => s.errors.io += 1,
                            }
                        }
                        Some(true)
                    }
                }
            };
            match restart {
                None => {}
                Some(pause) => {
                    if pause {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    continue 'chains;
                }
            }
            step += 1;
        }
        let done = Instant::now();
        if chain_start >= window.from && window.counts(done) {
            let mut s = stats.borrow_mut();
            s.chains += 1;
            s.chain_hist.saturating_record((done - chain_start).as_nanos() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_calls_from_the_json_params() {
        let c = Call::from_json("sum", &serde_json::json!({"a": 1, "b": 2})).unwrap();
        assert!(matches!(c, Call::Sum(SumRequest { a: 1, b: 2 })));
        let c = Call::from_json("echo", &serde_json::json!({"data": "AAEC"})).unwrap();
        assert!(matches!(c, Call::Echo(Blob { ref data }) if data == &[0, 1, 2]));
        let obj = serde_json::json!({"obj": {"id": 1, "name": "x", "flag1": true, "flag2": false,
            "vals": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}});
        assert!(matches!(
            Call::from_json("hash_complex", &obj).unwrap(),
            Call::HashComplex(_)
        ));
        assert!(Call::from_json("nope", &Value::Null).is_err());
        assert!(Answer::Float(2.0).matches(&serde_json::json!(2.0000000000001)));
        assert!(!Answer::Int(3).matches(&serde_json::json!(4)));
    }
}
