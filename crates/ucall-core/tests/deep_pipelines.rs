// SPDX-License-Identifier: Apache-2.0
//! Many connections pipelining deep at once. A test binary of its own: its 128 client
//! threads would starve the timing-sensitive tests of `limits.rs` (idle time-outs of
//! 300 ms) if they ran side by side.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{assert_result, call, post, Conn};

fn subtract(minuend: i64, subtrahend: i64, id: i64) -> String {
    call("subtract", &format!("[{minuend},{subtrahend}]"), &id.to_string())
}

#[test]
fn deep_pipelines_on_many_connections_at_once_are_all_answered_in_order() {
    // One worker, kept busy while every client sends its pipeline: once free it finds more
    // queued than an io_uring worker's receive buffers hold (4 MiB), so some receives find
    // the buffer ring dry and read into buffers of their own.
    const CONNECTIONS: usize = 128;
    const CALLS: i64 = 1000;
    common::for_each_engine(|engine| {
        let builder = common::builder(engine).threads(1).procedure("pause", |_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        });
        let server = Arc::new(common::start(engine, builder));
        let mut paused = Conn::to(&server);
        let all_open = Arc::new(Barrier::new(CONNECTIONS + 1));
        let clients: Vec<_> = (0..CONNECTIONS as i64)
            .map(|c| {
                let (server, all_open) = (Arc::clone(&server), Arc::clone(&all_open));
                std::thread::spawn(move || {
                    let mut conn = Conn::to(&server);
                    // Order and completeness are tested here, not speed: one debug-build
                    // worker serves 128,000 calls, and on a loaded host a connection may
                    // wait its turn for longer than the usual 5 s.
                    conn.patience = Duration::from_secs(60);
                    let calls: Vec<u8> = (0..CALLS)
                        .flat_map(|i| post("/", subtract(c * 10_000 + i, c, i).as_bytes()))
                        .collect();
                    all_open.wait();
                    conn.send(&calls);
                    for i in 0..CALLS {
                        let response = conn.read_response();
                        assert_eq!(response.status, 200, "connection {c}, call {i}: {response:?}");
                        assert_result(&response.body, &(c * 9_999 + i).to_string(), &i.to_string());
                    }
                })
            })
            .collect();
        paused.send(&post("/", call("pause", "[]", "0").as_bytes()));
        all_open.wait();
        for client in clients {
            client.join().expect("a client was answered wrongly or not at all");
        }
        assert_result(&paused.read_response().body, "null", "0");
    });
}
