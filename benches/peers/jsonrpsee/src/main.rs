// SPDX-License-Identifier: Apache-2.0
//! The benchmark procedures on jsonrpsee: JSON-RPC 2.0 over HTTP/1.1 and WebSocket on one
//! port, on one tokio thread (a current-thread runtime), as `make bench` runs every server.
//!
//! ```sh
//! cargo run --release --manifest-path benches/peers/jsonrpsee/Cargo.toml -- --port 0
//! ```
//!
//! Prints `listening on 127.0.0.1:PORT` once bound; SIGINT or SIGTERM stops it. The
//! procedures compute what `examples/rust/src/bin/bench_server.rs` and
//! `benches/peers/procs.py` compute; params come by name or by position.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use jsonrpsee::server::{RpcModule, Server, ServerConfig};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct Sum {
    a: i64,
    b: i64,
}

#[derive(Deserialize)]
struct Echo<'a> {
    #[serde(borrow)]
    data: &'a RawValue,
}

#[derive(Deserialize)]
struct Fibonacci {
    n: u64,
}

#[derive(Deserialize)]
struct Complex {
    id: i64,
    name: String,
    flag1: bool,
    flag2: bool,
    vals: [u8; 12],
}

#[derive(Deserialize)]
struct HashComplex {
    obj: Complex,
}

#[derive(Deserialize)]
struct Doubles {
    values: Vec<f64>,
}

#[derive(Deserialize)]
struct Uints {
    values: Vec<u64>,
}

#[derive(Deserialize)]
struct RandInts {
    min: u64,
    max: u64,
    count: usize,
}

fn invalid(message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(-32602, message.into(), None::<()>)
}

/// Named (`{"a":1}`) or positional (`[1]`) params: serde's derived structs take both.
fn args<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    params.parse::<T>().map_err(|e| invalid(format!("Invalid params: {}", e.message())))
}

fn fibonacci(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fibonacci(n - 1) + fibonacci(n - 2)
    }
}

fn hash_complex(c: &Complex) -> String {
    let mut rev = c.vals;
    rev.reverse();
    let mut out = String::with_capacity(c.name.len() * 3 + 16);
    for (i, b) in c.name.bytes().enumerate() {
        let v = u64::from(rev[i % 12]);
        let acc = if c.flag1 { u64::from(b) + v } else { u64::from(b) * v };
        let _ = write!(out, "{acc:x}");
    }
    if c.flag2 {
        let _ = write!(out, "{:x}", c.id);
    }
    out
}

fn std_dev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt()
}

fn average(values: &[u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().map(|&v| u128::from(v)).sum::<u128>() as f64 / values.len() as f64
}

fn next_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn module() -> Result<RpcModule<()>, Box<dyn std::error::Error>> {
    let mut m = RpcModule::new(());
    m.register_method("sum", |p, _, _| {
        let s: Sum = args(&p)?;
        s.a.checked_add(s.b).ok_or_else(|| invalid("Invalid params: the sum does not fit in 64 bits"))
    })?;
    // The argument goes back as the JSON text the client sent, as UCall's echo does.
    m.register_method("echo", |p, _, _| {
        let text = p.as_str().unwrap_or("null");
        let e: Echo<'_> = serde_json::from_str(text)
            .or_else(|_| serde_json::from_str::<(&RawValue,)>(text).map(|(data,)| Echo { data }))
            .map_err(|e| invalid(format!("Invalid params: {e}")))?;
        Ok::<Box<RawValue>, ErrorObjectOwned>(e.data.to_owned())
    })?;
    m.register_method("fibonacci", |p, _, _| {
        let f: Fibonacci = args(&p)?;
        if f.n > 35 {
            return Err(invalid("Invalid params: n must be at most 35"));
        }
        Ok(fibonacci(f.n))
    })?;
    m.register_method("hash_complex", |p, _, _| {
        args::<HashComplex>(&p).map(|h| hash_complex(&h.obj))
    })?;
    m.register_method("std_dev", |p, _, _| args::<Doubles>(&p).map(|d| std_dev(&d.values)))?;
    m.register_method("average_container", |p, _, _| args::<Uints>(&p).map(|u| average(&u.values)))?;
    m.register_method("gen_rand_ints", |p, _, _| {
        let r: RandInts = args(&p)?;
        if r.min > r.max || r.count > 1_000_000 {
            return Err(invalid("Invalid params: need min <= max and count <= 1000000"));
        }
        Ok(match (r.max - r.min).checked_add(1) {
            Some(span) => (0..r.count).map(|_| r.min + next_random() % span).collect::<Vec<u64>>(),
            None => (0..r.count).map(|_| next_random()).collect(),
        })
    })?;
    Ok(m)
}

fn parse_args() -> Result<(String, u16), String> {
    let (mut host, mut port) = ("127.0.0.1".to_string(), 8545u16);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--host" => host = value,
            "--port" => port = value.parse().map_err(|_| format!("bad port {value:?}"))?,
            _ => return Err(format!("unknown option {flag} (known: --host, --port)")),
        }
    }
    Ok((host, port))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (host, port) = parse_args()?;
    // 64 MiB as UCall's default: the 1.6 MB echo is 2.1 MB of base64 each way.
    let config = ServerConfig::builder()
        .max_request_body_size(64 << 20)
        .max_response_body_size(64 << 20)
        .max_connections(10_000)
        .build();
    let server = Server::builder().set_config(config).build((host.as_str(), port)).await?;
    let addr = server.local_addr()?;
    let handle = server.start(module()?);
    println!("listening on {addr} (jsonrpsee, 1 tokio thread)");
    std::io::stdout().flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let _ = handle.stop();
    handle.stopped().await;
    Ok(())
}
