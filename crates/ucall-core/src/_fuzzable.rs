// SPDX-License-Identifier: Apache-2.0
//! One entry point per parser and state machine, for the fuzz targets in `fuzz/` and for
//! the replay of their regression vectors (`tests/fuzz_vectors.rs`).
//!
//! Each function takes arbitrary bytes, runs one piece of protocol code on them and
//! panics when something that must hold whatever the input does not: a panic is a finding.
//! The checks live here rather than in the targets so that they follow the protocol code
//! as it changes (`cargo test` compiles and runs them on stable) and so that the targets
//! need no access to the modules themselves.
//!
//! Targets that split their input take the split points from its first byte ([`Splits`]):
//! libFuzzer mutates that byte like any other, so it explores splits and content together.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::buffer::OutBuf;
use crate::defer::{Sink, Target};
use crate::dispatch::{self, Deferrals};
use crate::http1::chunked::{ChunkError, ChunkedDecoder};
use crate::http1::{self, HeadStatus};
use crate::jsonrpc::message::{self, Envelope};
use crate::params::base64 as bytes_param;
use crate::session::{Context, Limits, Scratch, Session};
use crate::stream::{Frame, Framer};
use crate::{wire, ws, Server, ServerBuilder};

/// The names of the entry points, as the fuzz targets and the vector folders are named.
pub const TARGETS: &[&str] = &[
    "http_head",
    "chunked_body",
    "ws_frames",
    "tcp_framing",
    "jsonrpc",
    "jsonrpc_vs_serde",
    "rest_query",
    "bytes_params",
    "session",
    "binary_messages",
];

/// Run the entry point called `target` on `data`; `false` when there is none by that name.
pub fn run(target: &str, data: &[u8]) -> bool {
    match target {
        "http_head" => http_head(data),
        "chunked_body" => chunked_body(data),
        "ws_frames" => ws_frames(data),
        "tcp_framing" => tcp_framing(data),
        "jsonrpc" => jsonrpc_messages(data),
        "jsonrpc_vs_serde" => jsonrpc_vs_serde(data),
        "rest_query" => rest_query(data),
        "bytes_params" => bytes_params(data),
        "session" => session(data),
        "binary_messages" => binary_messages(data),
        _ => return false,
    }
    true
}

/// Split points drawn from the first byte of a fuzz input (xorshift: reproducible).
pub struct Splits(u64);

impl Splits {
    /// The generator seeded by `data[0]` and the rest of `data`, the input to split.
    #[must_use]
    pub fn from_input(data: &[u8]) -> (Self, &[u8]) {
        match data.split_first() {
            Some((&seed, rest)) => (
                Splits(0x9E37_79B9_7F4A_7C15 ^ u64::from(seed).wrapping_mul(0x0100_0000_01B3)),
                rest,
            ),
            None => (Splits(1), data),
        }
    }

    /// The length of the next piece of the `left` bytes still to feed (at least 1).
    pub fn next_piece(&mut self, left: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        // Mostly small pieces (a byte to a few dozen), sometimes all that is left.
        let piece = if r & 7 == 0 { left } else { 1 + (r >> 8) as usize % 48 };
        piece.clamp(1, left.max(1))
    }
}

/// HTTP/1.1 request heads: a parsed head never claims more bytes than it was given, a
/// complete head stays complete (same length, same framing) with more bytes after it, and
/// its request-target is part of the input.
pub fn http_head(data: &[u8]) {
    let mut target = String::new();
    let (max_head, max_body) = (4096, 1 << 20);
    match http1::parse_head(data, max_head, max_body, &mut target) {
        HeadStatus::Complete(head, used) => {
            assert!(
                used <= data.len() && used <= max_head,
                "head of {used} bytes out of {}",
                data.len()
            );
            let mut longer = data.to_vec();
            longer.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            let mut again = String::new();
            match http1::parse_head(&longer, max_head, max_body, &mut again) {
                HeadStatus::Complete(second, used_again) => {
                    assert_eq!(used_again, used, "the head's length depends on what follows it");
                    assert_eq!(second.framing, head.framing);
                    assert_eq!(again, target);
                }
                other => panic!("a complete head is no longer complete with bytes after it: {other:?}"),
            }
        }
        HeadStatus::Partial => assert!(data.len() <= max_head, "{} bytes and still partial", data.len()),
        HeadStatus::Rejected(reject) => assert!(!reject.reason.is_empty()),
    }
}

/// Chunked bodies: decoding in pieces gives what decoding at once gives (the same body,
/// the same error), consumes no more than it is given, and respects the body limit.
pub fn chunked_body(data: &[u8]) {
    let (mut splits, input) = Splits::from_input(data);
    let (max_body, max_trailers) = (2048, 512);
    let whole = decode_chunked(input, &mut |left| left, max_body, max_trailers);
    let pieces = decode_chunked(input, &mut |left| splits.next_piece(left), max_body, max_trailers);
    assert_eq!(whole, pieces, "the split changed the outcome");
    if let Ok((body, _, _)) = &whole {
        assert!(
            body.len() <= max_body,
            "a body of {} bytes passed the limit",
            body.len()
        );
    }
}

/// (body, bytes consumed, complete) or the error, feeding `input` in pieces.
fn decode_chunked(
    input: &[u8],
    piece: &mut dyn FnMut(usize) -> usize,
    max_body: usize,
    max_trailers: usize,
) -> Result<(Vec<u8>, usize, bool), ChunkError> {
    let mut decoder = ChunkedDecoder::default();
    let (mut body, mut buffered, mut consumed, mut fed) = (Vec::new(), Vec::new(), 0, 0);
    while fed < input.len() {
        let n = piece(input.len() - fed);
        buffered.extend_from_slice(&input[fed..fed + n]);
        fed += n;
        let (used, done) = decoder.decode(&buffered, &mut body, max_body, max_trailers)?;
        assert!(used <= buffered.len(), "consumed {used} of {} bytes", buffered.len());
        buffered.drain(..used);
        consumed += used;
        if done {
            return Ok((body, consumed, true));
        }
    }
    Ok((body, consumed, false))
}

/// WebSocket frames: a header read from the input lies within it and obeys §5 (masked,
/// control frames short and final); a frame the server writes reads back the same.
pub fn ws_frames(data: &[u8]) {
    let max_payload = 1 << 16;
    let mut at = 0;
    while at < data.len() {
        match ws::read_header(&data[at..], max_payload) {
            ws::Header::Frame(header) => {
                assert!(header.header_len <= data.len() - at && (6..=14).contains(&header.header_len));
                assert!(header.payload_len <= max_payload);
                assert!(!header.opcode.is_control() || (header.fin && header.payload_len <= 125));
                let end = (at + header.header_len)
                    .saturating_add(header.payload_len)
                    .min(data.len());
                let mut plain = Vec::new();
                ws::unmask_into(&data[at + header.header_len..end], header.mask, &mut plain);
                assert_eq!(plain.len(), end - at - header.header_len);
                at = end;
            }
            ws::Header::Partial => break,
            ws::Header::Fail(code) => {
                assert!(matches!(code, ws::close::PROTOCOL_ERROR | ws::close::MESSAGE_TOO_BIG));
                break;
            }
        }
    }
    // What the server sends, masked as a client would, reads back as the same frame.
    let mut frame = Vec::new();
    ws::frame(ws::Opcode::Text, data, &mut frame);
    let header_len = frame.len() - data.len();
    frame[1] |= 0x80;
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut masked = frame[..header_len].to_vec();
    masked.extend_from_slice(&mask);
    ws::unmask_into(data, mask, &mut masked);
    match ws::read_header(&masked, usize::MAX) {
        ws::Header::Frame(header) => {
            assert_eq!(
                (header.fin, header.opcode, header.payload_len),
                (true, ws::Opcode::Text, data.len())
            );
            let mut plain = Vec::new();
            ws::unmask_into(&masked[header.header_len..], header.mask, &mut plain);
            assert_eq!(plain, data);
        }
        other => panic!("a frame the server wrote does not read back: {other:?}"),
    }
}

/// Raw TCP framing: the texts found when the input comes in pieces are the texts found
/// when it comes at once, and each lies within the input.
pub fn tcp_framing(data: &[u8]) {
    let (mut splits, input) = Splits::from_input(data);
    let max_len = 1024;
    let whole = frame_texts(input, &mut |left| left, max_len);
    let pieces = frame_texts(input, &mut |left| splits.next_piece(left), max_len);
    assert_eq!(whole, pieces, "the split changed the framing");
}

/// The texts framed, then how framing ended (`None`: input ran out).
fn frame_texts(input: &[u8], piece: &mut dyn FnMut(usize) -> usize, max_len: usize) -> (Vec<Vec<u8>>, Option<Frame>) {
    let mut framer = Framer::default();
    let (mut texts, mut buffered, mut fed) = (Vec::new(), Vec::new(), 0);
    while fed < input.len() {
        let n = piece(input.len() - fed);
        buffered.extend_from_slice(&input[fed..fed + n]);
        fed += n;
        loop {
            match framer.next(&buffered, max_len) {
                Frame::Complete(range) => {
                    assert!(range.start < range.end && range.end <= buffered.len());
                    assert!(!buffered[range.start].is_ascii_whitespace());
                    texts.push(buffered[range.clone()].to_vec());
                    buffered.drain(..range.end);
                    framer.reset();
                }
                Frame::Incomplete { skip } => {
                    assert!(skip <= buffered.len());
                    break;
                }
                end @ (Frame::Invalid | Frame::TooLarge) => return (texts, Some(end)),
            }
        }
    }
    // A bare word (`42`) ends with the input.
    if let Some(range) = framer.finish(&buffered) {
        assert!(range.start < range.end && range.end <= buffered.len());
        texts.push(buffered[range].to_vec());
    }
    (texts, None)
}

/// The procedures the message and session targets call: `sum` (two integers), `echo`
/// (its `data` back) and `ping` (no params, `"pong"`).
fn procedures() -> ServerBuilder {
    Server::builder()
        .procedure("sum", |call| {
            Ok(call.get::<i64>(0, "a")?.wrapping_add(call.get::<i64>(1, "b")?))
        })
        .procedure("echo", |call| call.get::<serde_json::Value>(0, "data"))
        .procedure("ping", |_| Ok("pong"))
        .procedure("len", |call| Ok(call.params().bytes_view(0, "data")?.len()))
}

/// JSON-RPC requests and batches through the codec and a router: every reply is one JSON
/// value, a single request gets at most one reply and a batch at most one per element.
pub fn jsonrpc_messages(data: &[u8]) {
    let builder = procedures();
    let mut scratch = dispatch::Scratch::default();
    let mut next_slot = 0;
    let max_batch = 16;
    let mut deferrals = Deferrals {
        target: None,
        next_slot: &mut next_slot,
        streams: false,
        stream_attachments: false,
        attachments: None,
    };
    let mut message = dispatch::Message {
        context: &crate::context::NONE,
        router: builder.router(),
        max_batch,
        deferrals: &mut deferrals,
    };
    let mut out = Vec::new();
    let outcome = message.process(data, &mut scratch, &mut out);
    match outcome {
        dispatch::Outcome::Silent => assert!(out.is_empty(), "a silent outcome wrote {out:?}"),
        dispatch::Outcome::Replied | dispatch::Outcome::ParseError => {
            // The grammar only: an id is echoed as sent, and RFC 8259 §8.2 lets a string hold
            // an unpaired surrogate escape that a decoder into text may refuse.
            let text = String::from_utf8_lossy(&out);
            if message::is_batch(&out) {
                let replies: Vec<&RawValue> = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("batch reply is not a JSON array ({e}): {text}"));
                assert!(!replies.is_empty(), "an empty batch reply");
                assert!(replies.len() <= max_batch.max(1), "{} replies", replies.len());
            } else if let Err(e) = serde_json::from_str::<IgnoredAny>(&text) {
                panic!("reply is not JSON ({e}): {text}");
            }
        }
    }
}

/// The JSON-RPC reader against serde_json: the same texts accepted and refused, and for
/// each request object the same verdict and the same raw `id`, `method` and `params`.
/// Inputs whose first byte is odd are also padded past the size where sonic-rs reads them,
/// so both parsers are held to serde_json.
pub fn jsonrpc_vs_serde(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let padded;
    let text = if flags & 1 == 1 {
        padded = format!("{text}{}", " ".repeat(message::SIMD_PARSE_FROM));
        padded.as_str()
    } else {
        text
    };
    let grammar = serde_json::from_str::<IgnoredAny>(text).is_ok();
    // RFC 8259 §6 lets a parser limit the range of numbers: a number that no f64 holds
    // (1e999) where the reader decodes it (a bare text, a batch element) makes the message
    // unreadable (-32700), as serde_json decoding it says; an id or params keep it raw.
    let out_of_range = grammar
        && serde_json::from_str::<serde_json::Value>(text)
            .is_err_and(|e| e.to_string().starts_with("number out of range"));
    // RFC 8259 §8.2: a string with an unpaired surrogate escape (`"\\ud8e9"`) matches the
    // grammar, and what a parser makes of it is unpredictable: serde_json skips it where it
    // ignores a value, the reader refuses it. Either verdict is allowed for a text that holds
    // a surrogate escape.
    let unpaired_surrogate = text.as_bytes().windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && w[2].eq_ignore_ascii_case(&b'd')
            && matches!(w[3].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f')
    });
    let out_of_range = out_of_range || unpaired_surrogate;
    let accepted = grammar && !out_of_range;
    if message::is_batch(text.as_bytes()) {
        let mut elements = Vec::new();
        let ours = message::parse_batch(text, &mut elements);
        assert!(
            ours.is_ok() == accepted || out_of_range,
            "accept/reject differs from serde_json for {text:?}"
        );
        if ours.is_ok() {
            let reference: Vec<&RawValue> = serde_json::from_str(text).expect("serde_json accepted it");
            assert_eq!(elements.len(), reference.len());
            for (element, raw) in elements.iter().zip(reference) {
                compare_envelope(&element.envelope(text), raw.get());
            }
        }
    } else {
        let ours = message::parse_request(text);
        assert!(
            ours.is_ok() == accepted || out_of_range,
            "accept/reject differs from serde_json for {text:?}"
        );
        if let Ok(envelope) = ours {
            compare_envelope(&envelope, text);
        }
    }
}

/// Check `envelope` against what serde_json makes of `text`, one request object's text.
fn compare_envelope(envelope: &Envelope<'_>, text: &str) {
    // A map keeps the last of repeated members, as the reader does.
    let Ok(members) = serde_json::from_str::<BTreeMap<String, &RawValue>>(text) else {
        assert!(
            matches!(envelope, Envelope::Invalid { id: None, .. }),
            "not an object, yet {envelope:?}"
        );
        return;
    };
    let raw = |name: &str| members.get(name).map(|value| value.get());
    let id = raw("id").filter(|id| matches!(id.as_bytes()[0], b'"' | b'-' | b'0'..=b'9' | b'n'));
    let id_ok = raw("id").is_none() || id.is_some();
    let jsonrpc_ok = raw("jsonrpc")
        .and_then(|v| serde_json::from_str::<String>(v).ok())
        .as_deref()
        == Some("2.0");
    let method = raw("method").and_then(|v| serde_json::from_str::<String>(v).ok());
    let params_ok = raw("params").is_none_or(|p| p.starts_with(['[', '{']));
    match envelope {
        Envelope::Request(request) => {
            assert!(id_ok && jsonrpc_ok && params_ok, "accepted as a request: {text:?}");
            assert_eq!(Some(request.method.as_ref()), method.as_deref(), "method of {text:?}");
            assert_eq!(request.params, raw("params"), "params of {text:?}");
            assert_eq!(request.id, id, "id of {text:?}");
        }
        Envelope::Invalid { id: ours, .. } => {
            assert!(
                !(id_ok && jsonrpc_ok && method.is_some() && params_ok),
                "refused a valid request: {text:?}"
            );
            assert_eq!(*ours, id, "id kept for the error of {text:?}");
        }
    }
}

/// REST query strings: a target that is valid percent-encoded UTF-8 gives a procedure name,
/// and its query becomes one JSON object with one member per non-empty pair.
pub fn rest_query(data: &[u8]) {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    let mut name = Vec::new();
    let Some(query) = http1::rest::split_target(target, &mut name) else {
        return;
    };
    assert!(std::str::from_utf8(&name).is_ok());
    let (mut scratch, mut params) = (Vec::new(), Vec::new());
    if http1::rest::query_to_params(query, &mut scratch, &mut params) {
        // The grammar only: a value such as 1e999 is valid JSON that no f64 holds, and is
        // passed on as sent, for the procedure's parameter types to accept or refuse.
        let object: BTreeMap<String, &RawValue> = match serde_json::from_slice(&params) {
            Ok(object) => object,
            Err(e) => panic!(
                "params are not a JSON object ({e}): {}",
                String::from_utf8_lossy(&params)
            ),
        };
        let pairs = query.split('&').filter(|p| !p.is_empty()).count();
        assert!(object.len() <= pairs, "{} members from {pairs} pairs", object.len());
    }
}

/// `bytes` params: the one base64 decoder against the `base64` crate set to its rule (the
/// standard alphabet, no whitespace, zero bits under the padding; padding optional, but
/// whole when present), through each of its entry points.
pub fn bytes_params(data: &[u8]) {
    use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
    use base64::engine::DecodePaddingMode;
    use base64::Engine as _;

    const PADDED: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
    );
    const UNPADDED: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::RequireNone),
    );
    let reference = if data.ends_with(b"=") {
        PADDED.decode(data)
    } else {
        UNPADDED.decode(data)
    }
    .ok();
    let text = String::from_utf8_lossy(data);
    assert_eq!(bytes_param::decode(data), reference, "decode({text:?})");
    if let Some(expected) = &reference {
        assert_eq!(
            bytes_param::decoded_len(data),
            Some(expected.len()),
            "decoded_len({text:?})"
        );
        let mut room = vec![0xa5; expected.len() + 3];
        assert_eq!(bytes_param::decode_to_slice(data, &mut room), Some(expected.len()));
        assert_eq!(&room[..expected.len()], expected.as_slice());
        assert!(
            room[expected.len()..].iter().all(|&b| b == 0xa5),
            "wrote past the decoded bytes"
        );
        if !expected.is_empty() {
            let mut short = vec![0; expected.len() - 1];
            assert_eq!(
                bytes_param::decode_to_slice(data, &mut short),
                None,
                "a buffer one byte short"
            );
        }
        // Both spellings of the bytes decode to them.
        assert_eq!(
            bytes_param::decode(PADDED.encode(expected).as_bytes()).as_ref(),
            Some(expected)
        );
        assert_eq!(
            bytes_param::decode(UNPADDED.encode(expected).as_bytes()).as_ref(),
            Some(expected)
        );
    }
}

/// Whole conversations through a session, in pieces: it never consumes more than it was
/// given, keeps what it buffers within its limits, answers raw TCP with one JSON text per
/// line, and answers raw TCP the same however the input was split.
pub fn session(data: &[u8]) {
    let (mut splits, input) = Splits::from_input(data);
    let builder = procedures();
    let limits = Limits {
        max_body_bytes: 4096,
        max_head_bytes: 1024,
        max_batch: 8,
        ..Limits::default()
    };
    let pieces = converse(input, &mut |left| splits.next_piece(left), builder.router(), &limits);
    // An uppercase letter starts an HTTP method; anything else is raw TCP.
    let is_tcp = input
        .iter()
        .find(|c| !c.is_ascii_whitespace())
        .is_some_and(|c| !c.is_ascii_uppercase());
    if is_tcp {
        for line in pieces.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            assert!(
                serde_json::from_slice::<IgnoredAny>(line).is_ok(),
                "raw TCP reply is not JSON: {}",
                String::from_utf8_lossy(line)
            );
        }
        let whole = converse(input, &mut |left| left, builder.router(), &limits);
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&pieces),
            "the split changed the replies"
        );
    }
}

/// Binary messages (docs/wire.md) over raw TCP: the input after its split byte is a
/// length byte, a JSON text that long and an attachment section, framed here with a valid
/// prefix so that mutations explore the text and its placeholders rather than die at the
/// prefix. The message is sent twice, then the raw input (prefix and all, as it came):
/// however split, the replies are the same, one JSON text per line.
pub fn binary_messages(data: &[u8]) {
    let (mut splits, input) = Splits::from_input(data);
    let Some((&json_len, rest)) = input.split_first() else {
        return;
    };
    let json_len = usize::from(json_len).min(rest.len());
    let (text, section) = rest.split_at(json_len);
    let mut body = text.to_vec();
    if !section.is_empty() {
        body.resize(wire::align(text.len()), 0);
        body.extend_from_slice(section);
    }
    let mut message = wire::Prefix::encode(json_len as u32, body.len() as u64).to_vec();
    message.extend_from_slice(&body);
    let mut conversation = message.clone();
    conversation.extend_from_slice(&message);
    conversation.extend_from_slice(rest);
    assert_eq!(
        wire::split_message(&message),
        Ok((text, section)),
        "the split disagrees"
    );
    let builder = procedures();
    let limits = Limits {
        max_body_bytes: 4096,
        max_batch: 8,
        ..Limits::default()
    };
    let pieces = converse(
        &conversation,
        &mut |left| splits.next_piece(left),
        builder.router(),
        &limits,
    );
    for line in pieces.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        assert!(
            serde_json::from_slice::<IgnoredAny>(line).is_ok(),
            "raw TCP reply is not JSON: {}",
            String::from_utf8_lossy(line)
        );
    }
    let whole = converse(&conversation, &mut |left| left, builder.router(), &limits);
    assert_eq!(whole, pieces, "the split changed the replies");
}

/// The context an engine gives a session: deferring available (connection 0, generation
/// 0), not draining. For the in-memory drivers here and in the tests (`tests/alloc.rs`,
/// `tests/fuzz_smoke.rs`).
pub fn engine_context<'a>(
    router: &'a crate::Router,
    limits: &'a Limits,
    date: &'a [u8],
    scratch: &'a mut Scratch,
    sink: &'a Arc<Sink>,
) -> Context<'a> {
    Context {
        router,
        limits,
        date,
        scratch,
        defer: Some(Target {
            sink,
            conn: 0,
            generation: 0,
            presence: None,
            cancellation: None,
        }),
        draining: false,
    }
}

/// What a session writes when `input` arrives in pieces, then the input ends.
fn converse(input: &[u8], piece: &mut dyn FnMut(usize) -> usize, router: &crate::Router, limits: &Limits) -> Vec<u8> {
    let sink = Sink::new(|| {});
    let mut scratch = Scratch::default();
    let date = [b'x'; 29];
    let mut session = Session::new();
    let mut out = OutBuf::new();
    let (mut buffered, mut fed, mut closed) = (Vec::new(), 0, false);
    while fed < input.len() && !closed {
        let n = piece(input.len() - fed);
        buffered.extend_from_slice(&input[fed..fed + n]);
        fed += n;
        loop {
            let mut ctx = engine_context(router, limits, &date, &mut scratch, &sink);
            let progress = session.feed(&buffered, &mut out, &mut ctx, usize::MAX);
            assert!(progress.consumed <= buffered.len(), "consumed more than given");
            buffered.drain(..progress.consumed);
            closed = progress.close;
            if progress.consumed == 0 || closed || buffered.is_empty() {
                break;
            }
        }
        // What is left after the session closed is never read.
        assert!(
            closed || buffered.len() <= limits.max_body_bytes + limits.max_head_bytes + 64,
            "{} bytes buffered beyond the limits",
            buffered.len()
        );
    }
    if !closed {
        let mut ctx = engine_context(router, limits, &date, &mut scratch, &sink);
        session.end_of_input(&buffered, &mut out, &mut ctx);
    }
    out.to_vec()
}
