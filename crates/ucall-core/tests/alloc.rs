// SPDX-License-Identifier: Apache-2.0
//! The hot path allocates nothing per request in steady state: after a warm-up that sizes
//! the reused buffers, a stream of requests through a session makes zero heap allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use ucall_core::_fuzzable::engine_context;
use ucall_core::buffer::OutBuf;
use ucall_core::defer::Sink;
use ucall_core::session::{Limits, Scratch, Session};
use ucall_core::{Call, MetricsConfig, Reply, Router, RpcError};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator unchanged; counting touches only a
// thread-local integer (const-initialised, so it never allocates itself).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller upholds GlobalAlloc's contract, which we pass on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn router() -> Router {
    let mut router = Router::new();
    let sum = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        reply.json(&(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
    };
    router.insert("sum", Arc::new(sum));
    router
}

/// The same procedures, counted in metrics as when serving.
fn router_with_metrics() -> Router {
    let mut router = router();
    router.start_metrics(&MetricsConfig::default());
    router
}

/// Feed `input` `rounds` times, draining the output as an engine would after a write.
/// Returns the allocations made after the first (warm-up) round and the last output.
fn steady_state_allocations(input: &[u8], rounds: usize) -> (usize, Vec<u8>) {
    steady_state_allocations_with(&router(), input, rounds)
}

fn steady_state_allocations_with(router: &Router, input: &[u8], rounds: usize) -> (usize, Vec<u8>) {
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    // As in the engine: deferring is available, though these procedures answer at once.
    let sink = Sink::new(|| {});
    let mut session = Session::new();
    let mut out = OutBuf::new();
    let date = *b"Sun, 06 Nov 1994 08:49:37 GMT";
    let mut before = 0;
    for round in 0..rounds {
        if round == 1 {
            before = allocations();
        }
        let mut ctx = engine_context(router, &limits, &date, &mut scratch, &sink);
        let progress = session.feed(input, &mut out, &mut ctx, usize::MAX);
        assert_eq!(progress.consumed, input.len());
        assert!(!progress.close);
        if round + 1 == rounds {
            // Count before collecting the output: collecting allocates, serving did not.
            return (allocations() - before, out.to_vec());
        }
        let pending = out.pending();
        out.advance(pending);
    }
    unreachable!("rounds must be at least 1")
}

#[test]
fn http_requests_allocate_nothing_in_steady_state() {
    let body = r#"{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":42}"#;
    let request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let pipelined = request.repeat(16);
    let (allocated, out) = steady_state_allocations(pipelined.as_bytes(), 1000);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text.matches(r#"{"jsonrpc":"2.0","id":42,"result":3}"#).count(),
        16,
        "{text}"
    );
    assert_eq!(allocated, 0, "allocations over 999 rounds of 16 requests");
}

#[test]
fn tcp_requests_and_batches_allocate_nothing_in_steady_state() {
    let input = concat!(
        r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"x"}"#,
        "\n",
        r#"[{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1},{"jsonrpc":"2.0","method":"sum","params":[3,4]}]"#,
        "\n"
    );
    let (allocated, out) = steady_state_allocations(input.as_bytes(), 1000);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":3}\n[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":3}]\n"
    );
    assert_eq!(allocated, 0, "allocations over 999 rounds");
}

#[test]
fn counting_calls_in_metrics_allocates_nothing() {
    let router = router_with_metrics();
    let body = r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#;
    let http = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (allocated, _) = steady_state_allocations_with(&router, http.repeat(16).as_bytes(), 1000);
    assert_eq!(
        allocated, 0,
        "allocations over 999 rounds of 16 HTTP requests, metrics on"
    );
    let tcp = concat!(
        r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"x"}"#,
        "\n",
        r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"sum","params":[3,4]}]"#,
        "\n",
    );
    let (allocated, _) = steady_state_allocations_with(&router, tcp.as_bytes(), 1000);
    assert_eq!(allocated, 0, "allocations over 999 rounds of raw TCP texts, metrics on");
    // Every call was counted, notifications too (rendering the page allocates; serving
    // did not). Error replies are left out above: their messages are formatted.
    let page = router.metrics().expect("metrics on").render();
    for line in [
        "ucall_calls_handled_total{method=\"sum\",code=\"ok\"} 19000",
        "ucall_call_duration_seconds_count{method=\"sum\"} 19000",
    ] {
        assert!(page.lines().any(|l| l == line), "{line} missing from\n{page}");
    }
}

#[test]
fn the_counter_sees_allocations() {
    let before = allocations();
    let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(10));
    drop(v);
    assert_eq!(allocations() - before, 1);
}
