// SPDX-License-Identifier: Apache-2.0
//! The server `make bench` measures: `sum`, `echo` and the rpc.hpp comparison set.
//!
//! ```sh
//! cargo run --release -p ucall-examples --bin bench_server -- --port 8545 --engine poll
//! curl -s localhost:8545 -d '{"jsonrpc":"2.0","method":"fibonacci","params":{"n":20},"id":1}'
//! ```
//!
//! Every procedure has the same definition in the peer servers under `benches/peers/`
//! (Python), so that all of them compute the same results:
//!
//! | procedure | params | result |
//! |---|---|---|
//! | `sum` | `a`, `b` (integers) | `a + b` |
//! | `echo` | `data` (any JSON, or an attachment) | `data`, passed through as raw text (an attachment as an attachment) |
//! | `fibonacci` | `n` | the n-th Fibonacci number, computed by naive recursion (CPU-bound) |
//! | `hash_complex` | `obj`: `{id, name, flag1, flag2, vals: [12 bytes]}` | a hex string, see [`hash_complex`] |
//! | `std_dev` | `values` (10 numbers) | their population standard deviation |
//! | `average_container` | `values` (unsigned integers) | their mean |
//! | `gen_rand_ints` | `min`, `max`, `count` | `count` pseudo-random integers in `min..=max` |

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use ucall_core::{Call, Reply, RpcError, Server};

/// The struct argument of `hash_complex`.
#[derive(Deserialize)]
struct Complex {
    id: i64,
    name: String,
    flag1: bool,
    flag2: bool,
    vals: [u8; 12],
}

/// Naive recursion on purpose: the workload is the CPU time it takes.
fn fibonacci(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fibonacci(n - 1) + fibonacci(n - 2)
    }
}

/// Each byte of `name` combined with the reversed `vals` (added when `flag1`, else
/// multiplied), written in lowercase hex; `flag2` appends `id` in hex.
fn hash_complex(c: &Complex) -> String {
    use std::fmt::Write;
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

/// Population standard deviation.
fn std_dev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    var.sqrt()
}

fn average(values: &[u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().map(|&v| u128::from(v)).sum::<u128>() as f64 / values.len() as f64
}

/// splitmix64 over a shared counter: cheap, deterministic per process, good enough for test data.
fn next_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn gen_rand_ints(call: &Call<'_>) -> Result<Vec<u64>, RpcError> {
    let min: u64 = call.get(0, "min")?;
    let max: u64 = call.get(1, "max")?;
    let count: usize = call.get(2, "count")?;
    if min > max || count > 1_000_000 {
        return Err(RpcError::invalid_params(
            "Invalid params: need min <= max and count <= 1000000",
        ));
    }
    // The full range has 2^64 values: no span to take a remainder by.
    Ok(match (max - min).checked_add(1) {
        Some(span) => (0..count).map(|_| min + next_random() % span).collect(),
        None => (0..count).map(|_| next_random()).collect(),
    })
}

fn main() {
    let config = ucall_examples::config_from_args();
    let server = Server::builder()
        .config(config)
        .procedure("sum", |call| {
            call.get::<i64>(0, "a")?
                .checked_add(call.get::<i64>(1, "b")?)
                .ok_or_else(|| RpcError::invalid_params("Invalid params: the sum does not fit in 64 bits"))
        })
        .handler("echo", |call: &Call<'_>, reply: &mut Reply<'_>| {
            if let Ok(found) = call.params().attachment(0, "data") {
                // A binary message's attachment (docs/wire.md) comes back as one.
                let data = ucall_core::Bytes::copy_from_slice(found.bytes);
                match found.array {
                    Some(array) => reply.array(array.dtype, &array.shape().collect::<Vec<_>>(), data)?,
                    None => reply.bytes(data),
                }
                return Ok(());
            }
            let data = call
                .params()
                .raw_at(0, "data")
                .ok_or_else(|| RpcError::invalid_params("Invalid params: missing parameter 'data'"))?;
            reply.raw_trusted(data);
            Ok(())
        })
        .procedure("fibonacci", |call| {
            let n: u64 = call.get(0, "n")?;
            // Naive recursion: each step up nearly doubles the time (n = 40 takes seconds of
            // the worker's core, n = 92 years).
            if n > 35 {
                return Err(RpcError::invalid_params("Invalid params: n must be at most 35"));
            }
            Ok(fibonacci(n))
        })
        .procedure("hash_complex", |call| Ok(hash_complex(&call.get::<Complex>(0, "obj")?)))
        .procedure("std_dev", |call| Ok(std_dev(&call.get::<Vec<f64>>(0, "values")?)))
        .procedure("average_container", |call| {
            Ok(average(&call.get::<Vec<u64>>(0, "values")?))
        })
        .procedure("gen_rand_ints", gen_rand_ints)
        .bind();
    if let Err(e) = server.and_then(Server::run) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procedures_compute_the_documented_results() {
        assert_eq!(fibonacci(20), 6765);
        let c = Complex {
            id: 255,
            name: "ab".into(),
            flag1: true,
            flag2: true,
            vals: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
        };
        // 'a' + 12 = 0x6d, 'b' + 11 = 0x6d, then id 0xff.
        assert_eq!(hash_complex(&c), "6d6dff");
        assert!((std_dev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) - 2.0).abs() < 1e-12);
        assert!((average(&[1, 2, 3, 4]) - 2.5).abs() < 1e-12);
    }
}
