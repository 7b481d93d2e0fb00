// SPDX-License-Identifier: Apache-2.0
//! The reply vectors of `tests/vectors/binary/replies` (docs/wire.md; format in
//! `tests/vectors/README.md`, "Binary replies"): results with attachments, answered as a
//! binary message to a caller that accepts one and in their plain JSON form to any other,
//! over raw TCP, HTTP and WebSocket, in memory and over loopback on each engine.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;
use ucall_core::buffer::OutBuf;
use ucall_core::session::{Scratch, Session};
use ucall_core::wire::{self, Prefix, PREFIX_LEN};
use ucall_core::Limits;

use common::{show, ws_frame, ws_server_frame, Conn};

/// One reply vector.
struct ReplyVector {
    name: String,
    /// The request's JSON text.
    json: String,
    /// The reply expected from a caller that accepts binary replies; `None`: no reply.
    reply: Option<Value>,
    /// Its attachment section (zeros where no attachment is); `None`: a plain JSON reply.
    section: Option<Vec<u8>>,
    /// The reply a plain JSON caller gets.
    plain_reply: Option<Value>,
    /// A procedure defers its reply: only a server with an engine answers it.
    deferred: bool,
}

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/binary/replies")
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digits"))
        .collect()
}

fn load_all() -> Vec<ReplyVector> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(vector_dir())
        .expect("the reply vector folder")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let vectors: Vec<ReplyVector> = paths
        .iter()
        .map(|path| {
            let file: Value = serde_json::from_slice(&std::fs::read(path).expect("read a vector")).expect("JSON");
            let attachments = file["reply_attachments"].as_array().expect("reply_attachments");
            let section = (!attachments.is_empty()).then(|| {
                let mut section = Vec::new();
                for item in attachments {
                    let offset = item["offset"].as_u64().expect("an offset") as usize;
                    let bytes = hex(item["hex"].as_str().expect("hex"));
                    section.resize(section.len().max(offset + bytes.len()), 0);
                    section[offset..offset + bytes.len()].copy_from_slice(&bytes);
                }
                section
            });
            ReplyVector {
                name: path.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string(),
                json: file["json"].as_str().expect("json").to_string(),
                reply: Some(file["reply"].clone()).filter(|r| !r.is_null()),
                section,
                plain_reply: Some(file["plain_reply"].clone()).filter(|r| !r.is_null()),
                deferred: file["deferred"].as_bool().unwrap_or(false),
            }
        })
        .collect();
    assert!(vectors.len() >= 10, "only {} reply vectors", vectors.len());
    vectors
}

/// Whether `actual` has everything `expected` has: objects member by member (more
/// members allowed: an error's message), arrays and scalars whole.
fn contains(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e.iter().all(|(k, v)| a.get(k).is_some_and(|av| contains(v, av))),
        (Value::Array(e), Value::Array(a)) => e.len() == a.len() && e.iter().zip(a).all(|(e, a)| contains(e, a)),
        _ => expected == actual,
    }
}

/// What is wrong with a reply whose JSON text is `json` and section `section` (`None`:
/// a plain JSON reply), against `expected` and `expected_section`.
fn differences(
    expected: Option<&Value>,
    expected_section: Option<&[u8]>,
    json: &[u8],
    section: Option<&[u8]>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let expected = expected.map(|e| named(e, expected_section));
    match (
        serde_json::from_slice::<Value>(json).map(|a| named(&a, section)),
        expected.as_ref(),
    ) {
        (Ok(actual), Some(expected)) if contains(expected, &actual) => {}
        (Ok(actual), Some(expected)) => problems.push(format!("reply {actual}, expected {expected}")),
        (Err(e), _) => problems.push(format!("the reply is not JSON ({e}): {}", show(json))),
        (Ok(actual), None) => problems.push(format!("a reply where none was expected: {actual}")),
    }
    if section.is_some() != expected_section.is_some() {
        problems.push(format!(
            "section {:?}, expected {:?}",
            section.map(show),
            expected_section.map(show)
        ));
    }
    problems
}

/// `value` with each placeholder replaced by what it names (its kind, dtype, shape and
/// bytes as hex) in `section`: a server may place attachments in any order (docs/wire.md
/// §4), so replies are compared by what their placeholders name, not by offsets.
fn named(value: &Value, section: Option<&[u8]>) -> Value {
    match value {
        Value::Object(members) if members.contains_key("$ucall") && section.is_some() => {
            let section = section.unwrap_or_default();
            let offset = members["offset"].as_u64().unwrap_or(u64::MAX) as usize;
            let length = members["length"].as_u64().unwrap_or(0) as usize;
            let bytes = section.get(offset..offset.saturating_add(length));
            let hex: Option<String> = bytes.map(|b| b.iter().map(|b| format!("{b:02x}")).collect());
            serde_json::json!({
                "kind": members["$ucall"], "dtype": members.get("dtype"), "shape": members.get("shape"),
                "hex": hex, "aligned": offset % wire::ALIGN == 0,
            })
        }
        Value::Object(members) => Value::Object(members.iter().map(|(k, v)| (k.clone(), named(v, section))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(|v| named(v, section)).collect()),
        other => other.clone(),
    }
}

/// A binary message's body split into its JSON text and section, checking the padding.
fn split(body: &[u8], json_len: usize) -> Result<(&[u8], &[u8]), String> {
    let (json, section) = wire::split_body(body, json_len).map_err(|e| e.message().to_string())?;
    if body[json_len..wire::align(json_len).min(body.len())]
        .iter()
        .any(|&b| b != 0)
    {
        return Err("padding that is not zeros".into());
    }
    Ok((json, section))
}

/// The raw TCP message for a JSON text with no attachments (a caller that accepts binary
/// replies says so by sending one).
fn tcp_message(json: &str) -> Vec<u8> {
    let mut message = Prefix::encode(json.len() as u32, json.len() as u64).to_vec();
    message.extend_from_slice(json.as_bytes());
    message
}

const FOLLOW_UP: &str = r#"{"jsonrpc":"2.0","method":"sum","params":[40,2],"id":"next"}"#;

/// A reply as received: its JSON text, its section when it is a binary message, and the
/// bytes it took.
type Received = (Vec<u8>, Option<Vec<u8>>, usize);

/// One raw TCP reply at the start of `output`.
fn tcp_reply(output: &[u8]) -> Result<Received, String> {
    if output.first() == Some(&wire::MAGIC) {
        let prefix = Prefix::parse(output)
            .map_err(|e| e.message().to_string())?
            .ok_or("a prefix cut short")?;
        let end = PREFIX_LEN + prefix.body_len as usize;
        let body = output.get(PREFIX_LEN..end).ok_or("a body cut short")?;
        let (json, section) = split(body, prefix.json_len)?;
        return Ok((json.to_vec(), Some(section.to_vec()), end));
    }
    let line = output.iter().position(|&b| b == b'\n').ok_or("no line")?;
    Ok((output[..line].to_vec(), None, line + 1))
}

fn tcp_differences(vector: &ReplyVector, output: &[u8]) -> Vec<String> {
    let mut rest = output;
    let mut problems = Vec::new();
    if vector.reply.is_some() {
        match tcp_reply(rest) {
            Ok((json, section, used)) => {
                problems.extend(differences(
                    vector.reply.as_ref(),
                    vector.section.as_deref(),
                    &json,
                    section.as_deref(),
                ));
                rest = &rest[used..];
            }
            Err(e) => return vec![format!("{e}: {}", show(output))],
        }
    }
    if rest != b"{\"jsonrpc\":\"2.0\",\"id\":\"next\",\"result\":42}\n" {
        problems.push(format!("the follow-up: {}", show(rest)));
    }
    problems
}

fn in_memory(
    vectors: &[ReplyVector],
    mut check: impl FnMut(&ReplyVector, &mut dyn FnMut(&[u8]) -> Vec<u8>) -> Vec<String>,
) {
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let mut problems = Vec::new();
    for vector in vectors.iter().filter(|v| !v.deferred) {
        let mut session = Session::new();
        let mut out = OutBuf::new();
        let mut feed = |input: &[u8]| {
            let mut ctx = common::context(router, &limits, &mut scratch);
            session.feed(input, &mut out, &mut ctx, usize::MAX);
            let sent = out.to_vec();
            out.advance(sent.len());
            sent
        };
        problems.extend(
            check(vector, &mut feed)
                .into_iter()
                .map(|p| format!("{}: {p}", vector.name)),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn reply_vectors_in_memory_over_tcp() {
    in_memory(&load_all(), |vector, feed| {
        let mut input = tcp_message(&vector.json);
        input.extend_from_slice(FOLLOW_UP.as_bytes());
        tcp_differences(vector, &feed(&input))
    });
}

#[test]
fn a_json_text_over_tcp_gets_the_plain_reply() {
    in_memory(&load_all(), |vector, feed| {
        let output = feed(format!("{}\n{FOLLOW_UP}", vector.json).as_bytes());
        let plain = ReplyVector {
            name: String::new(),
            json: String::new(),
            reply: vector.plain_reply.clone(),
            section: None,
            plain_reply: None,
            deferred: false,
        };
        tcp_differences(&plain, &output)
    });
}

/// An HTTP request for `json`: a binary body when `binary`, with `Accept` listing binary
/// replies when `accept`.
fn http_request(json: &str, binary: bool, accept: bool) -> Vec<u8> {
    let mut request = b"POST / HTTP/1.1\r\nHost: x\r\n".to_vec();
    if binary {
        request.extend_from_slice(
            format!(
                "Content-Type: {}\r\nUCall-JSON-Length: {}\r\n",
                wire::CONTENT_TYPE,
                json.len()
            )
            .as_bytes(),
        );
    } else {
        request.extend_from_slice(b"Content-Type: application/json\r\n");
    }
    if accept {
        request.extend_from_slice(b"Accept: application/json, application/vnd.ucall.binary\r\n");
    }
    request.extend_from_slice(format!("Content-Length: {}\r\n\r\n{json}", json.len()).as_bytes());
    request
}

/// What is wrong with the HTTP response `response` to a request whose expected reply is
/// `expected` with `expected_section` (`None`: `application/json`).
fn http_differences(
    response: &common::Response,
    expected: Option<&Value>,
    expected_section: Option<&[u8]>,
) -> Vec<String> {
    if expected.is_none() {
        return if response.status == 204 {
            Vec::new()
        } else {
            vec![format!("status {}, expected 204", response.status)]
        };
    }
    let mut problems = Vec::new();
    if response.status != 200 {
        problems.push(format!("status {}", response.status));
    }
    let content_type = response.header("content-type").unwrap_or_default();
    let (json, section) = if content_type == wire::CONTENT_TYPE {
        let Some(json_len) = response.header("ucall-json-length").and_then(|v| v.parse().ok()) else {
            return vec!["a binary reply without UCall-JSON-Length".into()];
        };
        match split(&response.body, json_len) {
            Ok((json, section)) => (json.to_vec(), Some(section.to_vec())),
            Err(e) => return vec![e],
        }
    } else if content_type == "application/json" {
        (response.body.clone(), None)
    } else {
        return vec![format!("Content-Type {content_type}")];
    };
    problems.extend(differences(expected, expected_section, &json, section.as_deref()));
    problems
}

fn parse_http(output: &[u8]) -> Result<common::Response, String> {
    match common::parse_response(output)? {
        Some((response, used)) if used == output.len() => Ok(response),
        Some(_) => Err(format!("more than one response: {}", show(output))),
        None => Err(format!("no whole response: {}", show(output))),
    }
}

#[test]
fn reply_vectors_in_memory_over_http() {
    in_memory(&load_all(), |vector, feed| {
        let mut problems = Vec::new();
        // A binary request or a JSON one, accepting binary replies: the binary reply.
        for binary in [true, false] {
            match parse_http(&feed(&http_request(&vector.json, binary, true))) {
                Ok(response) => problems.extend(http_differences(
                    &response,
                    vector.reply.as_ref(),
                    vector.section.as_deref(),
                )),
                Err(e) => problems.push(e),
            }
        }
        // Without Accept (curl): the plain reply, exactly as before binary messages.
        match parse_http(&feed(&http_request(&vector.json, false, false))) {
            Ok(response) => problems.extend(http_differences(&response, vector.plain_reply.as_ref(), None)),
            Err(e) => problems.push(e),
        }
        problems
    });
}

#[test]
fn accept_with_q_zero_refuses_binary_replies() {
    let vectors: Vec<ReplyVector> = load_all().into_iter().filter(|v| v.name == "reply_bytes").collect();
    in_memory(&vectors, |vector, feed| {
        let request = http_request(&vector.json, true, false);
        let refusing = String::from_utf8(request).unwrap().replace(
            "Content-Length",
            "Accept: application/vnd.ucall.binary;q=0, application/json\r\nContent-Length",
        );
        match parse_http(&feed(refusing.as_bytes())) {
            Ok(response) => http_differences(&response, vector.plain_reply.as_ref(), None),
            Err(e) => vec![e],
        }
    });
}

const WS_HANDSHAKE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
                            Sec-WebSocket-Protocol: ucall.binary.v1\r\n\r\n";

fn ws_differences(vector: &ReplyVector, frames: &[(u8, Vec<u8>)]) -> Vec<String> {
    let follow_up = (1, b"{\"jsonrpc\":\"2.0\",\"id\":\"next\",\"result\":42}".to_vec());
    match (&vector.reply, frames) {
        (None, [follow]) if *follow == follow_up => Vec::new(),
        (Some(_), [(opcode, reply), follow]) if *follow == follow_up => match (opcode, &vector.section) {
            (2, Some(_)) => match wire::split_message(reply) {
                Ok((json, section)) => {
                    differences(vector.reply.as_ref(), vector.section.as_deref(), json, Some(section))
                }
                Err(e) => vec![e.message().to_string()],
            },
            (1, None) => differences(vector.reply.as_ref(), None, reply, None),
            _ => vec![format!("a frame of opcode {opcode}: {}", show(reply))],
        },
        _ => vec![format!("unexpected frames: {frames:?}")],
    }
}

#[test]
fn reply_vectors_in_memory_over_websocket() {
    in_memory(&load_all(), |vector, feed| {
        let handshake = feed(WS_HANDSHAKE.as_bytes());
        if !String::from_utf8_lossy(&handshake).contains("Sec-WebSocket-Protocol: ucall.binary.v1") {
            return vec![format!("the subprotocol is not selected: {}", show(&handshake))];
        }
        let mut input = ws_frame(2, &tcp_message(&vector.json));
        input.extend_from_slice(&ws_frame(1, FOLLOW_UP.as_bytes()));
        let mut output = &feed(&input)[..];
        let mut frames = Vec::new();
        while let Some((opcode, payload, used)) = ws_server_frame(output) {
            frames.push((opcode, payload));
            output = &output[used..];
        }
        ws_differences(vector, &frames)
    });
}

/// Over loopback on each engine, deferred replies included: raw TCP, HTTP accepting
/// binary replies and WebSocket under the subprotocol, one connection each per vector.
#[test]
fn reply_vectors_over_loopback() {
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let mut problems = Vec::new();
        for vector in load_all() {
            let mut found = Vec::new();
            // Raw TCP: a binary message, then a JSON text.
            let mut conn = Conn::to(&server);
            let mut input = tcp_message(&vector.json);
            input.extend_from_slice(FOLLOW_UP.as_bytes());
            conn.send(&input);
            let mut output = Vec::new();
            if vector.reply.is_some() {
                let first = conn.read_exact_bytes(1);
                output.extend_from_slice(&first);
                if first[0] == wire::MAGIC {
                    let prefix = conn.read_exact_bytes(PREFIX_LEN - 1);
                    output.extend_from_slice(&prefix);
                    let body_len = u64::from_le_bytes(prefix[7..15].try_into().unwrap()) as usize;
                    output.extend_from_slice(&conn.read_exact_bytes(body_len));
                } else {
                    output.extend_from_slice(&conn.read_line());
                    output.push(b'\n');
                }
            }
            output.extend_from_slice(&conn.read_line());
            output.push(b'\n');
            found.extend(
                tcp_differences(&vector, &output)
                    .into_iter()
                    .map(|p| format!("tcp: {p}")),
            );
            // HTTP: a JSON request accepting binary replies, then one without Accept.
            let mut conn = Conn::to(&server);
            let response = conn.roundtrip(&http_request(&vector.json, false, true));
            found.extend(
                http_differences(&response, vector.reply.as_ref(), vector.section.as_deref())
                    .into_iter()
                    .map(|p| format!("http: {p}")),
            );
            let response = conn.roundtrip(&http_request(&vector.json, false, false));
            found.extend(
                http_differences(&response, vector.plain_reply.as_ref(), None)
                    .into_iter()
                    .map(|p| format!("http, plain: {p}")),
            );
            // WebSocket under the subprotocol.
            let mut conn = Conn::to(&server);
            conn.send(WS_HANDSHAKE.as_bytes());
            let upgrade = conn.read_response();
            if upgrade.status != 101 {
                found.push(format!("websocket: upgrade answered {}", upgrade.status));
            } else {
                let mut input = ws_frame(2, &tcp_message(&vector.json));
                input.extend_from_slice(&ws_frame(1, FOLLOW_UP.as_bytes()));
                conn.send(&input);
                let mut frames = Vec::new();
                for _ in 0..usize::from(vector.reply.is_some()) + 1 {
                    let head = conn.read_exact_bytes(2);
                    let len = match head[1] & 0x7F {
                        126 => usize::from(u16::from_be_bytes(conn.read_exact_bytes(2).try_into().unwrap())),
                        127 => u64::from_be_bytes(conn.read_exact_bytes(8).try_into().unwrap()) as usize,
                        n => usize::from(n),
                    };
                    frames.push((head[0] & 0x0F, conn.read_exact_bytes(len)));
                }
                found.extend(
                    ws_differences(&vector, &frames)
                        .into_iter()
                        .map(|p| format!("websocket: {p}")),
                );
            }
            problems.extend(found.into_iter().map(|p| format!("{engine:?} {}: {p}", vector.name)));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    });
}

#[test]
fn a_large_result_is_sent_from_its_own_memory() {
    // 1 MiB of bytes as the result: the section holds them after the padding, and they
    // reached the output as a segment of their own (the reply is checked whole).
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let text = "ab".repeat(1 << 20);
    let json = format!(r#"{{"jsonrpc":"2.0","method":"unhex","params":["{text}"],"id":1}}"#);
    let mut session = Session::new();
    let mut out = OutBuf::new();
    let mut ctx = common::context(router, &limits, &mut scratch);
    session.feed(&tcp_message(&json), &mut out, &mut ctx, usize::MAX);
    let mut slices = [std::io::IoSlice::new(&[]); 8];
    let count = out.io_slices(&mut slices);
    assert!(
        slices[..count].iter().any(|slice| slice.len() == 1 << 20),
        "the attachment is one segment of the output"
    );
    let (json, section, _) = tcp_reply(&out.to_vec()).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&json).unwrap()["result"],
        serde_json::json!({"$ucall": "bytes", "offset": 0, "length": 1 << 20})
    );
    assert_eq!(section.unwrap(), vec![0xab; 1 << 20]);
}
