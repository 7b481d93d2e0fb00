// SPDX-License-Identifier: Apache-2.0
//! One connection that writes 1,000 requests at once: every reply leaves without the
//! worker ever waiting for a timer meanwhile. Counted, not timed: the test turns the
//! worker itself and counts the waits that ended on their time-out
//! ([`ucall_core::Worker::waits_timed_out`]) while replies were still owed.

mod common;

use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

use common::{call, post, ws_text, Conn};
use ucall_core::EngineKind;

const CALLS: usize = 1000;
/// Every reply holds this once.
const RESULT: &[u8] = b"\"result\":3";

const WS_UPGRADE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// The bytes of `CALLS` pipelined `sum` calls over `protocol`.
fn pipeline(protocol: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    if protocol == "ws" {
        bytes.extend_from_slice(WS_UPGRADE);
    }
    for id in 0..CALLS {
        let text = call("sum", "[1,2]", &id.to_string());
        match protocol {
            "http" => bytes.extend(post("/", text.as_bytes())),
            "tcp" => bytes.extend(format!("{text}\n").into_bytes()),
            _ => bytes.extend(ws_text(&text)),
        }
    }
    bytes
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Turn a one-thread server's worker until `CALLS` replies to one deep pipeline over
/// `protocol` have arrived; returns the waits that timed out while replies were owed.
fn timed_out_waits(engine: EngineKind, protocol: &str) -> u64 {
    let server = common::builder(engine).threads(1).bind().expect("bind");
    let addr = server.local_addr();
    let (stopper, mut workers) = server.into_workers();
    let worker = &mut workers[0];
    // Room for every reply on the client's side, so that no send waits for it to read.
    let mut conn = Conn::open(addr);
    conn.send(&pipeline(protocol));
    conn.stream.set_nonblocking(true).expect("non-blocking");
    let mut received = Vec::new();
    let mut stalls = 0;
    let limit = Instant::now() + Duration::from_secs(60);
    while count(&received, RESULT) < CALLS {
        assert!(
            Instant::now() < limit,
            "{protocol}: {} replies",
            count(&received, RESULT)
        );
        let before = worker.waits_timed_out();
        assert!(worker.turn(Some(Duration::from_secs(5))), "the worker stopped");
        let mut piece = [0u8; 1 << 16];
        loop {
            match conn.stream.read(&mut piece) {
                Ok(0) => panic!("{protocol}: closed"),
                Ok(n) => received.extend_from_slice(&piece[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{protocol}: {e}"),
            }
        }
        // The turn that sends the last replies may wait for a next request that never
        // comes: not a stall once those replies are all here.
        if worker.waits_timed_out() > before && count(&received, RESULT) < CALLS {
            stalls += 1;
        }
    }
    stopper.stop();
    while worker.turn(Some(Duration::from_millis(100))) {}
    stalls
}

#[test]
fn a_deep_pipeline_never_waits_for_a_timer() {
    common::for_each_engine(|engine| {
        let stalls: Vec<(&str, u64)> = ["http", "tcp", "ws"]
            .into_iter()
            .map(|protocol| (protocol, timed_out_waits(engine, protocol)))
            .collect();
        assert!(
            stalls.iter().all(|(_, waits)| *waits == 0),
            "{}: waits ended on a timer while replies were owed: {stalls:?}",
            engine.name()
        );
    });
}
