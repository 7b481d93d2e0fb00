// SPDX-License-Identifier: Apache-2.0
//! CORS over loopback: off by default (`OPTIONS` is 405, no CORS header on replies); when
//! configured, preflights are answered and replies to allowed origins, immediate or
//! deferred, carry `Access-Control-Allow-Origin`.

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
        let refused = conn.roundtrip(&preflight(PAGE, "POST", "content-type"));
        assert_eq!(refused.status, 405, "{refused:?}");
        assert!(refused.says_close());
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
        assert_eq!(allowed.header("access-control-allow-headers"), Some("Content-Type"));
        assert_eq!(allowed.header("access-control-max-age"), Some("60"));
        assert_eq!(allowed.header("vary"), Some("Origin"));
        assert!(allowed.body.is_empty() && !allowed.says_close());

        // The same connection goes on: a call from the page, then one from elsewhere.
        let reply = conn.roundtrip(&post_from(PAGE, &call("subtract", "[3,1]", "1")));
        assert_eq!(
            (reply.status, reply.header("access-control-allow-origin")),
            (200, Some(PAGE))
        );
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
