// SPDX-License-Identifier: Apache-2.0
//! Binary messages (docs/wire.md) from the client: the shared vectors
//! (`tests/vectors/binary/`) sent through the client's framing on every transport to the
//! spec server's procedures, arrays and bytes round-tripped as attachments, and servers
//! that read JSON only (the client falls back to base64 without running a call twice).

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;
use ucall_client::{
    write_binary_request, Batch, Client, Dtype, Endpoint, Multiplexed, Params, Protocol, RequestKind, Response,
};
use ucall_core::{Call, EngineKind, Reply, Server, ServerHandle};

mod common;

#[path = "../../../examples/rust/src/spec.rs"]
#[allow(dead_code)]
mod spec;

/// The spec server's procedures, and two that echo an attachment as one (they refuse
/// anything else, so a reply shows the param came as an attachment).
fn serve() -> ServerHandle {
    serve_with(None)
}

fn serve_with(tls: Option<ucall_core::TlsConfig>) -> ServerHandle {
    let mut builder = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(EngineKind::Poll);
    if let Some(tls) = tls {
        builder = builder.tls(tls);
    }
    spec::register(builder)
        .handler("echo_array", common::echo_array)
        .handler("echo_bytes", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let found = call.params().attachment(0, "data")?;
            reply.bytes(found.bytes.to_vec());
            Ok(())
        })
        .bind()
        .expect("bind")
        .spawn()
        .expect("spawn")
}

fn endpoints(port: u16) -> [Endpoint; 3] {
    [
        Endpoint::new("127.0.0.1", port),
        Endpoint::new("127.0.0.1", port).with_protocol(Protocol::Tcp),
        Endpoint::parse(&format!("ws://127.0.0.1:{port}/")).expect("a URL"),
    ]
}

fn vectors(folder: &str) -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/binary")
        .join(folder);
    let mut found: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("the vectors")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_name()?.to_str()?.to_owned();
            (name.ends_with(".json")).then(|| {
                let text = std::fs::read_to_string(&path).expect("readable");
                (name, serde_json::from_str(&text).expect("JSON"))
            })
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A body vector's bytes (docs/wire.md §1), as `tests/vectors/README.md` lays them out.
fn body_of(vector: &Value) -> (Vec<u8>, usize) {
    let json = vector["json"].as_str().expect("json").as_bytes().to_vec();
    let json_len = json.len();
    let mut section = Vec::new();
    for part in vector["attachments"].as_array().into_iter().flatten() {
        let offset = part["offset"].as_u64().expect("offset") as usize;
        section.resize(offset, 0);
        section.extend_from_slice(&unhex(part["hex"].as_str().expect("hex")));
    }
    if let Some(length) = vector.get("section_length").and_then(Value::as_u64) {
        section.resize(length as usize, 0);
    }
    let mut body = json;
    if !section.is_empty() {
        body.resize(ucall_core::wire::align(json_len), 0);
        body.extend_from_slice(&section);
    }
    (body, json_len)
}

/// `got` has every member `expected` names, equal (objects member by member, arrays
/// element by element).
fn matches(got: &Value, expected: &Value) -> bool {
    match (got, expected) {
        (Value::Object(got), Value::Object(expected)) => expected
            .iter()
            .all(|(key, value)| got.get(key).is_some_and(|g| matches(g, value))),
        (Value::Array(got), Value::Array(expected)) => {
            got.len() == expected.len() && got.iter().zip(expected).all(|(g, e)| matches(g, e))
        }
        _ => got == expected,
    }
}

#[test]
fn the_binary_request_vectors_get_their_replies_on_every_transport() {
    let server = serve();
    let mut ran = 0;
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        let mut client = Client::new(endpoint).expect("a client");
        for (name, vector) in vectors("") {
            let reply_expected = &vector["reply"];
            if !name.starts_with("valid_") || vector.get("json").is_none() || reply_expected.is_null() {
                continue;
            }
            let (body, json_len) = body_of(&vector);
            let replies = client
                .exchange_as(vec![(body, RequestKind::Binary(json_len))], 1)
                .unwrap_or_else(|e| panic!("{url} {name}: {e}"));
            let response = Response::from_reply(replies.into_iter().next().expect("a reply"));
            assert!(!response.is_binary(), "{url} {name}: no attachment, a JSON reply");
            let got: Value = serde_json::from_slice(response.body()).expect("JSON");
            assert!(
                matches(&got, reply_expected),
                "{url} {name}: {got} against {reply_expected}"
            );
            ran += 1;
        }
    }
    assert!(ran >= 3 * 10, "only {ran} vector runs");
    server.stop();
    server.join();
}

/// The reply vectors: the replies read by the client, placeholders compared by what they
/// name (kind, dtype, shape, bytes), and the plain form for a caller that did not ask.
#[test]
fn the_binary_reply_vectors_are_read_on_every_transport() {
    let server = serve();
    let mut ran = 0;
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        let mut client = Client::new(endpoint).expect("a client");
        for (name, vector) in vectors("replies") {
            let (body, json_len) = body_of(&vector);
            let plain = vector["json"].as_str().expect("json").as_bytes().to_vec();
            let expects = usize::from(!vector["reply"].is_null() || url.starts_with("http"));
            let replies = client
                .exchange_as(
                    vec![(body, RequestKind::Binary(json_len)), (plain, RequestKind::Json)],
                    2 * expects,
                )
                .unwrap_or_else(|e| panic!("{url} {name}: {e}"));
            if expects == 0 {
                assert!(replies.is_empty(), "{url} {name}");
                continue;
            }
            let mut replies = replies.into_iter().map(Response::from_reply);
            let (binary, plain) = (replies.next().expect("a reply"), replies.next().expect("a reply"));
            if vector["reply"].is_null() {
                assert!(
                    binary.body().is_empty() && plain.body().is_empty(),
                    "{url} {name}: HTTP 204"
                );
                continue;
            }
            let attached = !vector["reply_attachments"].as_array().expect("a list").is_empty();
            assert_eq!(binary.is_binary(), attached, "{url} {name}");
            let got: Value = serde_json::from_slice(binary.body()).expect("JSON");
            assert!(
                same_reply(&binary, &got, &vector["reply"], &vector),
                "{url} {name}: {got} against {}",
                vector["reply"]
            );
            let got_plain: Value = serde_json::from_slice(plain.body()).expect("JSON");
            assert!(!plain.is_binary(), "{url} {name}: a JSON request, a JSON reply");
            assert!(matches(&got_plain, &vector["plain_reply"]), "{url} {name}: {got_plain}");
            ran += 1;
        }
    }
    assert!(ran >= 3 * 7, "only {ran} vector runs");
    server.stop();
    server.join();
}

/// `got` (from `response`) matches `expected`, a placeholder by the bytes it names in the
/// vector's `reply_attachments` (a server lays its section out in its own order).
fn same_reply(response: &Response, got: &Value, expected: &Value, vector: &Value) -> bool {
    match (got, expected) {
        (Value::Object(g), Value::Object(e)) if e.contains_key("$ucall") => {
            let raw = serde_json::to_string(got).expect("text");
            let Ok(Some(found)) = response.attachment(&raw) else {
                return false;
            };
            let offset = e["offset"].as_u64().expect("offset") as usize;
            let length = e["length"].as_u64().expect("length") as usize;
            let section = body_of(&serde_json::json!({
                "json": "", "attachments": vector["reply_attachments"]
            }))
            .0;
            let wanted = section.get(offset..offset + length).unwrap_or_default();
            let array_same = match found.array {
                None => e["$ucall"] == "bytes",
                Some(info) => {
                    e["$ucall"] == "ndarray"
                        && e["dtype"] == info.dtype.name()
                        && e["shape"] == serde_json::json!(info.shape().collect::<Vec<_>>())
                }
            };
            g["$ucall"] == e["$ucall"] && found.bytes == wanted && array_same
        }
        (Value::Object(g), Value::Object(e)) => e
            .iter()
            .all(|(key, value)| g.get(key).is_some_and(|gv| same_reply(response, gv, value, vector))),
        (Value::Array(g), Value::Array(e)) => {
            g.len() == e.len() && g.iter().zip(e).all(|(gv, ev)| same_reply(response, gv, ev, vector))
        }
        _ => got == expected,
    }
}

#[test]
fn arrays_and_bytes_round_trip_as_attachments_on_every_transport() {
    let server = serve();
    let floats: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    let large: Vec<f32> = (0..400_000).map(|i| i as f32).collect(); // 1.6 MB
    let blob: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        let mut client = Client::new(endpoint).expect("a client");
        for (shape, data) in [(vec![2, 3], &floats), (vec![400, 1000], &large)] {
            let reply = client
                .call("echo_array", Params::array().ndarray_of(&shape, data.clone()))
                .expect(&url);
            assert!(reply.is_binary(), "{url}: a binary reply");
            let array = reply.result_array::<f32>().expect("an array");
            assert_eq!((&array.shape, &*array.data), (&shape, &data[..]), "{url}");
            assert!(
                matches!(array.data, Cow::Borrowed(_)),
                "{url}: viewed in the reply, not copied"
            );
            assert!(reply.result_array::<f64>().is_err(), "{url}: not float64");
        }
        let reply = client
            .call("echo_bytes", Params::object().named_attachment("data", blob.clone()))
            .expect(&url);
        assert_eq!(
            reply.result_attachment().expect("an attachment").bytes,
            &blob[..],
            "{url}"
        );
        assert_eq!(reply.result_bytes().expect("bytes"), blob, "{url}");
        // The spec server's `hex` reads an attachment (an array read as its bytes) as bytes.
        let hex = client
            .call(
                "hex",
                Params::array().ndarray(Dtype::Float32, &[2], [1.5f32, -2.0].map(f32::to_le_bytes).concat()),
            )
            .expect(&url);
        assert_eq!(hex.result::<String>().expect("hex"), "0000c03f000000c0", "{url}");
        // A call without attachments stays JSON: `floats` answers the .npy's base64...
        let plain = client.call("floats", [3]).expect(&url);
        assert!(!plain.is_binary(), "{url}");
        assert_eq!(
            &*plain.result_array::<f32>().expect("from .npy").data,
            [0.0, 1.0, 2.0],
            "{url}"
        );
        assert_eq!(client.call("sum", [1, 2]).expect(&url).result::<i64>(), Ok(3), "{url}");
    }
    // ...unless every call accepts binary replies; never on a client that sends none.
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        let mut always = Client::new(endpoint.clone().with_binary(Some(true))).expect("a client");
        let reply = always.call("floats", [3]).expect(&url);
        assert!(reply.is_binary(), "{url}");
        assert_eq!(reply.result_array::<f32>().expect("an array").shape, [3], "{url}");
        let mut never = Client::new(endpoint.with_binary(Some(false))).expect("a client");
        let hex = never
            .call("hex", Params::array().attachment(b"foo".to_vec()))
            .expect(&url);
        assert_eq!(hex.result::<String>().expect("base64 read as bytes"), "666f6f", "{url}");
        let refused = never
            .call("echo_bytes", Params::array().attachment(b"foo".to_vec()))
            .expect(&url)
            .result_bytes()
            .expect_err("base64 is no attachment");
        assert_eq!(refused.code, -32602, "{url}: {refused}");
        let array = never
            .call("echo_array", Params::array().ndarray_of(&[2], vec![1u8, 2]))
            .expect(&url);
        assert!(!array.is_binary(), "{url}");
    }
    server.stop();
    server.join();
}

#[test]
fn attachments_round_trip_over_tls_too() {
    let certs = common::certs();
    let server = serve_with(Some(ucall_core::TlsConfig::new(
        certs.0.join("server.pem"),
        certs.0.join("server.key"),
    )));
    let port = server.port();
    let data: Vec<f32> = (0..100_000).map(|i| i as f32 / 3.0).collect();
    for url in [
        format!("https://127.0.0.1:{port}/"),
        format!("tls://localhost:{port}"),
        format!("wss://127.0.0.1:{port}/"),
    ] {
        let endpoint = Endpoint::parse(&url).expect("a URL").cacert(certs.0.join("ca.pem"));
        let mut client = Client::new(endpoint).expect("a client");
        let reply = client
            .call("echo_array", Params::array().ndarray_of(&[100_000], data.clone()))
            .expect(&url);
        assert!(reply.is_binary(), "{url}");
        assert_eq!(
            &*reply.result_array::<f32>().expect("an array").data,
            &data[..],
            "{url}"
        );
    }
    server.stop();
    server.join();
}

/// A JSON-only server on loopback: JSON-RPC over HTTP/1.1 or newline-separated raw TCP,
/// answering `echo` with its first param and refusing binary messages as such a server
/// does (HTTP 415; over raw TCP a -32700 for the first byte, then closing). Counts the
/// binary messages it refused and the calls it ran.
struct JsonOnly {
    port: u16,
    http: bool,
    refused: Arc<AtomicUsize>,
    ran: Arc<AtomicUsize>,
}

impl JsonOnly {
    /// Where a client reaches it: over HTTP, or over raw TCP.
    fn endpoint(&self) -> Endpoint {
        let endpoint = Endpoint::new("127.0.0.1", self.port);
        if self.http {
            endpoint
        } else {
            endpoint.with_protocol(Protocol::Tcp)
        }
    }
}

fn json_only(http: bool) -> JsonOnly {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (refused, ran) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, n) = (Arc::clone(&refused), Arc::clone(&ran));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(stream) = stream else { return };
            let (r, n) = (Arc::clone(&r), Arc::clone(&n));
            std::thread::spawn(move || {
                let _ = if http {
                    serve_http(stream, &r, &n)
                } else {
                    serve_tcp(stream, &r, &n)
                };
            });
        }
    });
    JsonOnly {
        port,
        http,
        refused,
        ran,
    }
}

fn answer(request: &[u8], ran: &AtomicUsize) -> String {
    let request: Value = serde_json::from_slice(request).expect("a JSON request");
    let one = |request: &Value| {
        ran.fetch_add(1, Ordering::Relaxed);
        let result = &request["params"][0];
        format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{}}}"#, request["id"])
    };
    match request.as_array() {
        Some(batch) => format!("[{}]", batch.iter().map(one).collect::<Vec<_>>().join(",")),
        None => one(&request),
    }
}

fn serve_http(stream: TcpStream, refused: &AtomicUsize, ran: &AtomicUsize) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let (mut length, mut binary) = (0, false);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            binary |= lower.starts_with("content-type: application/vnd.ucall.binary");
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        if binary {
            refused.fetch_add(1, Ordering::Relaxed);
            writer.write_all(b"HTTP/1.1 415 Unsupported Media Type\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        let text = answer(&body, ran);
        write!(
            writer,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )?;
    }
}

fn serve_tcp(stream: TcpStream, refused: &AtomicUsize, ran: &AtomicUsize) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        // A binary message has no newline: its first byte is enough to refuse it.
        if reader.fill_buf()?.first() == Some(&0xC1) {
            refused.fetch_add(1, Ordering::Relaxed);
            writer.write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}\n",
            )?;
            return Ok(()); // out of step with the stream: closed
        }
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        writeln!(writer, "{}", answer(&line, ran))?;
    }
}

#[test]
fn a_json_only_server_gets_base64_and_runs_each_call_once() {
    for http in [true, false] {
        let server = json_only(http);
        let endpoint = server.endpoint();
        let url = endpoint.url();
        let mut client = Client::new(endpoint).expect("a client");
        for round in 0..3 {
            let reply = client
                .call("echo", Params::array().attachment(b"foo".to_vec()))
                .expect(&url);
            assert!(!reply.is_binary(), "{url}");
            assert_eq!(reply.result_bytes().expect("base64"), b"foo", "{url} round {round}");
        }
        let reply = client
            .call("echo", Params::array().ndarray_of(&[2], vec![1.5f32, -2.0]))
            .expect(&url);
        assert_eq!(
            &*reply.result_array::<f32>().expect("from .npy").data,
            [1.5, -2.0],
            "{url}"
        );
        assert_eq!(
            server.refused.load(Ordering::Relaxed),
            1,
            "{url}: refused once, then JSON"
        );
        assert_eq!(server.ran.load(Ordering::Relaxed), 4, "{url}: each call ran once");
    }
}

#[test]
fn a_binary_request_body_is_the_documented_layout() {
    // docs/wire.md §6: `hex` of `foo`, J = 91, P = 128, S = 3.
    let mut body = Vec::new();
    let json_len =
        write_binary_request(&mut body, "hex", &Params::array().attachment(&b"foo"[..]), Some(1)).expect("a body");
    let json = br#"{"jsonrpc":"2.0","method":"hex","params":[{"$ucall":"bytes","offset":0,"length":3}],"id":1}"#;
    assert_eq!((json_len, &body[..json_len]), (91, &json[..]));
    assert_eq!(body.len(), 131);
    assert!(body[91..128].iter().all(|&b| b == 0));
    assert_eq!(&body[128..], b"foo");
}

/// A float32 array of `n` elements, different for each `seed`.
fn floats(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (i * 7 + seed) as f32 * 0.25).collect()
}

#[test]
fn a_batch_carries_its_calls_attachments_in_one_binary_message_on_every_transport() {
    let server = serve();
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        let mut client = Client::new(endpoint).expect("a client");
        for n in [6, 100_000] {
            let (a, b) = (floats(n, 1), floats(n, 2));
            let mut batch = Batch::new();
            batch
                .call("echo_array", Params::array().ndarray_of(&[n], a.clone()))
                .expect("params");
            batch
                .notify("echo_array", Params::array().ndarray_of(&[1], vec![0f32]))
                .expect("params");
            batch
                .call("echo_array", Params::object().named_ndarray_of("x", &[n], b.clone()))
                .expect("params");
            let replies = client.batch(&batch).expect(&url);
            assert_eq!(replies.len(), 2, "{url}");
            // echo_array refuses anything but an attachment: both went as attachments.
            for (reply, sent) in replies.iter().zip([&a, &b]) {
                assert!(reply.is_binary(), "{url}: {:?}", String::from_utf8_lossy(reply.body()));
                let array = reply.result_array::<f32>().expect("an array");
                assert_eq!((&array.shape[..], &*array.data), (&[n][..], &sent[..]), "{url} n={n}");
            }
        }
    }
    server.stop();
    server.join();
}

#[test]
fn a_pipeline_of_binary_calls_runs_on_every_transport() {
    let server = serve();
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        // A new client learns from its first call whether the server takes binary messages.
        let mut client = Client::new(endpoint).expect("a client");
        let sent: Vec<Vec<f32>> = (0..24)
            .map(|i| floats(if i % 4 == 0 { 50_000 } else { 16 }, i))
            .collect();
        let calls = sent.iter().enumerate().map(|(i, data)| {
            let params = if i % 5 == 2 {
                Params::array().value(&i) // a JSON call among them
            } else {
                Params::array().ndarray_of(&[data.len()], data.clone())
            };
            (if i % 5 == 2 { "sum" } else { "echo_array" }, params)
        });
        let calls: Vec<_> = calls.collect();
        for round in 0..2 {
            let replies = client.pipeline(calls.iter().map(|(m, p)| (*m, p.clone()))).expect(&url);
            assert_eq!(replies.len(), sent.len(), "{url}");
            for (i, (reply, data)) in replies.iter().zip(&sent).enumerate() {
                if i % 5 == 2 {
                    assert!(!reply.is_binary(), "{url} {i}");
                    continue;
                }
                assert!(reply.is_binary(), "{url} round {round} call {i}");
                assert_eq!(
                    &*reply.result_array::<f32>().expect("an array").data,
                    &data[..],
                    "{url} {i}"
                );
            }
        }
    }
    server.stop();
    server.join();
}

#[test]
fn a_json_only_server_gets_batches_and_pipelines_in_base64_and_runs_each_call_once() {
    for http in [true, false] {
        let server = json_only(http);
        let endpoint = server.endpoint();
        let url = endpoint.url();
        let mut client = Client::new(endpoint).expect("a client");
        let mut batch = Batch::new();
        batch
            .call("echo", Params::array().attachment(b"foo".to_vec()))
            .expect("params");
        batch
            .call("echo", Params::array().ndarray_of(&[2], vec![1.5f32, -2.0]))
            .expect("params");
        let replies = client.batch(&batch).expect(&url);
        assert!(replies.iter().all(|reply| !reply.is_binary()), "{url}");
        assert_eq!(replies[0].result_bytes().expect("base64"), b"foo", "{url}");
        assert_eq!(
            &*replies[1].result_array::<f32>().expect(".npy").data,
            [1.5, -2.0],
            "{url}"
        );
        let replies = client
            .pipeline((0..5u8).map(|i| ("echo", Params::array().attachment(vec![i; 3]))))
            .expect(&url);
        for (i, reply) in (0..5u8).zip(&replies) {
            assert_eq!(reply.result_bytes().expect("base64"), [i; 3], "{url}");
        }
        assert_eq!(
            server.refused.load(Ordering::Relaxed),
            1,
            "{url}: refused once, then JSON"
        );
        assert_eq!(server.ran.load(Ordering::Relaxed), 7, "{url}: each call ran once");
        // A new client's pipeline learns it from its first call with attachments.
        let mut fresh = Client::new(Endpoint::parse(&url).expect("a URL")).expect("a client");
        let replies = fresh
            .pipeline((0..4u8).map(|i| ("echo", Params::array().attachment(vec![i; 2]))))
            .expect(&url);
        assert_eq!(replies.len(), 4, "{url}");
        assert_eq!(server.refused.load(Ordering::Relaxed), 2, "{url}");
        assert_eq!(server.ran.load(Ordering::Relaxed), 11, "{url}: each call ran once");
    }
}

/// `calls` calls from `threads` threads at once on one [`Multiplexed`], each echoing its
/// own float32 array (`method`) or bytes; every reply checked against what was sent.
fn multiplexed_echoes(endpoint: Endpoint, method: &str, threads: usize, calls: usize) {
    let url = endpoint.url();
    let (tx, rx) = std::sync::mpsc::channel();
    let mux = Multiplexed::new(endpoint, move || {
        let _ = tx.send(());
    })
    .expect("a multiplexed client");
    let mut sent = std::collections::HashMap::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mux = &mux;
                scope.spawn(move || {
                    (0..calls)
                        .map(|i| {
                            let id = (t * calls + i + 1) as u64;
                            let data = floats(if i % 3 == 0 { 40_000 } else { 8 }, id as usize);
                            let params = if method == "echo_array" {
                                Params::array().ndarray_of(&[data.len()], data.clone())
                            } else {
                                Params::array().attachment(bytemuck_free(&data))
                            };
                            let ticket = mux.submit_call(method, params, Some(id)).expect("params");
                            (ticket, (id, data))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in handles {
            sent.extend(handle.join().expect("a thread"));
        }
    });
    let mut done = Vec::new();
    while done.len() < sent.len() {
        rx.recv_timeout(std::time::Duration::from_secs(20)).expect(&url);
        mux.take(&mut done);
    }
    for completion in done {
        let (id, data) = &sent[&completion.ticket];
        let reply = Response::from_reply(completion.result.expect(&url));
        assert_eq!(reply.id(), Some(id.to_string().as_str()), "{url}");
        if method == "echo_array" {
            assert!(reply.is_binary(), "{url}: {:?}", String::from_utf8_lossy(reply.body()));
            assert_eq!(
                &*reply.result_array::<f32>().expect("an array").data,
                &data[..],
                "{url}"
            );
        } else {
            assert_eq!(reply.result_bytes().expect("bytes"), bytemuck_free(data), "{url}");
        }
    }
}

fn bytemuck_free(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn multiplexed_binary_calls_from_several_threads_on_every_transport() {
    let server = serve();
    for endpoint in endpoints(server.port()) {
        multiplexed_echoes(endpoint, "echo_array", 4, 12);
    }
    server.stop();
    server.join();
}

#[test]
fn a_json_only_server_gets_multiplexed_calls_in_base64_and_runs_each_once() {
    for http in [true, false] {
        let server = json_only(http);
        let endpoint = server.endpoint();
        let url = endpoint.url();
        multiplexed_echoes(endpoint, "echo", 3, 5);
        assert_eq!(
            server.refused.load(Ordering::Relaxed),
            1,
            "{url}: refused once, then JSON"
        );
        assert_eq!(server.ran.load(Ordering::Relaxed), 15, "{url}: each call ran once");
    }
}

/// The batch of `valid_batch_shares_section.json`, built with the client's API.
fn vector_batch() -> Batch {
    let mut batch = Batch::new();
    batch
        .call("hex", Params::array().attachment(b"foo".to_vec()))
        .expect("params");
    batch
        .call("hex", Params::array().attachment(vec![0xbe, 0xef]))
        .expect("params");
    batch
}

#[test]
fn a_batch_is_the_shared_section_vector_byte_for_byte_and_gets_its_replies() {
    let vector = vectors("")
        .into_iter()
        .find(|(name, _)| name == "valid_batch_shares_section.json")
        .expect("the vector")
        .1;
    let (body, json_len) = body_of(&vector);
    // What the client writes, read by a raw TCP server that answers the vector's reply.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let reply = serde_json::to_string(&vector["reply"]).expect("JSON");
    let reader = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("a client");
        let mut prefix = [0u8; 16];
        stream.read_exact(&mut prefix).expect("a prefix");
        let length = u64::from_le_bytes(prefix[8..16].try_into().expect("8 bytes"));
        let mut got = vec![0; usize::try_from(length).expect("a length")];
        stream.read_exact(&mut got).expect("the body");
        writeln!(stream, "{reply}").expect("the reply");
        (prefix, got)
    });
    let mut client = Client::new(Endpoint::new("127.0.0.1", port).with_protocol(Protocol::Tcp)).expect("a client");
    let replies = client.batch(&vector_batch()).expect("the batch");
    let (prefix, got) = reader.join().expect("the reader");
    assert_eq!(
        prefix,
        ucall_core::wire::Prefix::encode(json_len as u32, body.len() as u64)
    );
    assert_eq!(got, body, "the vector's body");
    assert_eq!(replies[1].result::<String>(), Ok("beef".to_owned()));
    // The spec server answers it on every transport.
    let server = serve();
    for endpoint in endpoints(server.port()) {
        let url = endpoint.url();
        let replies = Client::new(endpoint)
            .expect("a client")
            .batch(&vector_batch())
            .expect(&url);
        let got: Vec<Value> = replies
            .iter()
            .map(|reply| serde_json::from_slice(reply.body()).expect("JSON"))
            .collect();
        assert!(matches(&Value::Array(got.clone()), &vector["reply"]), "{url}: {got:?}");
    }
    server.stop();
    server.join();
}

#[test]
fn a_multiplexed_connection_carries_binary_messages_between_json_texts() {
    // `Multiplexed::submit_binary`: the JSON text, then the attachments from where they
    // lie; replies complete in submission order, a binary reply with its JSON length.
    let server = serve();
    let array: Vec<u8> = floats(50_000, 3).iter().flat_map(|f| f.to_le_bytes()).collect();
    for endpoint in endpoints(server.port()) {
        let (tx, rx) = std::sync::mpsc::channel();
        let mux = ucall_client::Multiplexed::new(endpoint, move || {
            let _ = tx.send(());
        })
        .expect("a connection");
        let mut section = ucall_core::jsonrpc::section::Section::new();
        let offset = section.attach(ucall_core::Bytes::from(array.clone()));
        let text = format!(
            r#"{{"jsonrpc":"2.0","method":"echo_array","params":[{{"$ucall":"ndarray","offset":{offset},"length":{},"dtype":"float32","shape":[50000]}}],"id":2}}"#,
            array.len()
        );
        let first = mux.submit(
            br#"{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":1}"#.to_vec(),
            true,
        );
        let second = mux.submit_binary(text.into_bytes(), section, true);
        let third = mux.submit(
            br#"{"jsonrpc":"2.0","method":"subtract","params":[9,3],"id":3}"#.to_vec(),
            true,
        );
        let mut done = Vec::new();
        while done.len() < 3 {
            rx.recv_timeout(std::time::Duration::from_secs(10))
                .expect("completions");
            mux.take(&mut done);
        }
        let tickets: Vec<_> = done.iter().map(|c| c.ticket).collect();
        assert_eq!(tickets, [first, second, third]);
        let replies: Vec<_> = done.into_iter().map(|c| c.result.expect("a reply")).collect();
        assert_eq!(replies[0].binary, None);
        let json_len = replies[1].binary.expect("a binary reply");
        let (text, section) = ucall_core::wire::split_body(&replies[1].body, json_len).expect("framed");
        assert!(std::str::from_utf8(text).unwrap().contains(r#""id":2"#));
        assert_eq!(
            &section[..array.len()],
            &array[..],
            "the array came back as an attachment"
        );
        assert!(String::from_utf8_lossy(&replies[2].body).contains(r#""result":6"#));
    }
}

#[test]
fn a_websocket_without_the_subprotocol_refuses_binary_messages_or_takes_their_plain_form() {
    // The upgrade offers no subprotocol, so the server selects none: a binary message would
    // be a frame it cannot read. `submit_binary` fails; `submit_binary_or` sends the plain
    // JSON text given; the blocking client says so before a message is built.
    let server = serve();
    let endpoint = || Endpoint::parse(&format!("ws://127.0.0.1:{}/", server.port())).expect("a URL");
    let mut client = Client::new(endpoint().with_binary(Some(false))).expect("a client");
    assert_eq!(client.websocket_binary().ok(), Some(false));
    assert_eq!(
        Client::new(endpoint()).expect("a client").websocket_binary().ok(),
        Some(true)
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let mux = ucall_client::Multiplexed::new(endpoint().with_binary(Some(false)), move || {
        let _ = tx.send(());
    })
    .expect("a connection");
    assert_eq!(mux.websocket_binary(), None, "no connection yet");
    let text = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"unhex","params":[{{"$ucall":"bytes","offset":0,"length":2}}],"id":{id}}}"#
        )
    };
    let attached = || {
        let mut section = ucall_core::jsonrpc::section::Section::new();
        section.attach(ucall_core::Bytes::from(vec![0xbe, 0xef]));
        section
    };
    let refused = mux.submit_binary(text(1).into_bytes(), attached(), true);
    let plain = br#"{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":2}"#.to_vec();
    let sent_plain = mux.submit_binary_or(text(2).into_bytes(), attached(), Some(plain), true);
    let mut done = Vec::new();
    while done.len() < 2 {
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("completions");
        mux.take(&mut done);
    }
    done.sort_by_key(|c| c.ticket);
    assert_eq!(done.iter().map(|c| c.ticket).collect::<Vec<_>>(), [refused, sent_plain]);
    let error = done[0].result.as_ref().expect_err("refused");
    assert!(
        error.message().contains("did not select the WebSocket subprotocol"),
        "{error:?}"
    );
    let reply = done[1].result.as_ref().expect("the plain form's reply");
    assert!(
        reply.binary.is_none() && String::from_utf8_lossy(&reply.body).contains(r#""result":2"#),
        "{reply:?}"
    );
    assert_eq!(mux.websocket_binary(), Some(false));
    server.stop();
    server.join();
}
