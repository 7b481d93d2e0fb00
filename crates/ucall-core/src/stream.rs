// SPDX-License-Identifier: Apache-2.0
//! Raw TCP: a connection carries JSON texts back to back or separated by whitespace; this
//! finds where each one ends, across any number of segments. Requests are objects or
//! arrays; a scalar text (`"hi"`, `42`, `null`) is framed too, so that it can be answered
//! `-32600` like any other invalid Request, and the stream goes on after it.
//!
//! The framer only tracks nesting, strings and the extent of bare words (numbers and
//! literals); the JSON parser validates each text it delimits. State is kept between calls, so a text arriving in many pieces is scanned once.
#![forbid(unsafe_code)]

use std::ops::Range;

/// Where the next JSON text in the buffered input stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A whole text spans this range; consume up to its end.
    Complete(Range<usize>),
    /// The text is not finished; this many leading whitespace bytes may be dropped.
    Incomplete {
        /// Leading whitespace that can be consumed already.
        skip: usize,
    },
    /// The next non-whitespace byte cannot start a JSON text.
    Invalid,
    /// The text has grown beyond the limit without ending.
    TooLarge,
}

/// Incremental scanner for the end of one JSON text.
#[derive(Debug, Default)]
pub struct Framer {
    start: Option<usize>,
    scanned: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The text is a bare word (a number or `true`, `false`, `null`): it ends at the first
    /// byte that no number or literal holds (whitespace, a structural byte), which must be
    /// seen first, or at the end of the input (see [`Framer::finish`]).
    word: bool,
}

/// Whether `byte` ends a bare word (RFC 8259 §3, §6: literals are lowercase letters,
/// numbers digits, signs, `.` and `e`/`E`).
fn ends_word(byte: u8) -> bool {
    !(byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.'))
}

/// Longest bare word framed: far beyond any literal or sensible number, and a bound on
/// what a client that sends digits without end makes the server buffer.
const MAX_WORD: usize = 1024;

impl Framer {
    /// Find the next text in `input`, which starts at the first byte not yet consumed and
    /// grows between calls. After `Complete`, consume its end and call [`Framer::reset`].
    pub fn next(&mut self, input: &[u8], max_len: usize) -> Frame {
        let start = match self.start {
            Some(start) => start,
            None => {
                let Some(start) = input.iter().position(|c| !c.is_ascii_whitespace()) else {
                    return Frame::Incomplete { skip: input.len() };
                };
                match input[start] {
                    b'{' | b'[' | b'"' => {}
                    b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => self.word = true,
                    _ => return Frame::Invalid,
                }
                self.start = Some(start);
                self.scanned = start;
                start
            }
        };
        let mut i = self.scanned;
        if self.word {
            let max_len = max_len.min(MAX_WORD);
            if let Some(end) = input[i..].iter().position(|&c| ends_word(c)) {
                return Self::complete(start, i + end, max_len);
            }
            if input.len() - start > max_len {
                return Frame::TooLarge;
            }
            self.scanned = input.len();
            return Frame::Incomplete { skip: 0 };
        }
        while i < input.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                // Strings are most of a large text (base64 payloads): jump to the next
                // quote or backslash with SIMD instead of stepping byte by byte.
                let Some(found) = memchr::memchr2(b'"', b'\\', &input[i..]) else {
                    break;
                };
                i += found;
                if input[i] == b'\\' {
                    self.escaped = true;
                } else {
                    self.in_string = false;
                    if self.depth == 0 {
                        // A string text, outside any object or array.
                        return Self::complete(start, i + 1, max_len);
                    }
                }
                i += 1;
                continue;
            }
            match input[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Self::complete(start, i + 1, max_len);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        self.scanned = input.len();
        if input.len() - start > max_len {
            return Frame::TooLarge;
        }
        Frame::Incomplete { skip: 0 }
    }

    /// The text `start..end`, unless it is over the limit, which is refused even when the
    /// text came whole in one read.
    fn complete(start: usize, end: usize, max_len: usize) -> Frame {
        if end - start > max_len {
            Frame::TooLarge
        } else {
            Frame::Complete(start..end)
        }
    }

    /// The input has ended (the peer closed its sending side): a bare word under way is
    /// whole, and this is its range in `input`; any other text is cut short (`None`).
    #[must_use]
    pub fn finish(&self, input: &[u8]) -> Option<Range<usize>> {
        self.start.filter(|_| self.word).map(|start| start..input.len())
    }

    /// Forget the text just consumed.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Whether part of a text has been seen.
    #[must_use]
    pub fn in_text(&self) -> bool {
        self.start.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_over_the_limit_is_too_large_however_it_arrives() {
        let text = format!("{{\"a\":\"{}\"}}", "x".repeat(2000));
        assert_eq!(
            Framer::default().next(text.as_bytes(), 1000),
            Frame::TooLarge,
            "whole in one read"
        );
        let mut framer = Framer::default();
        assert_eq!(
            framer.next(&text.as_bytes()[..500], 1000),
            Frame::Incomplete { skip: 0 }
        );
        assert_eq!(framer.next(text.as_bytes(), 1000), Frame::TooLarge, "in two pieces");
        let exact = format!("{{\"a\":\"{}\"}}", "x".repeat(992));
        assert_eq!(exact.len(), 1000);
        assert_eq!(
            Framer::default().next(exact.as_bytes(), 1000),
            Frame::Complete(0..1000),
            "at the limit"
        );
    }

    #[test]
    fn frames_texts_split_anywhere() {
        let stream = " {\"a\":\"}\\\"{\"}\n[1,[2]]{\"é\":\"😀\"}  ".as_bytes();
        for step in 1..stream.len() {
            let mut framer = Framer::default();
            let mut buffered = Vec::new();
            let mut texts = Vec::new();
            for piece in stream.chunks(step) {
                buffered.extend_from_slice(piece);
                loop {
                    match framer.next(&buffered, 1024) {
                        Frame::Complete(range) => {
                            texts.push(String::from_utf8(buffered[range.clone()].to_vec()).unwrap());
                            buffered.drain(..range.end);
                            framer.reset();
                        }
                        Frame::Incomplete { skip } => {
                            buffered.drain(..skip);
                            break;
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
            assert_eq!(
                texts,
                ["{\"a\":\"}\\\"{\"}", "[1,[2]]", "{\"é\":\"😀\"}"],
                "step {step}"
            );
        }
    }

    #[test]
    fn refuses_what_cannot_start_a_json_text() {
        for input in [&b"  x{}"[..], b"}", b",1", b"\x00{}", b"\xff", b"hello\n"] {
            assert_eq!(Framer::default().next(input, 100), Frame::Invalid, "{input:?}");
        }
        assert_eq!(Framer::default().next(b"[[[[[[[[[[[[", 4), Frame::TooLarge);
        assert_eq!(Framer::default().next(b"123456789", 4), Frame::TooLarge);
        assert_eq!(
            Framer::default().next(&[b'1'; MAX_WORD + 1], 1 << 20),
            Frame::TooLarge,
            "a word has a limit of its own"
        );
    }

    #[test]
    fn frames_scalar_texts_which_the_parser_then_judges() {
        // A string ends at its closing quote; a number or literal at the first byte that
        // cannot continue it, so only once one follows (or the input ends).
        for (input, frame) in [
            (&b" \"hi\" "[..], Frame::Complete(1..5)),
            (b"\"a\\\"b\"{}", Frame::Complete(0..6)),
            (b"42\n", Frame::Complete(0..2)),
            (b"-1.5e3{\"a\":1}", Frame::Complete(0..6)),
            (b"null[1]", Frame::Complete(0..4)),
            (b"true\"x\"", Frame::Complete(0..4)),
            (b"false,", Frame::Complete(0..5)),
            (b"nonsense ", Frame::Complete(0..8)),
            (b"4@", Frame::Complete(0..1)),
            (b"1.5E+3;", Frame::Complete(0..6)),
            (b"42", Frame::Incomplete { skip: 0 }),
            (b"\"open", Frame::Incomplete { skip: 0 }),
        ] {
            assert_eq!(Framer::default().next(input, 100), frame, "{input:?}");
        }
        let mut framer = Framer::default();
        assert_eq!(framer.next(b"12", 100), Frame::Incomplete { skip: 0 });
        assert_eq!(framer.next(b"123 ", 100), Frame::Complete(0..3), "resumed");
        let mut framer = Framer::default();
        assert_eq!(framer.next(b" 12", 100), Frame::Incomplete { skip: 0 });
        assert_eq!(framer.finish(b" 12"), Some(1..3), "the end of input ends a number");
        let mut framer = Framer::default();
        assert_eq!(framer.next(b"{\"a\"", 100), Frame::Incomplete { skip: 0 });
        assert_eq!(framer.finish(b"{\"a\""), None, "but not an object");
    }
}
