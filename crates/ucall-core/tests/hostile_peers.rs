// SPDX-License-Identifier: Apache-2.0
//! Slow and hostile peers, each held to a documented limit and time-out while everyone
//! else is served (docs/reliability.md, "Slow and hostile peers"): a peer that never reads
//! its replies (HTTP, raw TCP, WebSocket), many slowloris heads at once, a WebSocket peer
//! that never answers the server's Close, a body that stops arriving.

mod common;

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_result, call, post, ws_frame, Conn};
use ucall_core::{EngineKind, ServerHandle};

const UPGRADE: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Another client's call is answered promptly.
fn others_are_served(server: &ServerHandle, what: &str) {
    let started = Instant::now();
    let mut other = Conn::to(server);
    let reply = other.roundtrip(&post("/", call("subtract", "[3,1]", "7").as_bytes()));
    assert_eq!(reply.status, 200, "{what}: {reply:?}");
    assert_result(&reply.body, "2", "7");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{what}: another client waited {:?}",
        started.elapsed()
    );
}

/// Write `request` again and again without reading, until the server stops taking it;
/// returns the bytes it took. Each copy is written whole (the rest of a partial write
/// first), so that the server sees valid requests, not a stream cut mid-request.
fn send_until_held_back(conn: &mut Conn, request: &[u8]) -> usize {
    conn.stream.set_nonblocking(true).expect("non-blocking");
    let mut sent = 0usize;
    let mut at = 0usize;
    let mut stalled_since: Option<Instant> = None;
    while sent < 64 << 20 {
        match conn.stream.write(&request[at..]) {
            Ok(n) => {
                sent += n;
                at = (at + n) % request.len();
                stalled_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Held back for 200 ms in a row: the server reads no more.
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(200) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // The server let go already (at its idle time-out: checked by the caller).
            Err(e) if common::is_reset(&e) => break,
            Err(e) => panic!("send: {e}"),
        }
    }
    sent
}

/// The value of `series` (a name and its labels, as `GET /metrics` shows them).
fn metric(server: &ServerHandle, series: &str) -> u64 {
    let mut conn = Conn::to(server);
    // Its worker may be busy with a large call for seconds on a loaded host (debug build).
    conn.patience = Duration::from_secs(20);
    let page = conn.roundtrip(&common::get("/metrics"));
    assert_eq!(page.status, 200, "{page:?}");
    let page = String::from_utf8_lossy(&page.body).into_owned();
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {page}"))
}

#[test]
fn a_peer_that_never_reads_its_replies_is_closed_at_the_idle_time_out() {
    common::for_each_engine(|engine| {
        let idle = Duration::from_millis(400);
        let server = common::start(engine, common::builder(engine).idle_timeout(idle));
        let padding = "r".repeat(4000);
        let text = call("echo", &format!(r#"["{padding}"]"#), "1");
        let transports: [(&str, Vec<u8>, Vec<u8>); 3] = [
            ("HTTP", Vec::new(), post("/", text.as_bytes())),
            ("raw TCP", Vec::new(), format!("{text}\n").into_bytes()),
            ("WebSocket", UPGRADE.to_vec(), ws_frame(1, text.as_bytes())),
        ];
        for (name, opening, request) in transports {
            let mut slow = Conn::open_with_buffers(server.local_addr(), 16 << 10, 16 << 10);
            slow.send(&opening);
            let started = Instant::now();
            let taken = send_until_held_back(&mut slow, &request);
            // Memory: the server stops reading once 1 MiB of replies waits (the output
            // high-water mark); kernel buffers hold a few MB more at most.
            assert!(
                taken < 16 << 20,
                "{name}: the server took {} MB from a peer that reads nothing",
                taken >> 20
            );
            others_are_served(&server, name);
            // Time: unread replies are no progress; the connection goes at the idle time-out.
            assert!(
                common::wait_until(Duration::from_secs(5), || server.connections() == 0),
                "{name}: still held {:?} after the peer stopped reading (idle time-out {idle:?})",
                started.elapsed()
            );
            let held = started.elapsed();
            assert!(held >= idle, "{name}: closed after {held:?}, before the idle time-out");
        }
    });
}

#[test]
fn a_pipelining_peer_that_never_reads_leaves_little_input_unanswered() {
    common::for_each_engine(|engine| {
        // Calls the server has run; the rest of what it read waits unanswered in memory.
        let ran = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&ran);
        let builder = common::builder(engine).procedure("counted", move |call| {
            let data = call.get::<String>(0, "data")?;
            counter.fetch_add(1, Ordering::Relaxed);
            if data.len() > 1 << 20 {
                // Busy with a large call: meanwhile the peer's calls fill the socket. Its
                // 12 MB result is a notification's, never serialized (writing it as JSON
                // took an unoptimized build seconds on a loaded host, and the worker with it).
                std::thread::sleep(Duration::from_millis(300));
            }
            Ok(data)
        });
        let server = common::start(engine, builder);
        // A small receive buffer, so that the server's replies wait in its output, and a
        // large send buffer, so that many requests wait in the socket when it reads.
        let mut slow = Conn::open_with_buffers(server.local_addr(), 16 << 10, 4 << 20);
        // A 12 MB text first (a notification: no reply): the connection's input once had
        // room for megabytes. Then 4 KB calls, none of whose replies is read.
        let large = format!(
            r#"{{"jsonrpc":"2.0","method":"counted","params":["{}"]}}"#,
            "r".repeat(12 << 20)
        ) + "\n";
        let small = call("counted", &format!(r#"["{}"]"#, "r".repeat(4000)), "1") + "\n";
        // The large text and the start of a call: the input keeps its room while the
        // call is unfinished (an empty input gives it back).
        let half = small.len() / 2;
        slow.send((large.clone() + &small[..half]).as_bytes());
        slow.send(&small.as_bytes()[half..]);
        let taken = send_until_held_back(&mut slow, small.as_bytes());
        assert!(
            taken < 64 << 20,
            "the server took {} MB from a peer that reads nothing",
            taken >> 20
        );
        // What the server read and has not run is what it holds of this peer's input,
        // once it has stopped: the same bytes read and calls run 200 ms apart.
        let mut last = (u64::MAX, u64::MAX);
        let settled = common::wait_until(Duration::from_secs(15), || {
            std::thread::sleep(Duration::from_millis(200));
            let now = (
                metric(&server, r#"ucall_received_bytes_total{transport="tcp"}"#),
                ran.load(Ordering::Relaxed),
            );
            now.1 > 1 && std::mem::replace(&mut last, now) == now
        });
        assert!(settled, "the server kept reading from a peer that reads nothing");
        let (received, calls) = last;
        let unanswered = received - (large.len() as u64 + (calls - 1) * small.len() as u64);
        // The input's cap: 1 MiB of requests read beyond the one under way. On io_uring a
        // multishot receive armed when the cap is reached may have taken more already: at
        // most the worker's receive buffers (128 of 32 KiB).
        let ring = if engine == EngineKind::Uring { 4 << 20 } else { 0 };
        let cap = (1 << 20) + small.len() as u64 + ring;
        assert!(
            unanswered <= cap,
            "the server holds {unanswered} bytes of requests from a peer that reads nothing (cap {cap})"
        );
        others_are_served(&server, "a pipelining peer that never reads");
    });
}

#[test]
fn slowloris_heads_are_each_cut_at_the_header_time_out() {
    common::for_each_engine(|engine| {
        let header_timeout = Duration::from_millis(400);
        let server = common::start(engine, common::builder(engine).header_timeout(header_timeout));
        let started = Instant::now();
        let mut heads: Vec<Conn> = (0..100).map(|_| Conn::to(&server)).collect();
        for conn in &mut heads {
            conn.send(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        }
        // A header line a peer every 100 ms: progress, never a whole head.
        let mut open = heads.len();
        let mut round = 0;
        while open > 0 && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(100));
            round += 1;
            open = 0;
            for conn in &mut heads {
                if !conn.closed
                    && conn
                        .stream
                        .write_all(format!("X-Drip-{round}: 1\r\n").as_bytes())
                        .is_ok()
                {
                    open += 1;
                }
            }
            if round == 2 {
                others_are_served(&server, "slowloris");
            }
        }
        assert!(
            common::wait_until(Duration::from_secs(3), || server.connections() == 0),
            "{} slow heads still held after {:?} (header time-out {header_timeout:?})",
            server.connections(),
            started.elapsed()
        );
        let elapsed = started.elapsed();
        assert!(
            elapsed >= header_timeout && elapsed < Duration::from_secs(3),
            "the slow heads were cut after {elapsed:?} with a {header_timeout:?} header time-out"
        );
    });
}

#[test]
fn a_websocket_peer_that_never_answers_a_close_is_let_go() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine).max_exchanges_per_connection(1));
        let mut peer = Conn::to(&server);
        let mut opening = UPGRADE.to_vec();
        opening.extend_from_slice(&ws_frame(1, call("subtract", "[9,1]", "1").as_bytes()));
        peer.send(&opening);
        assert_eq!(peer.read_response().status, 101);
        // The reply, then the server's Close (its last exchange); the peer answers with
        // Pings, never a Close, and never closes.
        let started = Instant::now();
        let mut gone = false;
        while started.elapsed() < Duration::from_secs(6) {
            if server.connections() == 0 {
                gone = true;
                break;
            }
            if peer.stream.write_all(&ws_frame(9, b"still here")).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        gone = gone || common::wait_until(Duration::from_secs(1), || server.connections() == 0);
        // The close lingers for input at most 2 s (engine::LINGER), then the socket goes.
        assert!(
            gone,
            "the server still held the connection {:?} after its Close",
            started.elapsed()
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "let go after {:?}",
            started.elapsed()
        );
        others_are_served(&server, "WebSocket without a Close");
    });
}

#[test]
fn a_body_that_stops_arriving_is_cut_at_the_idle_time_out() {
    common::for_each_engine(|engine| {
        let idle = Duration::from_millis(400);
        let server = common::start(engine, common::builder(engine).idle_timeout(idle));
        let mut stalled = Conn::to(&server);
        stalled.send(
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n",
        );
        stalled.send(&[b'['; 1000]);
        let started = Instant::now();
        // Counted once accepted: until then "no connection" would not mean "cut".
        assert!(
            common::wait_until(Duration::from_secs(5), || server.connections() >= 1),
            "the stalled connection was never accepted"
        );
        others_are_served(&server, "a stalled body");
        assert!(
            common::wait_until(Duration::from_secs(5), || server.connections() == 0),
            "a stalled body still held after {:?} (idle time-out {idle:?})",
            started.elapsed()
        );
        assert!(
            started.elapsed() >= idle,
            "cut after {:?}, before the idle time-out",
            started.elapsed()
        );
        // A request partly received is answered 408 (RFC 9110 §15.5.9), or just closed.
        let rest = stalled
            .read_until_closed(Duration::from_secs(2))
            .unwrap_or_else(|got| got);
        if !rest.is_empty() {
            let response = common::parse_response(&rest)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("a partial response: {}", common::show(&rest)))
                .0;
            assert_eq!(response.status, 408, "{response:?}");
        }
    });
}
