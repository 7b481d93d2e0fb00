// SPDX-License-Identifier: Apache-2.0
//! MCP sessions over loopback (docs/mcp.md "Sessions"), as the session-era Streamable HTTP
//! transport says (2025-03-26 .. 2025-11-25 "Session Management"): an `Mcp-Session-Id`
//! issued with the `initialize` result, 400 without it, 404 for one unknown or ended,
//! `DELETE` ending it; GET refused with 405; and a `notifications/cancelled` posted on
//! another connection reaching the tool call it names, and only it, as its caller gone,
//! with no response sent for it (MCP "Cancellation": "Receivers of cancellation
//! notifications SHOULD ... Not send a response for the cancelled request").

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{for_each_engine, Conn, Response};
use serde_json::{json, Value};
use ucall_core::{Call, EngineKind, McpSettings, Reply, ServerHandle};

/// A server whose tool `wait` answers, from another thread, once its caller has gone (or
/// after `ms`, 10 s unless given), saying which, and reports it on `seen`; and whose tool
/// `ticks` streams items until its caller has gone.
fn serve(engine: EngineKind, sessions: bool, seen: mpsc::Sender<bool>) -> ServerHandle {
    let seen = std::sync::Mutex::new(seen);
    let builder = common::builder(engine)
        .mcp(McpSettings {
            sessions,
            ..McpSettings::default()
        })
        .handler("wait", move |call: &Call<'_>, reply: &mut Reply<'_>| {
            let ms = call.params().named("ms").and_then(|ms| ms.as_i64()).unwrap_or(10_000);
            let caller = call.context().caller();
            let deferred = reply.defer()?;
            let seen = seen.lock().expect("not poisoned").clone();
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_millis(ms.unsigned_abs());
                while !caller.is_gone() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = seen.send(caller.is_gone());
                deferred.json(&json!({"gone": caller.is_gone()}));
            });
            Ok(())
        })
        .handler("ticks", |_: &Call<'_>, reply: &mut Reply<'_>| {
            let stream = reply.stream()?;
            std::thread::spawn(move || {
                let mut sent = 0u64;
                while sent < 2_000 && stream.send_item(&sent).is_ok() {
                    sent += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                stream.json(&sent);
            });
            Ok(())
        });
    common::start(engine, builder)
}

/// `method` on `/mcp` with `headers` and `body`, in protocol revision 2025-06-18 unless
/// `headers` name another.
fn request(method: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let named = headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("mcp-protocol-version"));
    let revision = [("MCP-Protocol-Version", "2025-06-18")];
    let headers = [if named { &[][..] } else { &revision[..] }, headers].concat();
    common::mcp_request(method, &headers, body)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

fn call_wait(id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"wait","arguments":{{}}}}}}"#)
}

fn call_wait_for(id: u32, ms: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"wait","arguments":{{"ms":{ms}}}}}}}"#
    )
}

fn cancel(id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"user"}}}}"#)
}

/// The reply to a cancelled request: no response, so an event stream with no event.
fn assert_no_response(response: &Response) {
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.header("content-type"),
        Some("text/event-stream"),
        "{response:?}"
    );
    assert!(response.body.is_empty(), "{response:?}");
}

/// A streamed reply's head: its status line and fields.
fn read_head(conn: &mut Conn) -> Vec<String> {
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

/// The next chunk of a chunked body; `None` for its last chunk.
fn read_chunk(conn: &mut Conn) -> Option<Vec<u8>> {
    let size_line = String::from_utf8(conn.read_line()).expect("UTF-8");
    let size = usize::from_str_radix(size_line.trim(), 16).expect("a chunk size");
    if size == 0 {
        assert_eq!(conn.read_line(), b"\r", "no trailer");
        return None;
    }
    let chunk = conn.read_exact_bytes(size);
    assert_eq!(conn.read_exact_bytes(2), b"\r\n");
    Some(chunk)
}

fn structured(response: &Response) -> Value {
    let reply: Value = serde_json::from_slice(&response.body).expect("a JSON reply");
    reply["result"]["structuredContent"].clone()
}

/// Open a session: its id.
fn initialize(server: &ServerHandle) -> String {
    let response = Conn::to(server).roundtrip(&request("POST", &[], INITIALIZE));
    assert_eq!(response.status, 200, "{response:?}");
    let session = response.header("mcp-session-id").expect("a session id").to_string();
    assert!(
        session.len() == 32 && session.bytes().all(|b| b.is_ascii_hexdigit()),
        "{session}"
    );
    session
}

#[test]
fn a_session_is_issued_checked_and_ended() {
    for_each_engine(|engine| {
        let (seen, _) = mpsc::channel();
        let server = serve(engine, true, seen);
        let session = initialize(&server);
        assert_ne!(initialize(&server), session, "each initialize opens its own");
        let mut conn = Conn::to(&server);
        let without = conn.roundtrip(&request("POST", &[], LIST));
        assert_eq!(without.status, 400, "{without:?}");
        let unknown = conn.roundtrip(&request("POST", &[("Mcp-Session-Id", "0f0f")], LIST));
        assert_eq!(unknown.status, 404, "{unknown:?}");
        let with = [("Mcp-Session-Id", session.as_str())];
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(conn.roundtrip(&request("POST", &with, initialized)).status, 202);
        let listed = conn.roundtrip(&request("POST", &with, LIST));
        assert_eq!(listed.status, 200, "{listed:?}");
        let reply: Value = serde_json::from_slice(&listed.body).expect("JSON");
        assert!(reply["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()));
        // GET opens no stream of the server's own messages: 405, naming what is taken.
        let get = conn.roundtrip(&request("GET", &with, ""));
        assert_eq!(get.status, 405, "{get:?}");
        assert_eq!(get.header("allow"), Some("POST, DELETE, OPTIONS"));
        // The stateless revision has no sessions: served without one.
        let modern = r#"{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let discovered = conn.roundtrip(&request(
            "POST",
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "server/discover"),
            ],
            modern,
        ));
        assert_eq!(discovered.status, 200, "{discovered:?}");
        // DELETE ends it; then it is unknown.
        assert_eq!(conn.roundtrip(&request("DELETE", &[], "")).status, 400);
        assert_eq!(conn.roundtrip(&request("DELETE", &with, "")).status, 204);
        let ended = conn.roundtrip(&request("POST", &with, LIST));
        assert_eq!(ended.status, 404, "{ended:?}");
        assert_eq!(conn.roundtrip(&request("DELETE", &with, "")).status, 404);
    });
}

#[test]
fn without_sessions_every_request_stands_alone() {
    for_each_engine(|engine| {
        let (seen, _) = mpsc::channel();
        let server = serve(engine, false, seen);
        let mut conn = Conn::to(&server);
        // The /docs page names the endpoint, for people who point an agent at it.
        let docs = conn.roundtrip(b"GET /docs HTTP/1.1\r\nHost: x\r\n\r\n");
        let html = String::from_utf8(docs.body).expect("UTF-8");
        assert!(
            html.contains("\"mcpPath\":\"/mcp\""),
            "{}",
            &html[..200.min(html.len())]
        );
        let initialized = conn.roundtrip(&request("POST", &[], INITIALIZE));
        assert_eq!(initialized.status, 200);
        assert_eq!(initialized.header("mcp-session-id"), None);
        assert_eq!(conn.roundtrip(&request("POST", &[], LIST)).status, 200);
        let delete = conn.roundtrip(&request("DELETE", &[("Mcp-Session-Id", "0f0f")], ""));
        assert_eq!(delete.status, 405, "{delete:?}");
        assert_eq!(delete.header("allow"), Some("POST, OPTIONS"));
        // Elsewhere DELETE is refused as before, with what the target takes.
        let elsewhere = Conn::to(&server).roundtrip(b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(elsewhere.status, 405, "{elsewhere:?}");
        assert_eq!(elsewhere.header("allow"), Some("POST, OPTIONS"));
    });
}

#[test]
fn a_cancellation_in_the_session_reaches_the_call_as_its_caller_gone() {
    for_each_engine(|engine| {
        let (seen_tx, seen) = mpsc::channel();
        let server = serve(engine, true, seen_tx);
        let (session, other) = (initialize(&server), initialize(&server));
        let with = [("Mcp-Session-Id", session.as_str())];
        let mut calling = Conn::to(&server);
        calling.send(&request("POST", &with, &call_wait(9)));
        let mut notifying = Conn::to(&server);
        // Another session's, or another id's, cancellation leaves the call alone.
        let others = [("Mcp-Session-Id", other.as_str())];
        assert_eq!(notifying.roundtrip(&request("POST", &others, &cancel(9))).status, 202);
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(8))).status, 202);
        assert!(
            seen.recv_timeout(Duration::from_millis(300)).is_err(),
            "not cancelled yet"
        );
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(9))).status, 202);
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(5)),
            Ok(true),
            "the caller is gone"
        );
        // The handler answered, but the client cancelled: no response is sent.
        assert_no_response(&calling.read_response());
        // The connection goes on, and its next call's caller is there.
        calling.send(&request("POST", &with, &call_wait(10)));
        assert!(
            seen.recv_timeout(Duration::from_millis(300)).is_err(),
            "a later call is not cancelled"
        );
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(10))).status, 202);
        assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(true));
        assert_no_response(&calling.read_response());
        // Once answered, a call is no longer under way: its cancellation changes nothing.
        calling.send(&request("POST", &with, &call_wait_for(11, 50)));
        assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(false));
        let answered = calling.read_response();
        assert_eq!(structured(&answered), json!({"gone": false}), "{answered:?}");
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(11))).status, 202);
    });
}

#[test]
fn a_cancellation_reaches_only_the_call_it_names_on_a_shared_connection() {
    for_each_engine(|engine| {
        let (seen_tx, seen) = mpsc::channel();
        let server = serve(engine, true, seen_tx);
        let session = initialize(&server);
        let with = [("Mcp-Session-Id", session.as_str())];
        // Two calls under way on one connection (pipelined): cancel the first.
        let mut calling = Conn::to(&server);
        let mut both = request("POST", &with, &call_wait(21));
        both.extend_from_slice(&request("POST", &with, &call_wait_for(22, 1_500)));
        calling.send(&both);
        std::thread::sleep(Duration::from_millis(100));
        let mut notifying = Conn::to(&server);
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(21))).status, 202);
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(5)),
            Ok(true),
            "21 saw its cancellation"
        );
        assert_no_response(&calling.read_response());
        // The other ran on, its caller there, and answers with its result.
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(5)),
            Ok(false),
            "22 ran to its end"
        );
        let answered = calling.read_response();
        assert_eq!(answered.status, 200, "{answered:?}");
        assert_eq!(structured(&answered), json!({"gone": false}), "{answered:?}");

        // The same in one JSON-RPC batch (2025-03-26): the reply holds only the other's.
        let batched = [
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-03-26"),
        ];
        let batch = format!("[{},{}]", call_wait(31), call_wait_for(32, 1_500));
        calling.send(&request("POST", &batched, &batch));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(31))).status, 202);
        assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(true));
        assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(false));
        let reply = calling.read_response();
        assert_eq!(reply.status, 200, "{reply:?}");
        let replies: Value = serde_json::from_slice(&reply.body).expect("a JSON batch reply");
        assert_eq!(replies.as_array().map(Vec::len), Some(1), "{replies}");
        assert_eq!(replies[0]["id"], 32, "{replies}");
        assert_eq!(replies[0]["result"]["structuredContent"], json!({"gone": false}));
    });
}

#[test]
fn a_cancelled_progress_stream_ends_without_a_result() {
    for_each_engine(|engine| {
        let (seen, _) = mpsc::channel();
        let server = serve(engine, true, seen);
        let session = initialize(&server);
        let with = [("Mcp-Session-Id", session.as_str())];
        let mut calling = Conn::to(&server);
        let call = r#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"ticks","arguments":{},"_meta":{"progressToken":"p"}}}"#;
        calling.send(&request("POST", &with, call));
        let head = read_head(&mut calling);
        assert!(head[0].starts_with("HTTP/1.1 200"), "{head:?}");
        assert!(
            head.iter()
                .any(|line| line.eq_ignore_ascii_case("content-type: text/event-stream")),
            "{head:?}"
        );
        let first = read_chunk(&mut calling).expect("a first event");
        assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
        assert_eq!(
            Conn::to(&server).roundtrip(&request("POST", &with, &cancel(41))).status,
            202
        );
        // The stream ends (its last chunk) with progress events only, and soon: no
        // response, and no progress once the cancellation is in.
        let mut rest = Vec::new();
        while let Some(chunk) = read_chunk(&mut calling) {
            rest.extend_from_slice(&chunk);
        }
        let rest = String::from_utf8(rest).expect("UTF-8 events");
        assert!(!rest.contains("\"result\""), "{rest}");
        assert!(!rest.contains("\"id\":41"), "{rest}");
        assert!(rest.matches("notifications/progress").count() < 200, "{rest}");
        // The connection goes on.
        let listed = calling.roundtrip(&request("POST", &with, LIST));
        assert_eq!(listed.status, 200, "{listed:?}");
    });
}

#[test]
fn without_sessions_a_posted_cancellation_names_nobody_and_a_closed_stream_cancels() {
    for_each_engine(|engine| {
        let (seen_tx, seen) = mpsc::channel();
        let server = serve(engine, false, seen_tx);
        // Without a session, request ids are only the client's own (every client counts
        // from 0 or 1): the notification cannot say whose call it means, so it reaches none.
        let mut calling = Conn::to(&server);
        calling.send(&request("POST", &[], &call_wait_for(5, 800)));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            Conn::to(&server).roundtrip(&request("POST", &[], &cancel(5))).status,
            202
        );
        assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(false), "ran to its end");
        let answered = calling.read_response();
        assert_eq!(structured(&answered), json!({"gone": false}), "{answered:?}");
        // Closing the stream is how such a client cancels: the handler sees its caller gone.
        let mut closing = Conn::to(&server);
        closing.send(&request("POST", &[], &call_wait(6)));
        std::thread::sleep(Duration::from_millis(100));
        drop(closing);
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(5)),
            Ok(true),
            "saw its caller gone"
        );
        assert_eq!(calling.roundtrip(&request("POST", &[], LIST)).status, 200);
    });
}
