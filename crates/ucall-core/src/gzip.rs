// SPDX-License-Identifier: Apache-2.0
//! The gzip content coding (RFC 9110 §8.4.1.3, RFC 1952) of replies that gain from it:
//! the self-description documents (compressed once, when serving starts) and `/metrics`
//! (compressed when scraped by a client that takes gzip).

use std::io::Write;

/// `bytes` as a gzip member.
#[must_use]
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder =
        flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 4 + 64), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    #[test]
    fn decompresses_to_what_it_was() {
        let text = "the same words again and again, ".repeat(200);
        let packed = super::gzip(text.as_bytes());
        assert!(packed.starts_with(&[0x1f, 0x8b]) && packed.len() < text.len() / 10);
        let mut unpacked = String::new();
        flate2::read::GzDecoder::new(packed.as_slice())
            .read_to_string(&mut unpacked)
            .expect("gzip");
        assert_eq!(unpacked, text);
    }
}
