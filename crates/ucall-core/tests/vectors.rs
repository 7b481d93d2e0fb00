// SPDX-License-Identifier: Apache-2.0
//! Every JSON-RPC vector of `tests/vectors/jsonrpc` (format and comparison rule in
//! `tests/vectors/README.md`) run three ways: in memory through `Session::feed`, over
//! HTTP and over raw TCP. Each test reports every failing vector, not just the first.

mod common;

use std::path::{Path, PathBuf};

use common::json::{self, Json};
use common::rule::{check_all, follow_up, follow_up_differences, load_dir, reply_differences, Vector};
use common::{post, show, Conn};
use ucall_core::buffer::OutBuf;
use ucall_core::session::{Scratch, Session};
use ucall_core::{Limits, Router};

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/jsonrpc")
}

/// Every vector, sorted by name; fails listing every malformed file.
fn load_vectors() -> Vec<Vector> {
    load_dir(&vector_dir(), load_vector)
}

fn load_vector(name: &str, file: &Json) -> Result<Vector, String> {
    let Json::Object(members) = file else {
        return Err("not a JSON object".into());
    };
    const KNOWN: [&str; 8] = [
        "description",
        "source",
        "request",
        "request_base64",
        "reply",
        "reply_text_contains",
        "error_message_contains",
        "error_exact",
    ];
    if let Some((unknown, _)) = members.iter().find(|(k, _)| !KNOWN.contains(&k.as_str())) {
        return Err(format!("unknown member {unknown:?}"));
    }
    for required in ["description", "source"] {
        if file.get(required).and_then(Json::as_str).is_none() {
            return Err(format!("{required:?} must be a string"));
        }
    }
    let request = match (file.get("request"), file.get("request_base64")) {
        (Some(Json::Str(text)), None) => text.as_bytes().to_vec(),
        (None, Some(Json::Str(encoded))) => base64_decode(encoded)?,
        _ => return Err("exactly one of request (a string) and request_base64 (a string) is required".into()),
    };
    let reply = match file.get("reply") {
        None => return Err("\"reply\" is required".into()),
        Some(Json::Null) => None,
        Some(reply) => Some(reply.clone()),
    };
    let reply_text_contains = match file.get("reply_text_contains") {
        None => Vec::new(),
        Some(Json::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or("reply_text_contains: strings only")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("reply_text_contains must be an array".into()),
    };
    let error_message_contains = match file.get("error_message_contains") {
        None => None,
        Some(Json::Str(text)) => Some(text.clone()),
        Some(_) => return Err("error_message_contains must be a string".into()),
    };
    let error_exact = match file.get("error_exact") {
        None => false,
        Some(Json::Bool(exact)) => *exact,
        Some(_) => return Err("error_exact must be a boolean".into()),
    };
    Ok(Vector {
        name: name.to_string(),
        request,
        reply,
        reply_text_contains,
        error_message_contains,
        error_exact,
    })
}

/// Standard base64 (RFC 4648 §4) with padding.
fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return Err("base64 length is not a multiple of 4".into());
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (index, group) in bytes.chunks(4).enumerate() {
        let last = index == bytes.len() / 4 - 1;
        let padding = group.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 || (padding > 0 && !last) {
            return Err("misplaced base64 padding".into());
        }
        let mut bits = 0u32;
        for &c in &group[..4 - padding] {
            let value = ALPHABET
                .iter()
                .position(|&a| a == c)
                .ok_or_else(|| format!("{:?} is not base64", c as char))?;
            bits = bits << 6 | value as u32;
        }
        bits <<= 6 * padding as u32;
        out.extend_from_slice(&bits.to_be_bytes()[1..4 - padding]);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------

#[test]
fn vector_files_are_well_formed() {
    let vectors = load_vectors();
    let spec: Vec<&str> = vectors
        .iter()
        .map(|v| v.name.as_str())
        .filter(|n| n.starts_with("spec_"))
        .collect();
    assert_eq!(spec.len(), 15, "JSON-RPC 2.0 §7 has 15 examples: {spec:?}");
    for (i, name) in spec.iter().enumerate() {
        assert!(
            name.starts_with(&format!("spec_{:02}_", i + 1)),
            "{name} out of sequence"
        );
    }
    let bad: Vec<&str> = vectors
        .iter()
        .map(|v| v.name.as_str())
        .filter(|n| {
            !(n.starts_with("spec_") || n.starts_with("valid_") || n.starts_with("invalid_"))
                || !n
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        })
        .collect();
    assert!(bad.is_empty(), "badly named vectors: {bad:?}");
    // The comparison rule itself: the expected reply must pass against its own text.
    check_all("against their own reply", &vectors, |vector| match &vector.reply {
        Some(reply) if vector.reply_text_contains.is_empty() && vector.error_message_contains.is_none() => {
            reply_differences(vector, reply.to_string().as_bytes())
        }
        _ => Vec::new(),
    });
}

#[test]
fn json_reader_is_strict_and_keeps_number_kinds() {
    for bad in [
        "{\"a\":1,\"a\":2}",
        "[1,]",
        "NaN",
        "01",
        "1.",
        "\"\u{1}\"",
        "\"\\ud800\"",
        "{} {}",
        "'a'",
        "[1",
    ] {
        assert!(json::parse(bad.as_bytes()).is_err(), "{bad} was accepted");
    }
    let mut out = Vec::new();
    json::differences(&json::json("19"), &json::json("19.0"), "$", &mut out);
    json::differences(&json::json("true"), &json::json("1"), "$", &mut out);
    json::differences(&json::json("[1,2]"), &json::json("[2,1]"), "$", &mut out);
    json::differences(
        &json::json("123456789012345678901234567890"),
        &json::json("123456789012345678901234567891"),
        "$",
        &mut out,
    );
    json::differences(
        &json::json(r#"{"a":1}"#),
        &json::json(r#"{"a":1,"b":2}"#),
        "$",
        &mut out,
    );
    assert_eq!(out.len(), 6, "{out:#?}");
    out.clear();
    json::differences(
        &json::json(r#"{"a":[1,{"b":"\u00e9\ud83d\ude00"}],"c":-0}"#),
        &json::json(r#"{"c":0,"a":[1,{"b":"é😀"}]}"#),
        "$",
        &mut out,
    );
    json::differences(&json::json("1e2"), &json::json("100.0"), "$", &mut out);
    assert_eq!(out, Vec::<String>::new());
    assert_eq!(base64_decode("eyJhIjoxfQ==").unwrap(), br#"{"a":1}"#);
    assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
    assert!(base64_decode("YW=I").is_err());
}

/// `request` (a vector's, or a variant of it) posted in memory, then a follow-up on the
/// same connection: what differs from the vector's reply and the follow-up's.
fn http_in_memory(
    vector: &Vector,
    request: &[u8],
    router: &Router,
    limits: &Limits,
    scratch: &mut Scratch,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut session = Session::new();
    let mut input = post("/", request);
    input.extend_from_slice(&post("/", follow_up().as_bytes()));
    let (out, progress) = common::feed(&mut session, &input, router, limits, scratch);
    if progress.close {
        problems.push("the session closes after the reply".into());
    }
    let responses = match common::parse_responses(&out) {
        Ok(responses) => responses,
        Err(e) => {
            problems.push(e);
            return problems;
        }
    };
    let [first, second] = &responses[..] else {
        problems.push(format!("expected 2 responses, got {}: {}", responses.len(), show(&out)));
        return problems;
    };
    problems.extend(http_reply_differences(vector, first));
    problems.extend(follow_up_differences(&second.body));
    problems
}

/// Every vector padded with whitespace to past `SIMD_PARSE_FROM`, so that the parser for
/// large messages reads it: both parsers must accept and reject the same texts.
#[test]
fn vectors_in_memory_as_large_messages() {
    let vectors = load_vectors();
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();
    let half = ucall_core::jsonrpc::message::SIMD_PARSE_FROM / 2;
    check_all("padded to a large message", &vectors, |vector| {
        let mut request = vec![b'\n'; half];
        request.extend_from_slice(&vector.request);
        request.resize(request.len() + half, b' ');
        http_in_memory(vector, &request, router, &limits, &mut scratch)
    });
}

#[test]
fn vectors_in_memory() {
    let vectors = load_vectors();
    let builder = common::spec::register(ucall_core::Server::builder());
    let router = builder.router();
    let limits = Limits::default();
    let mut scratch = Scratch::default();

    check_all("in memory over HTTP framing", &vectors, |vector| {
        http_in_memory(vector, &vector.request, router, &limits, &mut scratch)
    });

    check_all("in memory over raw TCP framing", &vectors, |vector| {
        let mut problems = Vec::new();
        let mut session = Session::new();
        if vector.is_parse_error() {
            // A text that is not JSON: the stream cannot go on after it.
            let mut input = vector.request.clone();
            input.push(b'\n');
            let (out, progress) = common::feed(&mut session, &input, router, &limits, &mut scratch);
            let (out, closed) = if progress.close {
                (out, true)
            } else {
                // Cut short: only the end of input tells.
                let mut end = OutBuf::new();
                session.end_of_input(&input, &mut end, &mut common::context(router, &limits, &mut scratch));
                let mut all = out;
                all.extend_from_slice(&end.to_vec());
                (all, true)
            };
            if !closed {
                problems.push("the session does not close after a -32700".into());
            }
            match out.strip_suffix(b"\n") {
                Some(line) if !line.contains(&b'\n') => problems.extend(reply_differences(vector, line)),
                _ => problems.push(format!("expected one reply line, got {}", show(&out))),
            }
            return problems;
        }
        let mut input = vector.request.clone();
        input.push(b'\n');
        input.extend_from_slice(follow_up().as_bytes());
        let (out, progress) = common::feed(&mut session, &input, router, &limits, &mut scratch);
        if progress.close {
            problems.push("the session closes after the reply".into());
        }
        let Some(body) = out.strip_suffix(b"\n") else {
            problems.push(format!("the output does not end with a newline: {}", show(&out)));
            return problems;
        };
        let lines: Vec<&[u8]> = body.split(|&c| c == b'\n').collect();
        match (&vector.reply, &lines[..]) {
            (None, [follow]) => problems.extend(follow_up_differences(follow)),
            (Some(_), [reply, follow]) => {
                problems.extend(reply_differences(vector, reply));
                problems.extend(follow_up_differences(follow));
            }
            _ => problems.push(format!("unexpected lines: {}", show(&out))),
        }
        problems
    });
}

/// Where an HTTP response to `POST /` differs from what the vector asks.
fn http_reply_differences(vector: &Vector, response: &common::Response) -> Vec<String> {
    let mut problems = Vec::new();
    if vector.reply.is_none() {
        if response.status != 204 || !response.body.is_empty() {
            problems.push(format!(
                "expected 204 with no body, got {} {}",
                response.status,
                show(&response.body)
            ));
        }
        return problems;
    }
    if response.status != 200 {
        problems.push(format!(
            "expected status 200, got {} {}",
            response.status,
            show(&response.body)
        ));
    }
    let media_type = response
        .header("content-type")
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    if media_type.as_deref() != Some("application/json") {
        problems.push(format!("Content-Type: expected application/json, got {media_type:?}"));
    }
    problems.extend(reply_differences(vector, &response.body));
    problems
}

#[test]
fn vectors_over_http() {
    common::for_each_engine(|engine| {
        let vectors = load_vectors();
        let server = common::serve(engine);
        check_all("over HTTP", &vectors, |vector| {
            let mut conn = Conn::to(&server);
            conn.send(&post("/", &vector.request));
            let mut problems = match conn.try_read_response() {
                Ok(response) => http_reply_differences(vector, &response),
                Err(e) => return vec![e],
            };
            // The connection stays open after every one of these replies.
            conn.send(&post("/", follow_up().as_bytes()));
            match conn.try_read_response() {
                Ok(response) => problems.extend(follow_up_differences(&response.body)),
                Err(e) => problems.push(format!("follow-up on the same connection: {e}")),
            }
            problems
        });
    });
}

#[test]
fn vectors_over_tcp() {
    common::for_each_engine(|engine| {
        let vectors = load_vectors();
        let server = common::serve(engine);
        check_all("over raw TCP", &vectors, |vector| {
            let mut conn = Conn::to(&server);
            if vector.is_parse_error() {
                // The server cannot tell where a broken text ends: end the input, then it
                // answers -32700 and closes.
                conn.send(&vector.request);
                conn.shutdown_write();
                let mut problems = match conn.try_read_line() {
                    Ok(line) => reply_differences(vector, &line),
                    Err(e) => return vec![e],
                };
                match conn.read_until_closed(common::IO_TIMEOUT) {
                    Ok(extra) if extra.is_empty() => {}
                    Ok(extra) => problems.push(format!("more after the -32700: {}", show(&extra))),
                    Err(_) => problems.push("not closed after the -32700".into()),
                }
                return problems;
            }
            let mut text = vector.request.clone();
            text.push(b'\n');
            conn.send(&text);
            let mut problems = Vec::new();
            if vector.reply.is_some() {
                match conn.try_read_line() {
                    Ok(line) => problems.extend(reply_differences(vector, &line)),
                    Err(e) => return vec![e],
                }
            }
            // Nothing else was sent for the vector: the next line answers the next request.
            conn.send(format!("{}\n", follow_up()).as_bytes());
            match conn.try_read_line() {
                Ok(line) => problems.extend(follow_up_differences(&line)),
                Err(e) => problems.push(format!("follow-up: {e}")),
            }
            problems
        });
    });
}

#[test]
fn vectors_pipelined_on_one_tcp_connection() {
    // Every vector that leaves the stream usable, back to back in one write: the replies
    // come one line each, in request order, notifications leaving no line.
    common::for_each_engine(|engine| {
        let vectors = load_vectors();
        let usable: Vec<&Vector> = vectors.iter().filter(|v| !v.is_parse_error()).collect();
        let server = common::serve(engine);
        let mut conn = Conn::to(&server);
        let mut stream = Vec::new();
        for vector in &usable {
            stream.extend_from_slice(&vector.request);
            if vector.request.last().is_some_and(u8::is_ascii_alphanumeric) {
                // A bare word (`42`, `null`) runs on into a word after it: end it.
                stream.push(b'\n');
            }
        }
        stream.extend_from_slice(follow_up().as_bytes());
        conn.send(&stream);
        let mut failed = Vec::new();
        for vector in usable.iter().filter(|v| v.reply.is_some()) {
            let line = conn.read_line();
            let problems = reply_differences(vector, &line);
            if !problems.is_empty() {
                failed.push(format!("--- {}\n  {}", vector.name, problems.join("\n  ")));
            }
        }
        failed.extend(follow_up_differences(&conn.read_line()));
        assert!(failed.is_empty(), "pipelined vectors fail:\n{}", failed.join("\n"));
    });
}
