// SPDX-License-Identifier: Apache-2.0
//! Hostile input, in memory: mutated requests (from the shared vectors and a set of HTTP
//! requests) fed in random splits through sessions. Whatever arrives, a session must not
//! panic, must consume only what it was given, must stay within its limits, and every
//! raw TCP reply it writes must be one valid JSON text per line.
//!
//! Deterministic (a fixed-seed generator), so a failure reproduces; `UCALL_FUZZ_ROUNDS`
//! runs longer.

#[path = "../../../examples/rust/src/spec.rs"]
mod spec;

use std::path::Path;

use ucall_core::_fuzzable::engine_context;
use ucall_core::buffer::OutBuf;
use ucall_core::defer::Sink;
use ucall_core::session::{Limits, Scratch, Session};
use ucall_core::Server;

/// xorshift64*: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b" ",
    b"\0",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"-1",
    b"1e999",
    b"99999999999999999999",
    b"null",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n",
    b"0\r\n\r\n",
    b"ffffffff\r\n",
    b"Expect: 100-continue\r\n",
    b"Connection: close\r\n",
    b"POST / HTTP/1.1\r\n",
    b"GET /sum?a=1&b=%zz HTTP/1.1\r\n",
    b"\"jsonrpc\":\"2.0\"",
    b"\"method\":\"panic\"",
    b"\"id\":",
    b"\"params\":",
];

fn seeds() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/jsonrpc");
    let mut seeds = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("vectors")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("vector");
        let vector: serde_json::Value = serde_json::from_str(&text).expect("vector JSON");
        if let Some(request) = vector.get("request").and_then(|r| r.as_str()) {
            seeds.push(request.as_bytes().to_vec());
        }
    }
    assert!(seeds.len() > 50, "vectors found: {}", seeds.len());
    let body = r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#;
    for head in [
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x};x=y\r\n{body}\r\n0\r\nT: v\r\n\r\n",
            body.len()
        ),
        format!(
            "POST /subtract HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 29\r\n\r\n{}",
            r#"{"minuend":5,"subtrahend":3}"#
        ),
        "GET /sum?a=1&b=2 HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    ] {
        seeds.push(head.into_bytes());
    }
    seeds
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut input = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        let at = rng.below(input.len() + 1);
        match rng.below(6) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            1 => input.truncate(at),
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                input.splice(at..at, piece.iter().copied());
            }
            3 if !input.is_empty() => {
                let end = (at + rng.below(16)).min(input.len());
                input.drain(at..end);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                input.splice(at..at, other[from..].iter().copied());
            }
            _ => {
                let byte = (rng.next() & 0xff) as u8;
                input.insert(at, byte);
            }
        }
    }
    // Often send it twice or prefix another request, to exercise pipelining after damage.
    if rng.below(3) == 0 {
        let again = input.clone();
        input.extend_from_slice(&again);
    }
    input
}

#[test]
fn sessions_survive_mutated_input_in_any_split() {
    // The `panic` procedure panics on purpose (the server answers -32603); keep its
    // reports out of the output, and every other panic in it.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"asked to panic") {
            default_hook(info);
        }
    }));
    let rounds: usize = std::env::var("UCALL_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let seeds = seeds();
    let builder = spec::register(Server::builder());
    let router = builder.router();
    let limits = Limits {
        max_body_bytes: 4096,
        max_head_bytes: 1024,
        max_batch: 8,
        ..Limits::default()
    };
    let sink = Sink::new(|| {});
    let mut scratch = Scratch::default();
    let mut rng = Rng(0x5EED_CAFE_F00D_0001);
    let date = [b'x'; 29];
    let mut replies = 0usize;
    for round in 0..rounds {
        let input = mutate(&mut rng, &seeds);
        let mut session = Session::new();
        let mut out = OutBuf::new();
        let mut buffered: Vec<u8> = Vec::new();
        let mut offset = 0;
        let mut closed = false;
        let mut ctx = engine_context(router, &limits, &date, &mut scratch, &sink);
        while offset < input.len() && !closed {
            let step = 1 + rng.below(input.len() - offset);
            buffered.extend_from_slice(&input[offset..offset + step]);
            offset += step;
            let progress = session.feed(&buffered, &mut out, &mut ctx, 1 << 20);
            assert!(
                progress.consumed <= buffered.len(),
                "round {round}: consumed more than given"
            );
            buffered.drain(..progress.consumed);
            closed = progress.close;
            assert!(
                buffered.len() <= limits.max_body_bytes + limits.max_head_bytes + 64,
                "round {round}: {} bytes buffered beyond the limits",
                buffered.len()
            );
        }
        if !closed {
            session.end_of_input(&buffered, &mut out, &mut ctx);
        }
        let text = out.to_vec();
        let is_tcp = input
            .iter()
            .find(|c| !c.is_ascii_whitespace())
            .is_some_and(|c| !c.is_ascii_uppercase());
        if is_tcp {
            for line in text.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
                // Grammar only (RFC 8259 §6 leaves number range to implementations, and ids
                // such as 271e999 are echoed as sent).
                assert!(
                    serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok(),
                    "round {round}: reply is not JSON: {}\ninput: {}",
                    String::from_utf8_lossy(line),
                    String::from_utf8_lossy(&input)
                );
                replies += 1;
            }
        } else {
            let heads = text.windows(9).filter(|w| w.starts_with(b"HTTP/1.1 ")).count();
            replies += heads;
        }
    }
    assert!(
        replies > rounds / 4,
        "only {replies} replies over {rounds} rounds: the mutations are too destructive"
    );
}
