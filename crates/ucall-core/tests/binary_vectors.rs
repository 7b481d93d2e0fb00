// SPDX-License-Identifier: Apache-2.0
//! Every binary-message vector of `tests/vectors/binary` (docs/wire.md; format in
//! `tests/vectors/README.md`, "Binary vectors"), in memory through `Session::feed` and
//! over loopback, each followed by an ordinary call on the same connection.

mod common;

use std::path::{Path, PathBuf};

use common::json::Json;
use common::rule::{check_all, follow_up, follow_up_differences, load_dir, reply_differences, Vector};
use common::{show, ws_frame, Conn};
use ucall_core::session::{Scratch, Session};
use ucall_core::wire::{self, Prefix};
use ucall_core::Limits;

/// A binary vector: the bytes to send and what must follow.
struct Binary {
    /// `request` is the raw TCP message (prefix and body); the rest is the rule's.
    vector: Vector,
    /// Whether raw TCP closes after the reply.
    tcp_closes: bool,
    /// The reply over WebSocket, where it differs.
    websocket_reply: Option<Json>,
    /// The HTTP form, when the vector has one.
    http: Option<HttpForm>,
}

/// A vector's HTTP request: header fields, body and the status expected.
type HttpForm = (Vec<(String, String)>, Vec<u8>, u16);

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/binary")
}

fn hex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err("odd hex length".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// The body of docs/wire.md §1 for a JSON text and a section.
fn body(json_text: &[u8], section: &[u8]) -> Vec<u8> {
    let mut body = json_text.to_vec();
    if !section.is_empty() {
        body.resize(wire::align(json_text.len()), 0);
        body.extend_from_slice(section);
    }
    body
}

/// A raw TCP message: the prefix, then `body`.
fn message(json_len: usize, body: &[u8]) -> Vec<u8> {
    let mut message = Prefix::encode(json_len as u32, body.len() as u64).to_vec();
    message.extend_from_slice(body);
    message
}

fn load(name: &str, file: &Json) -> Result<Binary, String> {
    let reply = match file.get("reply") {
        None => return Err("\"reply\" is required".into()),
        Some(Json::Null) => None,
        Some(reply) => Some(reply.clone()),
    };
    let error_message_contains = file
        .get("error_message_contains")
        .and_then(Json::as_str)
        .map(String::from);
    let mut tcp_closes = false;
    let mut http = None;
    let request = if let Some(text) = file.get("json").and_then(Json::as_str) {
        let Some(Json::Array(attachments)) = file.get("attachments") else {
            return Err("\"attachments\" must be an array".into());
        };
        let mut section = Vec::new();
        for item in attachments {
            let offset = item.get("offset").and_then(Json::as_i64).ok_or("an offset")? as usize;
            let bytes = hex(item.get("hex").and_then(Json::as_str).ok_or("a hex string")?)?;
            if section.len() < offset + bytes.len() {
                section.resize(offset + bytes.len(), 0);
            }
            section[offset..offset + bytes.len()].copy_from_slice(&bytes);
        }
        if let Some(length) = file.get("section_length").and_then(Json::as_i64) {
            section.resize(length as usize, 0);
        }
        let body = body(text.as_bytes(), &section);
        let headers = vec![
            ("Content-Type".to_string(), wire::CONTENT_TYPE.to_string()),
            ("UCall-JSON-Length".to_string(), text.len().to_string()),
        ];
        http = Some((headers, body.clone(), 200));
        message(text.len(), &body)
    } else if let Some(text) = file.get("message_hex").and_then(Json::as_str) {
        tcp_closes = file.get("tcp_after").and_then(Json::as_str) == Some("closed");
        hex(text)?
    } else if let Some(Json::Object(fields)) = file.get("http_headers") {
        let headers = fields
            .iter()
            .map(|(name, value)| (name.clone(), value.as_str().unwrap_or_default().to_string()))
            .collect();
        let body = hex(file.get("body_hex").and_then(Json::as_str).ok_or("body_hex")?)?;
        let status = file.get("http_status").and_then(Json::as_i64).ok_or("http_status")? as u16;
        http = Some((headers, body, status));
        Vec::new()
    } else {
        return Err("no json, message_hex or http_headers".into());
    };
    Ok(Binary {
        vector: Vector {
            name: name.to_string(),
            request,
            reply,
            reply_text_contains: Vec::new(),
            error_message_contains,
            error_exact: false,
        },
        tcp_closes,
        websocket_reply: file.get("websocket_reply").cloned(),
        http,
    })
}

fn load_all() -> Vec<Binary> {
    let vectors = load_dir(&vector_dir(), load);
    assert!(vectors.len() > 40, "only {} binary vectors", vectors.len());
    vectors
}

/// The vectors that travel over raw TCP, as `Vector`s for `check_all`.
fn tcp_vectors() -> (Vec<Vector>, Vec<bool>) {
    load_all()
        .into_iter()
        .filter(|b| !b.vector.request.is_empty())
        .map(|b| (b.vector, b.tcp_closes))
        .unzip()
}

/// Where the raw TCP output for a vector (then a follow-up, unless it closes) differs.
fn tcp_differences(vector: &Vector, closes: bool, out: &[u8], closed: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if closed != closes {
        problems.push(format!("closed: {closed}, expected {closes}"));
    }
    let Some(body) = out.strip_suffix(b"\n") else {
        return vec![format!("the output does not end with a newline: {}", show(out))];
    };
    let lines: Vec<&[u8]> = body.split(|&c| c == b'\n').collect();
    match (&vector.reply, &lines[..], closes) {
        (Some(_), [reply], true) => problems.extend(reply_differences(vector, reply)),
        (None, [follow], false) => problems.extend(follow_up_differences(follow)),
        (Some(_), [reply, follow], false) => {
            problems.extend(reply_differences(vector, reply));
            problems.extend(follow_up_differences(follow));
        }
        _ => problems.push(format!("unexpected lines: {}", show(out))),
    }
    problems
}

#[test]
fn binary_vectors_in_memory_over_tcp() {
    let (vectors, closes) = tcp_vectors();
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let mut index = 0;
    check_all("in memory over raw TCP", &vectors, |vector| {
        let closes = closes[index];
        index += 1;
        let mut input = vector.request.clone();
        input.extend_from_slice(follow_up().as_bytes());
        let mut session = Session::new();
        let (out, progress) = common::feed(&mut session, &input, router, &limits, &mut scratch);
        tcp_differences(vector, closes, &out, progress.close)
    });
}

#[test]
fn binary_vectors_over_tcp() {
    common::for_each_engine(|engine| {
        let (vectors, closes) = tcp_vectors();
        let server = common::serve(engine);
        let mut index = 0;
        check_all("over raw TCP", &vectors, |vector| {
            let closes = closes[index];
            index += 1;
            let mut conn = Conn::to(&server);
            let mut input = vector.request.clone();
            input.extend_from_slice(follow_up().as_bytes());
            conn.send(&input);
            let mut out = Vec::new();
            let expected_lines = usize::from(vector.reply.is_some()) + usize::from(!closes);
            for _ in 0..expected_lines {
                match conn.try_read_line() {
                    Ok(line) => {
                        out.extend_from_slice(&line);
                        out.push(b'\n');
                    }
                    Err(e) => return vec![e],
                }
            }
            let closed = closes
                && conn
                    .read_until_closed(common::IO_TIMEOUT)
                    .is_ok_and(|rest| rest.is_empty());
            tcp_differences(vector, closes, &out, closed)
        });
    });
}

#[test]
fn a_binary_message_may_arrive_in_pieces() {
    // One byte at a time through the prefix, then the body in two: the session waits for
    // the whole message, asking the engine for room for all of it.
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let text = br#"{"jsonrpc":"2.0","method":"hex","params":[{"$ucall":"bytes","offset":0,"length":3}],"id":1}"#;
    let message = message(text.len(), &body(text, b"foo"));
    let mut session = Session::new();
    let mut out = Vec::new();
    let mut fed = 0;
    for end in (1..=20).chain([100, message.len()]) {
        let (more, progress) = common::feed(&mut session, &message[fed..end], router, &limits, &mut scratch);
        out.extend_from_slice(&more);
        fed += progress.consumed;
        if end >= wire::PREFIX_LEN && end < message.len() {
            assert_eq!(session.input_wanted(), message.len() - fed, "at {end}");
        }
    }
    assert_eq!(fed, message.len());
    assert_eq!(out, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"666f6f\"}\n");
}

/// The vectors that travel over HTTP, with their requests as whole HTTP messages.
fn http_vectors() -> (Vec<Vector>, Vec<u16>) {
    load_all()
        .into_iter()
        .filter_map(|b| {
            let (headers, body, status) = b.http?;
            let mut request = b"POST / HTTP/1.1\r\nHost: x\r\n".to_vec();
            for (name, value) in headers {
                request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
            request.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            request.extend_from_slice(&body);
            let status = if b.vector.reply.is_none() { 204 } else { status };
            Some((Vector { request, ..b.vector }, status))
        })
        .unzip()
}

/// Where the HTTP responses to a vector and a follow-up differ from what is expected.
fn http_differences(vector: &Vector, status: u16, responses: &[common::Response]) -> Vec<String> {
    let [first, second] = responses else {
        return vec![format!("expected 2 responses, got {}", responses.len())];
    };
    let mut problems = Vec::new();
    if first.status != status {
        problems.push(format!(
            "status {}, expected {status}: {}",
            first.status,
            show(&first.body)
        ));
    }
    if vector.reply.is_some() {
        let media_type = first
            .header("content-type")
            .map(|v| v.split(';').next().unwrap_or("").trim().to_string());
        if media_type.as_deref() != Some("application/json") {
            problems.push(format!("Content-Type: expected application/json, got {media_type:?}"));
        }
        problems.extend(reply_differences(vector, &first.body));
    } else if !first.body.is_empty() {
        problems.push(format!("a body after 204: {}", show(&first.body)));
    }
    problems.extend(follow_up_differences(&second.body));
    problems
}

#[test]
fn binary_vectors_in_memory_over_http() {
    let (vectors, statuses) = http_vectors();
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let mut index = 0;
    check_all("in memory over HTTP", &vectors, |vector| {
        let status = statuses[index];
        index += 1;
        let mut input = vector.request.clone();
        input.extend_from_slice(&common::post("/", follow_up().as_bytes()));
        let mut session = Session::new();
        let (out, progress) = common::feed(&mut session, &input, router, &limits, &mut scratch);
        let mut problems = match common::parse_responses(&out) {
            Ok(responses) => http_differences(vector, status, &responses),
            Err(e) => vec![e],
        };
        if progress.close {
            problems.push("the session closes".into());
        }
        problems
    });
}

#[test]
fn binary_vectors_over_http() {
    common::for_each_engine(|engine| {
        let (vectors, statuses) = http_vectors();
        let server = common::serve(engine);
        let mut index = 0;
        check_all("over HTTP", &vectors, |vector| {
            let status = statuses[index];
            index += 1;
            let mut conn = Conn::to(&server);
            conn.send(&vector.request);
            let first = match conn.try_read_response() {
                Ok(response) => response,
                Err(e) => return vec![e],
            };
            conn.send(&common::post("/", follow_up().as_bytes()));
            match conn.try_read_response() {
                Ok(second) => http_differences(vector, status, &[first, second]),
                Err(e) => vec![format!("follow-up: {e}")],
            }
        });
    });
}

const WS_HANDSHAKE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
                            Sec-WebSocket-Protocol: chat, ucall.binary.v1\r\n\r\n";

/// The server's frames in `bytes` as (opcode, payload).
fn ws_server_frames(mut bytes: &[u8]) -> Result<Vec<(u8, Vec<u8>)>, String> {
    let mut frames = Vec::new();
    while bytes.len() >= 2 {
        let (opcode, payload, used) = common::ws_server_frame(bytes).ok_or("a frame cut short")?;
        frames.push((opcode, payload));
        bytes = &bytes[used..];
    }
    Ok(frames)
}

#[test]
fn binary_vectors_in_memory_over_websocket() {
    // Each vector's message as one binary WebSocket message under the subprotocol, then a
    // text message: a broken message costs a -32700 text message, never the connection.
    let vectors: Vec<Vector> = load_all()
        .into_iter()
        .filter(|b| !b.vector.request.is_empty())
        .map(|b| match b.websocket_reply {
            Some(reply) => Vector {
                reply: Some(reply),
                ..b.vector
            },
            None => b.vector,
        })
        .collect();
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    check_all("in memory over WebSocket", &vectors, |vector| {
        let mut session = Session::new();
        let (handshake, _) = common::feed(&mut session, WS_HANDSHAKE.as_bytes(), router, &limits, &mut scratch);
        let mut problems = Vec::new();
        if !String::from_utf8_lossy(&handshake).contains("\r\nSec-WebSocket-Protocol: ucall.binary.v1\r\n") {
            problems.push(format!("the subprotocol is not selected: {}", show(&handshake)));
        }
        let mut input = ws_frame(2, &vector.request);
        input.extend_from_slice(&ws_frame(1, follow_up().as_bytes()));
        let (out, progress) = common::feed(&mut session, &input, router, &limits, &mut scratch);
        if progress.close {
            problems.push("the session closes".into());
        }
        let frames = match ws_server_frames(&out) {
            Ok(frames) => frames,
            Err(e) => return vec![e],
        };
        match (&vector.reply, &frames[..]) {
            (None, [(1, follow)]) => problems.extend(follow_up_differences(follow)),
            (Some(_), [(1, reply), (1, follow)]) => {
                problems.extend(reply_differences(vector, reply));
                problems.extend(follow_up_differences(follow));
            }
            _ => problems.push(format!("unexpected frames: {frames:?}")),
        }
        problems
    });
}

#[test]
fn without_the_subprotocol_websocket_is_unchanged() {
    let builder = common::spec::register(ucall_core::Server::builder());
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let router = builder.router();
    let mut session = Session::new();
    let plain = WS_HANDSHAKE.replace("chat, ucall.binary.v1", "chat");
    let (handshake, _) = common::feed(&mut session, plain.as_bytes(), router, &limits, &mut scratch);
    assert!(!String::from_utf8_lossy(&handshake).contains("Sec-WebSocket-Protocol"));
    // A binary WebSocket message is a JSON text there, as it always was.
    let call = br#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#;
    let (out, _) = common::feed(&mut session, &ws_frame(2, call), router, &limits, &mut scratch);
    let frames = ws_server_frames(&out).unwrap();
    assert_eq!(frames, [(1, br#"{"jsonrpc":"2.0","id":1,"result":3}"#.to_vec())]);
}

/// The request head of `fields`, parsed.
fn binary_head(fields: &str) -> ucall_core::http1::RequestHead {
    let text = format!("POST / HTTP/1.1\r\nHost: x\r\n{fields}\r\n\r\n");
    match ucall_core::http1::parse_head(text.as_bytes(), 4096, 1 << 20, &mut String::new()) {
        ucall_core::http1::HeadStatus::Complete(head, _) => head,
        other => panic!("{fields}: {other:?}"),
    }
}

#[test]
fn the_head_says_a_binary_body_and_its_json_length() {
    let head = binary_head("Content-Type: Application/VND.ucall.binary; v=1\r\nUCall-JSON-Length: 91");
    assert!(head.binary_body);
    assert_eq!(head.binary_json_length(), Some(91));
    for (field, binary) in [
        ("Content-Type: application/json", false),
        ("Content-Type: application/vnd.ucall.binaryx", false),
        ("Content-Type: application/vnd.ucall.binary", true),
    ] {
        assert_eq!(binary_head(field).binary_body, binary, "{field}");
    }
    for lengths in [
        "UCall-JSON-Length: +91",
        "UCall-JSON-Length: 9 1",
        "UCall-JSON-Length: 1\r\nUCall-JSON-Length: 1",
    ] {
        let head = binary_head(lengths);
        assert_eq!(
            (head.json_length.is_some(), head.binary_json_length()),
            (true, None),
            "{lengths}"
        );
    }
}
