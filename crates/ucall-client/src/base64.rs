// SPDX-License-Identifier: Apache-2.0
//! Base64 of `bytes` on the wire: RFC 4648 §4, the standard alphabet, written padded.
//! The client's params and the Python server's `bytes` results are written here. Results
//! are read by the core's rule (`ucall_core::params::base64`), the one `bytes` params are
//! held to, with simdutf decoding the groups of four.
//!
//! With the `simd` feature (the default) simdutf does the work, AVX-512 where the CPU has
//! it: on a 1.6 MB payload it encodes 1.2x as fast as base64-simd (docs/design.md, "Large
//! messages"); the writer is the core's (`ucall_core::base64_text`), which the feature
//! turns to simdutf. Without it, base64-simd, so a C library needs no libstdc++.

use std::mem::MaybeUninit;

#[cfg(feature = "simd")]
use simdutf::{Base64Options, ErrorCode, LastChunkHandlingOptions};

// Written by the core's writer, simdutf with this crate's `simd` feature (on by default),
// for the Rust server's results and the client's params alike.
pub use ucall_core::base64_text::{
    encode_append, encode_joined_append, encoded_len, write_base64, write_base64_joined,
};

/// The length `text` decodes to by the core's base64 rule (padding optional; see
/// `ucall_core::params::base64`), `None` when its length rules base64 out.
#[must_use]
pub fn base64_decoded_len(text: &[u8]) -> Option<usize> {
    ucall_core::params::base64::decoded_len(text)
}

/// Decode `text` into all of `out` ([`base64_decoded_len`] long) by the core's base64 rule,
/// the rule servers hold `bytes` params to; `false` when `text` is not base64.
pub fn base64_decode_into(text: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    ucall_core::params::base64::decode_into_with(text, out, decode_groups)
}

/// Complete groups of four, decoded by simdutf: AVX-512 where the CPU has it, a 1.6 MB
/// array's base64 in about half base64-simd's time (docs/design.md, "Large messages").
#[cfg(feature = "simd")]
pub fn decode_groups(groups: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    let mut written = out.len();
    // SAFETY: `groups` is readable for its length and `out` writable for `written` bytes,
    // which the bounded decoder never passes; `out` is borrowed mutably, so they are apart.
    let result = unsafe {
        simdutf::base64_to_binary_safe(
            groups.as_ptr(),
            groups.len(),
            out.as_mut_ptr().cast::<u8>(),
            &mut written,
            Base64Options::Default,
            LastChunkHandlingOptions::Strict,
            false,
        )
    };
    // simdutf skips whitespace and reads `=` as padding: either shows as fewer bytes
    // written, and is refused, as the rule has neither inside the text.
    result.error == ErrorCode::Success && written == out.len()
}

/// Complete groups of four, decoded by the core's decoder (no simdutf in this build).
#[cfg(not(feature = "simd"))]
pub fn decode_groups(groups: &[u8], out: &mut [MaybeUninit<u8>]) -> bool {
    ucall_core::params::base64::decode_into(groups, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(text: &[u8]) -> Option<Vec<u8>> {
        let len = base64_decoded_len(text)?;
        let mut out = Vec::with_capacity(len);
        if !base64_decode_into(text, &mut out.spare_capacity_mut()[..len]) {
            return None;
        }
        // SAFETY: the decoder wrote all `len` bytes (it succeeded).
        unsafe { out.set_len(len) };
        Some(out)
    }

    #[test]
    fn results_are_read_by_the_cores_rule_through_simd() {
        let plain: Vec<u8> = (0..=255u8).cycle().take(300_002).collect();
        let mut text = Vec::new();
        write_base64(&plain, &mut text);
        let text = &text[1..text.len() - 1]; // the quotes off
        assert!(text.ends_with(b"="));
        assert_eq!(decoded(text).as_deref(), Some(&plain[..]), "padded");
        let unpadded = &text[..text.len() - 1];
        assert_eq!(
            decoded(unpadded).as_deref(),
            Some(&plain[..]),
            "unpadded, as the rule allows"
        );
        // What the rule refuses, wherever simdutf meets it among the groups of four.
        for at in [0, 1, 100, 200_000, text.len() - 5] {
            for bad in [b' ', b'\n', b'=', b'-', b'_', b'\\', 0xc3] {
                let mut broken = text.to_vec();
                broken[at] = bad;
                assert_eq!(decoded(&broken), None, "{bad:#x} at {at}");
            }
        }
        assert_eq!(decoded(b"Zh=="), None, "leftover bits set");
        assert_eq!(decoded(b"Zg="), None, "padding that completes no group");
    }
}
