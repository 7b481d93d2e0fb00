// SPDX-License-Identifier: Apache-2.0
//! What only the uring engine has: the optional `SQPOLL` mode, and workers bound to the
//! thread that first turns them. Runs where the uring engine works and says so where it
//! does not.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{assert_result, call, post, Conn};
use ucall_core::EngineKind;

#[test]
fn sqpoll_serves_http_and_raw_tcp_and_stops() {
    if let Err(why) = ucall_core::engine::resolve(EngineKind::Uring) {
        eprintln!("SQPOLL not tested: {why}");
        return;
    }
    common::bounded("sqpoll", Duration::from_secs(30), || {
        let server = common::start(EngineKind::Uring, common::builder(EngineKind::Uring).sqpoll(true));
        let mut http = Conn::to(&server);
        let mut tcp = Conn::to(&server);
        for i in 0..50 {
            let response = http.roundtrip(&post(
                "/",
                call("subtract", &format!("[{i},1]"), &i.to_string()).as_bytes(),
            ));
            assert_eq!(response.status, 200, "{response:?}");
            assert_result(&response.body, &(i - 1).to_string(), &i.to_string());
            tcp.send(format!("{}\n", call("subtract", &format!("[{i},2]"), &i.to_string())).as_bytes());
            assert_result(&tcp.read_line(), &(i - 2).to_string(), &i.to_string());
        }
        // After a pause longer than the polling thread's idle time (1 s) it sleeps, and
        // a new submission must wake it.
        std::thread::sleep(Duration::from_millis(1300));
        let response = http.roundtrip(&post("/", call("subtract", "[5,3]", "99").as_bytes()));
        assert_result(&response.body, "2", "99");
        let started = std::time::Instant::now();
        server.stop();
        http.expect_closed(Duration::from_secs(2));
        tcp.expect_closed(Duration::from_secs(2));
        server.join();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "stop took {:?}",
            started.elapsed()
        );
    });
}

#[test]
fn a_worker_turned_from_a_second_thread_stops_instead_of_misbehaving() {
    if let Err(why) = ucall_core::engine::resolve(EngineKind::Uring) {
        eprintln!("single-issuer rings not tested: {why}");
        return;
    }
    common::bounded("second thread", Duration::from_secs(30), || {
        let server = common::builder(EngineKind::Uring).threads(1).bind().expect("bind");
        assert_eq!(server.engine(), EngineKind::Uring);
        let (stopper, mut workers) = server.into_workers();
        let mut worker = workers.pop().expect("one worker");
        // The first thread to turn the worker becomes its ring's only issuer.
        let mut worker = std::thread::spawn(move || {
            assert!(worker.turn(Some(Duration::from_millis(10))));
            worker
        })
        .join()
        .expect("first thread");
        // Another thread may not submit to that ring: the worker stops, and says why.
        let turned = std::thread::spawn(move || {
            let goes_on = worker.turn(Some(Duration::from_millis(10)));
            (goes_on, worker.turn(None))
        })
        .join()
        .expect("second thread");
        assert_eq!(turned, (false, false), "a worker turned from a second thread must stop");
        stopper.stop();
    });
}
