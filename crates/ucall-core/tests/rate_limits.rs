// SPDX-License-Identifier: Apache-2.0
//! Rate limits and the per-peer connection cap over loopback, on every engine: a call past
//! its client's limit is refused before it runs (HTTP 429 with `Retry-After`; over raw TCP
//! and WebSocket a JSON-RPC error -32029 with `data.retry_after_ms` and `executed: false`),
//! other clients and procedures keep their share, and `/metrics` counts the refusals.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{call, get, post, show, Conn};
use serde_json::Value as Json;
use ucall_core::{Call, ClientKey, EngineKind, Rate, ServerBuilder};

const WS_HANDSHAKE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// `bytes` as JSON, or fail naming them.
fn parse_reply(bytes: &[u8]) -> Json {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {}", show(bytes)))
}

fn rate(text: &str) -> Rate {
    text.parse().expect("a rate")
}

/// The test builder with `count`, a procedure that counts its runs in `runs`.
fn counting(engine: EngineKind, runs: &Arc<AtomicUsize>) -> ServerBuilder {
    let runs = Arc::clone(runs);
    common::builder(engine).procedure("count", move |_: &Call<'_>| Ok(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

/// The refusal every transport carries: code -32029, nothing run, when to retry.
fn assert_refused(error: &Json, limit: &str) -> u64 {
    assert_eq!(error["code"], -32029, "{error}");
    let data = &error["data"];
    assert_eq!(data["executed"], false, "{error}");
    assert_eq!(data["limit"], limit, "{error}");
    let retry = data["retry_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("retry_after_ms in {error}"));
    assert!(retry > 0, "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains(limit), "the message names the limit: {message}");
    retry
}

fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn over_http_a_call_past_the_limit_gets_429_with_retry_after_and_does_not_run() {
    common::for_each_engine(|engine| {
        let runs = Arc::new(AtomicUsize::new(0));
        let server = common::start(engine, counting(engine, &runs).rate_limit(rate("3/min")));
        let mut conn = Conn::to(&server);
        for n in 1..=3 {
            let reply = conn.roundtrip(&post("/", call("count", "[]", &n.to_string()).as_bytes()));
            assert_eq!(
                (reply.status, parse_reply(&reply.body)["result"].as_u64()),
                (200, Some(n))
            );
        }
        let refused = conn.roundtrip(&post("/", call("count", "[]", "4").as_bytes()));
        assert_eq!(refused.status, 429, "{refused:?}");
        assert_eq!(refused.reason, "Too Many Requests");
        let retry: u64 = refused
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("seconds");
        // At 3 a minute a token comes every 20 s.
        assert!((1..=20).contains(&retry), "Retry-After: {retry}");
        let body = parse_reply(&refused.body);
        assert_eq!(body["id"], 4);
        let millis = assert_refused(&body["error"], "3/min");
        assert!(
            millis <= 20_000 && millis.div_ceil(1000) == retry,
            "{millis} ms, {retry} s"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 3, "the refused call did not run");

        // A REST-style call counts against the same client, and is refused the same way.
        let rest = conn.roundtrip(&get("/count"));
        assert_eq!(rest.status, 429);
        assert!(rest.header("retry-after").is_some());
        assert_refused(&parse_reply(&rest.body), "3/min");
        // A batch answers 200; each call in it is admitted or refused on its own.
        let batch = format!("[{},{}]", call("count", "[]", "5"), call("sum", "[1, 2]", "6"));
        let reply = conn.roundtrip(&post("/", batch.as_bytes()));
        assert_eq!(reply.status, 200);
        let replies = parse_reply(&reply.body);
        for element in replies.as_array().expect("an array") {
            assert_refused(&element["error"], "3/min");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        // The connection stays open and the built-in routes are not limited.
        let page = conn.roundtrip(&get("/metrics"));
        assert_eq!(page.status, 200);
        let page = String::from_utf8(page.body).expect("UTF-8");
        assert_eq!(
            sample(&page, "ucall_requests_refused_total{reason=\"rate_limited\"}"),
            Some(4.0),
            "{page}"
        );
        server.stop();
        server.join();
    });
}

#[test]
fn over_raw_tcp_and_websocket_a_procedure_limit_answers_a_json_rpc_error() {
    common::for_each_engine(|engine| {
        let runs = Arc::new(AtomicUsize::new(0));
        let builder = counting(engine, &runs).procedure_rate_limit("count", rate("2/min"));
        let server = common::start(engine, builder);

        let mut tcp = Conn::to(&server);
        for n in 1..=3 {
            tcp.send(format!("{}\n", call("count", "[]", &n.to_string())).as_bytes());
        }
        let replies: Vec<Json> = (0..3).map(|_| parse_reply(&tcp.read_line())).collect();
        assert_eq!(replies[0]["result"], 1);
        assert_eq!(replies[1]["result"], 2);
        assert_eq!(replies[2]["id"], 3);
        assert_refused(&replies[2]["error"], "2/min");
        // Other procedures are not limited.
        tcp.send(format!("{}\n", call("sum", "[1, 2]", "4")).as_bytes());
        assert_eq!(parse_reply(&tcp.read_line())["result"], 3);

        // The same client (address) over WebSocket has used its two.
        let mut ws = Conn::to(&server);
        assert_eq!(ws.roundtrip(WS_HANDSHAKE).status, 101);
        ws.send(&common::ws_text(&call("count", "[]", "5")));
        let head = ws.read_exact_bytes(2);
        assert_eq!(head[0], 0x81, "a text frame");
        let len = usize::from(head[1] & 0x7f);
        let len = if len == 126 {
            usize::from(u16::from_be_bytes(ws.read_exact_bytes(2).try_into().expect("2 bytes")))
        } else {
            len
        };
        let reply = parse_reply(&ws.read_exact_bytes(len));
        assert_refused(&reply["error"], "2/min");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        server.stop();
        server.join();
    });
}

#[test]
fn clients_told_apart_by_api_key_each_get_their_own_budget() {
    common::for_each_engine(|engine| {
        let runs = Arc::new(AtomicUsize::new(0));
        let builder = counting(engine, &runs)
            .rate_limit(rate("1/min"))
            .rate_limit_key(ClientKey::Header("x-api-key".into()));
        let server = common::start(engine, builder);
        let mut conn = Conn::to(&server);
        let keyed = |key: &str, id: u32| {
            let body = call("count", "[]", &id.to_string());
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        assert_eq!(conn.roundtrip(keyed("alice", 1).as_bytes()).status, 200);
        assert_eq!(conn.roundtrip(keyed("bob", 2).as_bytes()).status, 200);
        assert_eq!(conn.roundtrip(keyed("alice", 3).as_bytes()).status, 429);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        server.stop();
        server.join();
    });
}

#[test]
fn a_peer_past_its_connection_cap_is_closed_at_accept() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_connections_per_peer(2));
        let mut first = Conn::to(&server);
        let mut second = Conn::to(&server);
        for conn in [&mut first, &mut second] {
            assert_eq!(
                conn.roundtrip(&post("/", call("sum", "[1, 2]", "1").as_bytes())).status,
                200
            );
        }
        let mut third = Conn::to(&server);
        third.send(&post("/", call("sum", "[1, 2]", "1").as_bytes()));
        assert!(
            third.closed_within(Duration::from_secs(5)),
            "the third connection is closed"
        );
        // A connection closed gives its place back.
        drop(first);
        let mut served = false;
        for _ in 0..100 {
            let mut again = Conn::to(&server);
            again.send(&post("/", call("sum", "[1, 2]", "1").as_bytes()));
            if again.try_read_response().is_ok_and(|reply| reply.status == 200) {
                served = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(served, "a place came free once a connection closed");
        let page = second.roundtrip(&get("/metrics"));
        let page = String::from_utf8(page.body).expect("UTF-8");
        let refused = sample(
            &page,
            "ucall_requests_refused_total{reason=\"max_connections_per_peer\"}",
        );
        assert!(refused.is_some_and(|n| n >= 1.0), "{page}");
        server.stop();
        server.join();
    });
}

#[test]
fn a_cap_of_zero_is_refused_at_bind() {
    let Err(error) = common::builder(EngineKind::Poll).max_connections_per_peer(0).bind() else {
        panic!("a cap of zero was accepted");
    };
    assert!(error.to_string().contains("positive"), "{error}");
}

/// `count` limited to one call a minute per client, clients keyed by a front end's middleware.
fn keyed_by_middleware(runs: &Arc<AtomicUsize>) -> ServerBuilder {
    counting(EngineKind::Poll, runs)
        .rate_limit(rate("1/min"))
        .rate_limit_key(ClientKey::Middleware)
}

#[test]
fn keyed_by_middleware_without_a_front_end_that_admits_is_refused_at_bind() {
    let runs = Arc::new(AtomicUsize::new(0));
    let builder = keyed_by_middleware(&runs);
    let Err(error) = builder.bind() else {
        panic!("ClientKey::Middleware bound with nothing to admit calls: the limit would limit nothing");
    };
    assert!(error.to_string().contains("Middleware"), "{error}");
}

#[test]
fn keyed_by_middleware_the_front_end_that_holds_the_keyed_limits_admits_calls() {
    let runs = Arc::new(AtomicUsize::new(0));
    let builder = keyed_by_middleware(&runs);
    let keyed = Arc::clone(builder.router().keyed_limits());
    let server = common::start(EngineKind::Poll, builder);
    assert!(keyed.get().is_some(), "serving started without the keyed limits");
    // Dispatch leaves these calls to the front end: past the limit, all run.
    let mut conn = Conn::to(&server);
    for id in 1..=3 {
        assert_eq!(
            conn.roundtrip(&post("/", call("count", "[]", &id.to_string()).as_bytes()))
                .status,
            200
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    server.stop();
    server.join();
}
