// SPDX-License-Identifier: Apache-2.0
//! Dependent call chains: each call's arguments come from earlier replies, so no two
//! calls of a chain are ever in flight together.
//!
//! The one chain implemented is rpc.hpp's `Sequential` benchmark: `gen_rand_ints(5, 30,
//! 1000)`, then `fibonacci(n)` for each number returned, then `average_container` of the
//! 1,000 results. Every connection runs chains back to back on its own thread with
//! blocking sockets (a chain has exactly one call in flight, so there is nothing to
//! multiplex). Each call is timed like a request of the closed loop; each completed chain
//! is timed as a whole too.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::framing::HttpFramer;
use crate::load::{cpu_percent_over, latency_of, pin_to_cpu, ErrorCounts, Latency, Report};

/// How a call is put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `POST /` with a JSON-RPC 2.0 request; the reply's `result` is the value.
    JsonRpc,
    /// `POST /METHOD` with the params object as the body; the reply body is the value.
    Rest,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    /// The server's address.
    pub addr: SocketAddr,
    /// Connections, each running chains on its own thread.
    pub connections: usize,
    /// Length of the measured interval.
    pub duration: Duration,
    /// Chains run before measuring starts; their calls are not counted.
    pub warmup: Duration,
    /// The wire form of each call.
    pub dialect: Dialect,
    /// Pin every thread to this CPU.
    pub cpu: Option<usize>,
    /// `gen_rand_ints(min, max, count)` arguments.
    pub min: u64,
    /// See `min`.
    pub max: u64,
    /// See `min`.
    pub count: usize,
}

impl ChainConfig {
    /// rpc.hpp's `Sequential`: `gen_rand_ints(5, 30, 1000)`.
    pub fn sequential(addr: SocketAddr) -> ChainConfig {
        ChainConfig {
            addr,
            connections: 1,
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            dialect: Dialect::JsonRpc,
            cpu: None,
            min: 5,
            max: 30,
            count: 1000,
        }
    }
}

/// Chain figures beyond the per-call ones of [`Report`].
#[derive(Debug, Clone, Default)]
pub struct ChainStats {
    /// Chains completed in the measured interval.
    pub chains: u64,
    /// Chains per second.
    pub chains_per_sec: f64,
    /// Latency of a whole chain, for chains completed in the interval.
    pub latency: Latency,
}

/// What one thread measured.
struct Stats {
    calls: u64,
    bytes: u64,
    connects: u64,
    chains: u64,
    errors: ErrorCounts,
    calls_hist: Histogram<u64>,
    chains_hist: Histogram<u64>,
}

impl Stats {
    fn new() -> Stats {
        let hist = || Histogram::new_with_bounds(1, 1_000_000_000_000, 3).expect("valid histogram bounds");
        Stats {
            calls: 0,
            bytes: 0,
            connects: 0,
            chains: 0,
            errors: ErrorCounts::default(),
            calls_hist: hist(),
            chains_hist: hist(),
        }
    }
}

/// Why one call failed.
enum CallError {
    /// The connection failed; it is reopened.
    Io,
    /// A reply arrived but is not a usable result.
    Reply,
    /// A non-2xx status.
    Status,
}

/// One blocking HTTP/1.1 connection.
struct Client {
    stream: TcpStream,
    host: String,
    dialect: Dialect,
    buf: Vec<u8>,
    end: usize,
    framer: HttpFramer,
}

impl Client {
    fn connect(addr: SocketAddr, dialect: Dialect) -> io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        // A server that stops answering ends the call, not the run.
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            stream,
            host: addr.to_string(),
            dialect,
            buf: vec![0; 64 * 1024],
            end: 0,
            framer: HttpFramer::default(),
        })
    }

    /// Sends one call and waits for its reply; returns the result and the bytes received.
    fn call(&mut self, method: &str, params: &Value) -> Result<(Value, usize), CallError> {
        let (path, body) = match self.dialect {
            Dialect::JsonRpc => (
                "/".to_owned(),
                json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 1}).to_string(),
            ),
            Dialect::Rest => (format!("/{method}"), params.to_string()),
        };
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body.as_bytes());
        self.stream.write_all(&req).map_err(|_| CallError::Io)?;
        let mut received = 0;
        loop {
            match self.framer.parse(&self.buf[..self.end], false) {
                Ok(Some(reply)) => {
                    let payload = reply.body_bytes(&self.buf);
                    let ok = reply.is_success();
                    self.buf.copy_within(reply.len..self.end, 0);
                    self.end -= reply.len;
                    if reply.close {
                        return Err(CallError::Io);
                    }
                    if !ok {
                        return Err(CallError::Status);
                    }
                    let value: Value = serde_json::from_slice(&payload).map_err(|_| CallError::Reply)?;
                    let result = match self.dialect {
                        Dialect::JsonRpc => value.get("result").cloned().ok_or(CallError::Reply)?,
                        Dialect::Rest => value,
                    };
                    return Ok((result, received));
                }
                Ok(None) => {}
                // The stream cannot be framed any more: drop the connection.
                Err(_) => return Err(CallError::Io),
            }
            if self.end == self.buf.len() {
                let len = self.buf.len() * 2;
                self.buf.resize(len, 0);
            }
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(CallError::Io),
                Ok(n) => {
                    self.end += n;
                    received += n;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(CallError::Io),
            }
        }
    }
}

/// Runs chains on every connection and reports per-call figures plus chain figures.
pub fn run(config: &ChainConfig) -> io::Result<(Report, ChainStats)> {
    if config.connections == 0 || config.duration.is_zero() || config.min > config.max {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "need connections >= 1, a positive duration and min <= max",
        ));
    }
    TcpStream::connect_timeout(&config.addr, Duration::from_secs(5))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {}: {e}", config.addr)))?;
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + config.warmup;
    let end = measure_from + config.duration;
    let handles: Vec<_> = (0..config.connections)
        .map(|t| {
            let config = config.clone();
            thread::Builder::new()
                .name(format!("ucall-chain-{t}"))
                .spawn(move || -> io::Result<Stats> {
                    if let Some(cpu) = config.cpu {
                        pin_to_cpu(cpu)?;
                    }
                    Ok(worker(&config, start, measure_from, end))
                })
        })
        .collect::<io::Result<_>>()?;

    let cpu_percent = cpu_percent_over(measure_from, end);

    let mut total = Stats::new();
    for handle in handles {
        let stats = handle
            .join()
            .map_err(|_| io::Error::other("a chain thread panicked"))??;
        total.calls += stats.calls;
        total.bytes += stats.bytes;
        total.connects += stats.connects;
        total.chains += stats.chains;
        total.errors.add(&stats.errors);
        total
            .calls_hist
            .add(&stats.calls_hist)
            .map_err(|e| io::Error::other(e.to_string()))?;
        total
            .chains_hist
            .add(&stats.chains_hist)
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let elapsed = config.duration.as_secs_f64();
    let report = Report {
        requests: total.calls,
        elapsed,
        requests_per_sec: total.calls as f64 / elapsed,
        bytes_per_sec: total.bytes as f64 / elapsed,
        errors: total.errors,
        connects: total.connects,
        latency: latency_of(&total.calls_hist),
        cpu_percent,
    };
    let chains = ChainStats {
        chains: total.chains,
        chains_per_sec: total.chains as f64 / elapsed,
        latency: latency_of(&total.chains_hist),
    };
    Ok((report, chains))
}

/// One connection's loop: chains until `end`. Calls and chains that complete before
/// `measure_from` are not counted.
fn worker(config: &ChainConfig, start: Instant, measure_from: Instant, end: Instant) -> Stats {
    let now = Instant::now();
    if start > now {
        thread::sleep(start - now);
    }
    let mut stats = Stats::new();
    let mut measuring = false;
    let mut client: Option<Client> = None;
    'chains: while Instant::now() < end {
        let chain_start = Instant::now();
        let mut results = Vec::with_capacity(config.count);
        let mut numbers = Vec::new();
        // Call 0 draws the numbers, calls 1..=count compute, the last averages.
        let mut step = 0;
        while step <= config.count + 1 {
            let now = Instant::now();
            if now >= end {
                break 'chains;
            }
            if !measuring && now >= measure_from {
                stats = Stats::new();
                measuring = true;
            }
            let (method, params) = if step == 0 {
                (
                    "gen_rand_ints",
                    json!({"min": config.min, "max": config.max, "count": config.count}),
                )
            } else if step <= config.count {
                ("fibonacci", json!({ "n": numbers[step - 1] }))
            } else {
                ("average_container", json!({ "values": results }))
            };
            let conn = match client.as_mut() {
                Some(c) => c,
                None => match Client::connect(config.addr, config.dialect) {
                    Ok(c) => {
                        stats.connects += 1;
                        client.insert(c)
                    }
                    Err(_) => {
                        stats.errors.connect += 1;
                        thread::sleep(Duration::from_millis(10));
                        continue 'chains;
                    }
                },
            };
            let sent = Instant::now();
            let outcome = conn.call(method, &params);
            let done = Instant::now();
            match outcome {
                Ok((value, bytes)) => {
                    stats.calls += 1;
                    stats.bytes += bytes as u64;
                    stats.calls_hist.saturating_record((done - sent).as_nanos() as u64);
                    if step == 0 {
                        match serde_json::from_value::<Vec<u64>>(value) {
                            Ok(v) if v.len() == config.count => numbers = v,
                            _ => {
                                stats.errors.expect += 1;
                                continue 'chains;
                            }
                        }
                    } else if step <= config.count {
                        match value.as_u64() {
                            Some(v) => results.push(v),
                            None => {
                                stats.errors.expect += 1;
                                continue 'chains;
                            }
                        }
                    } else if !value.is_number() {
                        stats.errors.expect += 1;
                        continue 'chains;
                    }
                }
                Err(e) => {
                    stats.calls += 1;
                    match e {
                        CallError::Io => {
                            stats.errors.io += 1;
                            client = None;
                        }
                        CallError::Reply => stats.errors.expect += 1,
                        CallError::Status => stats.errors.status += 1,
                    }
                    continue 'chains;
                }
            }
            step += 1;
        }
        if measuring && chain_start >= measure_from {
            stats.chains += 1;
            stats
                .chains_hist
                .saturating_record(chain_start.elapsed().as_nanos() as u64);
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    /// A blocking server for one connection at a time that knows the chain's three methods.
    fn serve(dialect: Dialect) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for sock in listener.incoming() {
                let Ok(sock) = sock else { return };
                thread::spawn(move || {
                    let mut out = sock.try_clone().unwrap();
                    let mut reader = BufReader::new(sock);
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
                        let mut length = 0;
                        loop {
                            line.clear();
                            reader.read_line(&mut line).unwrap();
                            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                                length = v.trim().parse().unwrap();
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        let v: Value = serde_json::from_slice(&body).unwrap();
                        let (method, params) = match dialect {
                            Dialect::JsonRpc => (v["method"].as_str().unwrap().to_owned(), v["params"].clone()),
                            Dialect::Rest => (path[1..].to_owned(), v),
                        };
                        let result = match method.as_str() {
                            "gen_rand_ints" => json!(vec![params["min"].as_u64().unwrap(); 3]),
                            "fibonacci" => json!(params["n"].as_u64().unwrap() + 1),
                            _ => json!(1.5),
                        };
                        let reply = match dialect {
                            Dialect::JsonRpc => json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string(),
                            Dialect::Rest => result.to_string(),
                        };
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", reply.len());
                        if out.write_all(format!("{head}{reply}").as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn runs_dependent_chains_in_both_dialects() {
        for dialect in [Dialect::JsonRpc, Dialect::Rest] {
            let mut c = ChainConfig::sequential(serve(dialect));
            c.dialect = dialect;
            c.count = 3;
            c.connections = 2;
            c.duration = Duration::from_millis(300);
            c.warmup = Duration::from_millis(50);
            let (report, chains) = run(&c).unwrap();
            assert_eq!(report.errors.total(), 0, "{report:?}");
            assert!(chains.chains > 0, "{chains:?}");
            // Five calls per chain: draw, three computations, average.
            assert!(report.requests >= 5 * chains.chains, "{report:?} {chains:?}");
            assert!(chains.latency.p50 >= report.latency.p50);
        }
    }
}
