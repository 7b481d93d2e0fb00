// SPDX-License-Identifier: Apache-2.0
//! Batch procedures over loopback, on each engine: calls sent one at a time by many
//! callers over HTTP, raw TCP and WebSocket run together; errors reach the callers they
//! belong to; a full queue answers at once; a caller that left is dropped; one caller
//! alone waits for nobody.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{call, for_each_engine, get, parse_reply, post, start, wait_until, ws_text, Conn, Json};
use ucall_core::{Batch, BatchOptions, Batcher, EngineKind, RpcError, Server, ServerBuilder};

/// A reply's integer result.
fn result(reply: &Json) -> Option<i64> {
    reply.get("result")?.as_i64()
}

/// A reply's error code.
fn code(reply: &Json) -> Option<i64> {
    reply.get("error")?.get("code")?.as_i64()
}

fn builder(engine: EngineKind) -> ServerBuilder {
    Server::builder().host("127.0.0.1").port(0).threads(2).engine(engine)
}

fn options(max_size: usize, max_wait_ms: u64) -> BatchOptions {
    BatchOptions {
        max_size,
        max_wait: Duration::from_millis(max_wait_ms),
        ..BatchOptions::default()
    }
}

/// A batch procedure squaring `x`, sleeping `pause` per batch so that others queue
/// meanwhile, and recording each batch's size.
fn squares(pause: Duration, sizes: Arc<Mutex<Vec<usize>>>) -> impl Fn(Batch) + Send + Sync {
    move |batch: Batch| {
        sizes.lock().unwrap().push(batch.len());
        std::thread::sleep(pause);
        let results: Vec<Result<i64, RpcError>> = batch.params().map(|p| p.get::<i64>(0, "x").map(|x| x * x)).collect();
        batch.complete_json(results);
    }
}

const WS_HANDSHAKE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Read one unmasked server text frame's payload (under 126 bytes).
fn ws_read(conn: &mut Conn) -> Vec<u8> {
    let head = conn.read_exact_bytes(2);
    assert_eq!(head[0], 0x81, "a final text frame");
    conn.read_exact_bytes(usize::from(head[1]))
}

/// One call of `square(x)` over `transport` (0 HTTP, 1 raw TCP, 2 WebSocket); its reply.
fn square_over(addr: std::net::SocketAddr, transport: usize, x: i64) -> Json {
    let mut conn = Conn::open(addr);
    let text = call("square", &format!("[{x}]"), &x.to_string());
    match transport {
        0 => conn.roundtrip(&post("/", text.as_bytes())).json(),
        1 => {
            conn.send(format!("{text}\n").as_bytes());
            parse_reply(&conn.read_line())
        }
        _ => {
            let response = conn.roundtrip(WS_HANDSHAKE);
            assert_eq!(response.status, 101);
            conn.send(&ws_text(&text));
            parse_reply(&ws_read(&mut conn))
        }
    }
}

#[test]
fn callers_on_every_transport_share_batches() {
    for_each_engine(|engine| {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let batcher = Batcher::new(
            "square",
            options(8, 50),
            squares(Duration::from_millis(30), Arc::clone(&sizes)),
        );
        let server = start(engine, builder(engine).handler("square", batcher.clone()));
        let addr = server.local_addr();
        let callers: Vec<_> = (0..24)
            .map(|i: i64| std::thread::spawn(move || (i, square_over(addr, (i % 3) as usize, i))))
            .collect();
        for caller in callers {
            let (i, reply) = caller.join().expect("a caller");
            assert_eq!(result(&reply), Some(i * i), "caller {i}: {reply:?}");
            assert_eq!(reply.get("id").and_then(Json::as_i64), Some(i));
        }
        let sizes = sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 24, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n <= 8), "no batch over max_size: {sizes:?}");
        assert!(
            sizes.len() < 24 && sizes.iter().any(|&n| n > 1),
            "calls queued while a batch ran must share the next: {sizes:?}"
        );
        let stats = batcher.stats();
        assert_eq!(stats.calls, 24);
        assert_eq!(stats.batches, sizes.len() as u64);
        assert_eq!(stats.sizes.iter().sum::<u64>(), stats.batches);
        server.stop();
        server.join();
    });
}

#[test]
fn a_jsonrpc_batch_runs_as_one_batch() {
    for_each_engine(|engine| {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&sizes);
        // x == 100: a slow batch, that the array's calls queue behind.
        let procedure = move |batch: Batch| {
            let xs: Vec<i64> = batch.params().map(|p| p.get::<i64>(0, "x").unwrap_or(0)).collect();
            seen.lock().unwrap().push(xs.len());
            if xs.contains(&100) {
                std::thread::sleep(Duration::from_millis(200));
            }
            batch.complete_json(xs.iter().map(|x| Ok::<_, RpcError>(x * x)).collect());
        };
        let server = start(
            engine,
            builder(engine).handler("square", Batcher::new("square", options(32, 5), procedure)),
        );
        let mut slow = Conn::open(server.local_addr());
        slow.send(&post("/", call("square", "[100]", "0").as_bytes()));
        std::thread::sleep(Duration::from_millis(50));
        let mut conn = Conn::open(server.local_addr());
        let body = format!(
            "[{}]",
            (1..=5)
                .map(|i| call("square", &format!("[{i}]"), &i.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        );
        let reply = conn.roundtrip(&post("/", body.as_bytes())).json();
        let replies = reply.as_array().expect("an array");
        for (i, reply) in (1..=5).zip(replies) {
            assert_eq!(result(reply), Some(i * i));
            assert_eq!(reply.get("id").and_then(Json::as_i64), Some(i));
        }
        assert_eq!(result(&slow.read_response().json()), Some(10_000));
        assert_eq!(
            *sizes.lock().unwrap(),
            [1, 5],
            "the array's calls, queued together, share a batch"
        );
        server.stop();
        server.join();
    });
}

#[test]
fn errors_reach_the_callers_they_belong_to() {
    for_each_engine(|engine| {
        // x < 0: that caller's error; x == 0: the whole batch fails; x == 1000: one
        // result too many; x == 100: a slow batch, that the next calls queue behind.
        let procedure = |batch: Batch| {
            let xs: Vec<i64> = batch.params().map(|p| p.get::<i64>(0, "x").unwrap_or(-1)).collect();
            if xs.contains(&100) {
                std::thread::sleep(Duration::from_millis(200));
            }
            if xs.contains(&0) {
                return batch.fail(&RpcError::new(-32001, "zero in the batch"));
            }
            let mut results: Vec<Result<i64, RpcError>> = xs
                .iter()
                .map(|&x| {
                    if x < 0 {
                        Err(RpcError::new(-32002, "negative"))
                    } else {
                        Ok(x * 2)
                    }
                })
                .collect();
            if xs.contains(&1000) {
                results.push(Ok(0));
            }
            batch.complete_json(results);
        };
        let server = start(
            engine,
            builder(engine).handler("double", Batcher::new("double", options(8, 5), procedure)),
        );
        let mut slow = Conn::open(server.local_addr());
        slow.send(&post("/", call("double", "[100]", "0").as_bytes()));
        std::thread::sleep(Duration::from_millis(50));
        let mut conn = Conn::open(server.local_addr());
        let body = format!(
            "[{},{},{}]",
            call("double", "[3]", "1"),
            call("double", "[-3]", "2"),
            call("double", "[4]", "3")
        );
        let reply = conn.roundtrip(&post("/", body.as_bytes())).json();
        let replies = reply.as_array().expect("an array");
        assert_eq!(result(&replies[0]), Some(6));
        assert_eq!(code(&replies[1]), Some(-32002));
        assert_eq!(result(&replies[2]), Some(8));
        assert_eq!(result(&slow.read_response().json()), Some(200));
        // Queued together behind a slow batch, so that they share the next one.
        slow.send(&post("/", call("double", "[100]", "0").as_bytes()));
        std::thread::sleep(Duration::from_millis(50));
        let body = format!("[{},{}]", call("double", "[0]", "1"), call("double", "[5]", "2"));
        let reply = conn.roundtrip(&post("/", body.as_bytes())).json();
        for reply in reply.as_array().expect("an array") {
            assert_eq!(code(reply), Some(-32001), "{reply:?}");
        }
        assert_eq!(result(&slow.read_response().json()), Some(200));
        let body = call("double", "[1000]", "9");
        let reply = conn.roundtrip(&post("/", body.as_bytes())).json();
        assert_eq!(code(&reply), Some(-32603), "{reply:?}");
        server.stop();
        server.join();
    });
}

#[test]
fn a_full_queue_answers_at_once_and_says_nothing_ran() {
    for_each_engine(|engine| {
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let entered = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&entered);
        let procedure = move |batch: Batch| {
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = gate.lock().unwrap().recv_timeout(Duration::from_secs(10));
            let n = batch.len();
            batch.complete_json(vec![Ok::<_, RpcError>(1); n]);
        };
        let options = BatchOptions {
            max_queue: 1,
            ..options(4, 5)
        };
        let server = start(
            engine,
            builder(engine).handler("slow", Batcher::new("slow", options, procedure)),
        );
        let addr = server.local_addr();
        let mut running = Conn::open(addr);
        running.send(format!("{}\n", call("slow", "[]", "1")).as_bytes());
        assert!(wait_until(Duration::from_secs(5), || entered.load(Ordering::SeqCst) == 1));
        let mut queued = Conn::open(addr);
        queued.send(format!("{}\n", call("slow", "[]", "2")).as_bytes());
        std::thread::sleep(Duration::from_millis(50));
        let mut refused = Conn::open(addr);
        let asked = Instant::now();
        let reply = refused.roundtrip(&post("/", call("slow", "[]", "3").as_bytes()));
        assert!(asked.elapsed() < Duration::from_secs(2), "refused at once");
        assert_eq!(reply.status, 503);
        let error = reply.json().get("error").cloned().expect("an error");
        assert_eq!(error.get("code").and_then(Json::as_i64), Some(-32000));
        assert!(matches!(
            error.get("data").and_then(|d| d.get("executed")),
            Some(Json::Bool(false))
        ));
        release.send(()).unwrap();
        release.send(()).unwrap();
        assert_eq!(result(&parse_reply(&running.read_line())), Some(1));
        assert_eq!(result(&parse_reply(&queued.read_line())), Some(1));
        server.stop();
        server.join();
    });
}

/// A server whose batch procedure `slow` (batches of up to 8, 5 ms) holds every batch until
/// `release` gets a message, and records each batch's size in `sizes`; one call (`first`,
/// over HTTP) is already running, so that the next ones queue behind it.
struct HeldBatches {
    server: ucall_core::ServerHandle,
    batcher: Batcher,
    release: mpsc::Sender<()>,
    sizes: Arc<Mutex<Vec<usize>>>,
    first: Conn,
}

fn held_batches(engine: EngineKind) -> HeldBatches {
    let (release, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&sizes);
    let procedure = move |batch: Batch| {
        seen.lock().unwrap().push(batch.len());
        let _ = gate.lock().unwrap().recv_timeout(Duration::from_secs(10));
        let n = batch.len();
        batch.complete_json(vec![Ok::<_, RpcError>(7); n]);
    };
    let batcher = Batcher::new("slow", options(8, 5), procedure);
    let server = start(engine, builder(engine).handler("slow", batcher.clone()));
    let mut first = Conn::open(server.local_addr());
    first.send(&post("/", call("slow", "[]", "1").as_bytes()));
    assert!(wait_until(Duration::from_secs(5), || sizes.lock().unwrap().len() == 1));
    HeldBatches {
        server,
        batcher,
        release,
        sizes,
        first,
    }
}

#[test]
fn a_caller_that_left_is_dropped_before_its_batch_runs() {
    for_each_engine(|engine| {
        let HeldBatches {
            server,
            batcher,
            release,
            sizes,
            mut first,
        } = held_batches(engine);
        let addr = server.local_addr();
        // Queued behind the running batch, then gone: over HTTP and over WebSocket.
        for transport in 0..2 {
            let mut leaving = Conn::open(addr);
            if transport == 0 {
                leaving.send(&post("/", call("slow", "[]", "2").as_bytes()));
            } else {
                assert_eq!(leaving.roundtrip(WS_HANDSHAKE).status, 101);
                leaving.send(&ws_text(&call("slow", "[]", "2")));
            }
            assert!(wait_until(Duration::from_secs(5), || batcher.queued() == transport + 1));
            drop(leaving);
        }
        let mut staying = Conn::open(addr);
        staying.send(&post("/", call("slow", "[]", "3").as_bytes()));
        assert!(wait_until(Duration::from_secs(5), || batcher.queued() == 3));
        // Let the server see the two closes before the batch is formed.
        std::thread::sleep(Duration::from_millis(100));
        release.send(()).unwrap();
        assert_eq!(result(&first.read_response().json()), Some(7));
        release.send(()).unwrap();
        assert_eq!(result(&staying.read_response().json()), Some(7));
        assert_eq!(*sizes.lock().unwrap(), [1, 1], "the callers that left did not run");
        assert_eq!(batcher.stats().abandoned, 2);
        server.stop();
        server.join();
    });
}

#[test]
fn one_caller_alone_waits_for_nobody() {
    for_each_engine(|engine| {
        // A max_wait of 2 s would show in every call if a lone caller waited for others.
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let batcher = Batcher::new("square", options(32, 2000), squares(Duration::ZERO, Arc::clone(&sizes)));
        let server = start(engine, builder(engine).handler("square", batcher.clone()));
        let mut conn = Conn::open(server.local_addr());
        let started = Instant::now();
        for i in 0..50 {
            let reply = conn.roundtrip(&post("/", call("square", &format!("[{i}]"), "1").as_bytes()));
            assert_eq!(result(&reply.json()), Some(i * i));
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        assert!(batcher.stats().max_queue_wait_us < 1_000_000, "{:?}", batcher.stats());
        assert_eq!(batcher.stats().batches, 50);
        server.stop();
        server.join();
    });
}

#[test]
fn a_lone_caller_after_a_burst_waits_once_at_most() {
    for_each_engine(|engine| {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let batcher = Batcher::new(
            "square",
            options(32, 300),
            squares(Duration::from_millis(20), Arc::clone(&sizes)),
        );
        let server = start(engine, builder(engine).handler("square", batcher));
        let addr = server.local_addr();
        // A burst: calls queue while batches run, so the rate says batches fill quickly.
        let burst: Vec<_> = (0..16)
            .map(|i: i64| std::thread::spawn(move || square_over(addr, 0, i)))
            .collect();
        for caller in burst {
            caller.join().expect("a caller");
        }
        let mut conn = Conn::open(addr);
        let started = Instant::now();
        for i in 0..6 {
            let reply = conn.roundtrip(&post("/", call("square", &format!("[{i}]"), "1").as_bytes()));
            assert_eq!(result(&reply.json()), Some(i * i));
        }
        // Six waits of 300 ms would take 1.8 s; one wait and six batches of 20 ms, 0.42 s.
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "took {:?}",
            started.elapsed()
        );
        server.stop();
        server.join();
    });
}

#[test]
fn the_rust_api_answers_a_batch_with_values() {
    for_each_engine(|engine| {
        let builder = builder(engine).batch_procedure("half", options(16, 20), |calls| {
            Ok(calls
                .iter()
                .map(|call| {
                    let x = call.get::<i64>(0, "x")?;
                    if x % 2 == 0 {
                        Ok(x / 2)
                    } else {
                        Err(RpcError::invalid_params("odd"))
                    }
                })
                .collect())
        });
        let server = start(engine, builder);
        let mut conn = Conn::open(server.local_addr());
        let body = format!("[{},{}]", call("half", "[4]", "1"), call("half", r#"{"x": 3}"#, "2"));
        let reply = conn.roundtrip(&post("/", body.as_bytes())).json();
        let replies = reply.as_array().expect("an array");
        assert_eq!(result(&replies[0]), Some(2));
        assert_eq!(code(&replies[1]), Some(-32602));
        server.stop();
        server.join();
    });
}

/// The value of the sample line `series` (`name{labels}`) on a metrics page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn metrics_show_batch_sizes_and_queue_waits() {
    for_each_engine(|engine| {
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let procedure = move |batch: Batch| {
            // The first batch holds the thread until released: the next calls queue meanwhile.
            if batch.params().any(|p| p.get::<i64>(0, "x").ok() == Some(0)) {
                let _ = gate.lock().unwrap().recv_timeout(Duration::from_secs(10));
            }
            let results = batch.params().map(|p| p.get::<i64>(0, "x").map(|x| x * x)).collect();
            batch.complete_json::<i64>(results);
        };
        let batcher = Batcher::new("square", options(5, 5), procedure);
        let server = start(
            engine,
            builder(engine)
                .handler("square", batcher.clone())
                .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?)),
        );
        let addr = server.local_addr();
        let mut first = Conn::open(addr);
        first.send(&post("/", call("square", "[0]", "0").as_bytes()));
        assert!(wait_until(Duration::from_secs(5), || batcher.stats().batches == 1));
        // Five calls queue behind the held batch for at least 150 ms, then run as one.
        let mut conn = Conn::open(addr);
        let body = format!(
            "[{}]",
            (1..=5)
                .map(|i| call("square", &format!("[{i}]"), &i.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        );
        conn.send(&post("/", body.as_bytes()));
        assert!(wait_until(Duration::from_secs(5), || batcher.queued() == 5));
        std::thread::sleep(Duration::from_millis(150));
        release.send(()).unwrap();
        assert_eq!(result(&first.read_response().json()), Some(0));
        assert_eq!(conn.read_response().json().as_array().map(<[Json]>::len), Some(5));
        assert_eq!(
            conn.roundtrip(&post("/", call("sum", "[1, 2]", "9").as_bytes())).status,
            200
        );

        let page = conn.roundtrip(&get("/metrics"));
        assert_eq!(page.status, 200);
        let page = String::from_utf8(page.body).expect("UTF-8");
        let size = |le: &str| {
            sample(
                &page,
                &format!("ucall_batch_size_bucket{{method=\"square\",le=\"{le}\"}}"),
            )
        };
        // Buckets 1, 2, 4, then max_size (5), then +Inf; counts are cumulative.
        let buckets: Vec<Option<f64>> = ["1", "2", "4", "5", "+Inf"].iter().map(|le| size(le)).collect();
        assert_eq!(
            buckets,
            [Some(1.0), Some(1.0), Some(1.0), Some(2.0), Some(2.0)],
            "{page}"
        );
        assert_eq!(sample(&page, "ucall_batch_size_count{method=\"square\"}"), Some(2.0));
        assert_eq!(sample(&page, "ucall_batch_size_sum{method=\"square\"}"), Some(6.0));
        let wait = |series: &str| sample(&page, &format!("ucall_batch_queue_wait_seconds{series}"));
        assert_eq!(wait("_count{method=\"square\"}"), Some(6.0), "{page}");
        assert!(
            wait("_sum{method=\"square\"}").is_some_and(|s| s >= 5.0 * 0.15),
            "{page}"
        );
        // The five waited past 0.1 s (the default buckets' bound below 0.25 s); the first did not.
        assert!(
            wait("_bucket{method=\"square\",le=\"0.1\"}").is_some_and(|n| n <= 1.0),
            "{page}"
        );
        assert_eq!(wait("_bucket{method=\"square\",le=\"+Inf\"}"), Some(6.0), "{page}");
        // Ordinary procedures have no batch histograms.
        assert!(!page.contains("ucall_batch_size_count{method=\"sum\"}"), "{page}");
        server.stop();
        server.join();
    });
}

#[test]
fn a_call_whose_deadline_passed_is_dropped_before_its_batch_runs() {
    for_each_engine(|engine| {
        let HeldBatches {
            server,
            batcher,
            release,
            sizes,
            mut first,
        } = held_batches(engine);
        let addr = server.local_addr();
        // Queued behind the running batch: two callers that wait 50 ms (the "timeout"
        // member, over HTTP and raw TCP), and one that waits 10 s.
        let hurried = r#"{"jsonrpc":"2.0","method":"slow","params":[],"id":2,"timeout":0.05}"#;
        let mut over_http = Conn::open(addr);
        over_http.send(&post("/", hurried.as_bytes()));
        let mut over_tcp = Conn::open(addr);
        over_tcp.send(format!("{hurried}\n").as_bytes());
        let mut patient = Conn::open(addr);
        let waits = r#"{"jsonrpc":"2.0","method":"slow","params":[],"id":3,"timeout":10}"#;
        patient.send(&post("/", waits.as_bytes()));
        assert!(wait_until(Duration::from_secs(5), || batcher.queued() == 3));
        std::thread::sleep(Duration::from_millis(150));
        release.send(()).unwrap();
        assert_eq!(result(&first.read_response().json()), Some(7));
        // Answered while the next batch (the patient caller's) is still held: they are not in it.
        let late = over_http.read_response();
        assert_eq!(late.status, 504, "{late:?}");
        let late = late.json();
        assert_eq!(code(&late), Some(-32000), "{late:?}");
        assert_eq!(
            late.get("error").and_then(|e| e.get("message")).and_then(Json::as_str),
            Some("Deadline exceeded")
        );
        assert_eq!(code(&parse_reply(&over_tcp.read_line())), Some(-32000));
        release.send(()).unwrap();
        assert_eq!(result(&patient.read_response().json()), Some(7));
        assert_eq!(
            *sizes.lock().unwrap(),
            [1, 1],
            "the calls past their deadline did not run"
        );
        let stats = batcher.stats();
        assert_eq!((stats.expired, stats.calls), (2, 2), "{stats:?}");
        server.stop();
        server.join();
    });
}
