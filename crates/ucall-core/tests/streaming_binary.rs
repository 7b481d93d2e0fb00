// SPDX-License-Identifier: Apache-2.0
//! A streamed call's items and final reply carry their arrays and bytes as attachments
//! (docs/wire.md §3, docs/streaming.md): each a binary message of its own over raw TCP
//! (to a call sent as a binary message), in a binary WebSocket message (under the
//! subprotocol), and in a chunked `application/vnd.ucall.binary-stream` body over HTTP
//! (when `Accept` lists it and binary replies); as base64 in JSON to every other caller.
//! On every engine.

mod common;

use base64::Engine as _;
use common::{call, for_each_engine, show, ws_frame, ws_server_frame, Conn};
use serde_json::Value;
use ucall_core::jsonrpc::attachment::Dtype;
use ucall_core::wire::{self, Prefix, PREFIX_LEN};
use ucall_core::{Call, EngineKind, Reply, RpcError, Server, ServerHandle};

/// Item `i`'s array: two float32, `i` and `-i`.
fn frame(i: u32) -> Vec<u8> {
    [i as f32, -(i as f32)].iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `frames(n)`: items 0..n as float32 arrays of shape [2] ([`frame`]), then the bytes
/// `end` as the final reply. `blobs(n)`: items of `n` bytes each, `i` repeated.
fn serve(engine: EngineKind) -> ServerHandle {
    let frames = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: u32 = call.get(0, "n")?;
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..n {
                if stream.send_item_array(Dtype::Float32, &[2], frame(i)).is_err() {
                    return;
                }
            }
            stream.bytes(&b"end"[..]);
        });
        Ok(())
    };
    let blobs = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: u8 = call.get(0, "n")?;
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..2u8 {
                if stream.send_item_bytes(vec![i; usize::from(n)]).is_err() {
                    return;
                }
            }
            stream.json(&"done");
        });
        Ok(())
    };
    let builder = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(engine)
        .handler("frames", frames)
        .handler("blobs", blobs)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?));
    common::start(engine, builder)
}

/// A binary message (prefix and body) holding `json` and no attachment: how a raw TCP or
/// WebSocket client accepts binary replies.
fn binary_message(json: &str) -> Vec<u8> {
    let mut message = Prefix::encode(json.len() as u32, json.len() as u64).to_vec();
    message.extend_from_slice(json.as_bytes());
    message
}

/// A message as received: its JSON value and, for a binary message, its section.
type Message = (Value, Option<Vec<u8>>);

fn parse(json: &[u8]) -> Value {
    serde_json::from_slice(json).unwrap_or_else(|e| panic!("{e}: {}", show(json)))
}

/// The binary message at the start of `bytes`; the bytes it took.
fn read_binary(bytes: &[u8]) -> (Message, usize) {
    let prefix = Prefix::parse(bytes)
        .unwrap_or_else(|e| panic!("{}: {}", e.message(), show(bytes)))
        .expect("a whole prefix");
    let end = PREFIX_LEN + prefix.body_len as usize;
    let body = &bytes[PREFIX_LEN..end];
    let json = parse(&body[..prefix.json_len]);
    let section = body[wire::align(prefix.json_len).min(body.len())..].to_vec();
    ((json, Some(section)), end)
}

/// The messages of a raw TCP stream or a binary-stream body: JSON lines and binary messages.
fn split_messages(mut bytes: &[u8]) -> Vec<Message> {
    let mut messages = Vec::new();
    while !bytes.is_empty() {
        if bytes[0] == wire::MAGIC {
            let (message, used) = read_binary(bytes);
            messages.push(message);
            bytes = &bytes[used..];
        } else {
            let end = bytes.iter().position(|&b| b == b'\n').expect("a line");
            messages.push((parse(&bytes[..end]), None));
            bytes = &bytes[end + 1..];
        }
    }
    messages
}

/// Read one raw TCP message: a binary message or a line.
fn read_tcp_message(conn: &mut Conn) -> Message {
    let first = conn.read_exact_bytes(1);
    if first[0] != wire::MAGIC {
        let mut line = first;
        line.extend(conn.read_line());
        return (parse(&line), None);
    }
    let mut bytes = first;
    bytes.extend(conn.read_exact_bytes(PREFIX_LEN - 1));
    let prefix = Prefix::parse(&bytes).expect("a prefix").expect("whole");
    bytes.extend(conn.read_exact_bytes(prefix.body_len as usize));
    read_binary(&bytes).0
}

/// `message` is item `i` of `frames` for the call `id`, as an attachment.
fn assert_attached_frame(message: &Message, id: i64, i: u32) {
    let (json, section) = message;
    let expected = format!(
        r#"{{"jsonrpc":"2.0","method":"ucall.stream","params":{{"id":{id},"item":{{"$ucall":"ndarray","offset":0,"length":8,"dtype":"float32","shape":[2]}}}}}}"#
    );
    assert_eq!(*json, parse(expected.as_bytes()));
    assert_eq!(section.as_deref(), Some(&frame(i)[..]), "item {i}'s bytes, at offset 0");
}

/// `message` is the final reply of `frames` for `id`: the bytes `end` as an attachment.
fn assert_attached_end(message: &Message, id: i64) {
    let (json, section) = message;
    let expected = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"$ucall":"bytes","offset":0,"length":3}}}}"#);
    assert_eq!(*json, parse(expected.as_bytes()));
    assert_eq!(section.as_deref(), Some(&b"end"[..]));
}

/// `message` is item `i` of `frames` in its plain JSON form: the base64 of its `.npy` form.
fn assert_plain_frame(message: &Message, i: u32) {
    let (json, section) = message;
    assert!(section.is_none(), "a JSON text");
    let item = json["params"]["item"].as_str().expect("a base64 string");
    let npy = base64_decode(item);
    assert!(npy.starts_with(b"\x93NUMPY"), "{item}");
    assert!(npy.ends_with(&frame(i)), "{item}");
}

fn base64_decode(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(text).expect("base64")
}

/// `message` is the JSON reply to `id` with `result`.
fn assert_result(message: &Message, result: &str, id: i64) {
    assert_eq!(message.1, None, "a JSON text");
    let expected = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
    assert_eq!(message.0, parse(expected.as_bytes()));
}

#[test]
fn raw_tcp_items_of_a_binary_call_are_binary_messages() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        conn.send(&binary_message(&call("frames", r#"{"n":3}"#, "5")));
        for i in 0..3 {
            assert_attached_frame(&read_tcp_message(&mut conn), 5, i);
        }
        assert_attached_end(&read_tcp_message(&mut conn), 5);
        // A JSON text on the same connection streams JSON, base64 included.
        conn.send(format!("{}\n", call("frames", r#"{"n":2}"#, "6")).as_bytes());
        for i in 0..2 {
            assert_plain_frame(&read_tcp_message(&mut conn), i);
        }
        assert_result(&read_tcp_message(&mut conn), r#""ZW5k""#, 6);
        conn.send(format!("{}\n", call("sum", "[1,2]", "7")).as_bytes());
        assert_result(&read_tcp_message(&mut conn), "3", 7);
    });
}

#[test]
fn websocket_items_of_a_binary_call_are_binary_frames() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        conn.send(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Protocol: ucall.binary.v1\r\n\r\n",
        );
        let head = conn.read_response();
        assert_eq!(head.status, 101);
        assert_eq!(head.header("sec-websocket-protocol"), Some(wire::SUBPROTOCOL));
        conn.send(&ws_frame(2, &binary_message(&call("blobs", "[3]", "9"))));
        let mut frames = Vec::new();
        let mut received = Vec::new();
        while frames.len() < 3 {
            match ws_server_frame(&received) {
                Some((opcode, payload, used)) => {
                    frames.push((opcode, payload));
                    received.drain(..used);
                }
                None => received.extend(conn.read_exact_bytes(1)),
            }
        }
        for (i, (opcode, payload)) in frames[..2].iter().enumerate() {
            assert_eq!(*opcode, 2, "item {i}: a binary frame");
            let ((json, section), used) = read_binary(payload);
            assert_eq!(used, payload.len(), "one message per frame");
            let expected = r#"{"jsonrpc":"2.0","method":"ucall.stream","params":{"id":9,"item":{"$ucall":"bytes","offset":0,"length":3}}}"#;
            assert_eq!(json, parse(expected.as_bytes()));
            assert_eq!(section, Some(vec![i as u8; 3]));
        }
        let (opcode, payload) = &frames[2];
        assert_eq!(*opcode, 1, "the final reply has no attachment: a text frame");
        assert_result(&(parse(payload), None), r#""done""#, 9);
    });
}

/// A POST of `json` accepting `accept`; its streamed reply's head and body.
fn http_stream(conn: &mut Conn, json: &str, accept: &str) -> (Vec<String>, Vec<u8>) {
    let request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: {accept}\r\nContent-Length: {}\r\n\r\n{json}",
        json.len()
    );
    conn.send(request.as_bytes());
    let mut head = Vec::new();
    loop {
        let line = String::from_utf8(conn.read_line()).expect("UTF-8");
        let line = line.trim_end_matches('\r').to_string();
        if line.is_empty() {
            break;
        }
        head.push(line);
    }
    let mut body = Vec::new();
    loop {
        let size_line = conn.read_line();
        let size = usize::from_str_radix(std::str::from_utf8(&size_line).expect("ASCII").trim(), 16).expect("hex");
        if size == 0 {
            assert_eq!(conn.read_line(), b"\r", "no trailer");
            return (head, body);
        }
        body.extend(conn.read_exact_bytes(size));
        assert_eq!(conn.read_exact_bytes(2), b"\r\n");
    }
}

const BOTH: &str = "application/vnd.ucall.binary-stream, application/vnd.ucall.binary";

#[test]
fn http_items_go_in_a_binary_stream_when_accepted() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        let (head, body) = http_stream(&mut conn, &call("frames", r#"{"n":2}"#, "1"), BOTH);
        assert!(
            head.iter()
                .any(|l| l == "Content-Type: application/vnd.ucall.binary-stream"),
            "{head:?}"
        );
        let messages = split_messages(&body);
        assert_eq!(messages.len(), 3, "{}", show(&body));
        assert_attached_frame(&messages[0], 1, 0);
        assert_attached_frame(&messages[1], 1, 1);
        assert_attached_end(&messages[2], 1);
        // `blobs` ends with a plain result: a JSON line of the same body.
        let (_, body) = http_stream(&mut conn, &call("blobs", "[1]", "2"), BOTH);
        let messages = split_messages(&body);
        assert_eq!(messages.len(), 3, "{}", show(&body));
        assert!(messages[..2].iter().all(|(_, section)| section.is_some()));
        assert_eq!(messages[2].1, None);
        assert_result(&messages[2], r#""done""#, 2);
    });
}

#[test]
fn http_items_are_json_unless_both_binary_types_are_accepted() {
    for_each_engine(|engine| {
        let server = serve(engine);
        let mut conn = Conn::to(&server);
        for (accept, content_type) in [
            ("application/vnd.ucall.binary", "application/jsonl"),
            (
                "application/vnd.ucall.binary-stream",
                "application/vnd.ucall.binary-stream",
            ),
            (
                "application/vnd.ucall.binary-stream;q=0, application/vnd.ucall.binary",
                "application/jsonl",
            ),
            ("application/jsonl", "application/jsonl"),
        ] {
            let (head, body) = http_stream(&mut conn, &call("frames", r#"{"n":2}"#, "3"), accept);
            let expected = format!("Content-Type: {content_type}");
            assert!(head.contains(&expected), "{accept}: {head:?}");
            let messages = split_messages(&body);
            assert_eq!(messages.len(), 3, "{accept}: {}", show(&body));
            assert_plain_frame(&messages[0], 0);
            assert_plain_frame(&messages[1], 1);
            assert_result(&messages[2], r#""ZW5k""#, 3);
        }
    });
}
