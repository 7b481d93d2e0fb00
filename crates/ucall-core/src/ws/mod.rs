// SPDX-License-Identifier: Apache-2.0
//! WebSocket (RFC 6455), sans-I/O: the opening handshake's accept key, frame headers in
//! and out, and the rules on close codes. The session drives it: each text or binary
//! message carries one JSON-RPC request or batch, and each reply is one text message.
#![forbid(unsafe_code)]

use base64::Engine as _;
use sha1::{Digest, Sha1};

/// §1.3: the GUID appended to `Sec-WebSocket-Key` before hashing.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The subprotocol of plain JSON-RPC messages. A browser, which cannot set headers on a
/// WebSocket, offers it beside one that carries a credential (`ucall.bearer.<base64url>`,
/// read by the auth middleware from the upgrade's `Sec-WebSocket-Protocol`); the server
/// selects it, as a browser fails a handshake whose answer selects none it offered
/// (§4.1, item 6 of the client's checks).
pub const SUBPROTOCOL: &str = "ucall";

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key` (§4.2.2 item 5.4).
#[must_use]
pub fn accept_key(client_key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(client_key);
    sha.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Whether `key` is a valid `Sec-WebSocket-Key`: base64 of 16 bytes (§4.1 item 7).
#[must_use]
pub fn is_valid_key(key: &[u8]) -> bool {
    key.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(key)
            .is_ok_and(|nonce| nonce.len() == 16)
}

/// Frame opcodes (§5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    const fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// Control frames: close, ping, pong (§5.5).
    #[must_use]
    pub const fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// Close status codes the server sends (§7.4.1).
pub mod close {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// The endpoint is going away (server shutdown).
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// A text message was not valid UTF-8.
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// A message was too big to process.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
}

/// A client frame's header, read from the start of the buffered input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Final fragment of its message.
    pub fin: bool,
    /// What the frame carries.
    pub opcode: Opcode,
    /// The masking key (clients must mask, §5.3).
    pub mask: [u8; 4],
    /// Header bytes before the payload.
    pub header_len: usize,
    /// Payload bytes.
    pub payload_len: usize,
}

/// Result of reading a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A header was read (the payload may not all be there yet).
    Frame(FrameHeader),
    /// More bytes are needed.
    Partial,
    /// The connection must close with this code.
    Fail(u16),
}

/// Read a client frame header (§5.2), refusing what §5 forbids: reserved bits set (no
/// extension is negotiated), unknown opcodes, unmasked client frames, fragmented or long
/// control frames, a 64-bit length with its top bit set, and payloads over `max_payload`.
#[must_use]
pub fn read_header(input: &[u8], max_payload: usize) -> Header {
    let [first, second, ..] = *input else {
        return Header::Partial;
    };
    let fin = first & 0x80 != 0;
    if first & 0x70 != 0 {
        return Header::Fail(close::PROTOCOL_ERROR);
    }
    let Some(opcode) = Opcode::from_bits(first & 0x0F) else {
        return Header::Fail(close::PROTOCOL_ERROR);
    };
    if second & 0x80 == 0 {
        return Header::Fail(close::PROTOCOL_ERROR);
    }
    let (length, mut at) = match second & 0x7F {
        126 => match input.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Header::Partial,
        },
        127 => match input.get(2..10) {
            Some(b) => {
                let length = u64::from_be_bytes(b.try_into().expect("invariant: 8 bytes"));
                if length >> 63 != 0 {
                    return Header::Fail(close::PROTOCOL_ERROR);
                }
                (length, 10)
            }
            None => return Header::Partial,
        },
        short => (u64::from(short), 2),
    };
    if opcode.is_control() && (!fin || length > 125) {
        return Header::Fail(close::PROTOCOL_ERROR);
    }
    let Ok(payload_len) = usize::try_from(length) else {
        return Header::Fail(close::MESSAGE_TOO_BIG);
    };
    if payload_len > max_payload {
        return Header::Fail(close::MESSAGE_TOO_BIG);
    }
    let Some(mask) = input.get(at..at + 4) else {
        return Header::Partial;
    };
    let mask = [mask[0], mask[1], mask[2], mask[3]];
    at += 4;
    Header::Frame(FrameHeader {
        fin,
        opcode,
        mask,
        header_len: at,
        payload_len,
    })
}

/// Append `payload` unmasked with `mask` (§5.3) to `out`.
pub fn unmask_into(payload: &[u8], mask: [u8; 4], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(payload);
    let data = &mut out[start..];
    // Eight bytes at a time: the mask repeats every four, so twice over one word.
    let [a, b, c, d] = mask;
    let wide = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut words = data.chunks_exact_mut(8);
    for chunk in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // The rest starts at a multiple of eight, so the mask starts over with it.
    for (byte, key) in words.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= key;
    }
}

/// Most header bytes of a server frame (unmasked, 64-bit length).
pub const MAX_HEADER: usize = 10;

/// Write the header of an unmasked, final server frame with `payload_len` bytes into the
/// end of `room`; returns how many bytes it used.
pub fn write_header(room: &mut [u8; MAX_HEADER], opcode: Opcode, payload_len: usize) -> usize {
    let mut header = [0u8; MAX_HEADER];
    header[0] = 0x80 | opcode.bits();
    let used = if payload_len < 126 {
        header[1] = payload_len as u8;
        2
    } else if let Ok(short) = u16::try_from(payload_len) {
        header[1] = 126;
        header[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        header[1] = 127;
        header[2..10].copy_from_slice(&(payload_len as u64).to_be_bytes());
        10
    };
    room[MAX_HEADER - used..].copy_from_slice(&header[..used]);
    used
}

/// A whole server frame, for small control frames.
pub fn frame(opcode: Opcode, payload: &[u8], out: &mut Vec<u8>) {
    let mut room = [0u8; MAX_HEADER];
    let used = write_header(&mut room, opcode, payload.len());
    out.extend_from_slice(&room[MAX_HEADER - used..]);
    out.extend_from_slice(payload);
}

/// Check a received close frame's payload (§5.5.1, §7.4): empty, or a code a peer may
/// send followed by UTF-8 text. Returns the code to answer with: the peer's, 1002 for a
/// malformed payload or a code never sent, 1007 for a reason that is not UTF-8 (§8.1,
/// as for a text message).
#[must_use]
pub fn close_reply(payload: &[u8]) -> u16 {
    match payload {
        [] => close::NORMAL,
        [_] => close::PROTOCOL_ERROR,
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999) {
                close::PROTOCOL_ERROR
            } else if std::str::from_utf8(reason).is_err() {
                close::INVALID_PAYLOAD
            } else {
                code
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        // §1.3: "dGhlIHNhbXBsZSBub25jZQ==" → "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        assert_eq!(accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(is_valid_key(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!is_valid_key(b"dGhlIHNhbXBsZQ=="));
        assert!(!is_valid_key(b"not base64 at all!!!!!!!"));
    }

    #[test]
    fn reads_the_masked_hello_of_section_5_7() {
        // "A single-frame masked text message" (§5.7)
        let frame = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
        let Header::Frame(h) = read_header(&frame, 1 << 20) else {
            panic!("a frame")
        };
        assert_eq!(
            (h.fin, h.opcode, h.header_len, h.payload_len),
            (true, Opcode::Text, 6, 5)
        );
        let mut text = Vec::new();
        unmask_into(&frame[6..], h.mask, &mut text);
        assert_eq!(text, b"Hello");
        for cut in 0..6 {
            assert_eq!(read_header(&frame[..cut], 1 << 20), Header::Partial, "cut at {cut}");
        }
    }

    #[test]
    fn refuses_what_section_5_forbids() {
        let fail = |bytes: &[u8]| read_header(bytes, 1000);
        assert_eq!(
            fail(&[0x81, 0x05, 0, 0, 0, 0]),
            Header::Fail(close::PROTOCOL_ERROR),
            "unmasked"
        );
        assert_eq!(
            fail(&[0xC1, 0x80, 0, 0, 0, 0]),
            Header::Fail(close::PROTOCOL_ERROR),
            "RSV1"
        );
        assert_eq!(
            fail(&[0x83, 0x80, 0, 0, 0, 0]),
            Header::Fail(close::PROTOCOL_ERROR),
            "opcode 3"
        );
        assert_eq!(
            fail(&[0x09, 0x80, 0, 0, 0, 0]),
            Header::Fail(close::PROTOCOL_ERROR),
            "fragmented ping"
        );
        assert_eq!(
            fail(&[0x89, 0xFE, 0, 126, 0, 0, 0, 0]),
            Header::Fail(close::PROTOCOL_ERROR),
            "long ping"
        );
        assert_eq!(
            fail(&[0x82, 0xFE, 0x10, 0x00, 0, 0, 0, 0]),
            Header::Fail(close::MESSAGE_TOO_BIG)
        );
        let huge = [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            fail(&huge),
            Header::Fail(close::PROTOCOL_ERROR),
            "64-bit length with top bit"
        );
    }

    #[test]
    fn unmasks_as_rfc_6455_defines_at_every_length() {
        // §5.7: "Hello" masked with 37 fa 21 3d.
        let mut out = Vec::new();
        unmask_into(&[0x7f, 0x9f, 0x4d, 0x51, 0x58], [0x37, 0xfa, 0x21, 0x3d], &mut out);
        assert_eq!(out, b"Hello");
        // §5.3: octet i is XORed with mask octet i MOD 4, whatever is in `out` before.
        let mask = [0x01, 0x80, 0x7f, 0xff];
        for len in 0..41 {
            let payload: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let mut out = b"kept".to_vec();
            unmask_into(&payload, mask, &mut out);
            let expected: Vec<u8> = payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
            assert_eq!(&out[..4], b"kept");
            assert_eq!(&out[4..], &expected[..], "length {len}");
        }
    }

    #[test]
    fn writes_unmasked_server_frames() {
        let mut out = Vec::new();
        frame(Opcode::Text, b"Hello", &mut out);
        assert_eq!(out, [0x81, 0x05, b'H', b'e', b'l', b'l', b'o']);
        let mut room = [0u8; MAX_HEADER];
        assert_eq!(write_header(&mut room, Opcode::Binary, 256), 4);
        assert_eq!(room[6..], [0x82, 0x7E, 0x01, 0x00]);
        assert_eq!(write_header(&mut room, Opcode::Binary, 65536), 10);
        assert_eq!(room, [0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn checks_close_payloads() {
        assert_eq!(close_reply(b""), close::NORMAL);
        assert_eq!(close_reply(&[0x03, 0xE8]), 1000);
        assert_eq!(close_reply(&[0x0B, 0xB8, b'o', b'k']), 3000);
        assert_eq!(close_reply(&[0x03]), close::PROTOCOL_ERROR);
        assert_eq!(close_reply(&[0x03, 0xED]), close::PROTOCOL_ERROR, "1005 is never sent");
        assert_eq!(
            close_reply(&[0x03, 0xE8, 0xFF]),
            close::INVALID_PAYLOAD,
            "reason not UTF-8"
        );
        assert_eq!(
            close_reply(&[0x03, 0xED, 0xFF]),
            close::PROTOCOL_ERROR,
            "a code never sent weighs more than its reason"
        );
    }
}
