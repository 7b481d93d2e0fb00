// SPDX-License-Identifier: Apache-2.0
//! Base64 for `bytes` params and results: RFC 4648 §4, the standard alphabet, padded,
//! nothing else (no whitespace, no URL-safe alphabet, zero bits under the padding).
//!
//! simdutf does the work, with AVX-512 where the CPU has it: on a 1.6 MB payload it
//! decodes 1.7x and encodes 1.2x as fast as base64-simd (docs/design.md, "Large
//! messages").

use std::mem::MaybeUninit;

use simdutf::{Base64Options, ErrorCode, LastChunkHandlingOptions};

/// The number of bytes `text` decodes to, or `None` when its length rules base64 out.
pub fn decoded_len(text: &[u8]) -> Option<usize> {
    if text.len() % 4 != 0 {
        return None;
    }
    let padding = text.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    Some(text.len() / 4 * 3 - padding)
}

/// Decode `text` into the whole of `out`, which must be [`decoded_len`] long. `false` when
/// `text` is not base64; `out` may then hold anything.
pub fn decode_into(text: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    if decoded_len(text) != Some(out.len()) {
        return false;
    }
    let mut written = out.len();
    // SAFETY: `text` is readable for its length and `out` writable for `written` bytes,
    // which the bounded ("safe") decoder never goes past; `out` is borrowed mutably, so
    // the two do not overlap.
    let result = unsafe {
        simdutf::base64_to_binary_safe(
            text.as_ptr(),
            text.len(),
            out.as_mut_ptr().cast::<u8>(),
            &mut written,
            Base64Options::Default,
            LastChunkHandlingOptions::Strict,
            false,
        )
    };
    // simdutf skips ASCII whitespace (WHATWG "forgiving base64"); a skipped byte shows as
    // fewer bytes written than the length allows, which is how whitespace is refused.
    result.error == ErrorCode::Success && written == out.len()
}

/// The length of the base64 text of `len` bytes.
pub fn encoded_len(len: usize) -> usize {
    simdutf::base64_length_from_binary(len, Base64Options::Default)
}

/// Append the base64 text of `bytes` to `out`.
pub fn encode_append(bytes: &[u8], out: &mut Vec<u8>) {
    let len = encoded_len(bytes.len());
    out.reserve(len);
    let room = out.spare_capacity_mut();
    // SAFETY: `room` has at least `len` writable bytes, all the encoder writes; `bytes`
    // cannot be part of `out`, which is borrowed mutably.
    let written = unsafe {
        simdutf::binary_to_base64(
            bytes.as_ptr(),
            bytes.len(),
            room.as_mut_ptr().cast::<u8>(),
            Base64Options::Default,
        )
    };
    assert_eq!(written, len, "simdutf wrote the length it announced");
    // SAFETY: the encoder initialised the `written` bytes after the old length.
    unsafe { out.set_len(out.len() + written) };
}
