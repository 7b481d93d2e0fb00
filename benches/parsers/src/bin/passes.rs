// SPDX-License-Identifier: Apache-2.0
//! What checking a large reply costs, pass by pass: a 1.6 MB echo's reply (2.1 MB of
//! base64 in one string) through each pass `ucall_core` makes over it, and the passes that
//! could replace them. Microseconds, best of 7 rounds, with the text in cache ("hot") and
//! after 64 MB were written in between ("cold", as a reply read among 100 in flight is).
//!
//! Run: `cargo run --release --manifest-path benches/parsers/Cargo.toml --bin passes`

use std::hint::black_box;
use std::time::Instant;

use serde::de::IgnoredAny;

/// Best microseconds of one call over 7 rounds of 20; `cold` evicts the caches before each.
fn micros(cold: bool, mut f: impl FnMut() -> usize) -> f64 {
    let mut flush = vec![0u8; 64 << 20];
    let mut best = f64::MAX;
    for round in 0..7 {
        let mut total = 0.0;
        for _ in 0..20 {
            if cold {
                flush.fill(round as u8 + 1);
                black_box(&flush);
            }
            let start = Instant::now();
            black_box(f());
            total += start.elapsed().as_secs_f64();
        }
        best = best.min(total / 20.0);
    }
    best * 1e6
}

fn main() {
    let image: Vec<u8> = (0..32 * 224 * 224).map(|i| (i * 7 % 251) as u8).collect();
    let b64 = base64_simd::STANDARD.encode_to_string(image);
    let text = format!(r#"{{"jsonrpc":"2.0","result":"{b64}","id":7}}"#);
    let bytes = text.as_bytes();
    let passes: Vec<(&str, Box<dyn Fn() -> usize>)> = vec![
        (
            "UTF-8 (simdutf8)",
            Box::new(|| usize::from(ucall_core::jsonrpc::as_text(black_box(bytes)).is_some())),
        ),
        (
            "`[` `{` count (memchr2)",
            Box::new(|| memchr::memchr2_iter(b'[', b'{', black_box(bytes)).take(129).count()),
        ),
        (
            "`\\` find (memchr)",
            Box::new(|| memchr::memchr(b'\\', black_box(bytes)).unwrap_or(0)),
        ),
        (
            "`[` `{` `\\` (memchr3)",
            Box::new(|| {
                memchr::memchr3_iter(b'[', b'{', b'\\', black_box(bytes))
                    .take(129)
                    .count()
            }),
        ),
        (
            "sonic-rs skip (IgnoredAny)",
            Box::new(|| usize::from(sonic_rs::from_str::<IgnoredAny>(black_box(&text)).is_ok())),
        ),
        (
            "sonic-rs skip from bytes",
            Box::new(|| usize::from(sonic_rs::from_slice::<IgnoredAny>(black_box(bytes)).is_ok())),
        ),
        (
            "is_json (all of the above it does)",
            Box::new(|| usize::from(ucall_core::jsonrpc::message::is_json(black_box(&text)))),
        ),
        (
            "members walk (Param::members)",
            Box::new(|| ucall_core::Param::new(black_box(&text)).members().count()),
        ),
        (
            "object_members: is_json and the members in one",
            Box::new(|| {
                let names = ["id", "result", "error"];
                usize::from(ucall_core::jsonrpc::message::object_members(black_box(&text), &names).is_ok())
            }),
        ),
    ];
    println!("| pass over a {} B reply | hot (µs) | cold (µs) |", text.len());
    println!("|---|---:|---:|");
    for (name, pass) in &passes {
        println!("| {name} | {:.0} | {:.0} |", micros(false, pass), micros(true, pass));
    }
}
