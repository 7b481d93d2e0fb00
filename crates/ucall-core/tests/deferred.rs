// SPDX-License-Identifier: Apache-2.0
//! Deferred replies: procedures that answer later, from other threads, while replies on
//! each connection still leave in request order.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ucall_core::buffer::OutBuf;
use ucall_core::defer::{Completion, Sink, Target};
use ucall_core::session::{Context, Limits, Scratch, Session};
use ucall_core::{Call, Deferred, Reply, Router, RpcError, Server};

type Parked = Arc<Mutex<Vec<(String, Deferred)>>>;

/// A router whose `later` procedure parks its reply (tagged with its `tag` param) and whose
/// `now` procedure answers at once.
fn router(parked: &Parked) -> Router {
    let mut router = Router::new();
    let parked = Arc::clone(parked);
    let later = move |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let tag: String = call.get(0, "tag")?;
        parked.lock().unwrap().push((tag, reply.defer()?));
        Ok(())
    };
    router.insert("later", Arc::new(later));
    let now = |call: &Call<'_>, reply: &mut Reply<'_>| reply.json(&call.get::<String>(0, "tag")?);
    router.insert("now", Arc::new(now));
    router
}

struct Harness {
    router: Router,
    parked: Parked,
    sink: Arc<Sink>,
    scratch: Scratch,
    session: Session,
    out: OutBuf,
}

const DATE: &[u8; 29] = b"Sun, 06 Nov 1994 08:49:37 GMT";

impl Harness {
    fn new() -> Self {
        let parked = Parked::default();
        Harness {
            router: router(&parked),
            parked,
            sink: Sink::new(|| {}),
            scratch: Scratch::default(),
            session: Session::new(),
            out: OutBuf::new(),
        }
    }

    fn feed(&mut self, input: &str) {
        self.feed_bytes(input.as_bytes());
    }

    fn feed_bytes(&mut self, input: &[u8]) {
        let limits = Limits::default();
        let mut ctx = Context {
            router: &self.router,
            limits: &limits,
            date: DATE,
            scratch: &mut self.scratch,
            defer: Some(Target {
                sink: &self.sink,
                conn: 0,
                generation: 1,
                presence: None,
                cancellation: None,
            }),
            draining: false,
        };
        let progress = self.session.feed(input, &mut self.out, &mut ctx, usize::MAX);
        assert_eq!(progress.consumed, input.len());
    }

    /// Complete the parked call tagged `tag` with `outcome`, then deliver it as a worker would.
    fn complete(&mut self, tag: &str, outcome: Result<&str, RpcError>) {
        let deferred = {
            let mut parked = self.parked.lock().unwrap();
            let index = parked.iter().position(|(t, _)| t == tag).expect("parked call");
            parked.remove(index).1
        };
        match outcome {
            Ok(json) => deferred.raw(json),
            Err(error) => deferred.error(error),
        }
        self.deliver();
    }

    fn deliver(&mut self) {
        let mut completions: Vec<Completion> = Vec::new();
        self.sink.drain(&mut completions);
        for c in completions {
            assert_eq!((c.conn, c.generation), (0, 1));
            self.session.complete(c.slot, c.outcome, &mut self.out, DATE);
        }
    }

    fn sent(&mut self) -> String {
        let text = String::from_utf8(self.out.to_vec()).unwrap();
        let n = self.out.pending();
        let sendable = text.len();
        self.out.advance(sendable.min(n));
        text
    }
}

fn request(method: &str, tag: &str, id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":["{tag}"],"id":{id}}}"#)
}

#[test]
fn tcp_replies_leave_in_request_order_whatever_order_they_complete_in() {
    let mut h = Harness::new();
    h.feed(&format!(
        "{}\n{}\n{}\n",
        request("later", "a", 1),
        request("now", "b", 2),
        request("later", "c", 3)
    ));
    assert_eq!(h.sent(), "", "nothing passes the first awaited reply");
    assert!(h.session.has_pending());
    h.complete("c", Ok("\"C\""));
    assert_eq!(h.sent(), "");
    h.complete("a", Ok("[1,\n2]")); // raw JSON with a newline: the reply must stay one line
    assert_eq!(
        h.sent(),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":[1, 2]}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":\"b\"}\n\
         {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"C\"}\n"
    );
    assert!(!h.session.has_pending());
    assert!(h.out.is_empty());
}

#[test]
fn batches_wait_for_every_deferred_entry_and_keep_their_order() {
    let mut h = Harness::new();
    let batch = format!(
        "[{},{},{},{}]",
        request("later", "a", 1),
        request("now", "b", 2),
        r#"{"jsonrpc":"2.0","method":"later","params":["n"]}"#,
        request("later", "c", 3)
    );
    h.feed(&batch);
    assert_eq!(h.sent(), "");
    h.complete("n", Ok("0")); // a notification: never sent
    h.complete("c", Err(RpcError::new(-32001, "late failure")));
    assert_eq!(h.sent(), "");
    h.complete("a", Ok("true"));
    assert_eq!(
        h.sent(),
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":true},{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":\"b\"},\
         {\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32001,\"message\":\"late failure\"}}]\n"
    );
}

#[test]
fn http_and_rest_replies_get_their_head_once_complete() {
    let mut h = Harness::new();
    let body = request("later", "a", 7);
    h.feed(&format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    h.feed("GET /later?tag=r HTTP/1.1\r\nHost: x\r\n\r\nGET /now?tag=q HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.sent(), "");
    h.complete("r", Err(RpcError::invalid_params("no such tag")));
    h.complete("a", Ok("\"done\""));
    let text = h.sent();
    let replies: Vec<&str> = text.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(replies.len(), 3, "{text}");
    assert!(
        replies[0].starts_with("200 OK") && replies[0].ends_with("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"done\"}")
    );
    assert!(replies[0].contains("Content-Length: 40\r\n"), "{}", replies[0]);
    assert!(
        replies[1].starts_with("400 Bad Request") && replies[1].contains("no such tag"),
        "{}",
        replies[1]
    );
    assert!(replies[2].starts_with("200 OK") && replies[2].ends_with("\"q\""));
}

#[test]
fn a_dropped_reply_answers_internal_error_and_unknown_slots_are_ignored() {
    let mut h = Harness::new();
    h.feed(&format!("{}\n", request("later", "a", 1)));
    let (_, deferred) = h.parked.lock().unwrap().pop().unwrap();
    drop(deferred);
    h.deliver();
    let text = h.sent();
    assert!(text.contains("\"id\":1,\"error\":{\"code\":-32603"), "{text}");
    assert!(!h.session.complete(99, Ok(b"1".to_vec()), &mut h.out, DATE));
}

#[test]
fn without_an_engine_deferring_is_refused_cleanly() {
    let mut h = Harness::new();
    let limits = Limits::default();
    let mut ctx = Context {
        router: &h.router,
        limits: &limits,
        date: DATE,
        scratch: &mut h.scratch,
        defer: None,
        draining: false,
    };
    let input = format!("{}\n", request("later", "a", 1));
    h.session.feed(input.as_bytes(), &mut h.out, &mut ctx, usize::MAX);
    let text = String::from_utf8(h.out.to_vec()).unwrap();
    assert!(
        text.contains("\"code\":-32603") && text.contains("cannot defer"),
        "{text}"
    );
}

/// A procedure that sleeps on another thread must not hold up anyone: with a single
/// worker thread, 8 concurrent slow calls take about one sleep, and a quick call made
/// meanwhile is answered at once.
#[test]
fn slow_procedures_on_other_threads_do_not_stall_the_worker() {
    const SLEEP: Duration = Duration::from_millis(300);
    let server = Server::builder()
        .port(0)
        .threads(1)
        .handler("slow", |_: &Call<'_>, reply: &mut Reply<'_>| {
            let deferred = reply.defer()?;
            std::thread::spawn(move || {
                std::thread::sleep(SLEEP);
                deferred.json("slept");
            });
            Ok(())
        })
        .procedure("quick", |_| Ok("quick"))
        .bind()
        .expect("bind")
        .spawn()
        .expect("spawn");
    let addr = server.local_addr();
    let started = Instant::now();
    let slow: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let body = format!(r#"{{"jsonrpc":"2.0","method":"slow","id":{i}}}"#);
                write!(
                    stream,
                    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                let mut reply = String::new();
                stream.read_to_string(&mut reply).unwrap();
                assert!(
                    reply.ends_with(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":\"slept\"}}")),
                    "{reply}"
                );
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let quick_started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    writeln!(stream, r#"{{"jsonrpc":"2.0","method":"quick","id":1}}"#).unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).unwrap();
    let quick = quick_started.elapsed();
    assert_eq!(line, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"quick\"}\n");
    for thread in slow {
        thread.join().expect("slow caller");
    }
    let total = started.elapsed();
    assert!(quick < Duration::from_millis(150), "quick call took {quick:?}");
    assert!(
        total < SLEEP * 3,
        "8 slow calls took {total:?}, not about one sleep of {SLEEP:?}"
    );
}

/// A one-thread server on `engine` whose `slow` procedure answers `"late"` from another
/// thread after `delay`; it gives in-flight calls 3 s at shutdown.
fn serve_late(engine: ucall_core::EngineKind, delay: Duration) -> ucall_core::ServerHandle {
    Server::builder()
        .port(0)
        .threads(1)
        .engine(engine)
        .shutdown_timeout(Duration::from_secs(3))
        .handler("slow", move |_: &Call<'_>, reply: &mut Reply<'_>| {
            let deferred = reply.defer()?;
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                deferred.json("late");
            });
            Ok(())
        })
        .bind()
        .expect("bind")
        .spawn()
        .expect("spawn")
}

/// A client that sends its requests and half-closes at once still gets every reply,
/// including those that complete after the half-close.
#[test]
fn a_half_closed_client_still_gets_replies_completed_later() {
    for engine in [ucall_core::EngineKind::Poll, ucall_core::EngineKind::Auto] {
        let server = serve_late(engine, Duration::from_millis(100));
        let mut stream = TcpStream::connect(server.local_addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"slow\",\"id\":1}\n{\"jsonrpc\":\"2.0\",\"method\":\"slow\",\"id\":2}\n")
            .unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut replies = String::new();
        stream.read_to_string(&mut replies).unwrap();
        assert_eq!(
            replies,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"late\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":\"late\"}\n",
            "{engine:?}"
        );
    }
}

/// RFC 9112 9.6: a server that closes after a reply says so in it. A keep-alive request
/// whose reply completes while the server shuts down is its connection's last: the reply
/// says `Connection: close`, and then the connection closes.
#[test]
fn a_reply_completed_during_shutdown_says_connection_close() {
    for engine in [ucall_core::EngineKind::Poll, ucall_core::EngineKind::Auto] {
        let server = serve_late(engine, Duration::from_millis(300));
        let mut stream = TcpStream::connect(server.local_addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let body = r#"{"jsonrpc":"2.0","method":"slow","id":1}"#;
        write!(
            stream,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        server.stop();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").expect("a whole reply");
        assert!(head.starts_with("HTTP/1.1 200 "), "{engine:?}: {reply}");
        assert!(head.contains("\r\nConnection: close"), "{engine:?}: {head}");
        assert_eq!(body, r#"{"jsonrpc":"2.0","id":1,"result":"late"}"#, "{engine:?}");
        let stopper = server.stopper();
        server.join();
        let counts = stopper.drain_counts();
        assert_eq!((counts.answered, counts.unanswered), (1, 0), "{engine:?}");
    }
}

/// A deferred call still unanswered when `shutdown_timeout` runs out is cut off, and the
/// drain counts say so.
#[test]
fn a_call_still_running_at_the_shutdown_timeout_is_counted_as_cut_off() {
    for engine in [ucall_core::EngineKind::Poll, ucall_core::EngineKind::Auto] {
        let parked = Arc::new(Mutex::new(Vec::new()));
        let server = parking_server_with(engine, &parked, |b| b.shutdown_timeout(Duration::from_millis(200)));
        let mut stream = TcpStream::connect(server.local_addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":1}\n")
            .unwrap();
        assert_eq!(wait_until_still(&parked), 1, "{engine:?}");
        let stopper = server.stopper();
        server.stop();
        server.join();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{engine:?}: no answer, the connection closed");
        let counts = stopper.drain_counts();
        assert_eq!((counts.answered, counts.unanswered), (0, 1), "{engine:?}");
        drop(parked);
    }
}

/// A JSON string of `len` bytes in all, quotes included, made of `fill`.
fn big_string(len: usize, fill: char) -> String {
    format!("\"{}\"", fill.to_string().repeat(len - 2))
}

/// The bodies of the HTTP responses in `text`, each checked against its `Content-Length`.
fn http_bodies(text: &str) -> Vec<&str> {
    let mut bodies = Vec::new();
    let mut rest = text;
    while let Some(head_end) = rest.find("\r\n\r\n") {
        let head = &rest[..head_end];
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .expect("a Content-Length")
            .parse()
            .unwrap();
        let body_start = head_end + 4;
        bodies.push(&rest[body_start..body_start + length]);
        rest = &rest[body_start + length..];
    }
    assert!(rest.is_empty(), "bytes beyond the last body: {}", rest.len());
    bodies
}

#[test]
fn large_results_completed_later_go_out_whole_on_every_transport() {
    // Over 64 KiB: handed to the output whole rather than copied (HTTP, WebSocket).
    let (a, b, c) = (big_string(100_000, 'a'), big_string(70_000, 'b'), big_string(300, 'c'));
    let mut h = Harness::new();
    let batch = format!("[{},{}]", request("later", "a", 1), request("later", "c", 2));
    let single = request("later", "b", 3);
    h.feed(&format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{batch}GET /later?tag=r HTTP/1.1\r\nHost: x\r\n\r\n\
         POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{single}",
        batch.len(),
        single.len()
    ));
    h.complete("b", Ok(&b));
    h.complete("r", Ok(&a));
    h.complete("c", Ok(&c));
    assert_eq!(h.sent(), "", "the batch's first entry is still awaited");
    h.complete("a", Ok(&a));
    let text = h.sent();
    let bodies = http_bodies(&text);
    assert_eq!(
        bodies,
        [
            format!(
                "[{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{a}}},{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{c}}}]"
            ),
            a.clone(),
            format!("{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{b}}}"),
        ]
    );
    assert!(h.out.is_empty());

    // Raw TCP: a large raw result with a line break still leaves as one line.
    let mut h = Harness::new();
    h.feed(&format!("{}\n", request("later", "t", 4)));
    let raw = format!("[{},\n{}]", a, b);
    h.complete("t", Ok(&raw));
    let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":[{a}, {b}]}}\n");
    assert_eq!(h.sent(), line);

    // WebSocket: the frame's length counts the result.
    let mut h = Harness::new();
    h.feed(
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    let upgrade = h.sent();
    assert!(upgrade.starts_with("HTTP/1.1 101"), "{upgrade}");
    let call = request("later", "w", 5);
    // A masked text frame; a zero key leaves the payload as it is.
    let mut frame = vec![0x81, 0x80 | u8::try_from(call.len()).unwrap(), 0, 0, 0, 0];
    frame.extend_from_slice(call.as_bytes());
    h.feed_bytes(&frame);
    h.complete("w", Ok(&a));
    let bytes = h.out.to_vec();
    assert_eq!((bytes[0], bytes[1]), (0x81, 127), "a final text frame, 64-bit length");
    let length = u64::from_be_bytes(bytes[2..10].try_into().unwrap());
    let expected = format!("{{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{a}}}");
    assert_eq!(length, expected.len() as u64);
    assert_eq!(&bytes[10..], expected.as_bytes());
}

/// How many calls are parked once no more come for 300 ms: all the worker will take.
fn wait_until_still(parked: &Mutex<Vec<Deferred>>) -> usize {
    let mut seen = 0;
    let mut still_since = Instant::now();
    while still_since.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(20));
        let now = parked.lock().unwrap().len();
        if now != seen {
            seen = now;
            still_since = Instant::now();
        }
    }
    seen
}

/// A server of one worker whose `park` procedure parks every call's reply in `parked`.
fn parking_server(engine: ucall_core::EngineKind, parked: &Arc<Mutex<Vec<Deferred>>>) -> ucall_core::ServerHandle {
    parking_server_with(engine, parked, |builder| builder)
}

/// The same, with more settings.
fn parking_server_with(
    engine: ucall_core::EngineKind,
    parked: &Arc<Mutex<Vec<Deferred>>>,
    configure: impl FnOnce(ucall_core::ServerBuilder) -> ucall_core::ServerBuilder,
) -> ucall_core::ServerHandle {
    let park = Arc::clone(parked);
    configure(Server::builder().port(0).threads(1).engine(engine))
        .handler("park", move |_: &Call<'_>, reply: &mut Reply<'_>| {
            park.lock().unwrap().push(reply.defer()?);
            Ok(())
        })
        .bind()
        .expect("bind")
        .spawn()
        .expect("spawn")
}

/// A client that pipelines `calls` calls of `park` over raw TCP, then checks that each is
/// answered, in order.
fn pipeline(addr: std::net::SocketAddr, calls: usize) -> std::thread::JoinHandle<()> {
    let mut stream = TcpStream::connect(addr).unwrap();
    std::thread::spawn(move || {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let requests: String = (0..calls)
            .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":{i}}}\n"))
            .collect();
        stream.write_all(requests.as_bytes()).unwrap();
        let mut lines = BufReader::new(stream).lines();
        for i in 0..calls {
            let line = lines.next().expect("a reply").expect("read");
            assert_eq!(line, format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":\"done\"}}"));
        }
    })
}

/// Complete parked calls until `total` have been, failing if they stop coming.
fn complete_all(parked: &Mutex<Vec<Deferred>>, total: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut completed = 0;
    while completed < total {
        assert!(
            Instant::now() < deadline,
            "{what}: {completed} completed, the rest stalled"
        );
        let batch = std::mem::take(&mut *parked.lock().unwrap());
        if batch.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        completed += batch.len();
        for deferred in batch {
            deferred.json("done");
        }
    }
}

/// A busy worker (one that awaits `BUSY_FROM` deferred calls) reads only `BUSY_SHARE`
/// messages of each connection at a time: a client that pipelines many calls cannot queue
/// them all ahead of everyone else's, and a client with a single call has it taken at once.
/// Below `BUSY_FROM`, deep pipelines are taken whole. Every call is answered in the end.
#[test]
fn a_busy_worker_takes_a_few_messages_of_each_connection_at_a_time() {
    use ucall_core::defer::{BUSY_FROM, BUSY_SHARE};
    const DEEP: usize = 1000;
    const WIDE: usize = 100;
    let deep_clients = BUSY_FROM.div_ceil(DEEP) + 1;
    for engine in [ucall_core::EngineKind::Poll, ucall_core::EngineKind::Auto] {
        let parked: Arc<Mutex<Vec<Deferred>>> = Arc::default();
        let server = parking_server(engine, &parked);
        let addr = server.local_addr();
        // One client at a time, so that the order they are read in is known.
        // Each is read until the worker is busy and it has its share, or to its end.
        let mut clients = Vec::new();
        let mut busy = 0;
        for c in 0..deep_clients {
            clients.push(pipeline(addr, DEEP));
            busy += DEEP.min(BUSY_FROM.saturating_sub(busy).max(BUSY_SHARE));
            assert_eq!(wait_until_still(&parked), busy, "{engine:?}: after deep client {c}");
        }
        assert_eq!(
            busy,
            BUSY_FROM + BUSY_SHARE,
            "the last deep client came to a busy worker"
        );
        clients.push(pipeline(addr, WIDE));
        assert_eq!(
            wait_until_still(&parked),
            busy + BUSY_SHARE,
            "{engine:?}: a wide client's share"
        );
        clients.push(pipeline(addr, 1));
        assert_eq!(
            wait_until_still(&parked),
            busy + BUSY_SHARE + 1,
            "{engine:?}: a single call"
        );
        complete_all(&parked, deep_clients * DEEP + WIDE + 1, &format!("{engine:?}"));
        for client in clients {
            client.join().expect("client");
        }
    }
}

/// A worker awaits a bounded number of deferred calls across all its connections: past
/// `MAX_AWAITED`, no connection's next request is read until some complete. Many clients
/// pipelining into a slow procedure thus cannot make the server queue millions of calls
/// (each holding memory); their requests wait in the kernel's socket buffers instead.
/// Once the calls complete, every request on every connection is answered, in order.
/// The calls come in batches: a busy worker reads only `BUSY_SHARE` messages of each
/// connection, and batches carry enough calls to fill it anyway.
#[test]
fn a_worker_awaits_a_bounded_number_of_deferred_calls_and_answers_them_all() {
    use ucall_core::defer::{BUSY_SHARE, MAX_AWAITED};
    const CONNECTIONS: usize = 32;
    const BATCH: usize = 300;
    const BATCHES: usize = 6;
    const PER_CONNECTION: usize = BATCH * BATCHES;
    const { assert!(CONNECTIONS * BUSY_SHARE * BATCH > 2 * MAX_AWAITED) };
    for engine in [ucall_core::EngineKind::Poll, ucall_core::EngineKind::Auto] {
        let parked: Arc<Mutex<Vec<Deferred>>> = Arc::default();
        let server = parking_server(engine, &parked);
        let addr = server.local_addr();
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                std::thread::spawn(move || {
                    let mut stream = TcpStream::connect(addr).unwrap();
                    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    let batch = |b: usize| {
                        let calls: Vec<String> = (b * BATCH..(b + 1) * BATCH)
                            .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":{i}}}"))
                            .collect();
                        format!("[{}]\n", calls.join(","))
                    };
                    let requests: String = (0..BATCHES).map(batch).collect();
                    stream.write_all(requests.as_bytes()).unwrap();
                    let mut lines = BufReader::new(stream).lines();
                    for b in 0..BATCHES {
                        let line = lines.next().expect("a reply").expect("read");
                        let expected: Vec<String> = (b * BATCH..(b + 1) * BATCH)
                            .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":\"done\"}}"))
                            .collect();
                        assert_eq!(line, format!("[{}]", expected.join(",")), "{c}");
                    }
                })
            })
            .collect();

        // Wait until the worker has taken all it will take, then check the bound: it
        // stops reading once it awaits MAX_AWAITED calls, within the batch that got there.
        let seen = wait_until_still(&parked);
        assert!(
            (MAX_AWAITED..MAX_AWAITED + BATCH).contains(&seen),
            "{engine:?}: {seen} calls awaited at once"
        );
        // A client that connects meanwhile waits its turn too, and is answered.
        let late = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            stream
                .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":\"late\"}\n")
                .unwrap();
            let mut line = String::new();
            BufReader::new(stream).read_line(&mut line).unwrap();
            assert_eq!(line, "{\"jsonrpc\":\"2.0\",\"id\":\"late\",\"result\":\"done\"}\n");
        });
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            parked.lock().unwrap().len(),
            seen,
            "{engine:?}: the late call was taken"
        );

        complete_all(&parked, CONNECTIONS * PER_CONNECTION + 1, &format!("{engine:?}"));
        for client in clients {
            client.join().expect("client");
        }
        late.join().expect("late client");
    }
}

/// Past `max_pending_calls` awaited replies a call is refused at once, nothing run: raw TCP
/// gets `-32000` with `data.executed: false`, HTTP a 503 with `Retry-After`; once parked
/// calls complete, calls are taken again.
#[test]
fn past_max_pending_calls_a_call_is_refused_safe_to_retry() {
    for engine in [ucall_core::EngineKind::Poll, ucall_core::EngineKind::Auto] {
        let parked = Arc::new(Mutex::new(Vec::new()));
        let server = parking_server_with(engine, &parked, |b| b.max_pending_calls(2));
        let addr = server.local_addr();
        let mut tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.write_all(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":1}\n{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":2}\n",
        )
        .unwrap();
        assert_eq!(wait_until_still(&parked), 2, "{engine:?}: both calls parked");

        let mut refused = TcpStream::connect(addr).unwrap();
        refused.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        refused
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":3}\n")
            .unwrap();
        let mut line = String::new();
        BufReader::new(&refused).read_line(&mut line).unwrap();
        let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(reply["id"], 3, "{line}");
        assert_eq!(reply["error"]["code"], -32000, "{line}");
        assert_eq!(reply["error"]["data"]["executed"], false, "{line}");
        assert_eq!(reply["error"]["data"]["max_pending_calls"], 2, "{line}");

        let mut http = TcpStream::connect(addr).unwrap();
        http.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = "{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":4}";
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        http.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        http.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"),
            "{answer}"
        );
        assert!(answer.contains("\"executed\":false"), "{answer}");
        assert_eq!(parked.lock().unwrap().len(), 2, "{engine:?}: nothing more ran");

        // The parked calls answer; the bound frees and a call is taken again.
        complete_all(&parked, 2, "parked");
        let mut lines = BufReader::new(tcp.try_clone().unwrap()).lines();
        for id in [1, 2] {
            let line = lines.next().expect("a reply").expect("read");
            assert_eq!(line, format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":\"done\"}}"));
        }
        tcp.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":5}\n")
            .unwrap();
        complete_all(&parked, 1, "after");
        let line = lines.next().expect("a reply").expect("read");
        assert_eq!(line, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":\"done\"}");
        server.stop();
        server.join();
    }
}
