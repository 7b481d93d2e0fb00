// SPDX-License-Identifier: Apache-2.0
//! Base64 decoding for bytes parameters (RFC 4648 §4: the standard alphabet).
//!
//! Clients send bytes as a JSON string of base64, as the Python front end does. Padding
//! is optional; anything else outside the alphabet (whitespace included) is refused.

/// Value of each byte in the alphabet, or `INVALID`.
const INVALID: u8 = 0xff;
const DECODE: [u8; 256] = {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Bytes that `text` decodes to, or `None` when it is not base64.
#[must_use]
pub fn decoded_len(text: &[u8]) -> Option<usize> {
    let text = strip_padding(text)?;
    match text.len() % 4 {
        1 => None,
        rest => Some(text.len() / 4 * 3 + rest.saturating_sub(1)),
    }
}

fn strip_padding(text: &[u8]) -> Option<&[u8]> {
    let unpadded = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    if unpadded.len() != text.len() && text.len() % 4 != 0 {
        return None; // padding only completes a final group of four
    }
    Some(unpadded)
}

/// Decode `text` into the start of `out`, returning the number of bytes written, or `None`
/// when `text` is not base64 or `out` is too small (then `out` may hold partial output).
#[must_use]
pub fn decode(text: &[u8], out: &mut [u8]) -> Option<usize> {
    let len = decoded_len(text)?;
    if out.len() < len {
        return None;
    }
    let text = strip_padding(text)?;
    let mut written = 0;
    for group in text.chunks(4) {
        let mut bits: u32 = 0;
        for &c in group {
            let value = DECODE[usize::from(c)];
            if value == INVALID {
                return None;
            }
            bits = bits << 6 | u32::from(value);
        }
        bits <<= 6 * (4 - group.len());
        let bytes = bits.to_be_bytes();
        let n = group.len() - 1;
        // Non-canonical trailing bits (e.g. "QR==") are refused, as a strict decoder does.
        if n < 3 && bits & (0x00ff_ffff >> (8 * n)) != 0 {
            return None;
        }
        out[written..written + n].copy_from_slice(&bytes[1..=n]);
        written += n;
    }
    Some(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(text: &str) -> Option<Vec<u8>> {
        let mut out = vec![0; text.len()];
        decode(text.as_bytes(), &mut out).map(|n| out[..n].to_vec())
    }

    #[test]
    fn decodes_rfc_4648_vectors() {
        // RFC 4648 §10.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(decoded(encoded).as_deref(), Some(plain.as_bytes()), "{encoded}");
            let unpadded = encoded.trim_end_matches('=');
            assert_eq!(decoded(unpadded).as_deref(), Some(plain.as_bytes()), "{unpadded}");
            assert_eq!(decoded_len(encoded.as_bytes()), Some(plain.len()));
        }
        assert_eq!(decoded("AP8A/w==").unwrap(), [0, 255, 0, 255]);
    }

    #[test]
    fn refuses_what_is_not_base64() {
        for bad in ["Zg=", "Z", "Zm9v Yg==", "Zm9v\n", "Zm-_", "Zh==", "=Zm9", "Zm9vYg==="] {
            assert_eq!(decoded(bad), None, "{bad:?}");
        }
        let mut small = [0u8; 2];
        assert_eq!(decode(b"Zm9v", &mut small), None);
    }
}
