// SPDX-License-Identifier: Apache-2.0
//! Binary messages (docs/wire.md): a JSON-RPC text followed by a section of attachments,
//! each 64-byte aligned. This module holds the framing every transport shares: the body's
//! split into the JSON text and the section, and the 16-byte prefix that delimits a
//! message on raw TCP and WebSocket. HTTP carries the JSON length in a header field
//! (`http1`); the codec resolves placeholders (`jsonrpc::attachment`).
#![forbid(unsafe_code)]

/// Attachments start at multiples of this, counted from the section's start, and the
/// section itself at a multiple of it from the body's start (Arrow's alignment).
pub const ALIGN: usize = 64;

/// The first byte of a binary message on raw TCP and WebSocket: it starts no JSON text and
/// no HTTP method, and appears in no UTF-8 text.
pub const MAGIC: u8 = 0xC1;

/// The one version of the prefix.
pub const VERSION: u8 = 1;

/// Bytes of the prefix: magic, version, flags (u16), JSON length (u32), body length (u64).
pub const PREFIX_LEN: usize = 16;

/// The HTTP content type of a binary body.
pub const CONTENT_TYPE: &str = "application/vnd.ucall.binary";

/// The HTTP content type of a streamed reply's body whose messages are framed as on a raw
/// TCP connection (docs/wire.md §3.1): JSON texts ending in a newline, and binary messages
/// with their prefix, so that a stream's items may carry attachments.
pub const STREAM_CONTENT_TYPE: &str = "application/vnd.ucall.binary-stream";

/// The HTTP header field giving the JSON text's length in a binary body.
pub const JSON_LENGTH_HEADER: &str = "ucall-json-length";

/// [`JSON_LENGTH_HEADER`] as replies and CORS lists spell it.
pub const JSON_LENGTH_NAME: &str = "UCall-JSON-Length";

/// The WebSocket subprotocol under which binary messages travel in binary frames.
pub const SUBPROTOCOL: &str = "ucall.binary.v1";

/// The first multiple of [`ALIGN`] at or after `n`.
#[must_use]
pub const fn align(n: usize) -> usize {
    n.next_multiple_of(ALIGN)
}

/// Why a binary message's framing cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// An unknown version or flags: the layout of the rest is unknown.
    Unsupported,
    /// Not a binary message (a WebSocket binary message without the magic byte).
    NotBinary,
    /// The JSON length passes the body's end.
    JsonBeyondBody,
    /// The body ends inside the padding after the JSON text.
    EndsInPadding,
    /// The body length disagrees with the message that carries it (WebSocket).
    LengthMismatch,
}

impl Malformed {
    /// The sentence an error reply gives.
    #[must_use]
    pub fn message(self) -> &'static str {
        match self {
            Malformed::Unsupported => "Parse error: unsupported binary message version or flags",
            Malformed::NotBinary => "Parse error: not a binary message",
            Malformed::JsonBeyondBody => "Parse error: the JSON length passes the end of the body",
            Malformed::EndsInPadding => "Parse error: the body ends inside the padding after the JSON text",
            Malformed::LengthMismatch => "Parse error: the body length does not match the message",
        }
    }
}

/// The lengths a prefix gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// The JSON text's length.
    pub json_len: usize,
    /// The body's length (JSON text, padding, section), after the prefix.
    pub body_len: u64,
}

impl Prefix {
    /// Read the prefix at the start of `input`: `Ok(None)` until 16 bytes are there.
    ///
    /// # Errors
    /// [`Malformed::NotBinary`] without the magic byte, [`Malformed::Unsupported`] for
    /// another version or non-zero flags.
    pub fn parse(input: &[u8]) -> Result<Option<Prefix>, Malformed> {
        if input.first().is_some_and(|&b| b != MAGIC) {
            return Err(Malformed::NotBinary);
        }
        let Some(prefix) = input.get(..PREFIX_LEN) else {
            return Ok(None);
        };
        if prefix[1] != VERSION || prefix[2..4] != [0, 0] {
            return Err(Malformed::Unsupported);
        }
        let json_len = u32::from_le_bytes(prefix[4..8].try_into().expect("invariant: 4 bytes"));
        let body_len = u64::from_le_bytes(prefix[8..16].try_into().expect("invariant: 8 bytes"));
        Ok(Some(Prefix {
            json_len: json_len as usize,
            body_len,
        }))
    }

    /// The prefix of a body of `body_len` bytes whose JSON text is `json_len` long.
    #[must_use]
    pub fn encode(json_len: u32, body_len: u64) -> [u8; PREFIX_LEN] {
        let mut out = [0; PREFIX_LEN];
        out[0] = MAGIC;
        out[1] = VERSION;
        out[4..8].copy_from_slice(&json_len.to_le_bytes());
        out[8..16].copy_from_slice(&body_len.to_le_bytes());
        out
    }
}

/// A whole message (prefix and body, as a WebSocket binary message carries one) split
/// into its JSON text and attachment section.
///
/// # Errors
/// Any [`Malformed`] its prefix or lengths show.
pub fn split_message(message: &[u8]) -> Result<(&[u8], &[u8]), Malformed> {
    let prefix = Prefix::parse(message)?.ok_or(Malformed::LengthMismatch)?;
    let body = &message[PREFIX_LEN..];
    if prefix.body_len != body.len() as u64 {
        return Err(Malformed::LengthMismatch);
    }
    split_body(body, prefix.json_len)
}

/// A body split into its JSON text (`json_len` bytes) and its attachment section.
///
/// # Errors
/// [`Malformed::JsonBeyondBody`] or [`Malformed::EndsInPadding`].
pub fn split_body(body: &[u8], json_len: usize) -> Result<(&[u8], &[u8]), Malformed> {
    if json_len > body.len() {
        return Err(Malformed::JsonBeyondBody);
    }
    if json_len == body.len() {
        return Ok((body, &[]));
    }
    let section = align(json_len);
    if body.len() < section {
        return Err(Malformed::EndsInPadding);
    }
    Ok((&body[..json_len], &body[section..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_starts_at_the_next_multiple_of_64() {
        let mut body = b"{}".to_vec();
        body.resize(64, 0);
        body.extend_from_slice(b"abc");
        assert_eq!(split_body(&body, 2), Ok((&b"{}"[..], &b"abc"[..])));
        assert_eq!(split_body(b"{}", 2), Ok((&b"{}"[..], &b""[..])));
        assert_eq!(split_body(&body[..64], 2), Ok((&b"{}"[..], &b""[..])));
        assert_eq!(split_body(&body[..10], 2), Err(Malformed::EndsInPadding));
        assert_eq!(split_body(b"{}", 3), Err(Malformed::JsonBeyondBody));
        assert_eq!(align(0), 0);
        assert_eq!(align(64), 64);
        assert_eq!(align(65), 128);
    }

    #[test]
    fn a_prefix_round_trips_and_refuses_other_versions() {
        let prefix = Prefix::encode(91, 131);
        assert_eq!(
            Prefix::parse(&prefix),
            Ok(Some(Prefix {
                json_len: 91,
                body_len: 131
            }))
        );
        assert_eq!(Prefix::parse(&prefix[..15]), Ok(None));
        let mut other = prefix;
        other[1] = 2;
        assert_eq!(Prefix::parse(&other), Err(Malformed::Unsupported));
        other = prefix;
        other[3] = 1;
        assert_eq!(Prefix::parse(&other), Err(Malformed::Unsupported));
        assert_eq!(Prefix::parse(b"{"), Err(Malformed::NotBinary));
    }
}
