// SPDX-License-Identifier: Apache-2.0
//! Deadlines of Rust procedures over loopback, on every engine: a procedure's own time
//! limit (`ServerBuilder::timeout`) and its caller's (the `UCall-Timeout` header, the
//! `"timeout"` member). A deferred reply is answered "Deadline exceeded" at its deadline
//! and its late result dropped; an inline one's late result is dropped; replies on a
//! connection stay in request order.

mod common;

use std::time::{Duration, Instant};

use common::{call, Conn};
use serde_json::Value as Json;
use ucall_core::{Call, EngineKind, Reply, RpcError, ServerHandle};

/// `later(ms)` defers and answers from a thread after `ms`; `bounded_later` is the same
/// within 300 ms. `nap(ms)` sleeps inline, within 300 ms. `sum(a, b)` answers at once.
fn serve(engine: EngineKind) -> ServerHandle {
    let later = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let ms: u64 = call.get(0, "ms")?;
        let deferred = reply.defer()?;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            deferred.json("done");
        });
        Ok(())
    };
    let builder = common::builder(engine)
        .handler("later", later)
        .handler("bounded_later", later)
        .timeout("bounded_later", Duration::from_millis(300))
        .timeout("nap", Duration::from_millis(300))
        .procedure("nap", |call| {
            std::thread::sleep(Duration::from_millis(call.get(0, "ms")?));
            Ok("rested")
        })
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?));
    common::start(engine, builder)
}

fn parse(reply: &[u8]) -> Json {
    serde_json::from_slice(reply).unwrap_or_else(|e| panic!("{e}: {}", common::show(reply)))
}

/// `reply` is the error "Deadline exceeded" for the call `id`.
fn assert_exceeded(reply: &Json, id: i64) {
    assert_eq!(reply["id"], Json::from(id), "{reply}");
    assert_eq!(reply["error"]["code"], Json::from(-32000), "{reply}");
    assert_eq!(reply["error"]["message"], Json::from("Deadline exceeded"), "{reply}");
}

fn assert_result(reply: &Json, id: i64, result: Json) {
    assert_eq!(reply["id"], Json::from(id), "{reply}");
    assert_eq!(reply["result"], result, "{reply}");
}

/// An HTTP POST of `body` with `headers` (each ending with CRLF).
fn post(body: &str, headers: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_deferred_reply_is_answered_at_its_deadline_and_its_late_result_dropped() {
    common::for_each_engine(|engine| {
        let server = serve(engine);
        // Raw TCP, two calls in one write: the first answered at its deadline, long
        // before its result would come; the second after it.
        let mut tcp = Conn::to(&server);
        let sent = Instant::now();
        tcp.send(
            format!(
                "{}\n{}\n",
                call("bounded_later", "[1500]", "1"),
                call("sum", "[1,2]", "2")
            )
            .as_bytes(),
        );
        assert_exceeded(&parse(&tcp.read_line()), 1);
        assert!(
            sent.elapsed() < Duration::from_millis(1000),
            "{engine:?}: answered at the deadline, not with the result: {:?}",
            sent.elapsed()
        );
        assert_result(&parse(&tcp.read_line()), 2, Json::from(3));
        // Once the late result has come, nothing of it reaches the connection.
        std::thread::sleep(Duration::from_millis(1700).saturating_sub(sent.elapsed()));
        tcp.send(format!("{}\n", call("sum", "[2,2]", "3")).as_bytes());
        assert_result(&parse(&tcp.read_line()), 3, Json::from(4));

        // HTTP: 504, then the next reply in order.
        let mut http = Conn::to(&server);
        let sent = Instant::now();
        let mut requests = post(&call("bounded_later", "[1500]", "4"), "");
        requests.extend(post(&call("sum", "[1,2]", "5"), ""));
        http.send(&requests);
        let late = http.read_response();
        assert_eq!(late.status, 504, "{engine:?}: {late:?}");
        assert_exceeded(&parse(&late.body), 4);
        assert!(
            sent.elapsed() < Duration::from_millis(1000),
            "{engine:?}: {:?}",
            sent.elapsed()
        );
        let next = http.read_response();
        assert_eq!(next.status, 200, "{engine:?}: {next:?}");
        assert_result(&parse(&next.body), 5, Json::from(3));

        // A call that ends in time is answered as usual.
        let mut tcp = Conn::to(&server);
        tcp.send(format!("{}\n", call("bounded_later", "[1]", "6")).as_bytes());
        assert_result(&parse(&tcp.read_line()), 6, Json::from("done"));
    });
}

#[test]
fn an_inline_result_past_its_deadline_is_dropped() {
    common::for_each_engine(|engine| {
        let server = serve(engine);
        let mut http = Conn::to(&server);
        let mut requests = post(&call("nap", "[800]", "1"), "");
        requests.extend(post(&call("sum", "[1,2]", "2"), ""));
        requests.extend(post(&call("nap", "[1]", "3"), ""));
        http.send(&requests);
        let late = http.read_response();
        assert_eq!(late.status, 504, "{engine:?}: {late:?}");
        assert_exceeded(&parse(&late.body), 1);
        assert_result(&parse(&http.read_response().body), 2, Json::from(3));
        assert_result(&parse(&http.read_response().body), 3, Json::from("rested"));
    });
}

#[test]
fn the_callers_deadline_bounds_every_procedure() {
    common::for_each_engine(|engine| {
        let server = serve(engine);
        // HTTP: the header.
        let mut http = Conn::to(&server);
        let sent = Instant::now();
        let late = http.roundtrip(&post(&call("later", "[1500]", "1"), "UCall-Timeout: 0.1\r\n"));
        assert_eq!(late.status, 504, "{engine:?}: {late:?}");
        assert_exceeded(&parse(&late.body), 1);
        assert!(
            sent.elapsed() < Duration::from_millis(1000),
            "{engine:?}: {:?}",
            sent.elapsed()
        );
        let in_time = http.roundtrip(&post(&call("later", "[1]", "2"), "UCall-Timeout: 5\r\n"));
        assert_result(&parse(&in_time.body), 2, Json::from("done"));

        // Raw TCP and WebSocket: the member; a caller may shorten a procedure's own limit.
        let member = |method: &str, ms: u64, id: u32, seconds: f64| {
            format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":[{ms}],"id":{id},"timeout":{seconds}}}"#)
        };
        let mut tcp = Conn::to(&server);
        let sent = Instant::now();
        tcp.send(format!("{}\n", member("later", 1500, 3, 0.1)).as_bytes());
        assert_exceeded(&parse(&tcp.read_line()), 3);
        assert!(
            sent.elapsed() < Duration::from_millis(1000),
            "{engine:?}: {:?}",
            sent.elapsed()
        );
        tcp.send(format!("{}\n", member("nap", 60, 4, 0.02)).as_bytes());
        assert_exceeded(&parse(&tcp.read_line()), 4);

        let mut ws = Conn::to(&server);
        ws.send(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        assert_eq!(ws.read_response().status, 101);
        ws.send(&common::ws_text(&member("later", 1500, 5, 0.1)));
        let head = ws.read_exact_bytes(2);
        assert_eq!(head[0], 0x81, "a text frame");
        let len = match head[1] {
            126 => {
                let n = ws.read_exact_bytes(2);
                usize::from(u16::from_be_bytes([n[0], n[1]]))
            }
            short => usize::from(short),
        };
        assert_exceeded(&parse(&ws.read_exact_bytes(len)), 5);
    });
}
