// SPDX-License-Identifier: Apache-2.0
//! The stream vectors of `tests/vectors/streams` (docs/streaming.md; format in
//! `tests/vectors/README.md`, "Stream vectors") over raw TCP on each engine: to a JSON
//! line, items as JSON lines in their plain form; to a binary message, items with arrays as
//! binary messages of their own. Then an ordinary call on the same connection. (The Python
//! suite runs the same files over HTTP and WebSocket too.)

mod common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use ucall_core::wire::{self, Prefix, PREFIX_LEN};

use common::{for_each_engine, Conn};

struct StreamVector {
    name: String,
    request: String,
    /// Items as a caller taking attachments reads them, each with its section (`None`: a
    /// JSON line).
    items: Vec<(Value, Option<Vec<u8>>)>,
    /// Items as a plain caller reads them.
    plain_items: Vec<Value>,
    reply: Value,
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digits"))
        .collect()
}

fn load_all() -> Vec<StreamVector> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/streams");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the stream vector folder")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let vectors: Vec<StreamVector> = paths
        .iter()
        .map(|path| {
            let file: Value = serde_json::from_slice(&std::fs::read(path).expect("read a vector")).expect("JSON");
            let items = file["items"].as_array().expect("items").clone();
            let sections: Vec<Option<Vec<u8>>> = match file.get("item_attachments") {
                Some(Value::Array(per_item)) => per_item
                    .iter()
                    .map(|parts| {
                        let parts = parts.as_array().expect("an item's attachments");
                        (!parts.is_empty()).then(|| {
                            let mut section = Vec::new();
                            for part in parts {
                                let offset = part["offset"].as_u64().expect("an offset") as usize;
                                let bytes = hex(part["hex"].as_str().expect("hex"));
                                section.resize(section.len().max(offset + bytes.len()), 0);
                                section[offset..offset + bytes.len()].copy_from_slice(&bytes);
                            }
                            section
                        })
                    })
                    .collect(),
                _ => vec![None; items.len()],
            };
            let plain_items = file
                .get("plain_items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_else(|| items.clone());
            StreamVector {
                name: path.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string(),
                request: file["request"].as_str().expect("request").to_string(),
                items: items.into_iter().zip(sections).collect(),
                plain_items,
                reply: file["reply"].clone(),
            }
        })
        .collect();
    assert!(vectors.len() >= 6, "only {} stream vectors", vectors.len());
    vectors
}

/// Whether `actual` has everything `expected` has: objects member by member, arrays and
/// scalars whole.
fn contains(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e.iter().all(|(k, v)| a.get(k).is_some_and(|av| contains(v, av))),
        (Value::Array(e), Value::Array(a)) => e.len() == a.len() && e.iter().zip(a).all(|(e, a)| contains(e, a)),
        _ => expected == actual,
    }
}

/// `value` with each placeholder replaced by the bytes it names in `section`: a server
/// may lay its section out in its own order (docs/wire.md §4).
fn named(value: &Value, section: &[u8]) -> Value {
    match value {
        Value::Object(members) if members.contains_key("$ucall") => {
            let offset = members["offset"].as_u64().unwrap_or(u64::MAX) as usize;
            let length = members["length"].as_u64().unwrap_or(0) as usize;
            let bytes = section.get(offset..offset.saturating_add(length));
            json!({"kind": members["$ucall"], "dtype": members.get("dtype"), "shape": members.get("shape"),
                   "bytes": bytes, "aligned": offset % wire::ALIGN == 0})
        }
        Value::Object(members) => Value::Object(members.iter().map(|(k, v)| (k.clone(), named(v, section))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(|v| named(v, section)).collect()),
        other => other.clone(),
    }
}

/// The next message on `conn`: a JSON line, or a binary message (JSON text and section).
fn read_message(conn: &mut Conn) -> (Value, Option<Vec<u8>>) {
    let first = conn.read_exact_bytes(1);
    if first[0] == wire::MAGIC {
        let mut head = first;
        head.extend(conn.read_exact_bytes(PREFIX_LEN - 1));
        let prefix = Prefix::parse(&head).expect("a prefix").expect("a whole prefix");
        let body = conn.read_exact_bytes(prefix.body_len as usize);
        let (text, section) = wire::split_body(&body, prefix.json_len).expect("a body");
        return (serde_json::from_slice(text).expect("JSON"), Some(section.to_vec()));
    }
    let mut line = first;
    line.extend(conn.read_line());
    (serde_json::from_slice(&line).expect("a JSON line"), None)
}

/// What is wrong with the stream that answered `vector` on `conn`, read as a binary
/// caller does (`binary`) or a plain one.
fn differences(vector: &StreamVector, conn: &mut Conn, binary: bool) -> Vec<String> {
    let call_id = serde_json::from_str::<Value>(&vector.request).expect("a request")["id"].clone();
    let mut problems = Vec::new();
    for (index, (item, section)) in vector.items.iter().enumerate() {
        let (message, got) = read_message(conn);
        let expected = if binary {
            item.clone()
        } else {
            vector.plain_items[index].clone()
        };
        let wanted = json!({"jsonrpc": "2.0", "method": "ucall.stream", "params": {"id": call_id, "item": expected}});
        let same = match (binary, section, &got) {
            (true, Some(section), Some(got)) => named(&wanted, section) == named(&message, got),
            (_, _, None) => !(binary && section.is_some()) && message == wanted,
            _ => false,
        };
        if !same {
            problems.push(format!("item {index}: {message} (section {got:?}), expected {wanted}"));
        }
    }
    let (reply, section) = read_message(conn);
    if !contains(&vector.reply, &reply) || section.is_some() {
        problems.push(format!("reply {reply}, expected {}", vector.reply));
    }
    problems
}

fn binary_message(json: &str) -> Vec<u8> {
    let mut message = Prefix::encode(json.len() as u32, json.len() as u64).to_vec();
    message.extend_from_slice(json.as_bytes());
    message
}

#[test]
fn stream_vectors_over_tcp_on_each_engine() {
    let vectors = load_all();
    for_each_engine(move |engine| {
        let server = common::serve(engine);
        let mut problems = Vec::new();
        for binary in [false, true] {
            let mut conn = Conn::to(&server);
            for vector in &vectors {
                if binary {
                    conn.send(&binary_message(&vector.request));
                } else {
                    conn.send(format!("{}\n", vector.request).as_bytes());
                }
                let found = differences(vector, &mut conn, binary);
                let how = if binary { "binary" } else { "lines" };
                problems.extend(
                    found
                        .into_iter()
                        .map(|p| format!("{engine:?} {how} {}: {p}", vector.name)),
                );
            }
            conn.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[40,2],\"id\":\"next\"}\n");
            let follow_up: Value = serde_json::from_slice(&conn.read_line()).expect("JSON");
            if follow_up != json!({"jsonrpc": "2.0", "id": "next", "result": 42}) {
                problems.push(format!("{engine:?}: the follow-up {follow_up}"));
            }
        }
        server.stop();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    });
}
