// SPDX-License-Identifier: Apache-2.0
//! HTTP/1.1 over loopback, byte for byte: persistence and pipelining (RFC 9112 §9),
//! message framing (§6, §7), `Expect: 100-continue` (RFC 9110 §10.1.1), the statuses the
//! server answers with, REST-style calls, large bodies and IPv6.

mod common;

use std::time::{Duration, SystemTime};

use common::{assert_result, call, get, json, notification, post, show, Conn, Response};

fn subtract(minuend: i64, subtrahend: i64, id: i64) -> Vec<u8> {
    post(
        "/",
        call("subtract", &format!("[{minuend},{subtrahend}]"), &id.to_string()).as_bytes(),
    )
}

fn assert_subtract(response: &Response, minuend: i64, subtrahend: i64, id: i64) {
    assert_eq!(response.status, 200, "{response:?}");
    assert_result(&response.body, &(minuend - subtrahend).to_string(), &id.to_string());
}

/// A rejected request: `status`, a JSON error object as body, `Connection: close`, then
/// the server closes.
fn assert_rejected(conn: &mut Conn, status: u16) {
    let response = conn.read_response();
    assert_eq!(response.status, status, "{response:?} {}", show(&response.body));
    assert!(
        response.says_close(),
        "a {status} that closes should say so: {response:?}"
    );
    // The body explains, as a JSON-RPC error object.
    let error = response.json();
    let code = error.get("code").and_then(common::Json::as_i64);
    assert!(code.is_some(), "no integer code in {error}");
    let problems = common::error_object_differences(&error, code.unwrap_or_default());
    assert!(problems.is_empty(), "{problems:?}");
    conn.expect_closed(common::IO_TIMEOUT);
}

// ---------------------------------------------------------------------------------------
// Persistence (RFC 9112 §9.3)

#[test]
fn connections_persist_by_default() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        for i in 0..5 {
            let response = conn.roundtrip(&subtract(100, i, i));
            assert_subtract(&response, 100, i, i);
            assert_eq!(response.minor_version, 1);
            assert!(!response.says_close(), "{response:?}");
        }
        assert!(
            conn.nothing_within(Duration::from_millis(100)),
            "the connection closed or sent extra bytes"
        );
    });
}

#[test]
fn connection_close_closes_after_the_reply() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // §9.6: the server answers the request carrying "close" and then closes; a request
        // pipelined after it is not answered.
        let body = call("subtract", "[7,2]", "1");
        let mut request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&subtract(9, 1, 2));
        let mut conn = Conn::to(&server);
        conn.send(&request);
        let response = conn.read_response();
        assert_subtract(&response, 7, 2, 1);
        assert!(response.says_close(), "{response:?}");
        conn.expect_closed(common::IO_TIMEOUT);

        // Any case, among other options.
        let mut conn = Conn::to(&server);
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nconnection: Keep-Alive, CLOSE\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_subtract(&conn.roundtrip(request.as_bytes()), 7, 2, 1);
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

#[test]
fn http_1_0_closes_unless_keep_alive_is_asked() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let body = call("subtract", "[5,1]", "10");
        let mut conn = Conn::to(&server);
        let request = format!("POST / HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let response = conn.roundtrip(request.as_bytes());
        assert_subtract(&response, 5, 1, 10);
        conn.expect_closed(common::IO_TIMEOUT);

        // A 1.0 client asking for keep-alive is told the connection persists (RFC 9112
        // Appendix C.2.2), and it does.
        let mut conn = Conn::to(&server);
        let request = format!(
            "POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        for _ in 0..3 {
            let response = conn.roundtrip(request.as_bytes());
            assert_subtract(&response, 5, 1, 10);
            let connection = response.header("connection").unwrap_or("");
            assert!(connection.eq_ignore_ascii_case("keep-alive"), "{response:?}");
        }
        assert!(conn.nothing_within(Duration::from_millis(100)));
        let response = conn.roundtrip(b"GET /sum?a=1&b=2 HTTP/1.0\r\n\r\n");
        assert_eq!((response.status, response.body.as_slice()), (200, &b"3"[..]));
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

// ---------------------------------------------------------------------------------------
// Pipelining and message framing

#[test]
fn pipelined_requests_are_answered_in_order() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let mut requests = subtract(10, 1, 1);
        requests.extend_from_slice(&get("/echo?data=second"));
        requests.extend_from_slice(&post("/", notification("notify_hello", "[1]").as_bytes()));
        requests.extend_from_slice(&subtract(30, 3, 3));
        conn.send(&requests);
        assert_subtract(&conn.read_response(), 10, 1, 1);
        let second = conn.read_response();
        assert_eq!((second.status, second.body.as_slice()), (200, &br#""second""#[..]));
        let third = conn.read_response();
        assert_eq!((third.status, third.body.as_slice()), (204, &b""[..]), "{third:?}");
        assert_subtract(&conn.read_response(), 30, 3, 3);

        // Many more than fit in one read of the server.
        let requests: Vec<u8> = (0..500).flat_map(|i| subtract(1000, i, i)).collect();
        conn.send(&requests);
        for i in 0..500 {
            assert_subtract(&conn.read_response(), 1000, i, i);
        }
        assert!(conn.nothing_within(Duration::from_millis(50)));
    });
}

#[test]
fn request_split_into_single_bytes() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let body = call("echo", r#"["é€😀"]"#, r#""split""#);
        let request = post("/", body.as_bytes());
        conn.send_in_pieces(&request, 1, Duration::from_micros(300));
        let response = conn.read_response();
        assert_eq!(response.status, 200);
        assert_result(&response.body, r#""é€😀""#, r#""split""#);
        // Then a chunked one, byte by byte too, on the same connection.
        let chunked = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        conn.send_in_pieces(chunked.as_bytes(), 1, Duration::from_micros(300));
        let response = conn.read_response();
        assert_result(&response.body, r#""é€😀""#, r#""split""#);
    });
}

#[test]
fn chunked_body_with_extensions_and_trailers() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let body = call("subtract", r#"{"minuend":42,"subtrahend":23}"#, r#""chunks""#);
        let (a, rest) = body.split_at(7);
        let (b, c) = rest.split_at(20);
        // Sizes in either case of hex, with extensions (RFC 9112 §7.1.1) and a trailer
        // section (§7.1.2) the server must read past.
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x};name=value\r\n{a}\r\n{:X} ; quoted=\"a;b\" ; bare\r\n{b}\r\n{:x}\r\n{c}\r\n\
             000;last=1\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n",
            a.len(),
            b.len(),
            c.len()
        );
        let mut conn = Conn::to(&server);
        conn.send(request.as_bytes());
        let response = conn.read_response();
        assert_eq!(response.status, 200, "{response:?}");
        assert_result(&response.body, "19", r#""chunks""#);
        // The trailers were consumed: the next request on the connection is understood.
        assert_subtract(&conn.roundtrip(&subtract(3, 2, 2)), 3, 2, 2);
        // A REST call with a chunked body.
        let params = r#"{"minuend":5,"subtrahend":3}"#;
        let request = format!(
            "POST /subtract HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n{:x}\r\n{params}\r\n0\r\n\r\n",
            params.len()
        );
        let response = conn.roundtrip(request.as_bytes());
        assert_eq!((response.status, response.body.as_slice()), (200, &b"2"[..]));
    });
}

#[test]
fn malformed_chunked_body_is_400() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        for body in ["zz\r\nabc\r\n0\r\n\r\n", "3\r\nabcd\r\n0\r\n\r\n", "-1\r\n"] {
            let mut conn = Conn::to(&server);
            conn.send(format!("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}").as_bytes());
            assert_rejected(&mut conn, 400);
        }
    });
}

#[test]
fn expect_100_continue() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let body = call("subtract", "[8,5]", "100");
        let mut conn = Conn::to(&server);
        conn.send(
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        // RFC 9110 §10.1.1: the interim 100 comes before the client sends the content.
        let interim = conn.read_response();
        assert_eq!((interim.status, interim.minor_version), (100, 1), "{interim:?}");
        conn.send(body.as_bytes());
        assert_subtract(&conn.read_response(), 8, 5, 100);

        // Chunked, on the same connection.
        conn.send(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n");
        let interim = conn.read_response();
        assert_eq!(interim.status, 100, "{interim:?}");
        conn.send(format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes());
        assert_subtract(&conn.read_response(), 8, 5, 100);
        assert!(conn.nothing_within(Duration::from_millis(50)));
    });
}

#[test]
fn header_names_and_tokens_in_any_case() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let body = call("subtract", "[4,1]", "7");
        let mut conn = Conn::to(&server);
        let request = format!(
            "POST / HTTP/1.1\r\nhOsT: x\r\ncOnTeNt-TyPe: application/json\r\ncontent-LENGTH: {}\r\n\r\n{body}",
            body.len()
        );
        assert_subtract(&conn.roundtrip(request.as_bytes()), 4, 1, 7);
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        assert_subtract(&conn.roundtrip(request.as_bytes()), 4, 1, 7);
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nCONNECTION: Close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_subtract(&conn.roundtrip(request.as_bytes()), 4, 1, 7);
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

// ---------------------------------------------------------------------------------------
// Statuses

#[test]
fn bad_content_length_is_400_and_closes() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let body = call("subtract", "[1,1]", "1");
        let n = body.len();
        // RFC 9112 §6.3: an invalid Content-Length, or one with Transfer-Encoding, is an
        // unrecoverable framing error: 400, then close.
        for fields in [
            "Content-Length: abc".to_string(),
            "Content-Length: -1".to_string(),
            "Content-Length: +5".to_string(),
            "Content-Length: 0x10".to_string(),
            "Content-Length: 99999999999999999999999999".to_string(),
            "Content-Length: 18446744073709551616".to_string(),
            format!("Content-Length: {n}, {}", n + 1),
            format!("Content-Length: {n}\r\nContent-Length: {}", n + 1),
            format!("Content-Length: {n}\r\nTransfer-Encoding: chunked"),
            format!("Transfer-Encoding: chunked\r\nContent-Length: {n}"),
        ] {
            let mut conn = Conn::to(&server);
            conn.send(format!("POST / HTTP/1.1\r\nHost: x\r\n{fields}\r\n\r\n{body}").as_bytes());
            let response = conn.read_response();
            assert_eq!(response.status, 400, "for {fields:?}: {response:?}");
            assert!(response.says_close(), "{response:?}");
            assert!(
                common::error_object_differences(&response.json(), -32600).is_empty(),
                "{}",
                show(&response.body)
            );
            conn.expect_closed(common::IO_TIMEOUT);
        }
    });
}

#[test]
fn other_methods_are_405_with_allow() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        for method in ["PUT", "DELETE", "PATCH"] {
            let mut conn = Conn::to(&server);
            conn.send(format!("{method} / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes());
            let response = conn.read_response();
            assert_eq!(response.status, 405, "{method}: {response:?}");
            // RFC 9110 §15.5.6: a 405 carries Allow.
            let allow = response
                .header("allow")
                .unwrap_or_else(|| panic!("405 without Allow: {response:?}"));
            let allowed: Vec<String> = allow.split(',').map(|m| m.trim().to_string()).collect();
            // `/` takes JSON-RPC: `GET /` is 404, so its Allow names POST and OPTIONS only.
            assert_eq!(allowed, ["POST", "OPTIONS"], "{allow}");
            conn.expect_closed(common::IO_TIMEOUT);
            let mut conn = Conn::to(&server);
            conn.send(format!("{method} /sum HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            let response = conn.read_response();
            assert_eq!(response.status, 405, "{method}: {response:?}");
            assert_eq!(response.header("allow"), Some("GET, HEAD, POST, OPTIONS"));
        }
    });
}

/// A `HEAD` request's whole answer, read until the server closes (`Connection: close`):
/// the head, and nothing after it.
fn head_of(server: &ucall_core::ServerHandle, target: &str) -> String {
    let mut conn = Conn::to(server);
    conn.send(format!("HEAD {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes());
    let bytes = conn.read_until_closed(common::IO_TIMEOUT).expect("the server closes");
    let text = String::from_utf8(bytes).expect("a text head");
    assert!(text.ends_with("\r\n\r\n"), "a HEAD's answer has no content: {text:?}");
    text
}

fn field<'t>(head: &'t str, name: &str) -> Option<&'t str> {
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

#[test]
fn head_and_options_answer_every_get_route() {
    // RFC 9110 §9.1: HEAD is a method every general-purpose server supports (uptime
    // monitors send it); OPTIONS is HAProxy's default `option httpchk`.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        for target in ["/healthz", "/readyz", "/metrics", "/sum?a=1&b=2"] {
            let got = conn.roundtrip(&get(target));
            assert_eq!(got.status, 200, "{target}: {got:?}");
            let head = head_of(&server, target);
            assert!(head.starts_with("HTTP/1.1 200 "), "{target}: {head}");
            if target != "/metrics" {
                // The length a GET's content has (the metrics page grows with each scrape).
                let length = got.body.len().to_string();
                assert_eq!(
                    field(&head, "content-length"),
                    Some(length.as_str()),
                    "{target}: {head}"
                );
            }
            assert_eq!(field(&head, "content-type"), got.header("content-type"), "{target}");

            let options = conn.roundtrip(format!("OPTIONS {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            assert_eq!(options.status, 204, "{target}: {options:?}");
            let expected = if target.starts_with("/sum") {
                "GET, HEAD, POST, OPTIONS"
            } else {
                "GET, HEAD, OPTIONS"
            };
            assert_eq!(options.header("allow"), Some(expected), "{target}");
        }
        let options = conn.roundtrip(b"OPTIONS / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((options.status, options.header("allow")), (204, Some("POST, OPTIONS")));
        // A HEAD of an unknown route is a 404 without content; the connection lives on.
        assert!(head_of(&server, "/nope").starts_with("HTTP/1.1 404 "));
        assert_eq!(conn.roundtrip(&get("/sum?a=1&b=2")).body, b"3");
    });
}

#[test]
fn a_head_answered_later_has_no_content_either() {
    // Python's procedures answer through deferred replies: a HEAD's reply is written when
    // the call completes, and must still be the head alone.
    common::for_each_engine(|engine| {
        let server = statuses_server(engine);
        let head = head_of(&server, "/user_later");
        assert!(head.starts_with("HTTP/1.1 409 "), "{head}");
        assert!(field(&head, "content-length").is_some_and(|n| n != "0"), "{head}");
    });
}

#[test]
fn what_changes_per_request_is_never_cached() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        for target in ["/healthz", "/readyz", "/metrics", "/sum?a=1&b=2", "/nope"] {
            let response = conn.roundtrip(&get(target));
            assert_eq!(
                response.header("cache-control"),
                Some("no-store"),
                "{target}: {response:?}"
            );
        }
    });
}

#[test]
fn a_path_names_one_procedure_or_none() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        // A JSON-RPC request or batch posted to `/subtract` must not run another method
        // (nor subtract: the body of a procedure's path is its named params).
        let other = call("sum", "[100,1]", "1");
        let batch = format!("[{other}]");
        for body in [other.as_str(), &batch, &call("subtract", "[5,3]", "2")] {
            let response = conn.roundtrip(&post("/subtract", body.as_bytes()));
            rest_error(&response, 400, -32600);
            let message = response
                .json()
                .get("message")
                .and_then(common::Json::as_str)
                .map(str::to_owned);
            assert!(message.unwrap_or_default().contains("POST /"), "{response:?}");
        }
        // A path that names no procedure may still carry JSON-RPC (`POST /rpc`).
        let response = conn.roundtrip(&post("/rpc", other.as_bytes()));
        assert_result(&response.body, "101", "1");
        assert_eq!(conn.roundtrip(&get("/sum?a=1&b=2")).body, b"3");
    });
}

#[test]
fn an_applications_own_error_is_not_a_server_fault() {
    use ucall_core::RpcError;
    common::for_each_engine(|engine| {
        let builder = common::builder(engine).procedure("divide", |call| -> Result<f64, RpcError> {
            let (a, b): (f64, f64) = (call.get(0, "a")?, call.get(1, "b")?);
            if b == 0.0 {
                return Err(RpcError::new(1, "division by zero"));
            }
            Ok(a / b)
        });
        let server = common::start(engine, builder);
        let mut conn = Conn::to(&server);
        // 422: understood and refused as the procedure says it may be; not a 5xx that
        // retries and alerts read as the server failing.
        rest_error(&conn.roundtrip(&get("/divide?a=1&b=0")), 422, 1);
        assert_eq!(conn.roundtrip(&get("/divide?a=1&b=4")).body, b"0.25");
        // A handler's failure is still the server's.
        rest_error(&conn.roundtrip(&get("/panic")), 500, -32603);
    });
}

#[test]
fn body_over_the_limit_is_413_without_reading_it() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_body_bytes(1000));
        // The head alone announces too much: 413 at once, the body never sent.
        for expect in ["", "Expect: 100-continue\r\n"] {
            let mut conn = Conn::to(&server);
            conn.send(format!("POST / HTTP/1.1\r\nHost: x\r\n{expect}Content-Length: 1001\r\n\r\n").as_bytes());
            let response = conn.read_response();
            assert_eq!(response.status, 413, "{response:?}");
            assert!(response.says_close(), "{response:?}");
            // The message says which setting to raise, and to what it is set.
            let body = String::from_utf8_lossy(&response.body);
            assert!(body.contains("more than max_body_bytes = 1000 bytes"), "{body}");
            conn.expect_closed(common::IO_TIMEOUT);
        }
        // Chunked: refused once the decoded size passes the limit.
        let mut conn = Conn::to(&server);
        let chunk = "a".repeat(600);
        conn.send(
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n"
            )
            .as_bytes(),
        );
        assert_rejected(&mut conn, 413);
        // At the limit exactly, it is served.
        let data = "x".repeat(1000 - call("echo", r#"[""]"#, "1").len());
        let body = call("echo", &format!(r#"["{data}"]"#), "1");
        assert_eq!(body.len(), 1000);
        let mut conn = Conn::to(&server);
        let response = conn.roundtrip(&post("/", body.as_bytes()));
        assert_eq!(response.status, 200);
        assert_result(&response.body, &format!(r#""{data}""#), "1");
    });
}

#[test]
fn head_over_the_limit_is_431() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_head_bytes(1024));
        // A complete head that is too large.
        let mut conn = Conn::to(&server);
        let filler = "v".repeat(1100);
        conn.send(format!("GET /sum?a=1 HTTP/1.1\r\nHost: x\r\nX-Filler: {filler}\r\n\r\n").as_bytes());
        assert_rejected(&mut conn, 431);
        // A head that never ends: answered once it passes the limit, not when it ends.
        let mut conn = Conn::to(&server);
        conn.send(format!("GET /sum?a=1 HTTP/1.1\r\nHost: x\r\nX-Filler: {filler}").as_bytes());
        assert_rejected(&mut conn, 431);
        // Just under the limit is served.
        let mut conn = Conn::to(&server);
        let head = "GET /sum?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-Filler: \r\n\r\n";
        let filler = "v".repeat(1024 - head.len());
        let response =
            conn.roundtrip(format!("GET /sum?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-Filler: {filler}\r\n\r\n").as_bytes());
        assert_eq!((response.status, response.body.as_slice()), (200, &b"3"[..]));
    });
}

#[test]
fn malformed_heads_are_400() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        for head in [
            "POST / HTTP/1.1\r\nBad Header\r\n\r\n",
            "POST / HTTP/1.1\r\nX : y\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "GET /\r\n\r\n",
        ] {
            let mut conn = Conn::to(&server);
            conn.send(head.as_bytes());
            let response = conn.read_response();
            assert!(matches!(response.status, 400 | 505), "for {head:?}: {response:?}");
            conn.expect_closed(common::IO_TIMEOUT);
        }
    });
}

#[test]
fn absolute_form_targets_are_accepted() {
    // RFC 9112 §3.2.2: "a server MUST accept the absolute-form in requests".
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let body = call("subtract", "[9,4]", "1");
        let request = format!(
            "POST http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_subtract(&conn.roundtrip(request.as_bytes()), 9, 4, 1);
        let response = conn.roundtrip(b"GET HTTP://Example.COM:8545/sum?a=1&b=2 HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(
            (response.status, response.body.as_slice()),
            (200, &b"3"[..]),
            "{response:?}"
        );
        let response = conn.roundtrip(b"GET http://example.com?a=1 HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(response.status, 404, "{response:?}");
    });
}

#[test]
fn replies_carry_type_length_and_date() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let close = |request: Vec<u8>| {
            let text = String::from_utf8(request).unwrap();
            text.replacen("\r\n", "\r\nConnection: close\r\n", 1).into_bytes()
        };
        for request in [subtract(2, 1, 1), get("/sum?a=1&b=2"), get("/nope"), get("/panic")] {
            let before = SystemTime::now() - Duration::from_secs(2);
            // Everything up to the close, so that the body is delimited by the bytes sent,
            // not by the Content-Length under test.
            let mut conn = Conn::to(&server);
            conn.send(&close(request));
            let raw = conn
                .read_until_closed(common::IO_TIMEOUT)
                .expect("closed after the reply");
            let after = SystemTime::now() + Duration::from_secs(2);
            let head_end = raw
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap_or_else(|| panic!("no head: {}", show(&raw)))
                + 4;
            let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
            let field = |name: &str| -> Option<String> {
                head.split("\r\n").skip(1).find_map(|line| {
                    let (k, v) = line.split_once(':')?;
                    k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            assert_eq!(field("content-type").as_deref(), Some("application/json"), "{head}");
            let length: usize = field("content-length").expect("Content-Length").parse().unwrap();
            assert_eq!(
                length,
                raw.len() - head_end,
                "Content-Length against the body sent: {}",
                show(&raw)
            );
            // RFC 9110 §6.6.1: an origin server with a clock sends Date, an IMF-fixdate.
            let date = field("date").expect("Date");
            assert_eq!(date.len(), 29, "{date:?}");
            assert!(date.ends_with(" GMT"), "{date:?}");
            let when = httpdate::parse_http_date(&date).unwrap_or_else(|e| panic!("Date {date:?}: {e}"));
            assert!(before <= when && when <= after, "Date {date:?} is not now");
        }
    });
}

#[test]
fn notifications_answer_204_without_body() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let batch = format!("[{},{}]", notification("update", "[1]"), notification("nope", "[]"));
        for body in [
            notification("notify_sum", "[1,2]"),
            notification("unknown", "{}"),
            batch,
        ] {
            conn.send(&post("/", body.as_bytes()));
            let response = conn.read_response();
            assert_eq!(response.status, 204, "{response:?}");
            // RFC 9110 §8.6: no Content-Length in a 204; the next bytes start the next response.
            assert!(response.header("content-length").is_none(), "{response:?}");
            assert!(response.header("transfer-encoding").is_none(), "{response:?}");
            assert!(response.header("date").is_some(), "{response:?}");
        }
        assert_subtract(&conn.roundtrip(&subtract(6, 6, 6)), 6, 6, 6);
    });
}

// ---------------------------------------------------------------------------------------
// REST-style calls

fn rest_error(response: &Response, status: u16, code: i64) {
    assert_eq!(response.status, status, "{response:?} {}", show(&response.body));
    let problems = common::error_object_differences(&response.json(), code);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
}

#[test]
fn rest_calls() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let ok = |response: Response, body: &str| {
            assert_eq!(response.status, 200, "{response:?} {}", show(&response.body));
            let mut problems = Vec::new();
            common::json::differences(&json(body), &response.json(), "$", &mut problems);
            assert!(problems.is_empty(), "{problems:?}");
        };
        ok(conn.roundtrip(&get("/sum?a=1&b=2")), "3");
        ok(conn.roundtrip(&get("/sum?a=1.5&b=2")), "3.5");
        ok(conn.roundtrip(&get("/sum")), "0");
        ok(conn.roundtrip(&get("/echo?data=hello")), r#""hello""#);
        ok(conn.roundtrip(&get("/echo?data=%22hi%20there%22")), r#""hi there""#);
        ok(conn.roundtrip(&get("/echo?data=%E2%82%AC+x")), r#""€ x""#);
        ok(
            conn.roundtrip(&get("/echo?data=%5B1%2C%7B%22a%22%3Anull%7D%5D")),
            r#"[1,{"a":null}]"#,
        );
        ok(conn.roundtrip(&get("/get_data")), r#"["hello",5]"#);
        ok(conn.roundtrip(&get("/update")), "null");
        ok(
            conn.roundtrip(&post("/subtract", br#"{"minuend":5,"subtrahend":3}"#)),
            "2",
        );
        ok(conn.roundtrip(&post("/get_data", b"")), r#"["hello",5]"#);
        // A JSON-RPC request posted to a named path is still JSON-RPC.
        let response = conn.roundtrip(&post("/rpc", call("subtract", "[5,3]", "4").as_bytes()));
        assert_result(&response.body, "2", "4");

        rest_error(&conn.roundtrip(&get("/nope?a=1")), 404, -32601);
        rest_error(&conn.roundtrip(&post("/nope", b"{}")), 404, -32601);
        rest_error(&conn.roundtrip(&get("/subtract?minuend=x&subtrahend=1")), 400, -32602);
        rest_error(&conn.roundtrip(&get("/subtract?minuend=1")), 400, -32602);
        rest_error(
            &conn.roundtrip(&post("/subtract", br#"{"minuend":true,"subtrahend":1}"#)),
            400,
            -32602,
        );
        rest_error(&conn.roundtrip(&post("/subtract", b"5")), 400, -32602);
        rest_error(&conn.roundtrip(&post("/subtract", b"{\"minuend\":")), 400, -32700);
        let failed = conn.roundtrip(&get("/fail"));
        assert!((400..600).contains(&failed.status), "{failed:?}");
        let error = failed.json();
        assert!(common::error_object_differences(&error, -32001).is_empty(), "{error}");
        assert_eq!(
            error.get("data").map(ToString::to_string).as_deref(),
            Some(r#"{"why":"asked to fail"}"#)
        );
        // Every error above left the connection usable.
        ok(conn.roundtrip(&get("/sum?a=1&b=2")), "3");
    });
}

#[test]
fn a_panicking_procedure_is_500_and_the_server_lives_on() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        for _ in 0..3 {
            rest_error(&conn.roundtrip(&get("/panic")), 500, -32603);
            let response = conn.roundtrip(&get("/sum?a=1&b=2"));
            assert_eq!((response.status, response.body.as_slice()), (200, &b"3"[..]));
        }
        let mut other = Conn::to(&server);
        rest_error(&other.roundtrip(&get("/panic")), 500, -32603);
        assert_subtract(&other.roundtrip(&subtract(2, 1, 1)), 2, 1, 1);
    });
}

// ---------------------------------------------------------------------------------------
// Size and address family

#[test]
fn a_large_body_is_echoed_intact() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // 1.6 MB of text with multi-byte characters and escapes.
        let unit = "abcdefghij-é€😀-\\\"\\n-0123456789";
        let mut data = String::new();
        while data.len() < 1_600_000 {
            data.push_str(unit);
        }
        let body = call("echo", &format!("[\"{data}\"]"), r#""big""#);
        assert!(body.len() > 1_600_000);
        let mut conn = Conn::to(&server);
        let response = conn.roundtrip(&post("/", body.as_bytes()));
        assert_eq!(response.status, 200);
        // The procedure returns its argument's text as sent: escapes and all.
        let expected = format!(r#"{{"jsonrpc":"2.0","id":"big","result":"{data}"}}"#);
        assert_result(&response.body, &format!("\"{data}\""), r#""big""#);
        assert_eq!(response.body.len(), expected.len(), "reply size");
        // And once more chunked, in pieces, on the same connection.
        let mut request = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for piece in body.as_bytes().chunks(100_000) {
            request.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            request.extend_from_slice(piece);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
        let response = conn.roundtrip(&request);
        assert_result(&response.body, &format!("\"{data}\""), r#""big""#);
    });
}

#[test]
fn large_messages_in_reused_buffers_never_carry_bytes_of_earlier_ones() {
    // Workers keep the buffers of large messages for the next ones (buffer::Spares):
    // replies of every size must hold their own bytes only, on one connection, pipelined
    // and on fresh connections.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let sizes_and_fill = [
            (1_500_000, 'a'),
            (400_000, 'b'),
            (2_200_000, 'c'),
            (10, 'd'),
            (700_000, 'e'),
        ];
        let mut conn = Conn::to(&server);
        for (size, fill) in sizes_and_fill {
            let data: String = std::iter::repeat_n(fill, size).collect();
            let body = call("echo", &format!("[\"{data}\"]"), "1");
            let response = conn.roundtrip(&post("/", body.as_bytes()));
            assert_result(&response.body, &format!("\"{data}\""), "1");
        }
        // Two large requests in one write, answered in order.
        let (first, second) = ("x".repeat(900_000), "y".repeat(300_000));
        let mut both = post("/", call("echo", &format!("[\"{first}\"]"), "1").as_bytes());
        both.extend_from_slice(&post("/", call("echo", &format!("[\"{second}\"]"), "2").as_bytes()));
        conn.send(&both);
        assert_result(&conn.read_response().body, &format!("\"{first}\""), "1");
        assert_result(&conn.read_response().body, &format!("\"{second}\""), "2");
        // A new connection after a large message starts clean.
        for (size, fill) in [(600_000, 'f'), (5, 'g')] {
            let data: String = std::iter::repeat_n(fill, size).collect();
            let body = call("echo", &format!("[\"{data}\"]"), "3");
            let response = Conn::to(&server).roundtrip(&post("/", body.as_bytes()));
            assert_result(&response.body, &format!("\"{data}\""), "3");
        }
    });
}

#[test]
fn small_and_large_messages_alternate_on_one_connection() {
    // On io_uring a connection that sent a large message receives one buffer at a time
    // for a while (70 small messages here is past that spell), then takes multishot
    // receives again; either way every byte reaches its request, single or pipelined.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let mut id: i64 = 0;
        for round in 0..3u8 {
            let large: String = std::iter::repeat_n(char::from(b'p' + round), 700_000 + usize::from(round)).collect();
            id += 1;
            let body = call("echo", &format!("[\"{large}\"]"), &id.to_string());
            assert_result(
                &conn.roundtrip(&post("/", body.as_bytes())).body,
                &format!("\"{large}\""),
                &id.to_string(),
            );
            for small in 0..70i64 {
                id += 1;
                let response = conn.roundtrip(&subtract(small + 10, small, id));
                assert_subtract(&response, small + 10, small, id);
            }
            // A small request and a large one in one write: the large one's start arrives
            // with the small one.
            let mut both = subtract(5, 3, id + 1);
            let tail = "t".repeat(300_000);
            both.extend_from_slice(&post(
                "/",
                call("echo", &format!("[\"{tail}\"]"), &(id + 2).to_string()).as_bytes(),
            ));
            conn.send(&both);
            assert_subtract(&conn.read_response(), 5, 3, id + 1);
            assert_result(
                &conn.read_response().body,
                &format!("\"{tail}\""),
                &(id + 2).to_string(),
            );
            id += 2;
        }
    });
}

#[test]
fn ipv6_loopback() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).host("::1"));
        assert!(server.local_addr().is_ipv6(), "{}", server.local_addr());
        let mut conn = Conn::to(&server);
        assert_subtract(&conn.roundtrip(&subtract(3, 2, 1)), 3, 2, 1);
        let response = conn.roundtrip(b"GET /sum?a=1&b=2 HTTP/1.1\r\nHost: [::1]\r\n\r\n");
        assert_eq!((response.status, response.body.as_slice()), (200, &b"3"[..]));
        let mut tcp = Conn::to(&server);
        tcp.send(format!("{}\n", call("subtract", "[3,1]", "2")).as_bytes());
        assert_result(&tcp.read_line(), "2", "2");
    });
}

// ---------------------------------------------------------------------------------------
// Errors that name an HTTP status (`RpcError::http`)

/// A server whose `user` fails with 404 (at once) and `user_later` with 409 (deferred).
fn statuses_server(engine: ucall_core::EngineKind) -> ucall_core::ServerHandle {
    use ucall_core::{Call, Reply, RpcError};
    let builder = common::builder(engine)
        .procedure("user", |call| -> Result<i64, RpcError> {
            let id: i64 = call.get(0, "id")?;
            Err(RpcError::http(404, format!("no user {id}")).with_data(&id))
        })
        .handler("user_later", |_: &Call<'_>, reply: &mut Reply<'_>| {
            let deferred = reply.defer()?;
            std::thread::spawn(move || deferred.error(RpcError::http(409, "taken")));
            Ok(())
        });
    common::start(engine, builder)
}

#[test]
fn an_error_with_a_status_answers_rest_and_single_calls_with_it() {
    common::for_each_engine(|engine| {
        let server = statuses_server(engine);
        let mut conn = Conn::to(&server);
        // REST-style, at once and deferred.
        let missing = conn.roundtrip(&get("/user?id=7"));
        rest_error(&missing, 404, -32000);
        assert_eq!(
            missing.json().get("message").and_then(common::Json::as_str),
            Some("no user 7")
        );
        assert_eq!(
            missing.json().get("data").map(ToString::to_string).as_deref(),
            Some("7")
        );
        rest_error(&conn.roundtrip(&post("/user_later", b"{}")), 409, -32000);
        // A single JSON-RPC call over HTTP: the status, with the JSON-RPC error as body.
        for method in ["user", "user_later"] {
            let response = conn.roundtrip(&post("/", call(method, "[7]", "3").as_bytes()));
            let expected = if method == "user" { 404 } else { 409 };
            assert_eq!(response.status, expected, "{response:?} {}", show(&response.body));
            common::assert_error(&response.body, -32000, "3");
        }
        // A batch keeps 200, whatever its calls' errors say.
        let batch = format!("[{},{}]", call("user", "[1]", "1"), call("sum", "[1,2]", "2"));
        let response = conn.roundtrip(&post("/", batch.as_bytes()));
        assert_eq!(response.status, 200, "{response:?}");
        let deferred_batch = format!("[{},{}]", call("user_later", "[]", "1"), call("sum", "[1,2]", "2"));
        assert_eq!(conn.roundtrip(&post("/", deferred_batch.as_bytes())).status, 200);
        // Errors without a status keep today's answers: 200 for JSON-RPC, the table for REST.
        let response = conn.roundtrip(&post("/", call("nope", "[]", "4").as_bytes()));
        assert_eq!(response.status, 200, "{response:?}");
        rest_error(&conn.roundtrip(&get("/nope")), 404, -32601);
        // The connection lives on.
        assert_eq!(conn.roundtrip(&get("/sum?a=1&b=2")).body, b"3");
    });
}

#[test]
fn raw_tcp_gets_only_the_jsonrpc_error() {
    common::for_each_engine(|engine| {
        let server = statuses_server(engine);
        let mut conn = Conn::to(&server);
        for method in ["user", "user_later"] {
            conn.send(format!("{}\n", call(method, "[7]", "5")).as_bytes());
            let line = conn.read_line();
            common::assert_error(&line, -32000, "5");
        }
    });
}
