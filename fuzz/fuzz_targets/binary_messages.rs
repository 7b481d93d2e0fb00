// SPDX-License-Identifier: Apache-2.0
//! Binary messages (docs/wire.md) through a raw TCP session: the checks are in
//! `ucall_core::_fuzzable::binary_messages`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ucall_core::_fuzzable::binary_messages(data));
