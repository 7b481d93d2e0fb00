// SPDX-License-Identifier: Apache-2.0
//! The documented example runs to its end.

#[path = "../examples/call.rs"]
#[allow(dead_code)]
mod call;

#[test]
fn the_example_calls_every_way() {
    call::main().expect("the example runs");
}
