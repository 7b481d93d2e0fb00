// SPDX-License-Identifier: Apache-2.0
//! `bytes` params: the core's base64 decoder against the `base64` crate (the checks are in
//! `ucall_core::_fuzzable::bytes_params`), and the Python module's encoder against both.
//! The encoder lives in the Python crate, which builds only as a Python module, so its file
//! is compiled in here.
#![no_main]

use base64::Engine as _;

#[path = "../../crates/ucall-python/src/base64.rs"]
#[allow(dead_code)]
mod python;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ucall_core::_fuzzable::bytes_params(data);
    let mut encoded = Vec::new();
    python::encode_append(data, &mut encoded);
    assert_eq!(
        encoded,
        base64::engine::general_purpose::STANDARD.encode(data).into_bytes()
    );
    assert_eq!(ucall_core::params::base64::decode(&encoded).as_deref(), Some(data));
});
