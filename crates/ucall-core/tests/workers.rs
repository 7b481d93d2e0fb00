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

/// A front end that runs its calls itself, between turns (the Python one), completes them
/// while holding the worker's wake (`WakeHold`): the next turn delivers the replies before
/// it waits. Delivering them can let new calls in: here, the rest of a pipeline held back
/// while its connection awaited its most calls (1,024). The turn must then return without
/// waiting, since nothing else would wake it while those calls wait for the caller: the
/// client has sent everything and reads only at the end.
#[test]
fn a_turn_that_lets_calls_in_before_waiting_does_not_wait() {
    use std::sync::{Arc, Mutex};
    use ucall_core::{Call, Deferred, EngineKind, Reply};
    const CALLS: usize = 1100;
    /// Longer than any turn with something to do takes; a turn that lasts it has slept.
    const WAIT_CAP: Duration = Duration::from_secs(3);
    for engine in [EngineKind::Poll, EngineKind::Auto] {
        let collected: Arc<Mutex<Vec<Deferred>>> = Arc::default();
        let collect = Arc::clone(&collected);
        let server = Server::builder()
            .port(0)
            .threads(1)
            .engine(engine)
            .handler("park", move |_: &Call<'_>, reply: &mut Reply<'_>| {
                collect.lock().unwrap().push(reply.defer()?);
                Ok(())
            })
            .bind()
            .expect("bind");
        let addr = server.local_addr();
        let (stopper, mut workers) = server.into_workers();
        let mut worker = workers.pop().expect("one worker");
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(WAIT_CAP * 4)).unwrap();
        let requests: String = (0..CALLS)
            .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"method\":\"park\",\"id\":{i}}}\n"))
            .collect();
        stream.write_all(requests.as_bytes()).unwrap();
        // All of it waits in the kernel before the worker first turns: from then on, only
        // the worker's own doing can end a wait.
        let driver = std::thread::spawn(move || {
            let hold = worker.wake_hold();
            let mut slept = 0;
            loop {
                let started = Instant::now();
                if !worker.turn(Some(WAIT_CAP)) {
                    return slept;
                }
                let calls = std::mem::take(&mut *collected.lock().unwrap());
                if !calls.is_empty() && started.elapsed() >= WAIT_CAP {
                    slept += 1;
                }
                hold.hold();
                for call in calls {
                    call.json("done");
                }
                hold.release(false);
            }
        });
        let mut lines = BufReader::new(stream).lines();
        for i in 0..CALLS {
            let line = lines.next().expect("a reply").expect("read");
            assert_eq!(line, format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":\"done\"}}"));
        }
        stopper.stop();
        let slept = driver.join().expect("the driving thread");
        assert_eq!(
            slept, 0,
            "{engine:?}: turns that waited out their cap with calls let in"
        );
    }
}

/// The workers' listeners share their port (`SO_REUSEPORT`), which any other process of
/// the same user could join: a second server on a port in use must fail to bind, not
/// quietly take half of the first one's clients. A server with several workers on a
/// fixed port still binds them all.
#[test]
fn a_port_another_server_listens_on_is_refused() {
    let first = Server::builder().port(0).threads(2).bind().expect("bind");
    let port = first.local_addr().port();
    let second = Server::builder().port(port).threads(1).bind();
    let error = second.err().expect("a second server on a port in use must not bind");
    assert!(error.is_bind(), "{error:?}");
    assert!(
        error.to_string().contains("another server listens on that port"),
        "{error}"
    );
    drop(first);
    let again = Server::builder()
        .port(port)
        .threads(2)
        .bind()
        .expect("the port is free again");
    assert_eq!(again.local_addr().port(), port);
}

/// Worker processes of one server share its port on purpose: with `share_port` a second
/// server joins the first one's port, and the kernel hands each some of the connections.
#[test]
fn share_port_joins_a_port_in_use_and_both_servers_answer() {
    let sum = |call: &ucall_core::Call<'_>| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?);
    let first = Server::builder()
        .port(0)
        .threads(1)
        .share_port(true)
        .procedure("sum", sum);
    let first = first.bind().expect("bind").spawn().expect("spawn");
    let addr = first.local_addr();
    let second = Server::builder()
        .port(addr.port())
        .threads(1)
        .share_port(true)
        .procedure("sum", sum);
    let second = second
        .bind()
        .expect("a server with share_port joins the port")
        .spawn()
        .expect("spawn");
    for i in 0..20 {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        writeln!(
            stream,
            r#"{{"jsonrpc":"2.0","method":"sum","params":[{i},1],"id":{i}}}"#
        )
        .unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).expect("reply");
        assert_eq!(
            line.trim_end(),
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":{}}}", i + 1)
        );
    }
    first.stop();
    first.join();
    // The port stays served by the second server alone.
    let mut stream = TcpStream::connect(addr).expect("connect after the first stopped");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    writeln!(stream, r#"{{"jsonrpc":"2.0","method":"sum","params":[2,2],"id":1}}"#).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).expect("reply");
    assert_eq!(line.trim_end(), r#"{"jsonrpc":"2.0","id":1,"result":4}"#);
    second.stop();
    second.join();
}
