// SPDX-License-Identifier: Apache-2.0
//! The MCP endpoint over loopback (docs/mcp.md): every vector of `tests/vectors/mcp/`
//! against the vector procedures served as tools, then what vectors cannot say: the
//! Origin check, GET refused, a refused bearer token's 401, a deferred result wrapped,
//! a streamed result's items as progress events, and hostile bodies beside a good call.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{for_each_engine, mcp_request, Conn};
use serde_json::{json, Value};
use ucall_core::{Call, EngineKind, McpSettings, Reply, RpcError, ServerHandle};

fn serve(engine: EngineKind) -> ServerHandle {
    let builder = common::builder(engine)
        .mcp(McpSettings::default())
        .handler("later", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let value: Value = call.get(0, "value")?;
            let deferred = reply.defer()?;
            std::thread::spawn(move || deferred.json(&json!({"got": value})));
            Ok(())
        })
        .handler("count", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let n: u64 = call.get(0, "n")?;
            let stream = reply.stream()?;
            std::thread::spawn(move || {
                for i in 0..n {
                    if stream.send_item(&format!("step {i}")).is_err() {
                        return;
                    }
                }
                stream.json(&n);
            });
            Ok(())
        })
        .hook(
            |call: &Call<'_>, reply: &mut Reply<'_>, next: &dyn ucall_core::Handler| {
                if call.method() == "guarded"
                    && call.context().header("authorization") != Some(b"Bearer t0ken".as_slice())
                {
                    return Err(RpcError::http(401, "a bearer token is required"));
                }
                next.handle(call, reply)
            },
        )
        .procedure("guarded", |_| Ok("in"));
    common::start(engine, builder)
}

/// Whether `actual` has every member `expected` names, equal (arrays and scalars whole,
/// objects member by member).
fn differences(expected: &Value, actual: &Value, at: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(wanted), Value::Object(got)) => {
            for (key, value) in wanted {
                match got.get(key) {
                    Some(found) => differences(value, found, &format!("{at}.{key}"), out),
                    None => out.push(format!("{at}.{key} missing")),
                }
            }
        }
        (Value::Array(wanted), Value::Array(got)) if wanted.len() == got.len() => {
            for (n, (value, found)) in wanted.iter().zip(got).enumerate() {
                differences(value, found, &format!("{at}[{n}]"), out);
            }
        }
        _ if expected == actual => {}
        _ => out.push(format!("{at}: expected {expected}, got {actual}")),
    }
}

fn vectors() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/mcp");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/vectors/mcp")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a vector");
            let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).expect("a JSON vector"))
        })
        .collect()
}

#[test]
fn every_vector_is_answered_as_it_says() {
    assert!(vectors().len() >= 20, "only {} vectors", vectors().len());
    for_each_engine(|engine| {
        let vectors = vectors();
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        for (name, vector) in &vectors {
            let headers: Vec<(&str, &str)> = vector["headers"]
                .as_object()
                .map(|fields| {
                    fields
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default();
            let body = vector["request"].as_str().expect("the request text");
            let response = conn.roundtrip(&mcp_request("POST", &headers, body));
            assert_eq!(u64::from(response.status), vector["status"], "{name}: {response:?}");
            match vector.get("reply") {
                None => assert!(response.body.is_empty(), "{name}: no body expected"),
                Some(expected) => {
                    let actual: Value = serde_json::from_slice(&response.body)
                        .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {response:?}"));
                    let mut out = Vec::new();
                    differences(expected, &actual, "reply", &mut out);
                    assert!(out.is_empty(), "{name}: {out:?} in {actual}");
                }
            }
        }
    });
}

#[test]
fn tools_list_has_object_schemas_and_pages() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let list: Value = serde_json::from_slice(&conn.roundtrip(&mcp_request("POST", &[], body)).body).expect("JSON");
        let tools = list["result"]["tools"].as_array().expect("tools");
        let names: Vec<&str> = tools.iter().filter_map(|tool| tool["name"].as_str()).collect();
        assert!(names.contains(&"subtract") && names.contains(&"echo"), "{names:?}");
        assert!(!names.iter().any(|name| name.starts_with("rpc.")), "{names:?}");
        for tool in tools {
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        }
        assert!(list["result"].get("nextCursor").is_none());
        // A cursor that was never given out is refused.
        let body = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"999"}}"#;
        let refused: Value =
            serde_json::from_slice(&conn.roundtrip(&mcp_request("POST", &[], body)).body).expect("JSON");
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    });
}

#[test]
fn origins_off_this_machine_are_refused_and_get_is_not_allowed() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let refused = Conn::to(&server).roundtrip(&mcp_request("POST", &[("Origin", "http://evil.example")], body));
        assert_eq!(refused.status, 403, "{refused:?}");
        let local = Conn::to(&server).roundtrip(&mcp_request("POST", &[("Origin", "http://localhost:5173")], body));
        assert_eq!(local.status, 200, "{local:?}");
        assert_eq!(
            local.header("access-control-allow-origin"),
            Some("http://localhost:5173")
        );
        let preflight = Conn::to(&server).roundtrip(
            b"OPTIONS /mcp HTTP/1.1\r\nHost: x\r\nOrigin: http://localhost:5173\r\n\
              Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: mcp-param-region\r\n\r\n",
        );
        assert_eq!(preflight.status, 204, "{preflight:?}");
        let allowed = preflight.header("access-control-allow-headers").unwrap_or_default();
        assert!(
            allowed.contains("MCP-Protocol-Version") && allowed.contains("mcp-param-region"),
            "{allowed}"
        );
        let get = Conn::to(&server).roundtrip(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(get.status, 405, "{get:?}");
        assert_eq!(get.header("allow"), Some("POST, OPTIONS"));
    });
}

#[test]
fn a_refused_token_is_401_with_www_authenticate() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"guarded","arguments":{}}}"#;
        let refused = conn.roundtrip(&mcp_request("POST", &[], body));
        assert_eq!(refused.status, 401, "{refused:?}");
        assert!(refused
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")));
        let allowed = conn.roundtrip(&mcp_request("POST", &[("Authorization", "Bearer t0ken")], body));
        assert_eq!(allowed.status, 200, "{allowed:?}");
        let reply: Value = serde_json::from_slice(&allowed.body).expect("JSON");
        assert_eq!(reply["result"]["structuredContent"], json!({"result": "in"}));
    });
}

#[test]
fn a_deferred_result_is_wrapped_like_an_inline_one() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        for id in 1..=3 {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"later","arguments":{{"value":{id}}}}}}}"#
            );
            let response = conn.roundtrip(&mcp_request("POST", &[], &body));
            assert_eq!(response.status, 200, "{response:?}");
            let reply: Value = serde_json::from_slice(&response.body).expect("JSON");
            assert_eq!(reply["id"], id);
            assert_eq!(reply["result"]["structuredContent"], json!({"got": id}), "{reply}");
            assert_eq!(reply["result"]["isError"], false);
            let text = reply["result"]["content"][0]["text"].as_str().expect("text");
            assert_eq!(
                serde_json::from_str::<Value>(text).expect("JSON text"),
                json!({"got": id})
            );
        }
    });
}

#[test]
fn a_streamed_result_sends_progress_events_when_asked() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        let body = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"count","arguments":{"n":3},"_meta":{"progressToken":"p1"}}}"#;
        conn.send(&mcp_request("POST", &[], body));
        let head = read_stream_head(&mut conn);
        assert_eq!(head[0], "HTTP/1.1 200 OK");
        assert!(head.iter().any(|l| l == "Content-Type: text/event-stream"), "{head:?}");
        // nginx in front passes each event on at once rather than buffering the body.
        assert!(head.iter().any(|l| l == "X-Accel-Buffering: no"), "{head:?}");
        let text = String::from_utf8(read_chunked(&mut conn)).expect("UTF-8");
        let events: Vec<Value> = text
            .split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).expect("a JSON event"))
            .collect();
        assert_eq!(events.len(), 4, "{text}");
        for (n, event) in events[..3].iter().enumerate() {
            assert_eq!(event["method"], "notifications/progress");
            assert_eq!(event["params"]["progressToken"], "p1");
            assert_eq!(event["params"]["progress"], n + 1);
            assert_eq!(event["params"]["message"], format!("step {n}"));
        }
        assert_eq!(events[3]["id"], 5);
        assert_eq!(events[3]["result"]["structuredContent"], json!({"result": 3}));
        // Without a progress token the items are not sent: one JSON reply.
        let body = r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"count","arguments":{"n":2}}}"#;
        let response = conn.roundtrip(&mcp_request("POST", &[], body));
        assert_eq!(
            response.header("content-type"),
            Some("application/json"),
            "{response:?}"
        );
        let reply: Value = serde_json::from_slice(&response.body).expect("JSON");
        assert_eq!(reply["result"]["structuredContent"], json!({"result": 2}));
    });
}

/// Read a streamed reply's head: its status line and fields.
fn read_stream_head(conn: &mut Conn) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = String::from_utf8(conn.read_line()).expect("UTF-8");
        let line = line.trim_end_matches('\r').to_string();
        if line.is_empty() {
            return lines;
        }
        lines.push(line);
    }
}

/// Read a chunked body until its last chunk.
fn read_chunked(conn: &mut Conn) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let size_line = String::from_utf8(conn.read_line()).expect("UTF-8");
        let size = usize::from_str_radix(size_line.trim(), 16).expect("a chunk size");
        if size == 0 {
            assert_eq!(conn.read_line(), b"\r", "no trailer");
            return body;
        }
        body.extend_from_slice(&conn.read_exact_bytes(size));
        assert_eq!(conn.read_exact_bytes(2), b"\r\n");
    }
}

#[test]
fn hostile_bodies_get_errors_and_the_server_serves_on() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"data":"{}"}}}}}}"#,
            "x".repeat(4 << 20)
        );
        let hostile: Vec<String> = vec![
            "[]".into(),
            "[1,2,3]".into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":"x"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.into(),
            "\u{0}\u{1}".into(),
        ];
        for body in &hostile {
            let response =
                Conn::to(&server).roundtrip(&mcp_request("POST", &[("MCP-Protocol-Version", "2025-03-26")], body));
            assert!(
                [200, 400, 413].contains(&response.status),
                "{}: {response:?}",
                &body[..body.len().min(80)]
            );
            if response.status != 413 {
                let reply: Value = serde_json::from_slice(&response.body).expect("a JSON reply");
                assert!(
                    reply.get("error").is_some() || reply.is_array() || reply["result"]["isError"] == true,
                    "{reply}"
                );
            }
        }
        // Large arguments: refused by the body limit, or echoed whole. 4 MiB in and 8 MiB
        // out (the result twice: structured, and as the text block's JSON) take an
        // unoptimized build 0.7 s on an idle core and 3.4 s sharing one with two others
        // (measured): the 5 s a small exchange is given would fail it on a loaded host.
        let mut conn = Conn::to(&server);
        conn.patience = Duration::from_secs(30);
        conn.stream
            .set_write_timeout(Some(conn.patience))
            .expect("set a write time-out");
        let response = conn.roundtrip(&mcp_request("POST", &[], &huge));
        if response.status == 200 {
            let reply: Value = serde_json::from_slice(&response.body).expect("a JSON reply");
            let echoed = reply["result"]["structuredContent"]["result"]
                .as_str()
                .unwrap_or_default();
            assert_eq!(echoed.len(), 4 << 20);
        } else {
            assert_eq!(response.status, 413, "{response:?}");
        }
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert_eq!(Conn::to(&server).roundtrip(&mcp_request("POST", &[], body)).status, 200);
    });
}

#[test]
fn metrics_and_the_request_log_count_tool_calls_under_the_tool_name() {
    for_each_engine(|engine| {
        let path = std::env::temp_dir().join(format!("ucall-mcp-log-{}-{}", std::process::id(), engine.name()));
        let log = ucall_core::RequestLog::open(&path, ucall_core::LogFormat::Json).expect("open the log");
        let server = common::start(
            engine,
            common::builder(engine).mcp(McpSettings::default()).request_log(log),
        );
        let mut conn = Conn::to(&server);
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subtract","arguments":{"minuend":5,"subtrahend":3}}}"#;
        assert_eq!(conn.roundtrip(&mcp_request("POST", &[], body)).status, 200);
        let page = String::from_utf8(conn.roundtrip(&common::get("/metrics")).body).expect("UTF-8");
        let started = page
            .lines()
            .find_map(|line| line.strip_prefix("ucall_calls_started_total{method=\"subtract\"} "))
            .and_then(|value| value.parse::<f64>().ok());
        assert_eq!(started, Some(1.0), "{page}");
        drop(conn);
        server.stop();
        let text = std::fs::read_to_string(&path).expect("the log");
        let _ = std::fs::remove_file(&path);
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect();
        let line = lines
            .iter()
            .find(|line| line["method"] == "subtract")
            .unwrap_or_else(|| panic!("no line for the tool call in {text}"));
        assert_eq!(line["id"], 1, "{line}");
        assert_eq!(line["code"], 0, "{line}");
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(line["bytes_in"], body.len(), "{line}");
    });
}
