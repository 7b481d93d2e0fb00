// SPDX-License-Identifier: Apache-2.0
//! The process's kept reply buffers (`ucall_client::reply_buffers`): large replies held
//! together and dropped leave their buffers kept, never more than the budget, and the
//! next large replies are read into them. A test binary of its own, so that no other
//! test's replies come and go in the pool while it counts.

use ucall_client::{reply_buffers, Client, Endpoint, Params, Response};
use ucall_core::{EngineKind, Server};

mod common;

/// Array `seed`: 400,000 floats, 1.6 MB.
fn floats(seed: usize) -> Vec<f32> {
    (0..400_000).map(|i| (i * 7 + seed) as f32 * 0.25).collect()
}

/// Whether `reply` holds array `seed`.
fn holds(reply: &Response, seed: usize) -> bool {
    *reply.result_array::<f32>().expect("an array").data == floats(seed)[..]
}

/// Array `seed` sent to `echo_array` and back: its reply, checked.
fn echoed(client: &mut Client, seed: usize) -> Response {
    let data = floats(seed);
    let reply = client
        .call("echo_array", Params::array().ndarray_of(&[data.len()], data))
        .expect("an echo");
    assert!(holds(&reply, seed), "the echo of array {seed}");
    reply
}

#[test]
fn dropped_large_replies_keep_their_buffers_up_to_the_budget_and_reuse_them() {
    // A 64 MiB budget, set before any reply is dropped (the only test in this process).
    let budget = 64 << 20;
    std::env::set_var("UCALL_REPLY_BUFFERS_MIB", "64");
    let server = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(EngineKind::Poll)
        .handler("echo_array", common::echo_array)
        .bind()
        .expect("bind")
        .spawn()
        .expect("spawn");
    let mut client = Client::new(Endpoint::new("127.0.0.1", server.port())).expect("a client");
    // Over HTTP, where a large body is read into a buffer of its own: 60 replies of 1.6 MB
    // alive at once (96 MB, more than the budget), each its own.
    let mut held = Vec::new();
    for seed in 0..60 {
        held.push((seed, echoed(&mut client, seed)));
        assert!(reply_buffers::held() <= budget);
    }
    for (seed, reply) in &held {
        assert!(holds(reply, *seed), "array {seed} still its own");
    }
    drop(held);
    let kept = reply_buffers::held();
    assert!(kept <= budget, "{kept} bytes kept, over the budget");
    assert!(kept >= 32 << 20, "the dropped replies' buffers are kept: {kept} bytes");
    // The next large replies are read into them, and are right.
    for seed in 100..110 {
        let _reply = echoed(&mut client, seed);
        assert!(reply_buffers::held() < kept, "a reply took a kept buffer");
    }
}
