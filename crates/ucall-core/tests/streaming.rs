// SPDX-License-Identifier: Apache-2.0
//! Streamed replies (docs/streaming.md): items as `ucall.stream` notifications over raw TCP
//! and WebSocket, as lines of a chunked `application/jsonl` body over HTTP, then the final
//! reply (server-sent events when asked); refused where a call cannot stream; stopped when
//! the caller goes or cancels; bounded when the caller reads slowly. On every engine.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::json::Json;
use common::{call, for_each_engine, notification, parse_reply, show, wait_until, ws_text, Conn};
use ucall_core::{Call, EngineKind, Reply, RpcError, Server, ServerHandle, StreamError};

/// What the server's procedures let a test observe.
#[derive(Default)]
struct Seen {
    /// Items `endless` and `large` have sent so far.
    sent: AtomicUsize,
    /// `endless` learned that its caller had gone.
    stopped: AtomicBool,
}

/// `count(n)`: items 0..n, then `"done"`. `endless`: items until the caller goes.
/// `large(n)`: n items of 16 KiB, then `n`.
fn serve(engine: EngineKind, seen: &Arc<Seen>) -> ServerHandle {
    let count = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: u64 = call.get(0, "n")?;
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..n {
                if stream.send_item(&i).is_err() {
                    return;
                }
            }
            stream.json("done");
        });
        Ok(())
    };
    let endless_seen = Arc::clone(seen);
    let endless = move |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let stream = reply.stream()?;
        let seen = Arc::clone(&endless_seen);
        std::thread::spawn(move || loop {
            match stream.send_item(&"tick") {
                Ok(()) => {
                    seen.sent.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(StreamError::Gone) => {
                    seen.stopped.store(true, Ordering::SeqCst);
                    stream.error(RpcError::internal("gone"));
                    return;
                }
                Err(StreamError::Cancelled) => {
                    seen.stopped.store(true, Ordering::SeqCst);
                    stream.error(ucall_core::defer::cancelled());
                    return;
                }
                Err(other) => panic!("unexpected {other}"),
            }
        });
        Ok(())
    };
    let large_seen = Arc::clone(seen);
    let large = move |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: usize = call.get(0, "n")?;
        let stream = reply.stream()?;
        let seen = Arc::clone(&large_seen);
        std::thread::spawn(move || {
            for i in 0..n {
                let item = format!("{i:08}{}", "x".repeat(16 << 10));
                if stream.send_item(&item).is_err() {
                    return;
                }
                seen.sent.fetch_add(1, Ordering::SeqCst);
            }
            stream.json(&n);
        });
        Ok(())
    };
    let builder = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(engine)
        .handler("count", count)
        .handler("endless", endless)
        .handler("large", large)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?));
    common::start(engine, builder)
}

/// `line` is the notification carrying `item` for the call `id`.
fn assert_item(line: &[u8], id: &str, item: &str) {
    let message = parse_reply(line);
    let expected = parse_reply(
        format!(r#"{{"jsonrpc":"2.0","method":"ucall.stream","params":{{"id":{id},"item":{item}}}}}"#).as_bytes(),
    );
    let mut differences = Vec::new();
    common::json::differences(&expected, &message, "", &mut differences);
    assert!(differences.is_empty(), "{differences:?}: {}", show(line));
}

/// `reply` is the success reply to `id` with `result`.
fn assert_reply(reply: &[u8], id: &str, result: &str) {
    common::assert_result(reply, result, id);
}

#[test]
fn raw_tcp_streams_items_then_the_final_reply() {
    for_each_engine(|engine| {
        let server = serve(engine, &Arc::default());
        let mut conn = Conn::to(&server);
        conn.send(format!("{}\n", call("count", r#"{"n":3}"#, r#""a""#)).as_bytes());
        for i in 0..3 {
            assert_item(&conn.read_line(), r#""a""#, &i.to_string());
        }
        assert_reply(&conn.read_line(), r#""a""#, r#""done""#);
        // The connection goes on serving ordinary calls.
        conn.send(format!("{}\n", call("sum", "[1,2]", "2")).as_bytes());
        assert_reply(&conn.read_line(), "2", "3");
    });
}

/// Read one unmasked server text frame's payload (RFC 6455 §5.2).
fn read_ws_text(conn: &mut Conn) -> Vec<u8> {
    let head = conn.read_exact_bytes(2);
    assert_eq!(head[0], 0x81, "a final text frame");
    let len = match head[1] {
        126 => {
            let n = conn.read_exact_bytes(2);
            usize::from(u16::from_be_bytes([n[0], n[1]]))
        }
        127 => {
            let n = conn.read_exact_bytes(8);
            usize::try_from(u64::from_be_bytes(n.try_into().unwrap())).unwrap()
        }
        n => usize::from(n),
    };
    conn.read_exact_bytes(len)
}

#[test]
fn websocket_streams_items_then_the_final_reply() {
    for_each_engine(|engine| {
        let server = serve(engine, &Arc::default());
        let mut conn = Conn::to(&server);
        conn.send(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        let head = conn.read_response();
        assert_eq!(head.status, 101);
        conn.send(&ws_text(&call("count", "[4]", "7")));
        for i in 0..4 {
            assert_item(&read_ws_text(&mut conn), "7", &i.to_string());
        }
        assert_reply(&read_ws_text(&mut conn), "7", r#""done""#);
    });
}

/// Read a chunked body's chunks until the last one; the body.
fn read_chunked(conn: &mut Conn) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let size_line = conn.read_line();
        let size_text = std::str::from_utf8(&size_line).unwrap().trim();
        let size = usize::from_str_radix(size_text, 16).unwrap_or_else(|_| panic!("chunk size {size_text:?}"));
        if size == 0 {
            assert_eq!(conn.read_line(), b"\r", "no trailer");
            return body;
        }
        body.extend_from_slice(&conn.read_exact_bytes(size));
        assert_eq!(conn.read_exact_bytes(2), b"\r\n");
    }
}

/// Read a streamed HTTP reply's head (its status line and fields).
fn read_stream_head(conn: &mut Conn) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = String::from_utf8(conn.read_line()).unwrap();
        let line = line.trim_end_matches('\r').to_string();
        if line.is_empty() {
            return lines;
        }
        lines.push(line);
    }
}

#[test]
fn http_streams_a_chunked_body_of_json_lines() {
    for_each_engine(|engine| {
        let server = serve(engine, &Arc::default());
        let mut conn = Conn::to(&server);
        let body = call("count", r#"{"n":2}"#, "1");
        conn.send(&common::post("/", body.as_bytes()));
        let head = read_stream_head(&mut conn);
        assert_eq!(head[0], "HTTP/1.1 200 OK");
        assert!(head.iter().any(|l| l == "Content-Type: application/jsonl"), "{head:?}");
        assert!(head.iter().any(|l| l == "Transfer-Encoding: chunked"), "{head:?}");
        let body = read_chunked(&mut conn);
        let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        assert_eq!(
            lines.len(),
            4,
            "two items, the reply, and the empty rest: {}",
            show(&body)
        );
        assert_item(lines[0], "1", "0");
        assert_item(lines[1], "1", "1");
        assert_reply(lines[2], "1", r#""done""#);
        assert!(lines[3].is_empty());
        // Keep-alive: the next request on the same connection.
        let reply = conn.roundtrip(&common::post("/", call("sum", "[2,3]", "2").as_bytes()));
        assert_reply(&reply.body, "2", "5");
    });
}

#[test]
fn calls_that_cannot_stream_are_refused_and_others_answered() {
    for_each_engine(|engine| {
        let server = serve(engine, &Arc::default());
        let mut conn = Conn::to(&server);
        // In a batch: -32600 for that call, the others answered.
        let batch = format!("[{},{}]\n", call("count", "[2]", "1"), call("sum", "[1,1]", "2"));
        conn.send(batch.as_bytes());
        let replies = parse_reply(&conn.read_line());
        let replies = replies.as_array().expect("a batch reply");
        assert_eq!(replies.len(), 2);
        let error = replies[0].get("error").expect("an error for the streamed call");
        assert_eq!(error.get("code").and_then(Json::as_i64), Some(-32600));
        assert_eq!(replies[1].get("result").and_then(Json::as_i64), Some(2));
        // A notification: nothing, and the next call is answered.
        conn.send(format!("{}\n{}\n", notification("count", "[2]"), call("sum", "[1,2]", "3")).as_bytes());
        assert_reply(&conn.read_line(), "3", "3");
        // HTTP/1.0 has no chunked coding.
        let mut http = Conn::to(&server);
        let body = call("count", "[2]", "4");
        let request = format!(
            "POST / HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        http.send(request.as_bytes());
        let response = http.read_response();
        let reply = response.json();
        let error = reply.get("error").expect("an error");
        assert_eq!(error.get("code").and_then(Json::as_i64), Some(-32600));
    });
}

#[test]
fn a_caller_that_disconnects_stops_the_stream() {
    for_each_engine(|engine| {
        for transport in ["tcp", "http"] {
            let seen = Arc::new(Seen::default());
            let server = serve(engine, &seen);
            let mut conn = Conn::to(&server);
            if transport == "tcp" {
                conn.send(format!("{}\n", call("endless", "[]", "1")).as_bytes());
                conn.read_line();
                conn.read_line();
            } else {
                conn.send(&common::post("/", call("endless", "[]", "1").as_bytes()));
                read_stream_head(&mut conn);
                conn.read_line();
            }
            drop(conn);
            assert!(
                wait_until(Duration::from_secs(10), || seen.stopped.load(Ordering::SeqCst)),
                "{transport}: the producer was not told that its caller had gone"
            );
            let after = seen.sent.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(
                seen.sent.load(Ordering::SeqCst),
                after,
                "{transport}: nothing more is produced"
            );
            // The server goes on serving.
            let mut other = Conn::to(&server);
            other.send(format!("{}\n", call("sum", "[1,2]", "9")).as_bytes());
            assert_reply(&other.read_line(), "9", "3");
        }
    });
}

#[test]
fn a_slow_reader_holds_the_producer_back() {
    for_each_engine(|engine| {
        let seen = Arc::new(Seen::default());
        let server = serve(engine, &seen);
        let total = 2000; // 32 MiB of items
        let mut conn = Conn::open_with_buffers(server.local_addr(), 4096, 4096);
        conn.send(format!("{}\n", call("large", &format!("[{total}]"), "1")).as_bytes());
        // Not reading: the producer must stop well short of the end. On a loaded host it
        // may take longer to get there than on a quiet one: where it stops is what counts,
        // once its count has held still for 300 ms.
        let mut stalled = usize::MAX;
        let held = wait_until(Duration::from_secs(10), || {
            std::thread::sleep(Duration::from_millis(300));
            let now = seen.sent.load(Ordering::SeqCst);
            std::mem::replace(&mut stalled, now) == now
        });
        assert!(
            held && stalled < total / 2,
            "a caller that reads nothing let the producer send {stalled} of {total} items"
        );
        // Reading, every item arrives in order, then the reply.
        conn.patience = Duration::from_secs(20);
        for i in 0..total {
            let line = conn.read_line();
            let message = parse_reply(&line);
            let item = message.get("params").and_then(|p| p.get("item")).and_then(Json::as_str);
            let item = item.unwrap_or_else(|| panic!("item {i}: {}", show(&line[..line.len().min(200)])));
            assert_eq!(&item[..8], format!("{i:08}"), "items in order");
        }
        assert_reply(&conn.read_line(), "1", &total.to_string());
    });
}

#[test]
fn http_streams_server_sent_events_when_asked() {
    for_each_engine(|engine| {
        let server = serve(engine, &Arc::default());
        let mut conn = Conn::to(&server);
        let body = call("count", "[2]", "1");
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.send(request.as_bytes());
        let head = read_stream_head(&mut conn);
        assert!(head.iter().any(|l| l == "Content-Type: text/event-stream"), "{head:?}");
        let body = read_chunked(&mut conn);
        let text = String::from_utf8(body).unwrap();
        let events: Vec<&str> = text.split("\n\n").collect();
        assert_eq!(events.len(), 4, "two items, the reply, and the empty rest: {text:?}");
        assert_item(events[0].strip_prefix("data: ").unwrap().as_bytes(), "1", "0");
        assert_item(events[1].strip_prefix("data: ").unwrap().as_bytes(), "1", "1");
        assert_reply(events[2].strip_prefix("data: ").unwrap().as_bytes(), "1", r#""done""#);
        assert!(events[3].is_empty());
    });
}

#[test]
fn ucall_cancel_stops_a_stream_on_the_same_connection() {
    for_each_engine(|engine| {
        let seen = Arc::new(Seen::default());
        let server = serve(engine, &seen);
        let mut conn = Conn::to(&server);
        conn.send(format!("{}\n", call("endless", "[]", r#""s1""#)).as_bytes());
        conn.read_line();
        // Cancelling another id finds nothing; cancelling the stream ends it with -32800.
        conn.send(format!("{}\n", call("ucall.cancel", r#"{"id":"s2"}"#, "2")).as_bytes());
        conn.send(format!("{}\n", call("ucall.cancel", r#"{"id":"s1"}"#, "3")).as_bytes());
        let mut lines = Vec::new();
        loop {
            let line = conn.read_line();
            let message = parse_reply(&line);
            if message.get("method").is_none() {
                lines.push(line);
                if lines.len() == 3 {
                    break;
                }
            }
        }
        common::assert_error(&lines[0], -32800, r#""s1""#);
        assert_reply(&lines[1], "2", "false");
        assert_reply(&lines[2], "3", "true");
        assert!(seen.stopped.load(Ordering::SeqCst), "the producer saw the cancel");
    });
}
