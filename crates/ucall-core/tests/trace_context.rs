// SPDX-License-Identifier: Apache-2.0
//! W3C trace context: the shared vectors (`tests/vectors/tracecontext/`) through the
//! parser, and over loopback on every engine and transport as a handler reads it through
//! `Call::context().trace()`: the HTTP header fields, the WebSocket upgrade request's, and
//! the request's `"_meta"` member (raw TCP, WebSocket messages, each call of a batch).

mod common;

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use common::{show, Conn};
use serde_json::{json, Value as Json};
use ucall_core::trace_context::{is_valid_tracestate, TraceContext, TraceParent};
use ucall_core::{Call, EngineKind, ServerHandle};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

fn vectors(name: &str) -> Vec<Json> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/tracecontext")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: Json = serde_json::from_str(&text).expect("a vector file is JSON");
    file["cases"].as_array().expect("cases").clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn traceparent_vectors() {
    let mut failures = Vec::new();
    for case in vectors("traceparent.json") {
        let value = case["value"].as_str().expect("value");
        let parsed = TraceParent::parse(value.as_bytes());
        let expected = case["valid"].as_bool().expect("valid");
        let ok = match parsed {
            None => !expected,
            Some(parent) => {
                expected
                    && hex(&parent.trace_id) == case["trace_id"]
                    && hex(&parent.parent_id) == case["parent_id"]
                    && case["sampled"] == parent.is_sampled()
            }
        };
        if !ok {
            failures.push(format!("{value:?} ({}): got {parsed:?}", case["note"]));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn tracestate_vectors() {
    let parent = TraceParent::parse(PARENT.as_bytes()).expect("valid");
    let mut failures = Vec::new();
    for case in vectors("tracestate.json") {
        let value = case["value"].as_str().expect("value");
        let expected = case["valid"].as_bool().expect("valid");
        let kept = TraceContext::new(parent, Some(Cow::Borrowed(value))).tracestate;
        if is_valid_tracestate(value) != expected || kept.is_some() != expected {
            failures.push(format!("{value:?} ({}): kept {kept:?}", case["note"]));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `trace` answers the trace context its call carries, or null.
fn serve(engine: EngineKind) -> ServerHandle {
    let builder = common::builder(engine)
        .keep_context()
        .procedure("trace", |call: &Call<'_>| {
            Ok(call.context().trace().map(|trace| {
                json!({
                    "trace_id": hex(&trace.parent.trace_id),
                    "parent_id": hex(&trace.parent.parent_id),
                    "sampled": trace.parent.is_sampled(),
                    "tracestate": trace.tracestate.as_deref(),
                })
            }))
        });
    common::start(engine, builder)
}

fn results(reply: &[u8]) -> Vec<Json> {
    let reply: Json = serde_json::from_slice(reply).unwrap_or_else(|e| panic!("{e}: {}", show(reply)));
    let all = match reply {
        Json::Array(all) => all,
        one => vec![one],
    };
    all.into_iter()
        .map(|r| r.get("result").cloned().unwrap_or_else(|| panic!("no result in {r}")))
        .collect()
}

fn request(id: u32, meta: Option<Json>) -> String {
    let mut request = json!({"jsonrpc": "2.0", "method": "trace", "id": id});
    if let Some(meta) = meta {
        request["_meta"] = meta;
    }
    request.to_string()
}

fn post(body: &str, fields: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\n{fields}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn http_header_fields_carry_the_context() {
    common::for_each_engine(|engine| {
        let server = serve(engine);
        let mut http = Conn::to(&server);
        let reply = http.roundtrip(&post(
            &request(1, None),
            &format!("traceparent: {PARENT}\r\ntracestate: a=1\r\ntracestate: b=2\r\n"),
        ));
        assert_eq!(
            results(&reply.body),
            [
                json!({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "parent_id": "00f067aa0ba902b7",
                    "sampled": true, "tracestate": "a=1,b=2"})
            ]
        );
        // Ignored, never an error: a malformed value, two traceparent fields, none at all.
        for fields in [
            "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1\r\ntracestate: a=1\r\n".to_owned(),
            format!("traceparent: {PARENT}\r\ntraceparent: {OTHER}\r\n"),
            String::new(),
        ] {
            let reply = http.roundtrip(&post(&request(2, None), &fields));
            assert_eq!(reply.status, 200, "{reply:?}");
            assert_eq!(results(&reply.body), [Json::Null], "{fields}");
        }
        // An invalid tracestate alone is dropped.
        let reply = http.roundtrip(&post(
            &request(3, None),
            &format!("Traceparent: {PARENT}\r\nTracestate: A=1\r\n"),
        ));
        assert_eq!(results(&reply.body)[0]["tracestate"], Json::Null);
        assert_eq!(results(&reply.body)[0]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    });
}

#[test]
fn each_call_of_a_batch_has_its_own_meta_over_the_header() {
    common::for_each_engine(|engine| {
        let server = serve(engine);
        let mut http = Conn::to(&server);
        let batch = format!(
            "[{},{},{},{}]",
            request(1, Some(json!({"traceparent": OTHER, "tracestate": "x=y"}))),
            request(2, None),
            request(3, Some(json!({"traceparent": "garbage"}))),
            request(4, Some(json!("not an object"))),
        );
        let reply = http.roundtrip(&post(&batch, &format!("traceparent: {PARENT}\r\n")));
        let got: Vec<Json> = results(&reply.body)
            .into_iter()
            .map(|r| r["trace_id"].clone())
            .collect();
        // A `_meta` without a valid traceparent leaves the message's header in force.
        assert_eq!(
            got,
            [
                "0af7651916cd43dd8448eb211c80319c",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "4bf92f3577b34da6a3ce929d0e0e4736"
            ]
        );
    });
}

#[test]
fn raw_tcp_and_websocket_carry_it_per_message_and_in_the_upgrade() {
    common::for_each_engine(|engine| {
        let server = serve(engine);
        let mut tcp = Conn::to(&server);
        tcp.send(
            format!(
                "{}\n{}\n",
                request(1, Some(json!({"traceparent": PARENT}))),
                request(2, None)
            )
            .as_bytes(),
        );
        assert_eq!(results(&tcp.read_line())[0]["parent_id"], "00f067aa0ba902b7");
        assert_eq!(results(&tcp.read_line()), [Json::Null]);

        let mut ws = Conn::to(&server);
        let mut bytes = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\ntraceparent: {PARENT}\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .into_bytes();
        bytes.extend_from_slice(&common::ws_text(&request(1, None)));
        bytes.extend_from_slice(&common::ws_text(&request(2, Some(json!({"traceparent": OTHER})))));
        bytes.extend_from_slice(&[0x88, 0x80, 0, 0, 0, 0]);
        ws.send(&bytes);
        assert_eq!(ws.read_response().status, 101);
        let frames = ws
            .read_until_closed(Duration::from_secs(3))
            .unwrap_or_else(|got| panic!("still open after Close: {}", show(&got)));
        let mut at = 0;
        let mut seen = Vec::new();
        while at < frames.len() && frames[at] == 0x81 {
            // Replies here are 126 to 65535 bytes long, or shorter (RFC 6455 §5.2).
            let (len, start) = match frames[at + 1] {
                126 => (
                    usize::from(u16::from_be_bytes([frames[at + 2], frames[at + 3]])),
                    at + 4,
                ),
                short => (usize::from(short), at + 2),
            };
            seen.push(results(&frames[start..start + len])[0]["trace_id"].clone());
            at = start + len;
        }
        assert_eq!(
            seen,
            ["4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"]
        );
    });
}
