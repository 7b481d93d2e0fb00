// SPDX-License-Identifier: Apache-2.0
//! `ServerBuilder::trace_calls` (cargo feature `tracing`): one span per call with the
//! OpenTelemetry conventions' attributes and the caller's trace context, the handler's own
//! spans its children, seen through a `tracing-subscriber` layer that records them.

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock};

use common::Conn;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use ucall_core::{EngineKind, RpcError};

/// A span as the layer saw it: its name, fields and parent's name.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    fields: BTreeMap<String, String>,
    parent: Option<String>,
    id: u64,
    parent_id: Option<u64>,
}

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'l> LookupSpan<'l>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_owned(),
            id: id.into_u64(),
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        if let Some(parent) = ctx.span(id).and_then(|span| span.parent()) {
            seen.parent = Some(parent.name().to_owned());
            seen.parent_id = Some(parent.id().into_u64());
        }
        self.0.lock().expect("not poisoned").push(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut all = self.0.lock().expect("not poisoned");
        if let Some(seen) = all.iter_mut().rev().find(|seen| seen.id == id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

/// The process's recorder: the server's workers run on threads of their own.
fn recorder() -> &'static Recorder {
    static RECORDER: OnceLock<Recorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = Recorder::default();
        let subscriber = tracing_subscriber::registry().with(recorder.clone());
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        recorder
    })
}

fn post(body: &str, fields: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\n{fields}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_span_per_call_with_the_conventions_and_the_callers_trace() {
    let recorder = recorder();
    let engine = EngineKind::Poll;
    let builder = common::builder(engine)
        .trace_calls()
        .procedure("work", |_call| {
            let _inner = tracing::info_span!("inner_work").entered();
            Ok(1)
        })
        .procedure("fail", |_call| -> Result<i64, RpcError> {
            Err(RpcError::new(-32001, "no"))
        });
    let server = common::start(engine, builder);
    let mut http = Conn::to(&server);
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let reply = http.roundtrip(&post(
        r#"{"jsonrpc":"2.0","method":"work","id":"w-1"}"#,
        &format!("traceparent: {parent}\r\n"),
    ));
    assert_eq!(reply.status, 200);
    let mut tcp = Conn::to(&server);
    tcp.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"fail\",\"id\":2,\"_meta\":{\"traceparent\":\"bad\"}}\n");
    let line = tcp.read_line();
    assert!(String::from_utf8_lossy(&line).contains("-32001"));

    let seen = recorder.0.lock().expect("not poisoned").clone();
    let work = seen
        .iter()
        .find(|s| s.name == "jsonrpc" && s.fields.get("rpc.method").map(String::as_str) == Some("work"))
        .unwrap_or_else(|| panic!("no span for work: {seen:#?}"));
    let field = |seen: &Seen, name: &str| seen.fields.get(name).cloned().unwrap_or_default();
    assert_eq!(field(work, "otel.kind"), "server");
    assert_eq!(field(work, "otel.name"), "work");
    assert_eq!(field(work, "rpc.system"), "jsonrpc");
    assert_eq!(field(work, "rpc.jsonrpc.request_id"), "w-1");
    assert_eq!(field(work, "network.protocol.name"), "http");
    assert_eq!(field(work, "network.peer.address"), "127.0.0.1");
    assert_eq!(field(work, "trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(field(work, "parent_span_id"), "00f067aa0ba902b7");
    assert!(!work.fields.contains_key("rpc.jsonrpc.error_code"), "{work:?}");
    let inner = seen
        .iter()
        .find(|s| s.name == "inner_work")
        .unwrap_or_else(|| panic!("no handler span: {seen:#?}"));
    assert_eq!(
        inner.parent_id,
        Some(work.id),
        "the handler's span is the call's child: {inner:?}"
    );
    assert_eq!(inner.parent.as_deref(), Some("jsonrpc"));

    let fail = seen
        .iter()
        .find(|s| s.fields.get("rpc.method").map(String::as_str) == Some("fail"))
        .unwrap_or_else(|| panic!("no span for fail: {seen:#?}"));
    assert_eq!(field(fail, "rpc.jsonrpc.error_code"), "-32001");
    assert_eq!(field(fail, "otel.status_code"), "ERROR");
    assert_eq!(field(fail, "network.protocol.name"), "tcp");
    assert!(
        !fail.fields.contains_key("trace_id"),
        "a malformed traceparent is ignored: {fail:?}"
    );
}

/// The nanoseconds `field` of the span of the call of `method` says.
fn nanos(seen: &[Seen], method: &str, field: &str) -> u64 {
    let span = seen
        .iter()
        .find(|s| s.fields.get("rpc.method").map(String::as_str) == Some(method))
        .unwrap_or_else(|| panic!("no span for {method}: {seen:#?}"));
    let value = span.fields.get(field).unwrap_or_else(|| panic!("no {field}: {span:?}"));
    value.parse().unwrap_or_else(|_| panic!("{field} = {value:?}"))
}

#[test]
fn spans_say_how_long_a_call_was_queued_and_in_its_handler() {
    let recorder = recorder();
    let engine = EngineKind::Poll;
    let builder = common::builder(engine)
        .trace_calls()
        .procedure("slow_step", |_call| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            Ok(1)
        })
        .procedure("quick_step", |_call| Ok(2));
    let server = common::start(engine, builder);
    // In one batch, the quick call waits for the slow one before it: queued that long.
    let batch = r#"[{"jsonrpc":"2.0","method":"slow_step","id":1},{"jsonrpc":"2.0","method":"quick_step","id":2}]"#;
    assert_eq!(Conn::to(&server).roundtrip(&post(batch, "")).status, 200);
    let seen = recorder.0.lock().expect("not poisoned").clone();
    let nanos = |method: &str, field: &str| nanos(&seen, method, field);
    let ms = 1_000_000;
    assert!(nanos("slow_step", "ucall.handler_ns") >= 30 * ms);
    assert!(nanos("slow_step", "ucall.queued_ns") < 30 * ms);
    assert!(
        nanos("quick_step", "ucall.queued_ns") >= 30 * ms,
        "it waited behind slow_step"
    );
    assert!(nanos("quick_step", "ucall.handler_ns") < 30 * ms);
}

/// A result whose serialization takes 30 ms: the time spent writing the reply.
struct SlowToWrite;

impl serde::Serialize for SlowToWrite {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        std::thread::sleep(std::time::Duration::from_millis(30));
        serializer.serialize_str("written")
    }
}

#[test]
fn spans_say_how_long_writing_the_reply_took_apart_from_the_handler() {
    let recorder = recorder();
    let engine = EngineKind::Poll;
    let builder = common::builder(engine)
        .trace_calls()
        .procedure("slow_to_write", |_call| Ok(SlowToWrite))
        .procedure("slow_to_run", |_call| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            Ok(3)
        });
    let server = common::start(engine, builder);
    for method in ["slow_to_write", "slow_to_run"] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"{method}","id":1}}"#);
        assert_eq!(Conn::to(&server).roundtrip(&post(&body, "")).status, 200);
    }
    let seen = recorder.0.lock().expect("not poisoned").clone();
    let nanos = |method: &str, field: &str| nanos(&seen, method, field);
    let ms = 1_000_000;
    assert!(nanos("slow_to_write", "ucall.reply_ns") >= 30 * ms);
    assert!(nanos("slow_to_write", "ucall.handler_ns") < 30 * ms);
    assert!(nanos("slow_to_run", "ucall.handler_ns") >= 30 * ms);
    assert!(nanos("slow_to_run", "ucall.reply_ns") < 30 * ms);
}
