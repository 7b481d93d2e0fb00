// SPDX-License-Identifier: Apache-2.0
//! Zero-copy sends of the uring engine: large replies go with `SEND_ZC`/`SENDMSG_ZC`,
//! whose buffers stay pinned until the kernel's second completion (the notification).
//!
//! The engine leaves zero copy off on loopback listeners, so this binary turns it on with
//! `UCALL_URING_SEND_ZC=on` (one test only, so no other thread reads the environment
//! meanwhile). It runs where the uring engine works and says so where it does not.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{assert_result, call, post, Conn};
use ucall_core::EngineKind;

#[test]
fn large_replies_sent_with_zero_copy_arrive_whole_and_in_order() {
    if let Err(why) = ucall_core::engine::resolve(EngineKind::Uring) {
        eprintln!("zero-copy sends not tested: {why}");
        return;
    }
    std::env::set_var("UCALL_URING_SEND_ZC", "on");
    common::bounded("zero copy", Duration::from_secs(60), || {
        let server = common::serve(EngineKind::Uring);
        // Replies from 300 KB (over the zero-copy threshold) to 1.6 MB.
        let sizes = [300_000usize, 1_600_000, 700_000];
        // Raw TCP, pipelined: replies queue behind one another while earlier buffers are
        // still pinned by the kernel.
        let mut tcp = Conn::to(&server);
        let mut batch = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let text = format!("{}", (b'a' + i as u8) as char).repeat(*size);
            batch.extend_from_slice(call("echo", &format!(r#"["{text}"]"#), &i.to_string()).as_bytes());
        }
        for round in 0..3 {
            tcp.send(&batch);
            for (i, size) in sizes.iter().enumerate() {
                let text = format!("{}", (b'a' + i as u8) as char).repeat(*size);
                let line = tcp
                    .try_read_line()
                    .unwrap_or_else(|e| panic!("round {round}, reply {i}: {}", &e[..e.len().min(300)]));
                assert_result(&line, &format!("\"{text}\""), &i.to_string());
            }
        }
        // HTTP: the head and the body leave with one vectored zero-copy send.
        let mut http = Conn::to(&server);
        for (i, size) in sizes.iter().enumerate() {
            let text = "z".repeat(*size);
            let response = http.roundtrip(&post(
                "/",
                call("echo", &format!(r#"["{text}"]"#), &i.to_string()).as_bytes(),
            ));
            assert_eq!(response.status, 200);
            assert_result(&response.body, &format!("\"{text}\""), &i.to_string());
        }
        // A client that leaves with replies unsent: its pinned buffers are released
        // without harm to the next client.
        let mut leaver = Conn::to(&server);
        leaver.send(&batch);
        drop(leaver);
        let mut after = Conn::to(&server);
        let response = after.roundtrip(&post("/", call("echo", r#"["still here"]"#, "9").as_bytes()));
        assert_result(&response.body, r#""still here""#, "9");
        drop((tcp, http, after));
        assert!(
            common::wait_until(Duration::from_secs(5), || server.connections() == 0),
            "connections left open: {}",
            server.connections()
        );
    });
}
