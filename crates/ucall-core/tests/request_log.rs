// SPDX-License-Identifier: Apache-2.0
//! The request log over loopback, on every engine: one line per call over HTTP (JSON-RPC
//! and REST), raw TCP and WebSocket, for results, errors, notifications, batch elements,
//! unknown methods, refused messages and deferred calls, each field checked against what
//! the client sent and received.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{call, get, notification, post, show, Conn};
use serde_json::Value as Json;
use ucall_core::{Call, EngineKind, LogFormat, Reply, RequestLog, RpcError, ServerHandle};

/// A log file of this test's own, removed when dropped.
struct LogFile(PathBuf);

impl LogFile {
    fn new(what: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "ucall-request-log-{}-{what}-{}.log",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        LogFile(path)
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }

    fn json_lines(&self) -> Vec<Json> {
        self.text()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
            .collect()
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The vector procedures, plus `later` (defers, and completes from another thread),
/// `deny` (an error that names HTTP 401) and `late_deny` (the same, deferred).
fn serve(engine: EngineKind, log: Option<RequestLog>) -> ServerHandle {
    let later = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let value: i64 = call.get(0, "x")?;
        let deferred = reply.defer()?;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            deferred.json(&(value * 2));
        });
        Ok(())
    };
    let late_deny = |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let deferred = reply.defer()?;
        std::thread::spawn(move || deferred.error(RpcError::http(401, "not you")));
        Ok(())
    };
    let mut builder = common::builder(engine)
        .handler("later", later)
        .handler("late_deny", late_deny)
        .procedure("deny", |_| -> Result<(), RpcError> {
            Err(RpcError::http(401, "not you"))
        });
    if let Some(log) = log {
        builder = builder.request_log(log);
    }
    common::start(engine, builder)
}

/// The line whose `method` and `id` are these (`id` as its JSON value, absent: `None`).
fn line<'a>(lines: &'a [Json], transport: &str, method: Option<&str>, id: Option<Json>) -> &'a Json {
    let found: Vec<&Json> = lines
        .iter()
        .filter(|l| l["transport"] == transport && l["method"] == method.map_or(Json::Null, Json::from))
        .filter(|l| l.get("id").cloned() == id)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {transport} line for {method:?} id {id:?} in {lines:#?}"
    );
    found[0]
}

/// `line` says what a call answered: its code, status, sizes and peer.
#[allow(clippy::too_many_arguments)]
fn check(line: &Json, conn: &Conn, code: i64, status: Option<u16>, bytes_in: usize, bytes_out: usize) {
    let peer = conn.stream.local_addr().expect("a local address").to_string();
    assert_eq!(line["peer"], Json::from(peer), "{line}");
    assert_eq!(line["code"], code, "{line}");
    assert_eq!(
        line.get("status").and_then(Json::as_u64),
        status.map(u64::from),
        "{line}"
    );
    assert_eq!(line["bytes_in"], bytes_in, "{line}");
    assert_eq!(line["bytes_out"], bytes_out, "{line}");
    assert!(line["duration_us"].is_u64(), "{line}");
    let time = line["time"].as_str().expect("a time");
    // RFC 3339, UTC, milliseconds: 2026-11-27T10:01:02.345Z.
    let shape = time.len() == 24
        && time.ends_with('Z')
        && time.as_bytes()[10] == b'T'
        && time.as_bytes()[19] == b'.'
        && time.as_bytes()[..4].iter().all(u8::is_ascii_digit);
    assert!(shape, "{time}");
}

#[test]
fn every_call_gets_a_line_with_its_fields() {
    common::for_each_engine(|engine| {
        let file = LogFile::new(engine.name());
        let log = RequestLog::open(&file.0, LogFormat::Json).expect("open the log");
        let server = serve(engine, Some(log));

        // HTTP: a result, a notification, errors (one naming a status), an unknown method.
        let mut http = Conn::to(&server);
        let sum = call("sum", "[1, 2]", "1");
        let reply = http.roundtrip(&post("/", sum.as_bytes()));
        assert_eq!(reply.status, 200);
        let sum_out = reply.body.len();
        let note = notification("update", "[1]");
        assert_eq!(http.roundtrip(&post("/", note.as_bytes())).status, 204);
        let fail = call("fail", "[]", "\"f\"");
        let fail_out = http.roundtrip(&post("/", fail.as_bytes())).body.len();
        let deny = call("deny", "[]", "2");
        let reply = http.roundtrip(&post("/", deny.as_bytes()));
        assert_eq!(reply.status, 401);
        let deny_out = reply.body.len();
        let unknown = call("nope", "[]", "3");
        let unknown_out = http.roundtrip(&post("/", unknown.as_bytes())).body.len();
        // Not JSON at all: one line, without a method.
        let parse_out = http.roundtrip(&post("/", b"{\"jsonrpc\":")).body.len();

        // A batch: a call, a notification, an unknown method, an element that is no request.
        let elements = [
            call("sum", "[3, 4]", "10"),
            notification("notify_hello", "[7]"),
            call("missing", "{}", "11"),
            "5".to_owned(),
        ];
        let batch = format!("[{}]", elements.join(", "));
        let reply = http.roundtrip(&post("/", batch.as_bytes()));
        assert_eq!(reply.status, 200);
        let replies: Vec<Json> = serde_json::from_slice(&reply.body).expect("a batch reply");
        let sizes: Vec<usize> = replies.iter().map(|r| r.to_string().len()).collect();
        // A batch of notifications only: no reply, 204.
        let silent_elements = [notification("notify_sum", "[]"), notification("notify_sum", "[1, 2]")];
        let silent = format!("[{}]", silent_elements.join(","));
        assert_eq!(http.roundtrip(&post("/", silent.as_bytes())).status, 204);

        // REST-style: GET with a query, and a deferred call.
        let reply = http.roundtrip(&get("/sum?a=1&b=2"));
        assert_eq!(reply.status, 200);
        let rest_out = reply.body.len();
        let later = call("later", "[21]", "4");
        let reply = http.roundtrip(&post("/", later.as_bytes()));
        assert_eq!(reply.status, 200, "{}", show(&reply.body));
        let later_out = reply.body.len();
        let late_deny = call("late_deny", "[]", "5");
        let reply = http.roundtrip(&post("/", late_deny.as_bytes()));
        assert_eq!(reply.status, 401, "{}", show(&reply.body));
        let late_deny_out = reply.body.len();

        // Raw TCP and WebSocket.
        let mut tcp = Conn::to(&server);
        tcp.send(format!("{sum}\n").as_bytes());
        let tcp_out = tcp.read_line().len();
        let mut ws = Conn::to(&server);
        let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            .to_vec();
        bytes.extend_from_slice(&common::ws_text(&sum));
        ws.send(&bytes);
        assert_eq!(ws.read_response().status, 101);
        let header = ws.read_exact_bytes(2);
        assert_eq!(header[0], 0x81, "a text frame");
        let ws_out = usize::from(header[1]);
        let _ = ws.read_exact_bytes(ws_out);

        drop(server); // the workers write their last lines as they stop
        let lines = file.json_lines();
        assert_eq!(lines.len(), 17, "{}", file.text());

        let line_of = |method: &str, id: Option<Json>| line(&lines, "http", Some(method), id);
        check(line_of("sum", Some(1.into())), &http, 0, Some(200), sum.len(), sum_out);
        check(line_of("update", None), &http, 0, Some(204), note.len(), 0);
        check(
            line_of("fail", Some("f".into())),
            &http,
            -32001,
            Some(200),
            fail.len(),
            fail_out,
        );
        check(
            line_of("deny", Some(2.into())),
            &http,
            -32000,
            Some(401),
            deny.len(),
            deny_out,
        );
        let unknown_line = line_of("nope", Some(3.into()));
        check(unknown_line, &http, -32601, Some(200), unknown.len(), unknown_out);
        assert_eq!(unknown_line["duration_us"], 0, "no handler ran");
        let parse: Vec<&Json> = lines.iter().filter(|l| l["code"] == -32700).collect();
        assert_eq!(parse.len(), 1, "{lines:#?}");
        assert_eq!((&parse[0]["method"], &parse[0]["id"]), (&Json::Null, &Json::Null));
        check(parse[0], &http, -32700, Some(200), 11, parse_out);

        check(
            line_of("sum", Some(10.into())),
            &http,
            0,
            Some(200),
            elements[0].len(),
            sizes[0],
        );
        check(line_of("notify_hello", None), &http, 0, Some(200), elements[1].len(), 0);
        check(
            line_of("missing", Some(11.into())),
            &http,
            -32601,
            Some(200),
            elements[2].len(),
            sizes[1],
        );
        let invalid: Vec<&Json> = lines.iter().filter(|l| l["code"] == -32600).collect();
        assert_eq!(invalid.len(), 1, "{lines:#?}");
        assert_eq!((&invalid[0]["method"], &invalid[0]["id"]), (&Json::Null, &Json::Null));
        check(invalid[0], &http, -32600, Some(200), 1, sizes[2]);
        let silent_lines: Vec<&Json> = lines.iter().filter(|l| l["method"] == "notify_sum").collect();
        assert_eq!(silent_lines.len(), 2, "{lines:#?}");
        for (line, sent) in silent_lines.iter().zip(&silent_elements) {
            check(line, &http, 0, Some(204), sent.len(), 0);
        }

        let rest = line_of("sum", None);
        check(rest, &http, 0, Some(200), 0, rest_out);
        let deferred = line_of("later", Some(4.into()));
        check(deferred, &http, 0, Some(200), later.len(), later_out);
        assert!(
            deferred["duration_us"].as_u64().is_some_and(|us| us >= 1000),
            "{deferred}"
        );
        check(
            line_of("late_deny", Some(5.into())),
            &http,
            -32000,
            Some(401),
            late_deny.len(),
            late_deny_out,
        );

        let tcp_line = line(&lines, "tcp", Some("sum"), Some(1.into()));
        check(tcp_line, &tcp, 0, None, sum.len(), tcp_out);
        let ws_line = line(&lines, "websocket", Some("sum"), Some(1.into()));
        check(ws_line, &ws, 0, None, sum.len(), ws_out);
    });
}

#[test]
fn lines_carry_the_callers_trace_id() {
    common::for_each_engine(|engine| {
        let file = LogFile::new(&format!("trace-{}", engine.name()));
        let log = RequestLog::open(&file.0, LogFormat::Json).expect("open the log");
        let server = serve(engine, Some(log));
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut http = Conn::to(&server);
        for (body, fields) in [
            (call("sum", "[1, 2]", "21"), format!("traceparent: {parent}\r\n")),
            (call("later", "[1]", "22"), format!("traceparent: {parent}\r\n")),
            (call("sum", "[1, 2]", "23"), "traceparent: 00-bad\r\n".to_owned()),
        ] {
            let head = format!(
                "POST / HTTP/1.1\r\nHost: x\r\n{fields}Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            assert_eq!(http.roundtrip(head.as_bytes()).status, 200);
        }
        let mut tcp = Conn::to(&server);
        tcp.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[1,2],\"id\":24,\"_meta\":{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}\n");
        let _ = tcp.read_line();
        drop(server);
        let lines = file.json_lines();
        let trace_of = |transport: &str, method: &str, id: i64| {
            line(&lines, transport, Some(method), Some(id.into()))["trace_id"].clone()
        };
        assert_eq!(trace_of("http", "sum", 21), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            trace_of("http", "later", 22),
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "a deferred call's line"
        );
        assert_eq!(
            trace_of("http", "sum", 23),
            Json::Null,
            "a malformed traceparent: no trace id"
        );
        assert_eq!(trace_of("tcp", "sum", 24), "0af7651916cd43dd8448eb211c80319c");
    });
}

#[test]
fn text_lines_are_logfmt_with_json_strings() {
    common::for_each_engine(|engine| {
        let file = LogFile::new(&format!("text-{}", engine.name()));
        let log = RequestLog::open(&file.0, LogFormat::Text).expect("open the log");
        let server = serve(engine, Some(log));
        let mut tcp = Conn::to(&server);
        // A method name a line must not be broken by.
        tcp.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"a b\\n\\\"c\",\"id\":\"x y\"}\n");
        let _ = tcp.read_line();
        drop(server);
        let text = file.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let peer = tcp.stream.local_addr().expect("a local address");
        let rest = lines[0].split_once(' ').expect("fields").1;
        assert!(
            lines[0].starts_with("time=") && lines[0].as_bytes()[28] == b'Z',
            "{text}"
        );
        let expected = format!(
            "peer={peer} transport=tcp method=\"a b\\n\\\"c\" id=\"x y\" code=-32601 duration_us=0 bytes_in=48 bytes_out="
        );
        assert!(rest.starts_with(&expected), "{rest}\n{expected}");
    });
}

#[test]
fn workers_append_whole_lines_to_one_file() {
    common::for_each_engine(|engine| {
        let file = LogFile::new(&format!("many-{}", engine.name()));
        // Two servers, as two worker processes would, each with two threads, one file.
        let servers: Vec<ServerHandle> = (0..2)
            .map(|_| serve(engine, Some(RequestLog::open(&file.0, LogFormat::Json).expect("open"))))
            .collect();
        let clients: Vec<std::thread::JoinHandle<()>> = servers
            .iter()
            .flat_map(|server| [server.local_addr(), server.local_addr()])
            .map(|addr| {
                std::thread::spawn(move || {
                    let mut conn = Conn::open(addr);
                    let batch: Vec<String> = (0..50).map(|i| call("sum", "[1, 2]", &i.to_string())).collect();
                    for _ in 0..10 {
                        conn.send(format!("[{}]\n", batch.join(",")).as_bytes());
                        let _ = conn.read_line();
                    }
                })
            })
            .collect();
        for client in clients {
            client.join().expect("a client");
        }
        drop(servers);
        assert_eq!(file.json_lines().len(), 4 * 10 * 50);
    });
}

#[test]
fn off_by_default() {
    let server = common::builder(EngineKind::Poll).bind().expect("bind");
    assert!(server.config().request_log.is_none());
    assert!(ucall_core::Config::default().request_log.is_none());
}
