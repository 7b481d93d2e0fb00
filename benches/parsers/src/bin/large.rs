// SPDX-License-Identifier: Apache-2.0
//! Large messages: which parser skips a message's params faster, and which base64 codec
//! moves `bytes` payloads faster. Prints two Markdown tables (microseconds, best of 7
//! rounds, so that a busy neighbour inflates nothing).
//!
//! Run: `cargo run --release --manifest-path benches/parsers/Cargo.toml --bin large`

use std::hint::black_box;
use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The envelope as ucall-core reads it: `method`, and `params` and `id` kept raw.
#[derive(Deserialize)]
struct SerdeEnvelope<'a> {
    method: &'a str,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    #[allow(dead_code)]
    id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct SonicEnvelope<'a> {
    method: &'a str,
    #[serde(borrow)]
    params: Option<sonic_rs::LazyValue<'a>>,
    #[serde(borrow)]
    #[allow(dead_code)]
    id: Option<sonic_rs::LazyValue<'a>>,
}

/// Best microseconds per call over 7 rounds of `iterations` calls.
fn micros(iterations: u32, mut f: impl FnMut() -> usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..iterations {
            black_box(f());
        }
        best = best.min(start.elapsed().as_secs_f64() / f64::from(iterations));
    }
    best * 1e6
}

/// Deterministic bytes: a 32x224x224 image batch's worth for the echo.
fn payload(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn main() {
    let image = payload(32 * 224 * 224);
    let b64 = base64_simd::STANDARD.encode_to_string(&image);
    let ints: Vec<String> = (0..1000).map(|i| (i * 7919 % 100_000).to_string()).collect();
    let objects: Vec<String> = (0..200)
        .map(|i| format!(r#"{{"id":{i},"name":"user{i}","tags":["a","b"],"ok":true}}"#))
        .collect();
    let shapes = [
        ("sum", r#"{"a":1,"b":2}"#.to_string()),
        ("one 1 KB string", format!(r#"["{}"]"#, &b64[..1024])),
        ("one 16 KB string", format!(r#"["{}"]"#, &b64[..16 * 1024])),
        ("1,000 ints", format!("[[{}]]", ints.join(","))),
        ("200 small objects", format!("[[{}]]", objects.join(","))),
        ("100,000 ints", format!("[[{}]]", vec![ints.join(","); 100].join(","))),
        ("1.6 MB echo", format!(r#"{{"data":"{b64}"}}"#)),
    ];
    println!("| params | message (B) | serde_json (µs) | sonic-rs (µs) | sonic-rs / serde_json |");
    println!("|---|---:|---:|---:|---:|");
    for (name, params) in shapes {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{params},"id":1}}"#);
        let iterations = (200_000_000 / text.len()).clamp(20, 200_000) as u32;
        let serde = micros(iterations, || {
            let e: SerdeEnvelope<'_> = serde_json::from_str(black_box(&text)).expect("valid JSON");
            e.method.len() + e.params.map_or(0, |p| p.get().len())
        });
        let sonic = micros(iterations, || {
            let e: SonicEnvelope<'_> = sonic_rs::from_str(black_box(&text)).expect("valid JSON");
            e.method.len() + e.params.map_or(0, |p| p.as_raw_str().len())
        });
        println!(
            "| {name} | {} | {serde:.2} | {sonic:.2} | {:.2} |",
            text.len(),
            sonic / serde
        );
    }

    println!();
    println!(
        "| 1.6 MB payload ({} B of base64) | base64-simd (µs) | simdutf (µs) |",
        b64.len()
    );
    println!("|---|---:|---:|");
    let text = b64.as_bytes();
    let mut out = vec![0u8; image.len()];
    let decode_simd = micros(50, || {
        base64_simd::STANDARD
            .decode(black_box(text), base64_simd::Out::from_slice(&mut out))
            .expect("base64")
            .len()
    });
    let decode_utf = micros(50, || {
        let mut written = out.len();
        // SAFETY: `text` readable, `out` writable for `written` bytes; they do not overlap.
        let result = unsafe {
            simdutf::base64_to_binary_safe(
                black_box(text).as_ptr(),
                text.len(),
                out.as_mut_ptr(),
                &mut written,
                simdutf::Base64Options::Default,
                simdutf::LastChunkHandlingOptions::Strict,
                false,
            )
        };
        assert_eq!(result.error, simdutf::ErrorCode::Success);
        written
    });
    assert_eq!(out, image);
    let mut encoded = vec![0u8; text.len()];
    let encode_simd = micros(50, || {
        base64_simd::STANDARD
            .encode(black_box(&image), base64_simd::Out::from_slice(&mut encoded))
            .len()
    });
    let encode_utf = micros(50, || {
        // SAFETY: `encoded` holds the whole base64 text; it does not overlap `image`.
        unsafe {
            simdutf::binary_to_base64(
                black_box(&image).as_ptr(),
                image.len(),
                encoded.as_mut_ptr(),
                simdutf::Base64Options::Default,
            )
        }
    });
    assert_eq!(encoded, text);
    println!("| decode | {decode_simd:.0} | {decode_utf:.0} |");
    println!("| encode | {encode_simd:.0} | {encode_utf:.0} |");
}
