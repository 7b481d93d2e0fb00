// SPDX-License-Identifier: Apache-2.0
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ucall_core::_fuzzable::jsonrpc_vs_serde(data));
