// SPDX-License-Identifier: Apache-2.0
//! `bytes` params: the core's base64 decoder against the `base64` crate (the checks are in
//! `ucall_core::_fuzzable::bytes_params`), and the encoder of the client and the Python
//! module (`ucall_client::base64`, simdutf) against both.
#![no_main]

use base64::Engine as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ucall_core::_fuzzable::bytes_params(data);
    let mut encoded = Vec::new();
    ucall_client::base64::encode_append(data, &mut encoded);
    assert_eq!(
        encoded,
        base64::engine::general_purpose::STANDARD.encode(data).into_bytes()
    );
    assert_eq!(ucall_core::params::base64::decode(&encoded).as_deref(), Some(data));
});
