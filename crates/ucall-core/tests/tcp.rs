// SPDX-License-Identifier: Apache-2.0
//! Raw TCP over loopback: a stream of JSON texts in, one reply line per call out, in
//! request order (`tests/vectors/README.md`, "Transports").

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_error, assert_result, call, notification, show, Conn};

fn subtract(minuend: i64, subtrahend: i64, id: i64) -> String {
    call("subtract", &format!("[{minuend},{subtrahend}]"), &id.to_string())
}

fn read_subtract(conn: &mut Conn, minuend: i64, subtrahend: i64, id: i64) {
    assert_result(&conn.read_line(), &(minuend - subtrahend).to_string(), &id.to_string());
}

#[test]
fn texts_back_to_back_or_separated_by_whitespace() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        // No separator at all, then every kind of JSON whitespace, then a batch.
        let stream = format!(
            "{}{}\n\n \t{}\r\n{} \r\n\t\n[{} , {}]\n",
            subtract(10, 1, 1),
            subtract(20, 2, 2),
            subtract(30, 3, 3),
            subtract(40, 4, 4),
            subtract(5, 1, 5),
            subtract(5, 2, 6)
        );
        conn.send(stream.as_bytes());
        for i in 1..=4 {
            read_subtract(&mut conn, 10 * i, i, i);
        }
        let batch = conn.read_line();
        let replies = common::parse_reply(&batch);
        let replies = replies
            .as_array()
            .unwrap_or_else(|| panic!("not a batch reply: {}", show(&batch)));
        assert_eq!(replies.len(), 2);
        assert_result(replies[0].to_string().as_bytes(), "4", "5");
        assert_result(replies[1].to_string().as_bytes(), "3", "6");
        // A stream that starts with whitespace is raw TCP too.
        let mut conn = Conn::to(&server);
        conn.send(format!(" \r\n\t{}", subtract(3, 1, 7)).as_bytes());
        read_subtract(&mut conn, 3, 1, 7);
        assert!(conn.nothing_within(Duration::from_millis(100)));
    });
}

#[test]
fn each_reply_is_one_compact_line() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let data = r#"{"text":"line 1\nline 2\r\n","list":[1, 2, {"a" : "b"}]}"#;
        conn.send(format!("{}\n", call("echo", &format!("[{data}]"), r#""lines""#)).as_bytes());
        let line = conn.read_line();
        assert!(!line.contains(&b'\r'), "{}", show(&line));
        assert_result(&line, data, r#""lines""#);
        assert!(
            conn.nothing_within(Duration::from_millis(100)),
            "more than one line for one call"
        );
    });
}

#[test]
fn notifications_write_nothing() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        conn.send(format!("{}\n", notification("notify_sum", "[1,2]")).as_bytes());
        conn.send(format!("[{},{}]", notification("update", "[1]"), notification("nope", "{}")).as_bytes());
        assert!(conn.nothing_within(Duration::from_millis(200)));
        conn.send(subtract(2, 1, 9).as_bytes());
        read_subtract(&mut conn, 2, 1, 9);
    });
}

/// A result whose serialization is counted and fails (`-32603` when it is sent).
struct Costly(Arc<AtomicUsize>);

impl serde::Serialize for Costly {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Err(serde::ser::Error::custom("too costly to send"))
    }
}

/// A raw TCP binary message carrying `text` and no attachments (docs/wire.md §3.2).
fn binary_message(text: &str) -> Vec<u8> {
    let prefix = ucall_core::wire::Prefix::encode(text.len() as u32, text.len() as u64);
    [&prefix[..], text.as_bytes()].concat()
}

#[test]
fn a_notifications_result_is_never_built() {
    common::for_each_engine(|engine| {
        // How many results were serialized, and how many attachments written.
        let serialized = Arc::new(AtomicUsize::new(0));
        let attached = Arc::new(AtomicUsize::new(0));
        // Deferred calls completed so far.
        let completed = Arc::new(AtomicUsize::new(0));
        let (counter, attaching) = (Arc::clone(&serialized), Arc::clone(&attached));
        let (later_counter, completing) = (Arc::clone(&serialized), Arc::clone(&completed));
        let builder = common::builder(engine)
            .procedure("costly", move |_| Ok(Costly(Arc::clone(&counter))))
            .handler(
                "costly_later",
                move |_: &ucall_core::Call<'_>, reply: &mut ucall_core::Reply<'_>| {
                    let deferred = reply.defer()?;
                    let (counter, completing) = (Arc::clone(&later_counter), Arc::clone(&completing));
                    std::thread::spawn(move || {
                        deferred.json(&Costly(counter));
                        completing.fetch_add(1, Ordering::Relaxed);
                    });
                    Ok(())
                },
            )
            .handler(
                "attach",
                move |_: &ucall_core::Call<'_>, reply: &mut ucall_core::Reply<'_>| {
                    reply.bytes(vec![7u8; 100_000]);
                    if reply.is_written() {
                        attaching.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                },
            );
        let server = common::start(engine, builder);
        let costly = notification("costly", "[]");
        // Raw TCP: alone, in a batch with a call, then as a binary message.
        let mut tcp = Conn::to(&server);
        tcp.send(format!("{costly}\n[{costly},{},{costly}]\n", subtract(42, 23, 1)).as_bytes());
        let batch = common::parse_reply(&tcp.read_line());
        let replies = batch.as_array().unwrap_or_else(|| panic!("not a batch reply: {batch}"));
        assert_eq!(replies.len(), 1, "{batch}");
        assert_result(replies[0].to_string().as_bytes(), "19", "1");
        tcp.send(&binary_message(&notification("attach", "[]")));
        tcp.send(&binary_message(&call("attach", "[]", "2")));
        let prefix = tcp.read_exact_bytes(ucall_core::wire::PREFIX_LEN);
        let body_len = u64::from_le_bytes(prefix[8..16].try_into().expect("8 bytes"));
        let body = tcp.read_exact_bytes(usize::try_from(body_len).expect("small"));
        let text = String::from_utf8_lossy(&body[..body.len().min(100)]);
        assert!(text.starts_with(r#"{"jsonrpc":"2.0","id":2,"#), "{text}");
        // A notification whose result comes later, from another thread.
        tcp.send(format!("{}\n{}", notification("costly_later", "[]"), subtract(2, 1, 3)).as_bytes());
        read_subtract(&mut tcp, 2, 1, 3);
        assert!(common::wait_until(Duration::from_secs(5), || completed
            .load(Ordering::Relaxed)
            == 1));
        // HTTP and WebSocket.
        let mut http = Conn::to(&server);
        assert_eq!(http.roundtrip(&common::post("/", costly.as_bytes())).status, 204);
        let mut ws = Conn::to(&server);
        ws.send(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        assert_eq!(ws.read_response().status, 101);
        ws.send(&common::ws_text(&costly));
        ws.send(&common::ws_text(&subtract(5, 3, 4)));
        let frame = ws.read_exact_bytes(2);
        let reply = ws.read_exact_bytes(usize::from(frame[1]));
        assert_result(&reply, "2", "4");
        assert_eq!(
            serialized.load(Ordering::Relaxed),
            0,
            "a notification's result was serialized"
        );
        assert_eq!(attached.load(Ordering::Relaxed), 1, "only the call's result is written");
        // A call's result is built (and here fails) as ever.
        tcp.send(format!("{}\n", call("costly", "[]", "5")).as_bytes());
        assert_error(&tcp.read_line(), -32603, "5");
        assert_eq!(serialized.load(Ordering::Relaxed), 1);
    });
}

/// Three texts with multi-byte characters in strings, names and ids, a notification
/// among them, and every kind of separator.
fn utf8_stream() -> Vec<u8> {
    format!(
        "{}\n{}{}\r\n",
        call("echo", r#"["aé€😀z"]"#, r#""é""#),
        notification("notify_hello", r#"{"ключ":"значение"}"#),
        call("subtract", r#"{"subtrahend":5,"minuend":8}"#, r#""😀""#)
    )
    .into_bytes()
}

fn read_utf8_stream_replies(conn: &mut Conn) {
    assert_result(&conn.read_line(), r#""aé€😀z""#, r#""é""#);
    assert_result(&conn.read_line(), "3", r#""😀""#);
}

#[test]
fn a_stream_split_at_every_byte() {
    common::for_each_engine(|engine| {
        let stream = utf8_stream();
        assert!(
            std::str::from_utf8(&stream).unwrap().chars().count() < stream.len(),
            "the stream must hold multi-byte characters"
        );
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        for cut in 1..stream.len() {
            conn.send(&stream[..cut]);
            std::thread::sleep(Duration::from_millis(1));
            conn.send(&stream[cut..]);
            read_utf8_stream_replies(&mut conn);
        }
        // And one byte per write throughout.
        conn.send_in_pieces(&stream, 1, Duration::from_micros(200));
        read_utf8_stream_replies(&mut conn);
        assert!(conn.nothing_within(Duration::from_millis(50)));
    });
}

#[test]
fn many_requests_in_one_write_are_answered_in_order() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let stream: String = (0..2000).map(|i| subtract(5000, i, i) + "\n").collect();
        conn.send(stream.as_bytes());
        for i in 0..2000 {
            read_subtract(&mut conn, 5000, i, i);
        }
        assert!(conn.nothing_within(Duration::from_millis(50)));
    });
}

#[test]
fn garbage_after_valid_requests() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // (A scalar that is JSON is an invalid Request instead, and the stream goes on:
        // see `the_first_byte_is_http_only_when_it_can_start_a_method`.)
        for garbage in ["@@@ this is not JSON\n", "}", "nul\n", "1.2.3 ", "tru e", "{\"a\":1]"] {
            let mut conn = Conn::to(&server);
            conn.send(format!("{}\n{}\n{garbage}", subtract(3, 1, 1), subtract(4, 1, 2)).as_bytes());
            read_subtract(&mut conn, 3, 1, 1);
            read_subtract(&mut conn, 4, 1, 2);
            // The stream cannot go on after a text that is not JSON: -32700 with id null,
            // then the server closes.
            let line = conn.read_line();
            assert_error(&line, -32700, "null");
            conn.expect_closed(common::IO_TIMEOUT);
        }
        // Garbage in a later write.
        let mut conn = Conn::to(&server);
        conn.send(subtract(0, 0, 0).as_bytes());
        read_subtract(&mut conn, 0, 0, 0);
        conn.send(b"]");
        assert_error(&conn.read_line(), -32700, "null");
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

#[test]
fn half_close_after_sending_still_gets_the_replies() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        conn.send(format!("{}{}", subtract(9, 1, 1), subtract(9, 2, 2)).as_bytes());
        conn.shutdown_write();
        read_subtract(&mut conn, 9, 1, 1);
        read_subtract(&mut conn, 9, 2, 2);
        conn.expect_closed(common::IO_TIMEOUT);

        // Ending inside a text: what came before is answered, the cut text gets -32700.
        let mut conn = Conn::to(&server);
        let cut = subtract(9, 3, 3);
        conn.send(format!("{}{}", subtract(9, 1, 1), &cut[..cut.len() - 4]).as_bytes());
        conn.shutdown_write();
        read_subtract(&mut conn, 9, 1, 1);
        assert_error(&conn.read_line(), -32700, "null");
        conn.expect_closed(common::IO_TIMEOUT);

        // Trailing whitespace only: nothing more to answer.
        let mut conn = Conn::to(&server);
        conn.send(format!("{}\n \r\n", subtract(9, 1, 1)).as_bytes());
        conn.shutdown_write();
        read_subtract(&mut conn, 9, 1, 1);
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

#[test]
fn half_close_after_a_large_pipeline_gets_every_reply() {
    // More than the server keeps buffered for one connection, sent before the client reads
    // anything: the server must hold back reading while its output is full, then answer
    // everything, including what it had read but not yet processed when the input ended.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // A small receive window keeps the server's output near its limit while it reads on.
        let conn = Conn::open_with_buffers(server.local_addr(), 4096, 64 << 10);
        let mut writer = conn.stream.try_clone().expect("clone the stream");
        let padding = "p".repeat(1000);
        let count = 20_000; // about 20 MB each way
        let sent = Arc::new(AtomicUsize::new(0));
        let progress = Arc::clone(&sent);
        let sender = std::thread::spawn(move || {
            writer
                .set_write_timeout(Some(Duration::from_secs(20)))
                .expect("set a write time-out");
            let mut stream = Vec::new();
            for i in 0..count {
                stream.extend_from_slice(call("echo", &format!(r#"["{padding}"]"#), &i.to_string()).as_bytes());
            }
            for piece in stream.chunks(16 << 10) {
                writer.write_all(piece).expect("send requests");
                progress.fetch_add(piece.len(), Ordering::Relaxed);
            }
            writer.shutdown(Shutdown::Write).expect("shutdown(Write)");
        });
        // Read nothing until the sender is done or stuck: the server's output fills up.
        let mut last = usize::MAX;
        while !sender.is_finished() {
            std::thread::sleep(Duration::from_millis(300));
            let now = sent.load(Ordering::Relaxed);
            if now == last {
                break;
            }
            last = now;
        }
        // Then read in small pieces, so that the server's output stays near its limit
        // while it reads on, up to the end of the input.
        let mut conn = conn;
        let expected = format!("\"{}\"", "p".repeat(1000));
        let mut received = Vec::new();
        let mut piece = [0u8; 4096];
        let mut replies = 0;
        while replies < count {
            match conn.stream.read(&mut piece) {
                Ok(0) => panic!("closed after {replies} of {count} replies"),
                Ok(n) => received.extend_from_slice(&piece[..n]),
                Err(e) => panic!("after {replies} of {count} replies: {e}"),
            }
            while let Some(end) = received.iter().position(|&c| c == b'\n') {
                assert_result(&received[..end], &expected, &replies.to_string());
                received.drain(..=end);
                replies += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        sender.join().expect("the sender finished");
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

#[test]
fn a_text_over_the_size_limit_is_refused() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_body_bytes(4096));
        let mut conn = Conn::to(&server);
        let small = call("echo", &format!(r#"["{}"]"#, "s".repeat(3000)), "1");
        conn.send(small.as_bytes());
        assert_result(&conn.read_line(), &format!(r#""{}""#, "s".repeat(3000)), "1");
        // A text that never ends within the limit: refused without waiting for its end.
        conn.send(format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"#, "x".repeat(5000)).as_bytes());
        assert_error(&conn.read_line(), -32600, "null");
        conn.expect_closed(common::IO_TIMEOUT);
    });
}

#[test]
fn the_first_byte_is_http_only_when_it_can_start_a_method() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // A scalar text opens a raw TCP stream: it is an invalid Request (-32600), framed
        // like any text, and the stream goes on after it.
        for scalar in ["\"hi\"", "42", "-1.5", "null", "true", "false"] {
            let mut conn = Conn::to(&server);
            conn.send(format!("{scalar}\n{}", subtract(5, 3, 1)).as_bytes());
            assert_error(&conn.read_line(), -32600, "null");
            read_subtract(&mut conn, 5, 3, 1);
        }
        // A bare word is whole when the input ends.
        let mut conn = Conn::to(&server);
        conn.send(b"  42");
        conn.shutdown_write();
        assert_error(&conn.read_line(), -32600, "null");
        conn.expect_closed(common::IO_TIMEOUT);
        // Bytes that cannot start a JSON text: -32700, then the connection closes.
        for garbage in [
            &b"hello\n"[..],
            b"}{",
            b"\x00\x01\x02",
            b"\xff\xfe",
            b"get / HTTP/1.1\r\n\r\n",
        ] {
            let mut conn = Conn::to(&server);
            conn.send(garbage);
            assert_error(&conn.read_line(), -32700, "null");
            conn.expect_closed(common::IO_TIMEOUT);
        }
        // An uppercase letter is HTTP, as before.
        let mut conn = Conn::to(&server);
        conn.send(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n");
        let response = conn.read_response();
        assert!(response.status >= 400, "{response:?}");
    });
}
