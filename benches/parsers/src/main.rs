// SPDX-License-Identifier: Apache-2.0
//! Which JSON parser should read requests? Each candidate does the work the server does
//! per request: validate the whole text, find `method`, keep `id` and `params`, then read
//! the arguments the procedure needs. Prints a Markdown table of nanoseconds per request
//! (best of several rounds, so that a busy neighbour inflates nothing).
//!
//! Run: `cargo run --release --manifest-path benches/parsers/Cargo.toml`

use std::hint::black_box;
use std::time::Instant;

use serde::Deserialize;
use ucall_core::jsonrpc::message::{parse_request, Envelope};
use ucall_core::Call;

struct Shape {
    name: &'static str,
    text: String,
    /// Read the arguments from raw params text (the procedure's share of the work).
    args: Args,
}

#[derive(Clone, Copy)]
enum Args {
    TwoInts,
    Struct,
    ThousandInts,
    BigString,
}

fn shapes() -> Vec<Shape> {
    let numbers: Vec<String> = (0..1000u64).map(|i| (i * 7_919 % 100_003).to_string()).collect();
    let payload: String = (0..1_600_000).map(|i| char::from(b'A' + (i % 26) as u8)).collect();
    vec![
        Shape {
            name: "sum, named params (60 B)",
            text: r#"{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":0}"#.into(),
            args: Args::TwoInts,
        },
        Shape {
            name: "sum, positional params (52 B)",
            text: r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":0}"#.into(),
            args: Args::TwoInts,
        },
        Shape {
            name: "HashComplex struct (150 B)",
            text: r#"{"jsonrpc":"2.0","method":"HashComplex","params":{"a":{"id":42,"name":"some name","flag1":true,"flag2":false,"payload":"AAECAwQFBgcICQoL"},"b":0},"id":"c9a1"}"#.into(),
            args: Args::Struct,
        },
        Shape {
            name: "AverageContainer, 1000 ints (5 KB)",
            text: format!(r#"{{"jsonrpc":"2.0","method":"avg","params":{{"a":[{}],"b":0}},"id":7}}"#, numbers.join(",")),
            args: Args::ThousandInts,
        },
        Shape {
            name: "echo, 1.6 MB string",
            text: format!(r#"{{"jsonrpc":"2.0","method":"echo","params":{{"a":"{payload}","b":0}},"id":7}}"#),
            args: Args::BigString,
        },
    ]
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Complex<'a> {
    id: u64,
    name: &'a str,
    flag1: bool,
    flag2: bool,
    payload: &'a str,
}

/// serde_json with borrowed raw values: what ucall-core does today.
fn with_serde_json(text: &[u8], args: Args) -> u64 {
    // As the server does: one UTF-8 check, then the parser works on text.
    let text = std::str::from_utf8(text).unwrap();
    let Ok(Envelope::Request(request)) = parse_request(text) else {
        panic!("not a request")
    };
    let call = Call::new(&request.method, request.params, request.id);
    let id_len = request.id.map_or(0, str::len) as u64;
    id_len
        + match args {
            Args::TwoInts => (call.get::<i64>(0, "a").unwrap() + call.get::<i64>(1, "b").unwrap()) as u64,
            Args::Struct => call.get::<Complex<'_>>(0, "a").unwrap().id,
            Args::ThousandInts => {
                let list = call.params().at(0, "a").unwrap();
                list.elements().map(|n| n.raw().parse::<u64>().unwrap()).sum()
            }
            Args::BigString => call.get::<&str>(0, "a").unwrap().len() as u64,
        }
}

#[derive(Deserialize)]
struct SonicEnvelope<'a> {
    #[allow(dead_code)]
    jsonrpc: &'a str,
    method: &'a str,
    #[serde(borrow)]
    params: Option<sonic_rs::LazyValue<'a>>,
    #[serde(borrow)]
    id: Option<sonic_rs::LazyValue<'a>>,
}

/// sonic-rs (SIMD) with lazy values for id and params.
fn with_sonic(text: &[u8], args: Args) -> u64 {
    let envelope: SonicEnvelope<'_> = sonic_rs::from_slice(text).unwrap();
    assert_eq!(envelope.method.len() > 0, true);
    let params = envelope.params.unwrap();
    let params = params.as_raw_str();
    let id_len = envelope.id.map_or(0, |id| id.as_raw_str().len()) as u64;
    let get = |key: &str| sonic_rs::get_from_str(params, &[key]).unwrap();
    id_len
        + match args {
            Args::TwoInts if params.starts_with('[') => {
                let a = sonic_rs::get_from_str(params, &[0usize]).unwrap();
                let b = sonic_rs::get_from_str(params, &[1usize]).unwrap();
                (sonic_rs::from_str::<i64>(a.as_raw_str()).unwrap()
                    + sonic_rs::from_str::<i64>(b.as_raw_str()).unwrap()) as u64
            }
            Args::TwoInts => {
                (sonic_rs::from_str::<i64>(get("a").as_raw_str()).unwrap()
                    + sonic_rs::from_str::<i64>(get("b").as_raw_str()).unwrap()) as u64
            }
            Args::Struct => sonic_rs::from_str::<Complex<'_>>(get("a").as_raw_str()).unwrap().id,
            Args::ThousandInts => sonic_rs::to_array_iter(get("a").as_raw_str())
                .map(|n| sonic_rs::from_str::<u64>(n.unwrap().as_raw_str()).unwrap())
                .sum(),
            Args::BigString => sonic_rs::from_str::<&str>(get("a").as_raw_str()).unwrap().len() as u64,
        }
}

/// simd-json's borrowed DOM. It parses in place, so the request is copied first (the
/// server could parse in its own buffer, but would still lose the id's original bytes).
fn with_simd_json(text: &[u8], scratch: &mut Vec<u8>, args: Args) -> u64 {
    use simd_json::prelude::*;
    scratch.clear();
    scratch.extend_from_slice(text);
    let value = simd_json::to_borrowed_value(scratch).unwrap();
    let params = value.get("params").unwrap();
    let arg = |key: &str, index: usize| {
        if params.is_array() {
            params.get_idx(index).unwrap()
        } else {
            params.get(key).unwrap()
        }
    };
    match args {
        Args::TwoInts => (arg("a", 0).as_i64().unwrap() + arg("b", 1).as_i64().unwrap()) as u64,
        Args::Struct => arg("a", 0).get("id").unwrap().as_u64().unwrap(),
        Args::ThousandInts => arg("a", 0)
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum(),
        Args::BigString => arg("a", 0).as_str().unwrap().len() as u64,
    }
}

/// Best nanoseconds per call over `rounds` rounds of `iterations` calls.
fn measure(mut f: impl FnMut() -> u64, iterations: u32, rounds: u32) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..iterations {
            black_box(f());
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(iterations));
    }
    best
}

fn main() {
    println!("| request shape | ucall-core: serde_json, sonic-rs from 64 KiB (ns) | sonic-rs, lazy (ns) | simd-json, DOM (ns) |");
    println!("|---|---:|---:|---:|");
    let mut scratch = Vec::new();
    for shape in shapes() {
        let text = shape.text.as_bytes();
        let expected = with_serde_json(text, shape.args);
        assert_eq!(with_sonic(text, shape.args), expected, "{}", shape.name);
        let iterations = (20_000_000 / text.len().max(64)).clamp(20, 200_000) as u32;
        let serde = measure(|| with_serde_json(black_box(text), shape.args), iterations, 7);
        let sonic = measure(|| with_sonic(black_box(text), shape.args), iterations, 7);
        let simd = measure(
            || with_simd_json(black_box(text), &mut scratch, shape.args),
            iterations,
            7,
        );
        println!("| {} | {serde:.0} | {sonic:.0} | {simd:.0} |", shape.name);
    }
}
