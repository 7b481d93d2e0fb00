// SPDX-License-Identifier: Apache-2.0
//! WebSocket (RFC 6455) through a session, in memory: the opening handshake, messages
//! carrying JSON-RPC, fragmentation, control frames, the failures §5 and §7 require, and
//! the size of a message in progress the session tells its engine (HTTP too).

mod common;

use common::{spec, ws_fragment};
use ucall_core::buffer::OutBuf;
use ucall_core::session::{Context, Limits, Progress, Scratch, Session};
use ucall_core::Server;

const HANDSHAKE: &str = "GET /rpc HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
/// Server frames in `bytes`: (opcode, payload). Server frames are never masked.
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert_eq!(bytes[0] & 0x80, 0x80, "server frames are final");
        assert_eq!(bytes[1] & 0x80, 0, "server frames are not masked");
        let (len, at) = match bytes[1] & 0x7F {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => (u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize, 10),
            n => (n as usize, 2),
        };
        frames.push((bytes[0] & 0x0F, bytes[at..at + len].to_vec()));
        bytes = &bytes[at + len..];
    }
    frames
}

struct Peer {
    builder: ucall_core::ServerBuilder,
    scratch: Scratch,
    session: Session,
    out: OutBuf,
    limits: Limits,
}

impl Peer {
    /// A new connection's session, serving the spec procedures under `limits`.
    fn new(limits: Limits) -> Self {
        Peer {
            builder: spec::register(Server::builder()),
            scratch: Scratch::default(),
            session: Session::new(),
            out: OutBuf::new(),
            limits,
        }
    }

    fn upgraded() -> Self {
        let mut peer = Peer::new(Limits {
            max_body_bytes: 1 << 20,
            ..Limits::default()
        });
        peer.feed(HANDSHAKE.as_bytes());
        let text = String::from_utf8(peer.take()).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{text}");
        // RFC 6455 §1.3's example key and accept value.
        assert!(
            text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\n"));
        peer
    }

    fn feed(&mut self, bytes: &[u8]) -> Progress {
        let mut ctx = Context {
            router: self.builder.router(),
            limits: &self.limits,
            date: b"Sun, 06 Nov 1994 08:49:37 GMT",
            scratch: &mut self.scratch,
            defer: None,
            draining: false,
        };
        self.session.feed(bytes, &mut self.out, &mut ctx, usize::MAX)
    }

    fn take(&mut self) -> Vec<u8> {
        let bytes = self.out.to_vec();
        self.out.advance(bytes.len());
        bytes
    }
}

const SUBTRACT: &[u8] = br#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#;
const REPLY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":19}"#;

#[test]
fn each_message_is_a_call_and_each_reply_a_text_message() {
    let mut peer = Peer::upgraded();
    for opcode in [0x1, 0x2] {
        let message = ws_fragment(true, opcode, SUBTRACT);
        let progress = peer.feed(&message);
        assert_eq!((progress.consumed, progress.close), (message.len(), false));
        assert_eq!(server_frames(&peer.take()), [(0x1, REPLY.to_vec())]);
    }
    let batch = br#"[{"jsonrpc":"2.0","method":"get_data","id":"a"},{"jsonrpc":"2.0","method":"update","params":[1]}]"#;
    peer.feed(&ws_fragment(true, 0x1, batch));
    assert_eq!(
        server_frames(&peer.take()),
        [(0x1, br#"[{"jsonrpc":"2.0","id":"a","result":["hello",5]}]"#.to_vec())]
    );
    peer.feed(&ws_fragment(
        true,
        0x1,
        br#"{"jsonrpc":"2.0","method":"update","params":[1]}"#,
    ));
    assert!(peer.take().is_empty(), "notifications get no message");
    peer.feed(&ws_fragment(true, 0x1, b"{not json"));
    let frames = server_frames(&peer.take());
    assert!(
        String::from_utf8_lossy(&frames[0].1).contains("-32700"),
        "a parse error keeps the connection"
    );
}

#[test]
fn fragments_reassemble_with_control_frames_between_them() {
    let mut peer = Peer::upgraded();
    let mut stream = ws_fragment(false, 0x1, &SUBTRACT[..10]);
    stream.extend(ws_fragment(true, 0x9, b"ping!"));
    stream.extend(ws_fragment(false, 0x0, &SUBTRACT[10..30]));
    stream.extend(ws_fragment(true, 0xA, b"unsolicited pong"));
    stream.extend(ws_fragment(true, 0x0, &SUBTRACT[30..]));
    // Any split of the byte stream gives the same replies.
    for step in [1, 3, 7, stream.len()] {
        let mut buffered = Vec::new();
        for piece in stream.chunks(step) {
            buffered.extend_from_slice(piece);
            let mut ctx = Context {
                router: peer.builder.router(),
                limits: &peer.limits,
                date: b"Sun, 06 Nov 1994 08:49:37 GMT",
                scratch: &mut peer.scratch,
                defer: None,
                draining: false,
            };
            let progress = peer.session.feed(&buffered, &mut peer.out, &mut ctx, usize::MAX);
            buffered.drain(..progress.consumed);
        }
        assert!(buffered.is_empty());
        assert_eq!(
            server_frames(&peer.take()),
            [(0xA, b"ping!".to_vec()), (0x1, REPLY.to_vec())],
            "step {step}"
        );
    }
}

#[test]
fn the_close_handshake_echoes_the_code_then_closes() {
    let mut peer = Peer::upgraded();
    let progress = peer.feed(&ws_fragment(true, 0x8, &[0x03, 0xE8, b'b', b'y', b'e']));
    assert!(progress.close);
    assert_eq!(server_frames(&peer.take()), [(0x8, vec![0x03, 0xE8])]);
}

fn fails_with(bytes: &[u8], code: u16) {
    let mut peer = Peer::upgraded();
    let mut ctx = Context {
        router: peer.builder.router(),
        limits: &peer.limits,
        date: b"Sun, 06 Nov 1994 08:49:37 GMT",
        scratch: &mut peer.scratch,
        defer: None,
        draining: false,
    };
    let progress = peer.session.feed(bytes, &mut peer.out, &mut ctx, usize::MAX);
    assert!(progress.close, "the connection closes");
    let frames = server_frames(&peer.take());
    assert_eq!(frames.last(), Some(&(0x8, code.to_be_bytes().to_vec())), "close code");
}

#[test]
fn protocol_violations_close_with_the_codes_rfc_6455_names() {
    let mut unmasked = ws_fragment(true, 0x1, SUBTRACT);
    unmasked[1] &= 0x7F;
    unmasked.drain(2..6);
    fails_with(&unmasked, 1002);
    fails_with(&ws_fragment(true, 0x3, b"x"), 1002); // reserved opcode
    fails_with(&ws_fragment(true, 0x41, b"x"), 1002); // RSV3 without an extension
    fails_with(&ws_fragment(true, 0x0, b"x"), 1002); // continuation with nothing to continue
    let mut twice = ws_fragment(false, 0x1, b"[");
    twice.extend(ws_fragment(true, 0x1, b"]"));
    fails_with(&twice, 1002); // a new message inside a fragmented one
    fails_with(&ws_fragment(true, 0x1, &[b'"', 0xC3, 0x28, b'"']), 1007); // text that is not UTF-8
    fails_with(&ws_fragment(true, 0x8, &[0x03]), 1002); // a 1-byte close payload
    fails_with(&ws_fragment(true, 0x8, &[0x03, 0xE8, 0xC3, 0x28]), 1007); // a close reason that is not UTF-8
    fails_with(&ws_fragment(true, 0x8, &[0x03, 0xED]), 1002); // 1005 is never sent
    fails_with(&ws_fragment(true, 0x1, &vec![b' '; (1 << 20) + 1]), 1009); // over max_body_bytes
    let mut growing = ws_fragment(false, 0x1, &vec![b' '; 700_000]);
    growing.extend(ws_fragment(true, 0x0, &vec![b' '; 700_000]));
    fails_with(&growing, 1009); // fragments adding up past the limit
}

#[test]
fn the_plain_subprotocol_is_selected_when_offered() {
    // A browser sends a credential as a subprotocol beside `ucall`; it fails a handshake
    // whose answer selects none of those it offered.
    for (offered, selected) in [
        ("ucall, ucall.bearer.dDBrZW4", Some("ucall")),
        ("ucall.bearer.dDBrZW4,ucall", Some("ucall")),
        ("chat", None),
    ] {
        let mut peer = Peer::new(Limits::default());
        let request = HANDSHAKE.replace("\r\n\r\n", &format!("\r\nSec-WebSocket-Protocol: {offered}\r\n\r\n"));
        peer.feed(request.as_bytes());
        let text = String::from_utf8(peer.take()).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
        let answered = text
            .lines()
            .find_map(|line| line.strip_prefix("Sec-WebSocket-Protocol: "));
        assert_eq!(answered, selected, "{offered}: {text}");
        let message = ws_fragment(true, 0x1, SUBTRACT);
        peer.feed(&message);
        assert_eq!(server_frames(&peer.take()), [(0x1, REPLY.to_vec())], "{offered}");
    }
}

#[test]
fn handshakes_that_rfc_6455_refuses() {
    let mut peer = Peer::new(Limits::default());
    assert!(
        peer.feed(HANDSHAKE.replace("Version: 13", "Version: 7").as_bytes())
            .close
    );
    let text = String::from_utf8(peer.take()).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 426 ") && text.contains("Sec-WebSocket-Version: 13\r\n"),
        "{text}"
    );
}

#[test]
fn a_frame_announced_but_unfinished_tells_its_size_and_no_more() {
    let mut peer = Peer::upgraded();
    assert_eq!(peer.session.input_wanted(), 0, "between messages nothing is announced");
    let message = ws_fragment(true, 0x1, SUBTRACT);
    // Header and part of the payload: the whole frame's size is known.
    assert_eq!(peer.feed(&message[..10]).consumed, 0);
    assert_eq!(peer.session.input_wanted(), message.len());
    // A header cut short tells nothing yet.
    let mut fresh = Peer::upgraded();
    fresh.feed(&message[..1]);
    assert_eq!(fresh.session.input_wanted(), 0);
    // Once the frame is whole, the call is answered and nothing is awaited.
    assert_eq!(peer.feed(&message).consumed, message.len());
    assert_eq!(peer.session.input_wanted(), 0);
    assert_eq!(server_frames(&peer.take()), [(0x1, REPLY.to_vec())]);
}

#[test]
fn an_http_body_with_a_length_tells_its_size_and_no_more() {
    let mut peer = Peer::new(Limits::default());
    let head = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        SUBTRACT.len()
    );
    // The head is consumed at once; the body's length is then what the session awaits.
    assert_eq!(peer.feed(head.as_bytes()).consumed, head.len());
    assert_eq!(peer.session.input_wanted(), SUBTRACT.len());
    assert_eq!(peer.feed(&SUBTRACT[..5]).consumed, 0);
    assert_eq!(peer.session.input_wanted(), SUBTRACT.len());
    assert_eq!(peer.feed(SUBTRACT).consumed, SUBTRACT.len());
    assert_eq!(peer.session.input_wanted(), 0);
    assert!(String::from_utf8(peer.take())
        .unwrap()
        .ends_with(std::str::from_utf8(REPLY).unwrap()));
    // A chunked body's size is unknown.
    let chunked = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    peer.feed(chunked.as_bytes());
    assert_eq!(peer.session.input_wanted(), 0);
}
