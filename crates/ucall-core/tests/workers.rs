// SPDX-License-Identifier: Apache-2.0
//! Workers driven by the caller's own threads (what the C API's `ucall_take_calls` does).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ucall_core::Server;

#[test]
fn caller_threads_drive_workers_turn_by_turn_until_stopped() {
    let server = Server::builder()
        .port(0)
        .threads(2)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .bind()
        .expect("bind");
    let addr = server.local_addr();
    let (stopper, workers) = server.into_workers();
    assert_eq!(workers.len(), 2);
    let threads: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            std::thread::spawn(move || {
                let mut turns = 0u64;
                while worker.turn(Some(Duration::from_millis(20))) {
                    turns += 1;
                }
                assert!(!worker.turn(None), "a finished worker stays finished");
                turns
            })
        })
        .collect();

    for i in 0..20 {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        writeln!(
            stream,
            r#"{{"jsonrpc":"2.0","method":"sum","params":[{i},1],"id":{i}}}"#
        )
        .unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).expect("reply");
        assert_eq!(
            line,
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":{}}}\n", i + 1)
        );
    }

    let started = Instant::now();
    stopper.stop();
    for thread in threads {
        assert!(thread.join().expect("worker thread") > 0);
    }
    assert!(started.elapsed() < Duration::from_secs(2), "workers stop promptly");
    assert!(TcpStream::connect(addr).is_err(), "nothing listens after the stop");
}

#[test]
fn procedures_added_after_bind_are_served() {
    let mut server = Server::builder().port(0).threads(1).bind().expect("bind");
    let addr = server.local_addr();
    server.router_mut().insert(
        "late",
        std::sync::Arc::new(|_: &ucall_core::Call<'_>, reply: &mut ucall_core::Reply<'_>| {
            reply.raw("\"added after bind\"")
        }),
    );
    let handle = server.spawn().expect("spawn");
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    writeln!(stream, r#"{{"jsonrpc":"2.0","method":"late","id":1}}"#).unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).expect("reply");
    assert_eq!(line, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"added after bind\"}\n");
    handle.stop();
    handle.join();
}
