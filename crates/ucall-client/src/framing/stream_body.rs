// SPDX-License-Identifier: Apache-2.0
//! A streamed reply's HTTP body (docs/streaming.md) split into its messages as they
//! complete: `application/jsonl` is one JSON text a line; `application/vnd.ucall.binary-stream`
//! is framed as raw TCP is, JSON texts ending in `\n` and binary messages with their
//! 16-byte prefix (docs/wire.md §3.2).

use ucall_core::wire;

use super::{binary_reply, malformed, too_large, Reply};
use crate::error::{Error, Result};

/// Where a streamed body is: its messages handed out one at a time, as each completes.
pub(crate) struct StreamBody {
    /// The body may hold binary messages (`application/vnd.ucall.binary-stream`).
    binary: bool,
    /// The last chunk has come: what is left in the body is all there is.
    pub(crate) finished: bool,
    /// Bytes at the front of the decoded body already handed out.
    taken: usize,
}

fn blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

impl StreamBody {
    /// A body of `binary` messages too (`application/vnd.ucall.binary-stream`), or JSON lines.
    pub(crate) fn new(binary: bool) -> Self {
        StreamBody {
            binary,
            finished: false,
            taken: 0,
        }
    }

    /// The next complete message in `body` (what the chunked coding decoded so far), its
    /// bytes then counted as taken; `None` until one completes. Each message is at most
    /// `max` bytes.
    ///
    /// # Errors
    /// A message over `max`, a broken binary message, or one cut short by the body's end.
    pub(crate) fn next_message(&mut self, body: &mut Vec<u8>, max: usize) -> Result<Option<Reply>> {
        // Compacted once half of it is taken: each byte moves at most once on average.
        if self.taken > 0 && self.taken * 2 >= body.len() {
            body.drain(..self.taken);
            self.taken = 0;
        }
        let rest = &body[self.taken..];
        let start = rest.iter().take_while(|&&b| blank(b)).count();
        let rest = &rest[start..];
        if rest.is_empty() {
            self.taken = body.len();
            return Ok(None);
        }
        let at = self.taken + start;
        if self.binary && rest[0] == wire::MAGIC {
            let cut = || Error::protocol("the streamed reply ended in the middle of a binary message");
            let Some(prefix) = wire::Prefix::parse(rest).map_err(malformed)? else {
                return if self.finished { Err(cut()) } else { Ok(None) };
            };
            let len = usize::try_from(prefix.body_len).unwrap_or(usize::MAX);
            if len > max {
                return Err(too_large(len, false, max));
            }
            let Some(message) = rest.get(wire::PREFIX_LEN..wire::PREFIX_LEN + len) else {
                return if self.finished { Err(cut()) } else { Ok(None) };
            };
            let reply = Reply {
                status: None,
                body: message.to_vec(),
                close: false,
                binary: None,
            };
            self.taken = at + wire::PREFIX_LEN + len;
            return binary_reply(reply, prefix.json_len).map(Some);
        }
        let end = match memchr::memchr(b'\n', rest) {
            Some(end) => end,
            None if self.finished => rest.len(),
            None if rest.len() > max => return Err(too_large(rest.len(), true, max)),
            None => return Ok(None),
        };
        let line = &rest[..end];
        let text = &line[..line.len() - line.iter().rev().take_while(|&&b| blank(b)).count()];
        if text.len() > max {
            return Err(too_large(text.len(), false, max));
        }
        let reply = Reply {
            status: None,
            body: text.to_vec(),
            close: false,
            binary: None,
        };
        self.taken = (at + end + 1).min(body.len());
        Ok(Some(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::StreamBody;

    #[test]
    fn lines_and_binary_messages_come_out_as_they_complete() {
        let mut stream = StreamBody::new(true);
        let mut body = b"{\"a\":1}\n{\"b\"".to_vec();
        let first = stream
            .next_message(&mut body, 1 << 20)
            .expect("framed")
            .expect("a line");
        assert_eq!(first.body, b"{\"a\":1}");
        assert!(stream.next_message(&mut body, 1 << 20).expect("framed").is_none());
        body.extend_from_slice(b":2}\n");
        let json = b"{\"c\":3}";
        let mut message = ucall_core::wire::Prefix::encode(json.len() as u32, json.len() as u64).to_vec();
        message.extend_from_slice(json);
        body.extend_from_slice(&message[..10]);
        let second = stream
            .next_message(&mut body, 1 << 20)
            .expect("framed")
            .expect("a line");
        assert_eq!(second.body, b"{\"b\":2}");
        assert!(stream.next_message(&mut body, 1 << 20).expect("framed").is_none());
        body.extend_from_slice(&message[10..]);
        let third = stream
            .next_message(&mut body, 1 << 20)
            .expect("framed")
            .expect("a message");
        assert_eq!((third.body.as_slice(), third.binary), (&json[..], Some(json.len())));
        assert!(stream.next_message(&mut body, 1 << 20).expect("framed").is_none());
        body.extend_from_slice(b"[1,2,3,4]");
        assert!(stream.next_message(&mut body, 4).is_err(), "over the limit");
    }
}
