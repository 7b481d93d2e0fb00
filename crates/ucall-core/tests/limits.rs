// SPDX-License-Identifier: Apache-2.0
//! Limits and time-outs under real sockets: slow and idle clients, connection and batch
//! limits, many clients at once, clients that reset or never read, graceful shutdown.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{assert_error, assert_result, call, post, show, ws_text, Conn};
use ucall_core::EngineKind;

fn subtract(minuend: i64, subtrahend: i64, id: i64) -> String {
    call("subtract", &format!("[{minuend},{subtrahend}]"), &id.to_string())
}

fn http_subtract(conn: &mut Conn, minuend: i64, subtrahend: i64, id: i64) {
    let response = conn.roundtrip(&post("/", subtract(minuend, subtrahend, id).as_bytes()));
    assert_eq!(response.status, 200, "{response:?}");
    assert_result(&response.body, &(minuend - subtrahend).to_string(), &id.to_string());
}

fn tcp_subtract(conn: &mut Conn, minuend: i64, subtrahend: i64, id: i64) {
    conn.send(format!("{}\n", subtract(minuend, subtrahend, id)).as_bytes());
    assert_result(&conn.read_line(), &(minuend - subtrahend).to_string(), &id.to_string());
}

// ---------------------------------------------------------------------------------------
// Time-outs

#[test]
fn a_slow_head_is_cut_while_others_are_served() {
    common::for_each_engine(|engine| {
        let server = common::start(
            engine,
            common::builder(engine).header_timeout(Duration::from_millis(300)),
        );
        let head = format!("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: {}", "s".repeat(100));
        let mut slow = Conn::to(&server);
        let started = Instant::now();
        let mut closed_after = None;
        let mut other_latency = None;
        for byte in head.as_bytes() {
            // One byte per 100 ms: progress, but the head is far from complete in 300 ms.
            if slow.stream.write_all(std::slice::from_ref(byte)).is_err()
                || slow.closed_within(Duration::from_millis(100))
            {
                closed_after = Some(started.elapsed());
                break;
            }
            if other_latency.is_none() && started.elapsed() > Duration::from_millis(150) {
                let t0 = Instant::now();
                let mut other = Conn::to(&server);
                http_subtract(&mut other, 5, 2, 1);
                other_latency = Some(t0.elapsed());
            }
            if started.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
        let closed_after = closed_after.expect("a head dripping one byte per 100 ms was never cut");
        let other_latency = other_latency.expect("the other client ran");
        assert!(
            other_latency < Duration::from_millis(500),
            "another client waited {other_latency:?} while a slow head was arriving"
        );
        assert!(
            closed_after >= Duration::from_millis(250) && closed_after < Duration::from_millis(1500),
            "cut after {closed_after:?} with a 300 ms header time-out"
        );
        // RFC 9110 §15.5.9: 408 (or a plain close) for a request not received in time.
        if !slow.buf.is_empty() {
            let response = common::parse_response(&slow.buf)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("a partial response: {}", show(&slow.buf)))
                .0;
            assert_eq!(response.status, 408, "{response:?}");
        }
    });
}

#[test]
fn idle_connections_are_closed_silently() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).idle_timeout(Duration::from_millis(300)));
        // After a reply, over HTTP and raw TCP, and without ever sending anything.
        let mut http = Conn::to(&server);
        http_subtract(&mut http, 5, 2, 1);
        let mut tcp = Conn::to(&server);
        tcp_subtract(&mut tcp, 5, 2, 2);
        let mut silent = Conn::to(&server);
        let started = Instant::now();
        for (name, conn) in [("HTTP", &mut http), ("raw TCP", &mut tcp), ("silent", &mut silent)] {
            // No request was started: there is nothing to answer, not even 408.
            match conn.read_until_closed(Duration::from_secs(3)) {
                Ok(extra) => assert!(extra.is_empty(), "{name}: sent before closing: {}", show(&extra)),
                Err(got) => panic!("{name}: still open after 3 s; received {}", show(&got)),
            }
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(200),
            "closed after {elapsed:?} with a 300 ms idle time-out"
        );
        assert!(common::wait_until(Duration::from_secs(2), || server.connections() == 0));
    });
}

#[test]
fn active_connections_are_kept() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).idle_timeout(Duration::from_millis(300)));
        let mut http = Conn::to(&server);
        let mut tcp = Conn::to(&server);
        let until = Instant::now() + Duration::from_millis(1200);
        let mut i = 0;
        while Instant::now() < until {
            http_subtract(&mut http, 100, i, i);
            tcp_subtract(&mut tcp, 100, i, i);
            std::thread::sleep(Duration::from_millis(100));
            i += 1;
        }
        assert!(i >= 8);
    });
}

// ---------------------------------------------------------------------------------------
// Counting limits

#[test]
fn connections_over_the_limit_are_closed_and_the_server_recovers() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_connections(4));
        let mut held: Vec<Conn> = (0..4).map(|_| Conn::to(&server)).collect();
        for (i, conn) in held.iter_mut().enumerate() {
            http_subtract(conn, 10, i as i64, i as i64);
        }
        assert_eq!(server.connections(), 4);
        // A fifth is closed (or reset) and never served.
        for _ in 0..3 {
            let mut extra = Conn::to(&server);
            let _ = extra.stream.write_all(&post("/", subtract(1, 1, 99).as_bytes()));
            match extra.read_until_closed(Duration::from_secs(3)) {
                Ok(got) => assert!(
                    got.is_empty() || got.starts_with(b"HTTP/1.1 503"),
                    "served over the limit: {}",
                    show(&got)
                ),
                Err(got) => panic!("a connection over the limit stayed open; received {}", show(&got)),
            }
        }
        assert!(server.connections() <= 4);
        for (i, conn) in held.iter_mut().enumerate() {
            http_subtract(conn, 20, i as i64, i as i64);
        }
        // Once one leaves, a new one is served.
        drop(held.pop());
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let mut fresh = Conn::to(&server);
            let _ = fresh.stream.write_all(&post("/", subtract(7, 7, 7).as_bytes()));
            if let Ok(response) = fresh.try_read_response() {
                assert_eq!(response.status, 200, "{response:?}");
                assert_result(&response.body, "0", "7");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no connection served after one of four closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

fn batch(n: usize, offset: usize) -> String {
    let calls: Vec<String> = (0..n)
        .map(|i| subtract(100, (offset + i) as i64, (offset + i) as i64))
        .collect();
    format!("[{}]", calls.join(","))
}

fn check_batch(reply: &[u8], n: usize, offset: usize) {
    let replies = common::parse_reply(reply);
    let replies = replies
        .as_array()
        .unwrap_or_else(|| panic!("not a batch reply: {}", show(reply)));
    assert_eq!(replies.len(), n, "{}", show(reply));
    for (i, reply) in replies.iter().enumerate() {
        let id = offset + i;
        assert_result(
            reply.to_string().as_bytes(),
            &(100 - id as i64).to_string(),
            &id.to_string(),
        );
    }
}

#[test]
fn a_batch_over_the_limit_is_one_error() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_batch(4));
        let mut http = Conn::to(&server);
        check_batch(&http.roundtrip(&post("/", batch(4, 0).as_bytes())).body, 4, 0);
        let response = http.roundtrip(&post("/", batch(5, 0).as_bytes()));
        assert_eq!(response.status, 200);
        // JSON-RPC 2.0 §6: a batch that is refused as a whole gets a single Response object.
        assert_error(&response.body, -32600, "null");
        check_batch(&http.roundtrip(&post("/", batch(3, 10).as_bytes())).body, 3, 10);

        let mut tcp = Conn::to(&server);
        tcp.send(format!("{}\n{}\n{}\n", batch(4, 0), batch(5, 0), batch(3, 10)).as_bytes());
        check_batch(&tcp.read_line(), 4, 0);
        assert_error(&tcp.read_line(), -32600, "null");
        check_batch(&tcp.read_line(), 3, 10);
    });
}

// ---------------------------------------------------------------------------------------
// Exchanges per connection

#[test]
fn http_connections_close_after_their_last_exchange() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_exchanges_per_connection(3));
        // One at a time: the third reply says `Connection: close`, then the server closes.
        let mut http = Conn::to(&server);
        for i in 0..3 {
            let response = http.roundtrip(&post("/", subtract(10, i, i).as_bytes()));
            assert_eq!(response.status, 200, "{response:?}");
            assert_result(&response.body, &(10 - i).to_string(), &i.to_string());
            assert_eq!(response.says_close(), i == 2, "exchange {}: {response:?}", i + 1);
        }
        http.expect_closed(Duration::from_secs(3));

        // Pipelined in one write; a REST call and a notification (204) count too.
        let mut pipelined = Conn::to(&server);
        let mut requests = post("/", subtract(7, 1, 1).as_bytes());
        requests.extend_from_slice(&common::get("/subtract?minuend=7&subtrahend=2"));
        requests.extend_from_slice(&post("/", common::notification("notify_hello", "[7]").as_bytes()));
        pipelined.send(&requests);
        let first = pipelined.read_response();
        assert_result(&first.body, "6", "1");
        let second = pipelined.read_response();
        assert_eq!((second.status, second.body.as_slice()), (200, &b"5"[..]), "{second:?}");
        let third = pipelined.read_response();
        assert_eq!(third.status, 204, "{third:?}");
        assert!(!first.says_close() && !second.says_close(), "{first:?} {second:?}");
        assert!(third.says_close(), "the last exchange says close: {third:?}");
        pipelined.expect_closed(Duration::from_secs(3));

        // Each connection counts its own: a new one is served again.
        let mut fresh = Conn::to(&server);
        let response = fresh.roundtrip(&post("/", subtract(3, 1, 9).as_bytes()));
        assert_result(&response.body, "2", "9");
        assert!(!response.says_close(), "{response:?}");
    });
}

#[test]
fn raw_tcp_connections_close_after_their_last_exchange() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_exchanges_per_connection(3));
        // A notification (no reply) and a batch (one exchange) count once each.
        let mut tcp = Conn::to(&server);
        tcp.send(format!("{}\n", common::notification("notify_hello", "[7]")).as_bytes());
        tcp_subtract(&mut tcp, 8, 2, 1);
        tcp.send(format!("{}\n", batch(2, 0)).as_bytes());
        check_batch(&tcp.read_line(), 2, 0);
        tcp.expect_closed(Duration::from_secs(3));

        let mut one_write = Conn::to(&server);
        one_write.send(format!("{}\n{}\n{}\n", subtract(5, 1, 1), subtract(5, 2, 2), subtract(5, 3, 3)).as_bytes());
        for i in 1..=3 {
            assert_result(&one_write.read_line(), &(5 - i).to_string(), &i.to_string());
        }
        one_write.expect_closed(Duration::from_secs(3));
    });
}

#[test]
fn websocket_connections_close_after_their_last_message() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_exchanges_per_connection(2));
        let mut ws = Conn::to(&server);
        // The upgrade itself is no exchange; the two messages are.
        let mut bytes = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            .to_vec();
        bytes.extend_from_slice(&ws_text(&subtract(9, 1, 1)));
        bytes.extend_from_slice(&ws_text(&subtract(9, 2, 2)));
        ws.send(&bytes);
        let upgrade = ws.read_response();
        assert_eq!(upgrade.status, 101, "{upgrade:?}");
        let rest = ws
            .read_until_closed(Duration::from_secs(3))
            .unwrap_or_else(|got| panic!("still open after two messages: {}", show(&got)));
        // Server frames: unmasked, final, short here.
        let mut frames = Vec::new();
        let mut at = 0;
        while at < rest.len() {
            assert!(rest.len() >= at + 2 && rest[at + 1] < 126, "frames: {}", show(&rest));
            let end = at + 2 + usize::from(rest[at + 1]);
            frames.push((rest[at], rest[at + 2..end].to_vec()));
            at = end;
        }
        assert_eq!(frames.len(), 3, "two replies and a Close: {}", show(&rest));
        assert_eq!(frames[0].0, 0x81);
        assert_result(&frames[0].1, "8", "1");
        assert_eq!(frames[1].0, 0x81);
        assert_result(&frames[1].1, "7", "2");
        assert_eq!(
            frames[2],
            (0x88, 1000u16.to_be_bytes().to_vec()),
            "a Close frame with 1000"
        );
    });
}

#[test]
fn zero_exchanges_per_connection_is_refused() {
    let refused = common::builder(ucall_core::EngineKind::Poll)
        .max_exchanges_per_connection(0)
        .bind();
    assert!(refused.is_err(), "a limit of zero exchanges would serve nothing");
}

/// A WebSocket call: one masked text frame out, the reply's text frame back.
fn ws_subtract(conn: &mut Conn, minuend: i64, subtrahend: i64, id: i64) {
    let frame = common::ws_text(&subtract(minuend, subtrahend, id));
    conn.send(&frame);
    let mut reply = [0u8; 2];
    conn.stream.read_exact(&mut reply).expect("a reply frame's header");
    assert_eq!(reply[0], 0x81, "a final text frame");
    let mut body = vec![0u8; usize::from(reply[1] & 0x7F)];
    conn.stream.read_exact(&mut body).expect("the reply");
    assert_result(&body, &(minuend - subtrahend).to_string(), &id.to_string());
}

#[test]
fn connections_left_idle_give_their_buffers_back_and_go_on_serving() {
    // An idle connection's buffers go back after a second (`IDLE_TRIM`), and a worker's
    // connection table shrinks after a storm: neither may change what clients see.
    const STORM: usize = 3000;
    common::for_each_engine(|engine| {
        common::raise_open_files(2 * STORM as u64 + 512);
        let server = common::serve(engine);
        let mut http = Conn::to(&server);
        let mut tcp = Conn::to(&server);
        let mut ws = Conn::to(&server);
        ws.send(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        assert_eq!(ws.read_response().status, 101);
        http_subtract(&mut http, 5, 2, 1);
        tcp_subtract(&mut tcp, 5, 2, 1);
        ws_subtract(&mut ws, 5, 2, 1);
        // A storm of connections, each answered once, then gone: the tables grow past
        // the slots kept and are shrunk by the scan after the last close.
        let storm: Vec<Conn> = (0..STORM)
            .map(|i| {
                let mut conn = Conn::to(&server);
                http_subtract(&mut conn, 9, 4, i as i64);
                conn
            })
            .collect();
        drop(storm);
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            common::wait_until(Duration::from_secs(5), || server.connections() == 3),
            "{}: {} connections open after the storm, 3 expected",
            engine.name(),
            server.connections()
        );
        // The three idle connections had their buffers given back meanwhile.
        for id in 2..5 {
            http_subtract(&mut http, 10, id, id);
            tcp_subtract(&mut tcp, 10, id, id);
            ws_subtract(&mut ws, 10, id, id);
        }
        let mut fresh = Conn::to(&server);
        http_subtract(&mut fresh, 3, 1, 7);
    });
}

// ---------------------------------------------------------------------------------------
// Many clients, broken clients

#[test]
fn a_thousand_concurrent_connections() {
    const CONNECTIONS: usize = 1000;
    const THREADS: usize = 8;
    const ROUNDS: i64 = 3;
    common::for_each_engine(|engine| {
        // Both ends of every connection live in this process.
        let limit = common::raise_open_files(4 * CONNECTIONS as u64 + 512);
        assert!(
            limit >= 2 * CONNECTIONS as u64 + 256,
            "open-file limit {limit} is too low"
        );
        let server = Arc::new(common::serve(engine));
        let all_open = Arc::new(Barrier::new(THREADS + 1));
        let all_done = Arc::new(Barrier::new(THREADS + 1));
        let clients: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = Arc::clone(&server);
                let (all_open, all_done) = (Arc::clone(&all_open), Arc::clone(&all_done));
                std::thread::spawn(move || {
                    let tcp = t % 2 == 1;
                    let mut conns: Vec<Conn> = (0..CONNECTIONS / THREADS).map(|_| Conn::to(&server)).collect();
                    all_open.wait();
                    for round in 0..ROUNDS {
                        // Every connection has a request in flight before any reply is read.
                        for (i, conn) in conns.iter_mut().enumerate() {
                            let id = (t * 10_000 + i) as i64;
                            let text = subtract(id, round, id);
                            if tcp {
                                conn.send(format!("{text}\n").as_bytes());
                            } else {
                                conn.send(&post("/", text.as_bytes()));
                            }
                        }
                        for (i, conn) in conns.iter_mut().enumerate() {
                            let id = (t * 10_000 + i) as i64;
                            let reply = if tcp {
                                conn.read_line()
                            } else {
                                conn.read_response().body
                            };
                            assert_result(&reply, &(id - round).to_string(), &id.to_string());
                        }
                    }
                    all_done.wait();
                    // Held until the count of open connections has been checked.
                    all_done.wait();
                    drop(conns);
                })
            })
            .collect();
        all_open.wait();
        all_done.wait();
        assert_eq!(server.connections(), CONNECTIONS, "connections open at once");
        all_done.wait();
        for client in clients {
            client.join().expect("a client thread failed");
        }
        assert!(
            common::wait_until(Duration::from_secs(5), || server.connections() == 0),
            "{} connections still counted after every client left",
            server.connections()
        );
    });
}

/// Open a connection, send `bytes`, then reset it (SO_LINGER 0).
fn send_and_reset(addr: std::net::SocketAddr, bytes: &[u8]) {
    let conn = Conn::open(addr);
    let mut stream = conn.stream;
    let _ = stream.write_all(bytes);
    let socket = socket2::Socket::from(stream);
    socket.set_linger(Some(Duration::ZERO)).expect("SO_LINGER 0");
    drop(socket);
}

#[test]
fn clients_that_reset_mid_request_disturb_no_one() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let addr = server.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let steady = {
            let (stop, served) = (Arc::clone(&stop), Arc::clone(&served));
            std::thread::spawn(move || {
                let mut http = Conn::open(addr);
                let mut tcp = Conn::open(addr);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    http_subtract(&mut http, 1000, i, i);
                    tcp_subtract(&mut tcp, 1000, i, i);
                    served.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        };
        let body = subtract(1, 2, 3);
        let head = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
        let chunked = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}",
            body.len(),
            &body[..5]
        );
        let head_and_some_body = format!("{head}{}", &body[..10]);
        let texts_and_a_cut_one = format!("{body}{body}{}", &body[..7]);
        let pieces: [&[u8]; 7] = [
            b"",
            b"POST / HT",
            head.as_bytes(),
            head_and_some_body.as_bytes(),
            chunked.as_bytes(),
            &body.as_bytes()[..20],
            texts_and_a_cut_one.as_bytes(),
        ];
        for round in 0..20 {
            for piece in pieces {
                send_and_reset(addr, piece);
            }
            // Resets after a full request whose reply the client never reads.
            let mut full = post(
                "/",
                call("echo", &format!(r#"["{}"]"#, "r".repeat(100_000)), "1").as_bytes(),
            );
            full.extend_from_slice(&post("/", body.as_bytes()));
            send_and_reset(addr, &full);
            if round % 5 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        steady.join().expect("the steady client was disturbed");
        assert!(served.load(Ordering::Relaxed) > 0);
        assert!(
            common::wait_until(Duration::from_secs(3), || server.connections() == 0),
            "{} connections still counted",
            server.connections()
        );
        let mut after = Conn::to(&server);
        http_subtract(&mut after, 1, 1, 1);
    });
}

#[test]
fn large_requests_cut_off_midway_disturb_no_one() {
    // The uring engine receives the rest of a large body straight into the connection's
    // input: a reset, a half-close or a stall in the middle must end that connection only.
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).idle_timeout(Duration::from_millis(300)));
        let addr = server.local_addr();
        let data = "q".repeat(2_000_000);
        let full = post("/", call("echo", &format!("[\"{data}\"]"), "1").as_bytes());
        let part = &full[..700_000];
        for _ in 0..5 {
            send_and_reset(addr, part);
        }
        let mut half_closed = Conn::open(addr);
        half_closed.send(part);
        half_closed
            .stream
            .shutdown(std::net::Shutdown::Write)
            .expect("half-close");
        let mut stalled = Conn::open(addr);
        stalled.send(part);
        let response = Conn::open(addr).roundtrip(&full);
        assert_result(&response.body, &format!("\"{data}\""), "1");
        assert!(
            half_closed.closed_within(Duration::from_secs(3)),
            "the half-closed client was not closed"
        );
        assert!(
            stalled.closed_within(Duration::from_secs(3)),
            "the stalled client was not closed"
        );
        assert!(
            common::wait_until(Duration::from_secs(3), || server.connections() == 0),
            "{} connections still counted",
            server.connections()
        );
        let response = Conn::open(addr).roundtrip(&full);
        assert_result(&response.body, &format!("\"{data}\""), "1");
    });
}

#[test]
fn a_large_body_sent_in_pieces_is_answered_and_small_requests_follow_at_once() {
    // An engine may ask the kernel to wake it only once a large body is all there
    // (SO_RCVLOWAT): a body that trickles in must still be answered, and a small request
    // after it on the same connection must not wait for bytes that never come.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let data = "p".repeat(1_000_000);
        let full = post("/", call("echo", &format!("[\"{data}\"]"), "1").as_bytes());
        let mut conn = Conn::to(&server);
        for piece in full.chunks(64 << 10) {
            conn.send(piece);
            std::thread::sleep(Duration::from_millis(5));
        }
        let response = conn.read_response();
        assert_result(&response.body, &format!("\"{data}\""), "1");
        for id in 2..5 {
            let started = Instant::now();
            http_subtract(&mut conn, 5, 2, id);
            assert!(
                started.elapsed() < Duration::from_millis(500),
                "{engine:?}: a small request after a large one took {:?}",
                started.elapsed()
            );
        }
    });
}

#[test]
fn a_large_body_that_keeps_arriving_is_not_timed_out() {
    // Each piece is progress, even when the engine waits to be woken for the whole body:
    // a body that takes five idle time-outs to arrive, but never pauses for one, is answered.
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).idle_timeout(Duration::from_millis(300)));
        let data = "s".repeat(640_000);
        let full = post("/", call("echo", &format!("[\"{data}\"]"), "1").as_bytes());
        let mut conn = Conn::to(&server);
        for piece in full.chunks(40 << 10) {
            conn.send(piece);
            std::thread::sleep(Duration::from_millis(100));
        }
        let response = conn.read_response();
        assert_result(&response.body, &format!("\"{data}\""), "1");
    });
}

#[test]
fn a_client_that_never_reads_is_held_back() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // Small client buffers, so that what the server holds shows on the client's side.
        let mut greedy = Conn::open_with_buffers(server.local_addr(), 64 << 10, 64 << 10);
        greedy
            .stream
            .set_write_timeout(Some(Duration::from_millis(500)))
            .expect("set a write time-out");
        let padding = "g".repeat(1000);
        let mut sent_requests = 0usize;
        let mut sent_bytes = 0usize;
        let cap = 64 << 20;
        'sending: while sent_bytes < cap {
            let text = call("echo", &format!(r#"["{padding}"]"#), &sent_requests.to_string());
            let mut rest = text.as_bytes();
            while !rest.is_empty() {
                match greedy.stream.write(rest) {
                    Ok(n) => {
                        rest = &rest[n..];
                        sent_bytes += n;
                    }
                    // The server stopped reading: a whole request is still owed, finish it
                    // below once the client reads.
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        let mut writer = greedy.stream.try_clone().expect("clone the stream");
                        let owed = rest.to_vec();
                        sent_requests += 1;
                        std::thread::spawn(move || {
                            let _ = writer.set_write_timeout(Some(Duration::from_secs(10)));
                            let _ = writer.write_all(&owed);
                        });
                        break 'sending;
                    }
                    Err(e) => panic!("send: {e}"),
                }
            }
            sent_requests += 1;
        }
        // The server stops taking requests once its output for this client is full; the
        // kernel buffers hold a few MB more at most.
        assert!(
            sent_bytes < 32 << 20,
            "the server read {} MB from a client that reads nothing",
            sent_bytes >> 20
        );
        // Meanwhile another client is served at once.
        let t0 = Instant::now();
        let mut other = Conn::to(&server);
        http_subtract(&mut other, 3, 1, 1);
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "another client waited {:?}",
            t0.elapsed()
        );
        // The greedy client gets every reply, in order, once it reads.
        let expected = format!("\"{padding}\"");
        for i in 0..sent_requests {
            let line = greedy
                .try_read_line()
                .unwrap_or_else(|e| panic!("reply {i} of {sent_requests}: {}", &e[..e.len().min(200)]));
            assert_result(&line, &expected, &i.to_string());
        }
        assert!(greedy.nothing_within(Duration::from_millis(50)));
    });
}

// ---------------------------------------------------------------------------------------
// Graceful shutdown

#[test]
fn stop_lets_a_request_in_progress_finish_and_closes_idle_connections() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).shutdown_timeout(Duration::from_secs(3)));
        let addr = server.local_addr();
        let mut idle = Conn::to(&server);
        http_subtract(&mut idle, 2, 1, 1);
        let mut idle_tcp = Conn::to(&server);
        tcp_subtract(&mut idle_tcp, 2, 1, 2);
        let request = post("/", subtract(50, 8, 3).as_bytes());
        let (first, second) = request.split_at(request.len() - 10);
        let mut busy = Conn::to(&server);
        busy.send(first);
        let mut busy_tcp = Conn::to(&server);
        let text = subtract(60, 8, 4);
        busy_tcp.send(&text.as_bytes()[..10]);
        assert!(common::wait_until(Duration::from_secs(2), || server.connections() == 4));

        server.stop();
        // Idle connections close at once, without a reply.
        idle.expect_closed(Duration::from_secs(1));
        idle_tcp.expect_closed(Duration::from_secs(1));
        // No new connection is served.
        if let Ok(mut late) = Conn::try_open(addr) {
            let _ = late.stream.write_all(&post("/", subtract(1, 1, 9).as_bytes()));
            match late.read_until_closed(Duration::from_secs(2)) {
                Ok(got) => assert!(got.is_empty(), "served after stop: {}", show(&got)),
                Err(got) => panic!("a connection after stop stayed open: {}", show(&got)),
            }
        }
        // Requests under way are completed, answered, and then the connections close.
        std::thread::sleep(Duration::from_millis(100));
        busy.send(second);
        let response = busy.read_response();
        assert_eq!(response.status, 200, "{response:?}");
        assert_result(&response.body, "42", "3");
        busy.expect_closed(Duration::from_secs(1));
        busy_tcp.send(&text.as_bytes()[10..]);
        assert_result(&busy_tcp.read_line(), "52", "4");
        busy_tcp.expect_closed(Duration::from_secs(1));

        let t0 = Instant::now();
        server.join();
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "join took {:?} with nothing left to do",
            t0.elapsed()
        );
    });
}

#[test]
fn stop_cuts_a_stalled_request_after_the_grace_period() {
    common::for_each_engine(|engine| {
        let server = common::start(
            engine,
            common::builder(engine).shutdown_timeout(Duration::from_millis(500)),
        );
        let mut stalled = Conn::to(&server);
        stalled.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"");
        assert!(common::wait_until(Duration::from_secs(2), || server.connections() == 1));
        let t0 = Instant::now();
        server.stop();
        server.join();
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(2500),
            "join took {took:?} with a 500 ms shutdown grace"
        );
        assert!(
            stalled.closed_within(Duration::from_secs(1)),
            "the stalled client was not closed"
        );
    });
}

#[test]
fn the_last_reply_survives_requests_sent_past_the_close() {
    // RFC 9112 9.6: closing with unread input makes the kernel reset the connection and
    // drop what it has not sent yet. The server half-closes and reads on until the client
    // closes (or a short linger time passes), so a large last reply arrives whole: when
    // the server chose the close (a limit), and when the client asked for it and then
    // broke its word (it must not send more).
    for asked in [false, true] {
        common::for_each_engine(move |engine| last_reply_survives(engine, asked));
    }
}

fn last_reply_survives(engine: EngineKind, asked: bool) {
    let builder = common::builder(engine);
    let server = common::start(
        engine,
        if asked {
            builder
        } else {
            builder.max_exchanges_per_connection(1)
        },
    );
    let mut conn = Conn::open_with_buffers(server.local_addr(), 16 << 10, 1 << 20);
    let data = "z".repeat(2 << 20);
    let mut bytes = post("/", call("echo", &format!(r#"["{data}"]"#), "1").as_bytes());
    if asked {
        bytes = String::from_utf8(bytes)
            .unwrap()
            .replacen("\r\n", "\r\nConnection: close\r\n", 1)
            .into_bytes();
    }
    // Sent past the last exchange: the server will not read it all.
    bytes.extend_from_slice(&post("/", call("echo", &format!(r#"["{data}"]"#), "2").as_bytes()));
    let writer = {
        let mut stream = conn.stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = stream.write_all(&bytes);
        })
    };
    // Let the server answer, fill the socket buffers and decide to close.
    std::thread::sleep(Duration::from_millis(300));
    let response = conn.read_response();
    assert_eq!(response.status, 200);
    assert!(response.says_close(), "{:?}", response.headers);
    assert_result(&response.body, &format!(r#""{data}""#), "1");
    drop(conn);
    writer.join().unwrap();
}

#[test]
fn a_client_that_asked_to_close_is_let_go_at_once() {
    // Nothing left unread: no staged close, so the connection is gone as soon as the
    // reply is sent, not when the client closes or the linger time (2 s) passes.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let request = String::from_utf8(post("/", call("sum", "[1,2]", "1").as_bytes()))
            .unwrap()
            .replacen("\r\n", "\r\nConnection: close\r\n", 1);
        conn.send(request.as_bytes());
        let response = conn.read_response();
        assert_eq!(response.status, 200);
        assert!(response.says_close(), "{:?}", response.headers);
        assert!(
            conn.closed_within(Duration::from_secs(1)),
            "no end of stream after the reply"
        );
        let deadline = Instant::now() + Duration::from_millis(500);
        while server.connections() > 0 {
            assert!(
                Instant::now() < deadline,
                "still held by the server, the client's socket open"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(conn);
    });
}

#[test]
fn connections_closed_one_after_another_never_disturb_the_next() {
    // Each close reuses resources for the next connection (a registered file slot on
    // uring): a close still in progress must not touch the connection accepted after it.
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let addr = server.local_addr();
        let request = post("/", call("sum", "[1,2]", "1").as_bytes());
        let request = String::from_utf8(request)
            .unwrap()
            .replacen("\r\n", "\r\nConnection: close\r\n", 1);
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let request = request.clone();
                std::thread::spawn(move || {
                    for round in 0..400 {
                        let mut conn = Conn::open(addr);
                        conn.send(request.as_bytes());
                        let response = conn
                            .try_read_response()
                            .unwrap_or_else(|e| panic!("round {round}: {e}"));
                        assert_result(&response.body, "3", "1");
                        // Dropped at once, without waiting for the server's close.
                    }
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
    });
}

/// A worker accepts a bounded number of connections per turn (so that a flood of new ones
/// cannot make one turn as long as all their work), and takes the rest of the listen
/// backlog on the following turns without waiting for another connection to arrive.
#[test]
fn connections_queued_while_the_worker_was_busy_are_all_accepted_and_answered() {
    const CONNECTIONS: i64 = 300;
    common::for_each_engine(|engine| {
        let builder = common::builder(engine).threads(1).procedure("pause", |_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        });
        let server = common::start(engine, builder);
        let mut paused = Conn::to(&server);
        paused.send(&post("/", call("pause", "[]", "0").as_bytes()));
        std::thread::sleep(Duration::from_millis(50));
        // These wait in the listen backlog, each with its request sent, until the pause ends.
        let mut conns: Vec<Conn> = (0..CONNECTIONS)
            .map(|c| {
                let mut conn = Conn::to(&server);
                conn.send(&post("/", subtract(c, 1, c).as_bytes()));
                conn
            })
            .collect();
        assert_result(&paused.read_response().body, "null", "0");
        for (c, conn) in (0..CONNECTIONS).zip(&mut conns) {
            let response = conn.read_response();
            assert_eq!(response.status, 200, "{engine:?}: connection {c}: {response:?}");
            assert_result(&response.body, &(c - 1).to_string(), &c.to_string());
        }
    });
}
