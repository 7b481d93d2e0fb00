// SPDX-License-Identifier: Apache-2.0
//! `ucall-load`: a closed-loop load generator for HTTP/1.1 and raw TCP
//! JSON-RPC servers.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ucall_bench::chain::{self, ChainConfig, ChainStats, Dialect};
use ucall_bench::load::{self, Config, Protocol, Report, DEFAULT_BODY};

/// Wire protocol.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Proto {
    /// HTTP/1.1 POST requests.
    Http,
    /// Newline-delimited JSON over raw TCP.
    Tcp,
    /// JSON-RPC in WebSocket text frames, opened with GET on --path.
    Ws,
}

/// A run made of dependent calls instead of one repeated request.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scenario {
    /// rpc.hpp's Sequential: gen_rand_ints(5, 30, 1000), one fibonacci(n) per number,
    /// then average_container of the results; each call waits for the one before.
    Sequential,
}

/// How a scenario puts each call on the wire.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum DialectArg {
    /// POST / with a JSON-RPC 2.0 request.
    Jsonrpc,
    /// POST /METHOD with the params object as the body; the body of the reply is the result.
    Rest,
}

/// Closed-loop load generator: every connection keeps --pipeline requests in
/// flight and sends a new one as each reply arrives.
#[derive(Debug, Parser)]
#[command(name = "ucall-load", version)]
struct Args {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8545")]
    addr: String,
    /// Wire protocol.
    #[arg(long, value_enum, default_value = "http")]
    proto: Proto,
    /// Concurrent connections.
    #[arg(long, short = 'c', default_value_t = 1)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(long, short = 'p', default_value_t = 1)]
    pipeline: usize,
    /// One request per connection: connect, send, read the reply, close.
    #[arg(long)]
    new_connection: bool,
    /// Seconds to measure.
    #[arg(long, short = 'd', default_value_t = 5.0)]
    duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Read the request body from this file (trailing whitespace is dropped).
    #[arg(long, conflicts_with = "body_json")]
    body: Option<PathBuf>,
    /// The request body.
    #[arg(long, default_value = DEFAULT_BODY)]
    body_json: String,
    /// HTTP request target.
    #[arg(long, default_value = "/")]
    path: String,
    /// An extra HTTP header line, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Pin the worker threads to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Worker threads; connections are spread across them.
    #[arg(long, short = 't', default_value_t = 1)]
    threads: usize,
    /// Print the results as one JSON object.
    #[arg(long)]
    json: bool,
    /// Count a reply as an error if its payload lacks this substring.
    #[arg(long)]
    expect: Option<String>,
    /// Send the body N times in one JSON array (a JSON-RPC batch); figures also count calls.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Speak TLS over each connection (HTTP, raw TCP or WebSocket); any server
    /// certificate is accepted.
    #[arg(long)]
    tls: bool,
    /// Run dependent call chains instead of repeating one request (HTTP only).
    #[arg(long, value_enum)]
    scenario: Option<Scenario>,
    /// How --scenario sends each call.
    #[arg(long, value_enum, default_value = "jsonrpc")]
    dialect: DialectArg,
}

fn seconds(name: &str, value: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value).map_err(|_| format!("--{name} must be a non-negative number of seconds"))
}

fn config(args: &Args) -> Result<Config, String> {
    let addr: SocketAddr = args
        .addr
        .to_socket_addrs()
        .map_err(|e| format!("--addr {}: {e}", args.addr))?
        .next()
        .ok_or_else(|| format!("--addr {}: no address", args.addr))?;
    let mut config = Config::new(addr);
    config.proto = match args.proto {
        Proto::Http => Protocol::Http,
        Proto::Tcp => Protocol::Tcp,
        Proto::Ws => Protocol::Ws,
    };
    config.connections = args.connections;
    config.pipeline = args.pipeline;
    config.new_connection = args.new_connection;
    if let Some(bad) = args
        .headers
        .iter()
        .find(|h| !h.contains(':') || h.contains(['\r', '\n']))
    {
        return Err(format!("--header {bad:?}: give one 'Name: value' line"));
    }
    config.headers.clone_from(&args.headers);
    config.duration = seconds("duration", args.duration)?;
    config.warmup = seconds("warmup", args.warmup)?;
    config.body = match &args.body {
        Some(path) => {
            let mut bytes = std::fs::read(path).map_err(|e| format!("--body {}: {e}", path.display()))?;
            while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
                bytes.pop();
            }
            bytes
        }
        None => args.body_json.clone().into_bytes(),
    };
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    if args.batch > 1 {
        let mut batch = Vec::with_capacity((config.body.len() + 1) * args.batch + 1);
        batch.push(b'[');
        for i in 0..args.batch {
            if i > 0 {
                batch.push(b',');
            }
            batch.extend_from_slice(&config.body);
        }
        batch.push(b']');
        config.body = batch;
    }
    config.path = args.path.clone();
    config.threads = args.threads;
    config.cpu = args.cpu;
    config.expect = args.expect.as_ref().map(|s| s.clone().into_bytes());
    config.tls = args.tls;
    Ok(config)
}

fn json_report(config: &Config, batch: usize, r: &Report) -> serde_json::Value {
    serde_json::json!({
        "addr": config.addr.to_string(),
        "proto": config.proto.name(),
        "tls": config.tls,
        "connections": config.connections,
        "pipeline": config.pipeline,
        "new_connection": config.new_connection,
        "threads": config.threads.min(config.connections),
        "duration_s": r.elapsed,
        "warmup_s": config.warmup.as_secs_f64(),
        "requests": r.requests,
        "requests_per_s": r.requests_per_sec,
        "calls_per_request": batch,
        "calls_per_s": r.requests_per_sec * batch as f64,
        "bytes_per_s": r.bytes_per_sec,
        "errors": r.errors.total(),
        "errors_by_kind": {
            "status": r.errors.status,
            "expect": r.errors.expect,
            "io": r.errors.io,
            "connect": r.errors.connect,
            "protocol": r.errors.protocol,
        },
        "connects": r.connects,
        "latency_us": {
            "mean": r.latency.mean,
            "p50": r.latency.p50,
            "p99": r.latency.p99,
            "p999": r.latency.p999,
            "max": r.latency.max,
        },
        "client_cpu_percent": r.cpu_percent,
    })
}

fn text_report(config: &Config, batch: usize, r: &Report) -> String {
    let mut s =
        format!(
        "ucall-load: {} {}, {} connection(s), pipeline {}{}, {} thread(s), {:.1} s measured after {:.1} s warm-up\n",
        config.proto.name(),
        config.addr,
        config.connections,
        config.pipeline,
        if config.new_connection { ", new connection per request" } else { "" },
        config.threads.min(config.connections),
        r.elapsed,
        config.warmup.as_secs_f64(),
    );
    s += &format!("  requests      {}\n", r.requests);
    s += &format!("  requests/s    {:.1}\n", r.requests_per_sec);
    if batch > 1 {
        s += &format!(
            "  calls/s       {:.1} ({batch} per request)\n",
            r.requests_per_sec * batch as f64
        );
    }
    s += &format!("  received      {:.2} MB/s\n", r.bytes_per_sec / 1e6);
    let e = &r.errors;
    s += &format!(
        "  errors        {} (status {}, expect {}, io {}, connect {}, protocol {})\n",
        e.total(),
        e.status,
        e.expect,
        e.io,
        e.connect,
        e.protocol
    );
    if config.new_connection {
        s += &format!("  connections   {}\n", r.connects);
    }
    let l = &r.latency;
    s += &format!(
        "  latency (us)  mean {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}\n",
        l.mean, l.p50, l.p99, l.p999, l.max
    );
    if let Some(cpu) = r.cpu_percent {
        s += &format!("  client CPU    {cpu:.0} % of one core\n");
    }
    s
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ucall-load: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(cpu) = config.cpu {
        if let Err(e) = load::pin_to_cpu(cpu) {
            eprintln!("ucall-load: cannot pin to CPU {cpu}: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(Scenario::Sequential) = args.scenario {
        return run_chain(&args, &config);
    }
    match load::run(&config) {
        Ok(report) => {
            if args.json {
                println!("{}", json_report(&config, args.batch, &report));
            } else {
                print!("{}", text_report(&config, args.batch, &report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ucall-load: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_chain(args: &Args, config: &Config) -> ExitCode {
    if config.proto != Protocol::Http || config.pipeline != 1 || config.new_connection || args.batch != 1 || config.tls
    {
        eprintln!("ucall-load: --scenario runs over plain HTTP, without --pipeline, --new-connection or --batch");
        return ExitCode::from(2);
    }
    let mut chain = ChainConfig::sequential(config.addr);
    chain.connections = config.connections;
    chain.duration = config.duration;
    chain.warmup = config.warmup;
    chain.cpu = config.cpu;
    chain.dialect = match args.dialect {
        DialectArg::Jsonrpc => Dialect::JsonRpc,
        DialectArg::Rest => Dialect::Rest,
    };
    match chain::run(&chain) {
        Ok((report, stats)) => {
            if args.json {
                let mut v = json_report(config, 1, &report);
                v["scenario"] = "sequential".into();
                v["chains"] = chain_json(&stats);
                println!("{v}");
            } else {
                print!("{}", text_report(config, 1, &report));
                let l = &stats.latency;
                println!(
                    "  chains        {} ({:.2}/s), chain latency (ms) mean {:.1}  p50 {:.1}  max {:.1}",
                    stats.chains,
                    stats.chains_per_sec,
                    l.mean / 1e3,
                    l.p50 / 1e3,
                    l.max / 1e3
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ucall-load: {e}");
            ExitCode::FAILURE
        }
    }
}

fn chain_json(stats: &ChainStats) -> serde_json::Value {
    let l = &stats.latency;
    serde_json::json!({
        "completed": stats.chains,
        "per_s": stats.chains_per_sec,
        "latency_us": {"mean": l.mean, "p50": l.p50, "p99": l.p99, "max": l.max},
    })
}
