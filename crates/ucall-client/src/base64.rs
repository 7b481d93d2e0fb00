// SPDX-License-Identifier: Apache-2.0
//! Base64 of `bytes` on the wire: RFC 4648 §4, the standard alphabet, padded and strict.
//! The client's params and the Python server's `bytes` results are written here; `bytes`
//! params a server receives are decoded by the core (`ucall_core::params::base64`).
//!
//! With the `simd` feature (the default) simdutf does the work, AVX-512 where the CPU has
//! it: on a 1.6 MB payload it encodes 1.2x as fast as base64-simd (docs/design.md, "Large
//! messages"). Without it, the base64 crate, so a C library needs no libstdc++.

use std::mem::MaybeUninit;

#[cfg(feature = "simd")]
use simdutf::{Base64Options, ErrorCode, LastChunkHandlingOptions};

/// The length of the base64 text of `len` bytes.
#[must_use]
#[cfg(feature = "simd")]
pub fn encoded_len(len: usize) -> usize {
    simdutf::base64_length_from_binary(len, Base64Options::Default)
}

/// The length of the base64 text of `len` bytes.
#[must_use]
#[cfg(not(feature = "simd"))]
pub fn encoded_len(len: usize) -> usize {
    ::base64::encoded_len(len, true).unwrap_or(0)
}

/// Append the base64 text of `bytes` to `out`, straight into its spare capacity.
#[cfg(feature = "simd")]
pub fn encode_append(bytes: &[u8], out: &mut Vec<u8>) {
    let len = encoded_len(bytes.len());
    out.reserve(len);
    let room = out.spare_capacity_mut();
    // SAFETY: `room` has at least `len` writable bytes (reserved above), all the encoder
    // writes; `bytes` is not part of `out`, which is borrowed mutably.
    let written = unsafe {
        simdutf::binary_to_base64(
            bytes.as_ptr(),
            bytes.len(),
            room.as_mut_ptr().cast::<u8>(),
            Base64Options::Default,
        )
    };
    // SAFETY: the encoder initialised `written` bytes after the old length, within capacity.
    unsafe { out.set_len(out.len() + written.min(len)) };
}

/// Append the base64 text of `bytes` to `out`.
#[cfg(not(feature = "simd"))]
pub fn encode_append(bytes: &[u8], out: &mut Vec<u8>) {
    use ::base64::Engine as _;
    let start = out.len();
    out.resize(start + encoded_len(bytes.len()), 0);
    let written = ::base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}

/// Append `bytes` as a quoted standard base64 string (a JSON string).
pub fn write_base64(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(bytes.len()) + 2);
    out.push(b'"');
    encode_append(bytes, out);
    out.push(b'"');
}

/// The length `text` decodes to as strict standard base64, `None` when it cannot be.
#[must_use]
pub fn base64_decoded_len(text: &[u8]) -> Option<usize> {
    if text.len() % 4 != 0 {
        return None;
    }
    let padding = text.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    Some(text.len() / 4 * 3 - padding)
}

/// Decode strict standard base64 `text` into all of `out` ([`base64_decoded_len`] long).
/// `false` when `text` is not base64.
#[cfg(feature = "simd")]
pub fn base64_decode_into(text: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    if base64_decoded_len(text) != Some(out.len()) {
        return false;
    }
    let mut written = out.len();
    // SAFETY: `text` is readable for its length and `out` writable for `written` bytes,
    // which the bounded decoder never passes; `out` is borrowed mutably, so they are apart.
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
    // Skipped whitespace shows as fewer bytes written: refused, as strict base64 has none.
    result.error == ErrorCode::Success && written == out.len()
}

/// Decode strict standard base64 `text` into all of `out` ([`base64_decoded_len`] long).
/// `false` when `text` is not base64.
#[cfg(not(feature = "simd"))]
pub fn base64_decode_into(text: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    use ::base64::Engine as _;
    if base64_decoded_len(text) != Some(out.len()) {
        return false;
    }
    let Ok(decoded) = ::base64::engine::general_purpose::STANDARD.decode(text) else {
        return false;
    };
    if decoded.len() != out.len() {
        return false;
    }
    for (slot, byte) in out.iter_mut().zip(decoded) {
        slot.write(byte);
    }
    true
}
