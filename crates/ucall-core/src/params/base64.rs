// SPDX-License-Identifier: Apache-2.0
//! Base64 for `bytes` params (RFC 4648 §4: the standard alphabet), the one decoder every
//! front end uses.
//!
//! The rule (docs/design.md, "Bytes params: one base64 rule"): padding is optional, but
//! when present it completes the final group of four (`Zg==`, `Zm8=`; never `Zg=`); a
//! text of 4n+1 characters is never base64; nothing outside the alphabet is accepted
//! (no whitespace, no URL-safe `-` `_`), and the bits a short final group leaves over must
//! be zero (`Zh==` is refused), so that one byte string has exactly two spellings, padded
//! and unpadded.
//!
//! Complete groups go through base64-simd (SIMD, pure Rust); the final partial group is
//! decoded here, where the padding rule and the zero bits are checked.

use std::mem::MaybeUninit;

use base64_simd::{Out, STANDARD};

/// The number of bytes `text` decodes to, or `None` when its length or padding rules
/// base64 out (its characters are checked only when decoding).
#[must_use]
pub fn decoded_len(text: &[u8]) -> Option<usize> {
    let (data, _) = split(text)?;
    Some(data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1))
}

/// `text` without its padding, and the number of `=` removed; `None` when the padding
/// or the length breaks the rule.
fn split(text: &[u8]) -> Option<(&[u8], usize)> {
    let padding = text.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    let data = &text[..text.len() - padding];
    if padding > 0 && (text.len() % 4 != 0 || data.len() % 4 + padding != 4) {
        return None; // padding only completes a final group of four
    }
    (data.len() % 4 != 1).then_some((data, padding))
}

/// Value of each byte in the alphabet, or [`INVALID`].
const INVALID: u8 = 0xff;
const VALUES: [u8; 256] = {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Decode `text` into the whole of `out`, which must be [`decoded_len`] long. `false`
/// when `text` is not base64; `out` may then hold anything. `out` may be uninitialised
/// (a new Python `bytes`): every byte of it is written on success.
#[must_use]
pub fn decode_into(text: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    decode_into_with(text, out, decode_groups)
}

/// Decodes complete groups of four characters (no `=` among them) into exactly
/// `groups.len() / 4 * 3` bytes, every one written; `false` on anything else.
pub type GroupDecoder = fn(groups: &[u8], out: &mut [MaybeUninit<u8>]) -> bool;

/// [`decode_into`] with the complete groups decoded by `groups`, another SIMD engine (the
/// Python binding's simdutf has AVX-512 kernels): the rule, padding and the final group,
/// stays here.
#[must_use]
pub fn decode_into_with(text: &[u8], out: &mut [MaybeUninit<u8>], groups: GroupDecoder) -> bool {
    let Some((data, _)) = split(text) else { return false };
    if decoded_len(text) != Some(out.len()) {
        return false;
    }
    let whole = data.len() / 4 * 4;
    let (body, tail) = data.split_at(whole);
    let (out_body, out_tail) = out.split_at_mut(whole / 4 * 3);
    if !body.is_empty() && !groups(body, out_body) {
        return false;
    }
    decode_tail(tail, out_tail)
}

/// The core's [`GroupDecoder`]: base64-simd (AVX2, pure Rust).
fn decode_groups(groups: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    // A `=` inside the groups reads as padding and yields fewer bytes: caught here.
    let expected = out.len();
    matches!(STANDARD.decode(groups, Out::from_uninit_slice(out)), Ok(written) if written.len() == expected)
}

/// Decode the final partial group (0, 2 or 3 characters) into its 0, 1 or 2 bytes.
fn decode_tail(tail: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    let mut bits: u32 = 0;
    for &c in tail {
        let value = VALUES[usize::from(c)];
        if value == INVALID {
            return false;
        }
        bits = bits << 6 | u32::from(value);
    }
    let spare = 6 * tail.len() % 8; // 4 bits after 2 characters, 2 after 3
    if bits & ((1 << spare) - 1) != 0 {
        return false; // non-canonical: a strict decoder refuses bits the encoder never sets
    }
    let bytes = (bits >> spare).to_be_bytes();
    let first = bytes.len() - out.len();
    for (slot, &byte) in out.iter_mut().zip(&bytes[first..]) {
        slot.write(byte);
    }
    true
}

/// Decode `text` into the start of `out`; the number of bytes written, or `None` when
/// `text` is not base64 or `out` is shorter than [`decoded_len`] (then `out` may hold
/// partial output).
#[must_use]
pub fn decode_to_slice(text: &[u8], out: &mut [u8]) -> Option<usize> {
    let len = decoded_len(text)?;
    let out = out.get_mut(..len)?;
    // SAFETY: the same bytes seen as possibly uninitialised: `MaybeUninit<u8>` has the
    // layout of `u8`, and the decoder writes only initialised bytes through this view.
    let out = unsafe { &mut *(std::ptr::from_mut(out) as *mut [MaybeUninit<u8>]) };
    decode_into(text, out).then_some(len)
}

/// Decode `text` into a new vector, or `None` when it is not base64.
#[must_use]
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0; decoded_len(text)?];
    decode_to_slice(text, &mut out).map(|_| out)
}

/// Why `text` is not base64 by the rule, in words for an error message (`'-' at index 4
/// is not a base64 character ...`); call it on a text [`decode`] refused.
#[cold]
#[must_use]
pub fn problem(text: &[u8]) -> String {
    let padding_at = text.iter().position(|&c| c == b'=');
    let data = &text[..padding_at.unwrap_or(text.len())];
    if let Some(at) = data.iter().position(|&c| VALUES[usize::from(c)] == INVALID) {
        let shown = std::str::from_utf8(&text[at..])
            .ok()
            .and_then(|rest| rest.chars().next())
            .map_or_else(|| format!("byte 0x{:02x}", text[at]), |c| format!("{c:?}"));
        let hint = if matches!(text[at], b'-' | b'_') {
            " (URL-safe base64 is not taken: use + and /)"
        } else {
            ""
        };
        return format!("{shown} at index {at} is not a base64 character{hint}");
    }
    if let Some(at) = padding_at.filter(|&at| text[at..].iter().any(|&c| c != b'=')) {
        return format!("'=' at index {at} pads the middle of the text");
    }
    if data.len() % 4 == 1 {
        return format!(
            "{} characters before the padding: a length of 4n+1 is never base64 (one is missing or extra)",
            data.len()
        );
    }
    if padding_at.is_some() && split(text).is_none() {
        return "the '=' padding does not complete a final group of four".to_owned();
    }
    "the last character sets bits that the bytes do not have (it was not written by a base64 encoder)".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_why_a_text_is_not_base64() {
        for (bad, says) in [
            ("Zm-_", "'-' at index 2 is not a base64 character (URL-safe"),
            ("Zm9v Yg==", "' ' at index 4 is not a base64"),
            ("Zg==Zg==", "'=' at index 2 pads the middle"),
            ("Zm9vY", "5 characters before the padding: a length of 4n+1"),
            ("Zg=", "does not complete a final group of four"),
            ("Zm9vYg===", "does not complete"),
            ("Zh==", "the last character sets bits"),
            ("AQJ", "the last character sets bits"),
            ("é", "'é' at index 0"),
        ] {
            assert_eq!(decoded(bad), None, "{bad}");
            let said = problem(bad.as_bytes());
            assert!(said.contains(says), "{bad}: {said}");
        }
    }

    fn decoded(text: &str) -> Option<Vec<u8>> {
        decode(text.as_bytes())
    }

    #[test]
    fn decodes_rfc_4648_vectors_padded_or_not() {
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
            assert_eq!(decoded_len(unpadded.as_bytes()), Some(plain.len()));
        }
        assert_eq!(decoded("AP8A/w==").unwrap(), [0, 255, 0, 255]);
    }

    #[test]
    fn long_texts_decode_through_the_simd_body() {
        let plain: Vec<u8> = (0..=255u8).cycle().take(3000 + 2).collect();
        let mut text = String::new();
        for chunk in plain.chunks(3) {
            let mut group = [0u8; 3];
            group[..chunk.len()].copy_from_slice(chunk);
            let bits = u32::from_be_bytes([0, group[0], group[1], group[2]]);
            let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            for i in 0..=chunk.len() {
                text.push(alphabet[(bits >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        assert_eq!(decoded(&text).as_deref(), Some(&plain[..]), "unpadded");
        assert_eq!(decoded(&format!("{text}=")).as_deref(), Some(&plain[..]), "padded");
        for at in [0, 1, 100, 2000, text.len() - 1] {
            let mut bad = text.clone().into_bytes();
            bad[at] = b' ';
            assert_eq!(decode(&bad), None, "a space at {at}");
            bad[at] = b'=';
            assert_eq!(decode(&bad), None, "a '=' at {at}");
        }
    }

    #[test]
    fn refuses_what_is_not_base64() {
        for bad in [
            "Zg=",
            "Z",
            "Zm9vY",
            "Zm9v Yg==",
            "Zm9v\n",
            "Zm-_",
            "Zh==",
            "Zh",
            "Zm9=",
            "Zm9",
            "=Zm9",
            "Zm9vYg===",
            "====",
            "Zg==Zg==",
        ] {
            assert_eq!(decoded(bad), None, "{bad:?}");
        }
        let mut small = [0u8; 2];
        assert_eq!(decode_to_slice(b"Zm9v", &mut small), None);
        let mut exact = [0u8; 3];
        assert_eq!(decode_to_slice(b"Zm9v", &mut exact), Some(3));
    }
}
