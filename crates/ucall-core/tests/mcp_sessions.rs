// SPDX-License-Identifier: Apache-2.0
//! MCP sessions over loopback (docs/mcp.md "Sessions"), as the session-era Streamable HTTP
//! transport says (2025-03-26 .. 2025-11-25 "Session Management"): an `Mcp-Session-Id`
//! issued with the `initialize` result, 400 without it, 404 for one unknown or ended,
//! `DELETE` ending it; GET refused with 405; and a `notifications/cancelled` posted on
//! another connection reaching the tool call it names as its caller gone.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{for_each_engine, Conn, Response};
use serde_json::{json, Value};
use ucall_core::{Call, EngineKind, McpSettings, Reply, ServerHandle};

/// A server whose tool `wait` answers, from another thread, once its caller has gone (or
/// after 10 s), saying which, and reports it on `seen`.
fn serve(engine: EngineKind, sessions: bool, seen: mpsc::Sender<bool>) -> ServerHandle {
    let seen = std::sync::Mutex::new(seen);
    let builder = common::builder(engine)
        .mcp(McpSettings {
            sessions,
            ..McpSettings::default()
        })
        .handler("wait", move |call: &Call<'_>, reply: &mut Reply<'_>| {
            let caller = call.context().caller();
            let deferred = reply.defer()?;
            let seen = seen.lock().expect("not poisoned").clone();
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(10);
                while !caller.is_gone() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = seen.send(caller.is_gone());
                deferred.json(&json!({"gone": caller.is_gone()}));
            });
            Ok(())
        });
    common::start(engine, builder)
}

/// `method` on `/mcp` with `headers` and `body`.
fn request(method: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut request = format!("{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n");
    request.push_str("Accept: application/json, text/event-stream\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("mcp-protocol-version"))
    {
        request.push_str("MCP-Protocol-Version: 2025-06-18\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    request.into_bytes()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

fn call_wait(id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"wait","arguments":{{}}}}}}"#)
}

fn cancel(id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"user"}}}}"#)
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
        let reply = calling.read_response();
        assert_eq!(structured(&reply), json!({"gone": true}), "{reply:?}");
        // The connection goes on, and its next call's caller is there.
        calling.send(&request("POST", &with, &call_wait(10)));
        assert!(
            seen.recv_timeout(Duration::from_millis(300)).is_err(),
            "a later call is not cancelled"
        );
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(10))).status, 202);
        assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(true));
        assert_eq!(structured(&calling.read_response()), json!({"gone": true}));
        // Once answered, a call is no longer under way: its cancellation changes nothing.
        assert_eq!(notifying.roundtrip(&request("POST", &with, &cancel(10))).status, 202);
    });
}
