// SPDX-License-Identifier: Apache-2.0
//! A client that vanishes while its reply is being written costs only its connection,
//! also in a host program that does not ignore SIGPIPE, as C programs do not: the server
//! never writes in a way that raises it. Its own test binary, since it changes the
//! process's signal disposition.

mod common;

use std::io::{Read, Write};

use common::{assert_result, call, post, Conn};

#[test]
fn a_vanished_reader_raises_no_sigpipe() {
    // SAFETY: restores the default disposition (Rust's runtime ignores SIGPIPE); no
    // handler is installed. Should a write raise SIGPIPE, this binary dies and fails.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        // Far more than the socket buffers of both ends hold: the server is still
        // writing when the client's close (with unread data: a reset) arrives.
        let data = "x".repeat(8 << 20);
        let request = post("/", call("echo", &format!(r#"["{data}"]"#), "1").as_bytes());
        for _ in 0..3 {
            let mut conn = Conn::to(&server);
            conn.send(&request);
            let mut some = [0u8; 4096];
            let _ = conn.stream.read(&mut some);
            drop(conn);
        }
        let mut raw_tcp = Conn::to(&server);
        raw_tcp
            .stream
            .write_all(call("echo", &format!(r#"["{data}"]"#), "2").as_bytes())
            .unwrap();
        raw_tcp.stream.write_all(b"\n").unwrap();
        drop(raw_tcp);
        let reply = Conn::to(&server).roundtrip(&post("/", call("sum", "[1,2]", "3").as_bytes()));
        assert_result(&reply.body, "3", "3");
    });
}
