// SPDX-License-Identifier: Apache-2.0
//! `bytes` params: base64 text decoded by the C API and by the Python module, each held to
//! the `base64` crate configured as it documents itself (RFC 4648 §4, the standard alphabet,
//! no whitespace, zero bits under the padding; the C API also takes it with no padding at
//! all, but not with part of it), and the
//! Python module's encoder held to the same. The decoders live in the front-end crates,
//! which build only as C and Python libraries, so their files are compiled in here.
#![no_main]

use base64::alphabet::STANDARD;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;

#[path = "../../crates/ucall-capi/src/base64.rs"]
#[allow(dead_code)]
mod capi;
#[path = "../../crates/ucall-python/src/base64.rs"]
#[allow(dead_code)]
mod python;

/// Without padding, as the C API also takes it (with padding, it must be whole: `PADDED`).
const UNPADDED: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::RequireNone),
);
/// Padding required, as the Python module takes it and writes it.
const PADDED: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut out = vec![0; data.len()];
    let c_api = capi::decode(data, &mut out).map(|n| out[..n].to_vec());
    let reference = if data.ends_with(b"=") {
        PADDED.decode(data)
    } else {
        UNPADDED.decode(data)
    };
    assert_eq!(c_api, reference.ok(), "C API on {:?}", String::from_utf8_lossy(data));

    let reference = PADDED.decode(data).ok();
    let python = python::decoded_len(data).and_then(|len| {
        let mut out = vec![std::mem::MaybeUninit::new(0u8); len];
        // SAFETY: every byte of `out` was initialized above, so reading them is sound
        // whatever the decoder wrote.
        python::decode_into(data, &mut out).then(|| out.iter().map(|b| unsafe { b.assume_init() }).collect::<Vec<u8>>())
    });
    assert_eq!(
        python,
        reference,
        "Python module on {:?}",
        String::from_utf8_lossy(data)
    );

    let mut encoded = Vec::new();
    python::encode_append(data, &mut encoded);
    assert_eq!(encoded, PADDED.encode(data).into_bytes());
});
