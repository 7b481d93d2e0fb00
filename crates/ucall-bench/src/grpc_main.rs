// SPDX-License-Identifier: Apache-2.0
//! `ucall-load-grpc`: closed-loop load over gRPC for the servers of
//! `benches/peers/bench.proto`, with the figures and JSON of `ucall-load`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use ucall_bench::grpc::{self, Call, GrpcConfig};
use ucall_bench::load;

/// A run made of dependent calls.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scenario {
    /// GenRandInts(5, 30, 1000), one Fibonacci per number, then AverageContainer.
    Sequential,
}

/// Closed-loop gRPC load: every connection keeps --pipeline unary calls in flight (HTTP/2
/// streams) and starts a new one as each completes.
#[derive(Debug, Parser)]
#[command(name = "ucall-load-grpc", version)]
struct Args {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:50051")]
    addr: String,
    /// HTTP/2 connections.
    #[arg(long, short = 'c', default_value_t = 1)]
    connections: usize,
    /// Calls in flight per connection.
    #[arg(long, short = 'p', default_value_t = 1)]
    pipeline: usize,
    /// Seconds to measure.
    #[arg(long, short = 'd', default_value_t = 5.0)]
    duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// The procedure, by its JSON-RPC name: sum, echo, fibonacci, hash_complex, std_dev,
    /// average_container, gen_rand_ints.
    #[arg(long, default_value = "sum")]
    method: String,
    /// A file with the params object, as the JSON-RPC workloads send it (echo's data in base64).
    #[arg(long)]
    params: Option<PathBuf>,
    /// The expected result, as JSON; a reply that differs counts as an error.
    #[arg(long)]
    expect_json: Option<String>,
    /// Run dependent call chains instead of repeating one call.
    #[arg(long, value_enum)]
    scenario: Option<Scenario>,
    /// Pin the load generator to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Print the results as one JSON object.
    #[arg(long)]
    json: bool,
}

fn config(args: &Args) -> Result<GrpcConfig, String> {
    let secs = |name: &str, v: f64| {
        Duration::try_from_secs_f64(v).map_err(|_| format!("--{name} must be a non-negative number of seconds"))
    };
    let call = match args.scenario {
        Some(Scenario::Sequential) => None,
        None => {
            let params: Value = match &args.params {
                Some(path) => {
                    let text = std::fs::read(path).map_err(|e| format!("--params {}: {e}", path.display()))?;
                    serde_json::from_slice(&text).map_err(|e| format!("--params {}: {e}", path.display()))?
                }
                None => json!({"a": 1, "b": 2}),
            };
            Some(Call::from_json(&args.method, &params).map_err(|e| e.to_string())?)
        }
    };
    let expect = match &args.expect_json {
        Some(text) => Some(serde_json::from_str(text).map_err(|e| format!("--expect-json: {e}"))?),
        None => None,
    };
    Ok(GrpcConfig {
        addr: args.addr.clone(),
        connections: args.connections,
        pipeline: args.pipeline,
        duration: secs("duration", args.duration)?,
        warmup: secs("warmup", args.warmup)?,
        call,
        expect,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ucall-load-grpc: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(cpu) = args.cpu {
        if let Err(e) = load::pin_to_cpu(cpu) {
            eprintln!("ucall-load-grpc: cannot pin to CPU {cpu}: {e}");
            return ExitCode::from(2);
        }
    }
    let (r, chains) = match grpc::run(&config) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ucall-load-grpc: {e}");
            return ExitCode::FAILURE;
        }
    };
    let l = &r.latency;
    let mut v = json!({
        "addr": config.addr,
        "proto": "grpc",
        "connections": config.connections,
        "pipeline": config.pipeline,
        "duration_s": r.elapsed,
        "warmup_s": config.warmup.as_secs_f64(),
        "requests": r.requests,
        "requests_per_s": r.requests_per_sec,
        "calls_per_s": r.requests_per_sec,
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
        "latency_us": {"mean": l.mean, "p50": l.p50, "p99": l.p99, "p999": l.p999, "max": l.max},
        "client_cpu_percent": r.cpu_percent,
    });
    if let Some(c) = &chains {
        v["scenario"] = "sequential".into();
        v["chains"] = json!({
            "completed": c.chains,
            "per_s": c.chains_per_sec,
            "latency_us": {"mean": c.latency.mean, "p50": c.latency.p50, "p99": c.latency.p99, "max": c.latency.max},
        });
    }
    if args.json {
        println!("{v}");
    } else {
        println!(
            "ucall-load-grpc: {}, {} connection(s), {} in flight each, {:.1} s measured after {:.1} s warm-up",
            config.addr,
            config.connections,
            config.pipeline,
            r.elapsed,
            config.warmup.as_secs_f64()
        );
        println!("  calls/s       {:.1}", r.requests_per_sec);
        println!(
            "  errors        {} (status {}, expect {}, io {})",
            r.errors.total(),
            r.errors.status,
            r.errors.expect,
            r.errors.io
        );
        println!(
            "  latency (us)  mean {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            l.mean, l.p50, l.p99, l.p999, l.max
        );
        if let Some(c) = &chains {
            println!("  chains        {} ({:.2}/s)", c.chains, c.chains_per_sec);
        }
    }
    ExitCode::SUCCESS
}
