// SPDX-License-Identifier: Apache-2.0
//! A call's context over loopback, on every engine: the transport, the peer's address,
//! the request's header fields (the upgrade request's for WebSocket), the id and the
//! method, as a handler reads them through `Call::context`.

mod common;

use std::time::Duration;

use common::{call, show, Conn};
use serde_json::Value as Json;
use ucall_core::{Call, EngineKind, ServerHandle};

/// `whoami` answers what its call's context says.
fn serve(engine: EngineKind, keep: bool) -> ServerHandle {
    let mut builder = common::builder(engine).procedure("whoami", |call: &Call<'_>| {
        let context = call.context();
        let token = context
            .header("x-token")
            .map(|v| String::from_utf8_lossy(v).into_owned());
        Ok(serde_json::json!({
            "transport": context.transport().as_str(),
            "tls": context.is_tls(),
            "peer": context.peer().map(|peer| peer.to_string()),
            "token": token,
            "method": call.method(),
            "id": call.id(),
        }))
    });
    if keep {
        builder = builder.keep_context();
    }
    common::start(engine, builder)
}

fn result_of(reply: &[u8]) -> Json {
    let reply: Json = serde_json::from_slice(reply).unwrap_or_else(|e| panic!("{e}: {}", show(reply)));
    reply
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("no result in {reply}"))
}

/// The context's fields common to every transport: the peer is this test's own socket.
fn check(result: &Json, transport: &str, conn: &Conn, token: Option<&str>) {
    assert_eq!(result["transport"], Json::from(transport), "{result}");
    assert_eq!(result["tls"], Json::from(false), "{result}");
    assert_eq!(result["method"], Json::from("whoami"), "{result}");
    assert_eq!(result["id"], Json::from("\"a-7\""), "the raw id text: {result}");
    assert_eq!(
        result["peer"],
        Json::from(conn.stream.local_addr().expect("a local address").to_string()),
        "{result}"
    );
    assert_eq!(result["token"], token.map_or(Json::Null, Json::from), "{result}");
}

#[test]
fn handlers_see_transport_peer_headers_id_and_method() {
    common::for_each_engine(|engine| {
        let server = serve(engine, true);
        let request = call("whoami", "[]", "\"a-7\"");

        let mut http = Conn::to(&server);
        let head = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nX-Token: s3cret\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{request}",
            request.len()
        );
        let response = http.roundtrip(head.as_bytes());
        assert_eq!(response.status, 200, "{response:?}");
        check(&result_of(&response.body), "http", &http, Some("s3cret"));
        // The next request on the connection carries its own head, not the first one's.
        let head = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{request}",
            request.len()
        );
        let response = http.roundtrip(head.as_bytes());
        check(&result_of(&response.body), "http", &http, None);

        let mut tcp = Conn::to(&server);
        tcp.send(format!("{request}\n").as_bytes());
        check(&result_of(&tcp.read_line()), "tcp", &tcp, None);

        let mut ws = Conn::to(&server);
        let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Token: up\r\n\
                          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            .to_vec();
        bytes.extend_from_slice(&common::ws_text(&request));
        bytes.extend_from_slice(&common::ws_text(&request));
        bytes.extend_from_slice(&[0x88, 0x80, 0, 0, 0, 0]); // Close, masked, no payload
        ws.send(&bytes);
        assert_eq!(ws.read_response().status, 101);
        let frames = ws
            .read_until_closed(Duration::from_secs(3))
            .unwrap_or_else(|got| panic!("still open after Close: {}", show(&got)));
        let mut at = 0;
        for _ in 0..2 {
            assert_eq!(frames[at], 0x81, "a text frame: {}", show(&frames));
            // Replies here are 126 to 65535 bytes long, or shorter (RFC 6455 §5.2).
            let (len, start) = match frames[at + 1] {
                126 => (
                    usize::from(u16::from_be_bytes([frames[at + 2], frames[at + 3]])),
                    at + 4,
                ),
                short => (usize::from(short), at + 2),
            };
            let end = start + len;
            check(&result_of(&frames[start..end]), "websocket", &ws, Some("up"));
            at = end;
        }
    });
}

#[test]
fn without_keep_context_no_head_is_kept() {
    common::for_each_engine(|engine| {
        let server = serve(engine, false);
        let request = call("whoami", "[]", "1");
        let mut http = Conn::to(&server);
        let head = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nX-Token: s3cret\r\nContent-Length: {}\r\n\r\n{request}",
            request.len()
        );
        let result = result_of(&http.roundtrip(head.as_bytes()).body);
        assert_eq!(result["transport"], Json::from("http"), "{result}");
        assert_eq!(result["token"], Json::Null, "no head kept: {result}");
        if engine == EngineKind::Uring {
            assert_eq!(result["peer"], Json::Null, "no address asked of the kernel: {result}");
        }
    });
}

#[test]
fn hooks_run_around_every_call_and_may_refuse() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    common::for_each_engine(|engine| {
        let around = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&around);
        let builder = common::builder(engine)
            // Outermost: counts every call, before and after.
            .hook(
                move |call: &Call<'_>, reply: &mut ucall_core::Reply<'_>, next: &dyn ucall_core::Handler| {
                    counted.fetch_add(1, Ordering::Relaxed);
                    let result = next.handle(call, reply);
                    counted.fetch_add(1, Ordering::Relaxed);
                    result
                },
            )
            // Inner: a token in a header, else 401 (no header at all: raw TCP, refused too).
            .hook(
                |call: &Call<'_>, reply: &mut ucall_core::Reply<'_>, next: &dyn ucall_core::Handler| match call
                    .context()
                    .header("x-token")
                {
                    Some(b"t0k") => next.handle(call, reply),
                    _ => Err(ucall_core::RpcError::http(401, "a token is required")),
                },
            );
        let server = common::start(engine, builder);
        let request = call("subtract", "[5,2]", "4");
        let with = |token: &str| {
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\n{token}Content-Length: {}\r\n\r\n{request}",
                request.len()
            )
        };
        let mut http = Conn::to(&server);
        let refused = http.roundtrip(with("").as_bytes());
        assert_eq!(refused.status, 401, "{refused:?}");
        let body: Json = serde_json::from_slice(&refused.body).expect("a JSON body");
        assert_eq!(body["error"]["message"], Json::from("a token is required"), "{body}");
        assert_eq!(body["id"], Json::from(4), "{body}");
        let passed = http.roundtrip(with("X-Token: t0k\r\n").as_bytes());
        assert_eq!(passed.status, 200, "{passed:?}");
        assert_eq!(result_of(&passed.body), Json::from(3));
        let mut tcp = Conn::to(&server);
        tcp.send(format!("{request}\n").as_bytes());
        let line: Json = serde_json::from_slice(&tcp.read_line()).expect("a JSON line");
        assert_eq!(line["error"]["message"], Json::from("a token is required"), "{line}");
        assert_eq!(
            around.load(Ordering::Relaxed),
            6,
            "the outer hook ran before and after each of 3 calls"
        );
    });
}

/// What `wait_gone` saw: whether its caller had gone, and when it stopped waiting.
type Seen = std::sync::mpsc::Receiver<(bool, std::time::Instant)>;

/// `wait_gone(seconds)` answers later, from a thread of its own that waits up to
/// `seconds` for its caller to go: whether it went (also sent to the returned channel).
fn serve_watching(engine: EngineKind) -> (ServerHandle, Seen) {
    let (seen, saw) = std::sync::mpsc::channel();
    let wait_gone = move |call: &Call<'_>, reply: &mut ucall_core::Reply<'_>| -> Result<(), ucall_core::RpcError> {
        let seconds: f64 = call.get(0, "seconds")?;
        let caller = call.context().caller();
        let deferred = reply.defer()?;
        let seen = seen.clone();
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + Duration::from_secs_f64(seconds);
            while !caller.is_gone() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = seen.send((caller.is_gone(), std::time::Instant::now()));
            deferred.json(&caller.is_gone());
        });
        Ok(())
    };
    (
        common::start(engine, common::builder(engine).handler("wait_gone", wait_gone)),
        saw,
    )
}

/// Open `transport`'s conversation with `request` sent.
fn send_over(server: &ServerHandle, transport: &str, request: &str) -> Conn {
    let mut conn = Conn::to(server);
    match transport {
        "http" => conn.send(&common::post("/", request.as_bytes())),
        "tcp" => conn.send(format!("{request}\n").as_bytes()),
        _ => {
            conn.send(
                b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            );
            assert_eq!(conn.read_response().status, 101);
            conn.send(&common::ws_text(request));
        }
    }
    conn
}

#[test]
fn a_handler_that_answers_later_sees_its_caller_hang_up() {
    common::for_each_engine(|engine| {
        let (server, seen) = serve_watching(engine);
        for transport in ["http", "tcp", "websocket"] {
            let conn = send_over(&server, transport, &call("wait_gone", "[30]", "1"));
            std::thread::sleep(Duration::from_millis(100)); // the call is under way
            match transport {
                // A raw TCP client that only half-closes may still read its reply: it
                // hangs up with a reset.
                "tcp" => socket2::SockRef::from(&conn.stream)
                    .set_linger(Some(Duration::ZERO))
                    .expect("SO_LINGER"),
                // A WebSocket client says Close, and may wait for the server's.
                "websocket" => {
                    let mut conn = conn;
                    conn.send(&[0x88, 0x80, 0, 0, 0, 0]);
                    let hung_up = std::time::Instant::now();
                    let (gone, at) = seen.recv_timeout(Duration::from_secs(10)).expect("the handler ended");
                    assert!(
                        gone && at.saturating_duration_since(hung_up) < Duration::from_secs(5),
                        "{engine:?} websocket"
                    );
                    continue;
                }
                _ => {}
            }
            drop(conn);
            let hung_up = std::time::Instant::now();
            let (gone, at) = seen
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{engine:?} {transport}: the handler never saw its caller go"));
            assert!(gone, "{engine:?} {transport}");
            assert!(
                at.saturating_duration_since(hung_up) < Duration::from_secs(5),
                "{engine:?} {transport}: seen {:?} after the hang-up",
                at - hung_up
            );
        }
        // A caller that stays is not gone, over every transport.
        for transport in ["http", "tcp", "websocket"] {
            let mut conn = send_over(&server, transport, &call("wait_gone", "[0.2]", "2"));
            let reply = match transport {
                "http" => conn.read_response().body,
                "tcp" => conn.read_line(),
                _ => {
                    let head = conn.read_exact_bytes(2);
                    assert_eq!(head[0], 0x81, "a text frame");
                    conn.read_exact_bytes(usize::from(head[1]))
                }
            };
            assert_eq!(result_of(&reply), Json::from(false), "{engine:?} {transport}");
            let (gone, _) = seen.recv_timeout(Duration::from_secs(10)).expect("the handler ended");
            assert!(!gone, "{engine:?} {transport}");
        }
    });
}
