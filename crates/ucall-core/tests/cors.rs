// SPDX-License-Identifier: Apache-2.0
//! CORS over loopback: off by default (`OPTIONS` names the methods, no CORS header on replies); when
//! configured, preflights are answered and replies to allowed origins, immediate or
//! deferred, refusals included, carry `Access-Control-Allow-Origin`, and a WebSocket
//! handshake from an origin not allowed is refused.

mod common;

use std::time::Duration;

use common::{call, post, Conn};
use ucall_core::{Call, Cors, EngineKind, Reply};

const PAGE: &str = "http://127.0.0.1:8080";

fn preflight(origin: &str, method: &str, headers: &str) -> Vec<u8> {
    format!(
        "OPTIONS / HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: {method}\r\n\
         Access-Control-Request-Headers: {headers}\r\n\r\n"
    )
    .into_bytes()
}

fn post_from(origin: &str, body: &str) -> Vec<u8> {
    let request = String::from_utf8(post("/", body.as_bytes())).unwrap();
    request
        .replacen("\r\n", &format!("\r\nOrigin: {origin}\r\n"), 1)
        .into_bytes()
}

fn with_cors(engine: EngineKind) -> ucall_core::ServerHandle {
    let builder = common::builder(engine).cors(Cors::new([PAGE]).max_age(60)).handler(
        "later",
        |_: &Call<'_>, reply: &mut Reply<'_>| {
            let deferred = reply.defer()?;
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                deferred.json("later");
            });
            Ok(())
        },
    );
    common::start(engine, builder)
}

#[test]
fn off_by_default() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let reply = conn.roundtrip(&post_from(PAGE, &call("subtract", "[3,1]", "1")));
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("access-control-allow-origin"), None);
        // A preflight is a plain OPTIONS then: the target's methods, and no CORS header,
        // which a browser reads as a refusal.
        let refused = conn.roundtrip(&preflight(PAGE, "POST", "content-type"));
        assert_eq!(refused.status, 204, "{refused:?}");
        assert_eq!(refused.header("access-control-allow-origin"), None);
        assert_eq!(refused.header("allow"), Some("POST, OPTIONS"));
    });
}

#[test]
fn answers_preflights_and_marks_replies_to_allowed_origins() {
    common::for_each_engine(|engine| {
        let server = with_cors(engine);
        let mut conn = Conn::to(&server);
        let allowed = conn.roundtrip(&preflight(PAGE, "POST", "content-type"));
        assert_eq!(allowed.status, 204, "{allowed:?}");
        assert_eq!(allowed.header("access-control-allow-origin"), Some(PAGE));
        assert_eq!(allowed.header("access-control-allow-methods"), Some("GET, POST"));
        assert_eq!(
            allowed.header("access-control-allow-headers"),
            Some("Content-Type, UCall-JSON-Length")
        );
        assert_eq!(allowed.header("access-control-max-age"), Some("60"));
        assert_eq!(allowed.header("vary"), Some("Origin"));
        assert!(allowed.body.is_empty() && !allowed.says_close());

        // The same connection goes on: a call from the page, then one from elsewhere.
        let reply = conn.roundtrip(&post_from(PAGE, &call("subtract", "[3,1]", "1")));
        assert_eq!(
            (reply.status, reply.header("access-control-allow-origin")),
            (200, Some(PAGE))
        );
        // A page reads a binary reply's JSON length (docs/wire.md §3.1) only when exposed.
        assert_eq!(reply.header("access-control-expose-headers"), Some("UCall-JSON-Length"));
        common::assert_result(&reply.body, "2", "1");
        let other = conn.roundtrip(&post_from("http://evil.example", &call("subtract", "[3,1]", "2")));
        assert_eq!((other.status, other.header("access-control-allow-origin")), (200, None));

        // A refused preflight is answered without CORS headers, so the browser refuses.
        let refused = conn.roundtrip(&preflight("http://evil.example", "POST", "content-type"));
        assert_eq!(
            (refused.status, refused.header("access-control-allow-origin")),
            (204, None)
        );
        let header = conn.roundtrip(&preflight(PAGE, "POST", "x-secret"));
        assert_eq!(header.header("access-control-allow-origin"), None);

        // A reply that waits for a deferred call keeps its headers.
        let later = conn.roundtrip(&post_from(PAGE, &call("later", "[]", "3")));
        assert_eq!(
            (later.status, later.header("access-control-allow-origin")),
            (200, Some(PAGE))
        );
        common::assert_result(&later.body, "\"later\"", "3");
        // A REST call too.
        let rest = conn.roundtrip(
            format!("GET /subtract?minuend=5&subtrahend=1 HTTP/1.1\r\nHost: x\r\nOrigin: {PAGE}\r\n\r\n").as_bytes(),
        );
        assert_eq!(
            (rest.status, rest.header("access-control-allow-origin")),
            (200, Some(PAGE))
        );
        assert_eq!(rest.body, b"4");
    });
}

#[test]
fn a_page_may_send_and_read_binary_messages() {
    common::for_each_engine(|engine| {
        let server = with_cors(engine);
        let mut conn = Conn::to(&server);
        // What a browser asks before fetch() with a binary body (docs/wire.md §3.1).
        let allowed = conn.roundtrip(&preflight(PAGE, "POST", "content-type, ucall-json-length"));
        assert_eq!(allowed.header("access-control-allow-origin"), Some(PAGE), "{allowed:?}");
        let text = call("subtract", "[3,1]", "4");
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nOrigin: {PAGE}\r\nContent-Type: application/vnd.ucall.binary\r\n\
             UCall-JSON-Length: {0}\r\nAccept: application/vnd.ucall.binary\r\nContent-Length: {0}\r\n\r\n{text}",
            text.len()
        );
        let reply = conn.roundtrip(request.as_bytes());
        assert_eq!(
            (reply.status, reply.header("access-control-allow-origin")),
            (200, Some(PAGE))
        );
        assert_eq!(reply.header("access-control-expose-headers"), Some("UCall-JSON-Length"));
        common::assert_result(&reply.body, "2", "4");
    });
}

#[test]
fn a_long_origin_fits_in_the_head() {
    common::for_each_engine(|engine| {
        let origin = format!("https://{}.example", "a".repeat(2000));
        let server = common::start(engine, common::builder(engine).cors(Cors::new([origin.as_str()])));
        let mut conn = Conn::to(&server);
        let reply = conn.roundtrip(&post_from(&origin, &call("subtract", "[3,1]", "1")));
        assert_eq!(reply.header("access-control-allow-origin"), Some(origin.as_str()));
        common::assert_result(&reply.body, "2", "1");
    });
}

#[test]
fn refusals_to_an_allowed_origin_carry_the_header() {
    // A page sees a 4xx/5xx only when the reply allows its origin; else fetch fails with a
    // network error that hides the status.
    common::for_each_engine(|engine| {
        let server = common::start(
            engine,
            common::builder(engine).cors(Cors::new([PAGE])).max_body_bytes(64),
        );
        let refused = |request: &[u8]| Conn::to(&server).roundtrip(request);
        for origin in [PAGE, "http://evil.example"] {
            let expected = (origin == PAGE).then_some(PAGE);
            // Refused with the head: a method not served, a body over the limit.
            let put = refused(
                format!("PUT / HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
            );
            assert_eq!((put.status, put.header("access-control-allow-origin")), (405, expected));
            assert!(put.says_close());
            let large = post_from(origin, &call("echo", &format!("[\"{}\"]", "x".repeat(100)), "1"));
            let large = refused(&large);
            assert_eq!(
                (large.status, large.header("access-control-allow-origin")),
                (413, expected)
            );
            // Refused on the way through the body: a malformed chunk.
            let chunked =
                format!("POST / HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
            let chunked = refused(chunked.as_bytes());
            assert_eq!(
                (chunked.status, chunked.header("access-control-allow-origin")),
                (400, expected)
            );
        }
        // A head that cannot be read names no origin: refused without the header.
        let malformed = refused(format!("POST / HTTP/1.1\r\nOrigin: {PAGE}\r\nBad Header\r\n\r\n").as_bytes());
        assert_eq!(
            (malformed.status, malformed.header("access-control-allow-origin")),
            (400, None)
        );
    });
}

#[test]
fn websocket_handshakes_from_origins_not_allowed_are_refused() {
    const HANDSHAKE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let from = |origin: Option<&str>| match origin {
        Some(origin) => format!("{HANDSHAKE}Origin: {origin}\r\n\r\n"),
        None => format!("{HANDSHAKE}\r\n"),
    };
    common::for_each_engine(move |engine| {
        // Browsers apply no CORS to WebSocket (RFC 6455 §10.2): the server checks Origin.
        let server = with_cors(engine);
        let mut refused = Conn::to(&server);
        let reply = refused.roundtrip(from(Some("http://evil.example")).as_bytes());
        assert_eq!(reply.status, 403, "{reply:?}");
        assert!(reply.says_close());
        refused.expect_closed(Duration::from_secs(5));
        for allowed in [Some(PAGE), None] {
            let reply = Conn::to(&server).roundtrip(from(allowed).as_bytes());
            assert_eq!(reply.status, 101, "{allowed:?}: {reply:?}");
        }
        // Without CORS, every origin may open one, as before.
        let open = common::serve(engine);
        let reply = Conn::to(&open).roundtrip(from(Some("http://evil.example")).as_bytes());
        assert_eq!(reply.status, 101, "{reply:?}");
    });
}
