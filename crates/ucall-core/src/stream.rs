// SPDX-License-Identifier: Apache-2.0
//! Raw TCP: a connection carries JSON texts (objects or arrays) back to back or separated
//! by whitespace; this finds where each one ends, across any number of segments.
//!
//! The framer only tracks nesting and strings; the JSON parser validates each text it
//! delimits. State is kept between calls, so a text arriving in many pieces is scanned once.
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
    /// The next non-whitespace byte cannot start a JSON object or array.
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
}

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
                if !matches!(input[start], b'{' | b'[') {
                    return Frame::Invalid;
                }
                self.start = Some(start);
                self.scanned = start;
                start
            }
        };
        let mut i = self.scanned;
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
                        // Over the limit is refused even when the text came whole in one read.
                        if i + 1 - start > max_len {
                            return Frame::TooLarge;
                        }
                        return Frame::Complete(start..i + 1);
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
    fn refuses_what_cannot_be_a_request() {
        assert_eq!(Framer::default().next(b"  x{}", 100), Frame::Invalid);
        assert_eq!(Framer::default().next(b"123", 100), Frame::Invalid);
        assert_eq!(Framer::default().next(b"[[[[[[[[[[[[", 4), Frame::TooLarge);
    }
}
