// SPDX-License-Identifier: Apache-2.0
//! Decoding a `Transfer-Encoding: chunked` request body (RFC 9112 §7.1), incrementally.
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! last-chunk     = 1*("0") [ chunk-ext ] CRLF
//! ```

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// The framing does not follow the grammar.
    Malformed,
    /// The decoded body would exceed the body limit.
    TooLarge,
    /// The trailer section exceeds the header limit.
    TrailersTooLarge,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// Longest chunk-size line (with extensions) accepted before the line ends.
const MAX_SIZE_LINE: usize = 4096;

/// State of one chunked body being decoded.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: State,
    body_bytes: u64,
    trailer_bytes: usize,
}

impl ChunkedDecoder {
    /// Decode what `input` holds, appending chunk data to `body`.
    ///
    /// Returns the bytes consumed and whether the body is complete.
    ///
    /// # Errors
    /// [`ChunkError`] when the framing is invalid or a limit is exceeded.
    pub fn decode(
        &mut self,
        input: &[u8],
        body: &mut Vec<u8>,
        max_body: usize,
        max_trailers: usize,
    ) -> Result<(usize, bool), ChunkError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Size => match httparse::parse_chunk_size(rest) {
                    // The line's length is capped whether it came whole or in pieces, and
                    // a control byte has no place in it (httparse lets extensions hold any).
                    Ok(httparse::Status::Complete((used, _)))
                        if used > MAX_SIZE_LINE
                            || rest[..used]
                                .iter()
                                .any(|&c| c < b' ' && !matches!(c, b'\t' | b'\r' | b'\n')) =>
                    {
                        return Err(ChunkError::Malformed)
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        pos += used;
                        if size == 0 {
                            self.state = State::Trailers;
                        } else {
                            self.body_bytes = self.body_bytes.checked_add(size).ok_or(ChunkError::TooLarge)?;
                            if self.body_bytes > max_body as u64 {
                                return Err(ChunkError::TooLarge);
                            }
                            self.state = State::Data(size);
                        }
                    }
                    Ok(httparse::Status::Partial) if rest.len() <= MAX_SIZE_LINE => return Ok((pos, false)),
                    Ok(httparse::Status::Partial) | Err(_) => return Err(ChunkError::Malformed),
                },
                State::Data(remaining) => {
                    if rest.is_empty() {
                        return Ok((pos, false));
                    }
                    let take = usize::try_from(remaining).unwrap_or(usize::MAX).min(rest.len());
                    body.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = remaining - take as u64;
                    self.state = if left == 0 { State::DataEnd } else { State::Data(left) };
                }
                State::DataEnd => {
                    if rest.len() < 2 {
                        return if rest.is_empty() || rest == b"\r" {
                            Ok((pos, false))
                        } else {
                            Err(ChunkError::Malformed)
                        };
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ChunkError::Malformed);
                    }
                    pos += 2;
                    self.state = State::Size;
                }
                State::Trailers => {
                    let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
                        if self.trailer_bytes + rest.len() > max_trailers {
                            return Err(ChunkError::TrailersTooLarge);
                        }
                        return Ok((pos, false));
                    };
                    pos += line_end + 2;
                    self.trailer_bytes += line_end + 2;
                    if self.trailer_bytes > max_trailers {
                        return Err(ChunkError::TrailersTooLarge);
                    }
                    if line_end == 0 {
                        self.state = State::Done;
                    } else if !rest[..line_end].contains(&b':') {
                        return Err(ChunkError::Malformed);
                    }
                }
                State::Done => return Ok((pos, true)),
            }
        }
    }

    /// Forget the finished body, ready for the next request.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_split(input: &[u8], step: usize) -> Result<Vec<u8>, ChunkError> {
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        let mut buffered: Vec<u8> = Vec::new();
        for piece in input.chunks(step) {
            buffered.extend_from_slice(piece);
            let (used, done) = decoder.decode(&buffered, &mut body, 1 << 20, 1024)?;
            buffered.drain(..used);
            if done {
                assert!(buffered.is_empty(), "bytes left after the body: {buffered:?}");
                return Ok(body);
            }
        }
        panic!("body never completed");
    }

    #[test]
    fn decodes_split_anywhere() {
        let input = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n";
        for step in 1..input.len() {
            assert_eq!(decode_split(input, step).unwrap(), b"Wikipedia in\r\n\r\nchunks.");
        }
    }

    #[test]
    fn refuses_bad_framing_and_limits() {
        let mut body = Vec::new();
        assert_eq!(
            ChunkedDecoder::default().decode(b"zz\r\n", &mut body, 100, 100),
            Err(ChunkError::Malformed)
        );
        assert_eq!(
            ChunkedDecoder::default().decode(b"3\r\nabcX", &mut body, 100, 100),
            Err(ChunkError::Malformed)
        );
        assert_eq!(
            ChunkedDecoder::default().decode(b"65\r\n", &mut body, 100, 100),
            Err(ChunkError::TooLarge)
        );
        assert_eq!(
            ChunkedDecoder::default().decode(b"ffffffffffffffff\r\n", &mut body, 100, 100),
            Err(ChunkError::TooLarge)
        );
        let long_extension = format!("3;e={}\r\nabc\r\n0\r\n\r\n", "v".repeat(MAX_SIZE_LINE));
        assert_eq!(
            ChunkedDecoder::default().decode(long_extension.as_bytes(), &mut body, 100, 100),
            Err(ChunkError::Malformed),
            "a long chunk-size line is refused when it arrives whole too"
        );
        assert_eq!(
            ChunkedDecoder::default().decode(b"3;a\x00=b\r\nabc\r\n0\r\n\r\n", &mut body, 100, 100),
            Err(ChunkError::Malformed),
            "a NUL in an extension"
        );
        let trailers = b"0\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        assert_eq!(
            ChunkedDecoder::default().decode(trailers, &mut body, 100, 16),
            Err(ChunkError::TrailersTooLarge)
        );
    }
}
