// SPDX-License-Identifier: Apache-2.0
//! Server-side logs through the `log` facade (target `ucall`): the start-up and shutdown
//! lines, limits hit, failed TLS sessions; one test binary, one logger that keeps records.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Mutex, Once};
use std::time::Duration;

use common::{call, post, Conn};
use ucall_core::{EngineKind, TlsConfig};

static RECORDS: Mutex<Vec<(log::Level, String, String)>> = Mutex::new(Vec::new());

struct Keeper;

impl log::Log for Keeper {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let entry = (record.level(), record.target().to_owned(), record.args().to_string());
        RECORDS.lock().unwrap().push(entry);
    }
    fn flush(&self) {}
}

fn keep_records() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&Keeper).expect("the only logger of this binary");
        log::set_max_level(log::LevelFilter::Trace);
    });
}

/// The messages logged so far at `level` under target `ucall` (or below it) that contain `needle`.
fn logged(level: log::Level, needle: &str) -> Vec<String> {
    RECORDS
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, target, text)| *l == level && target.starts_with("ucall") && text.contains(needle))
        .map(|(_, _, text)| text.clone())
        .collect()
}

/// Records that a client can provoke are throttled to one a second per kind: let the
/// second turn before provoking the next.
fn next_second() {
    std::thread::sleep(Duration::from_millis(1100));
}

#[test]
fn start_up_and_shutdown_lines_name_address_engine_threads_and_procedures() {
    keep_records();
    common::for_each_engine(|engine| {
        let server = common::serve(engine);
        let addr = server.local_addr();
        let serving = logged(log::Level::Info, &format!("serving on {addr} "));
        assert_eq!(serving.len(), 1, "{serving:?}");
        assert!(
            serving[0].contains(&format!("(engine {}, 2 threads, ", engine.name()))
                && serving[0].ends_with(" procedures)"),
            "{serving:?}"
        );
        assert!(logged(log::Level::Info, &format!("stopped serving on {addr}")).is_empty());
        drop(server);
        assert_eq!(logged(log::Level::Info, &format!("stopped serving on {addr}")).len(), 1);
    });
}

#[test]
fn limits_hit_are_warnings() {
    keep_records();
    common::for_each_engine(|engine| {
        let builder = common::builder(engine)
            .max_connections(2)
            .max_body_bytes(1000)
            .max_batch(2);
        let server = common::start(engine, builder);
        let port = server.local_addr().port();

        next_second();
        let mut conn = Conn::to(&server);
        conn.send(&post("/", &[b' '; 1001]));
        assert_eq!(conn.read_response().status, 413);
        let body = logged(log::Level::Warn, "max_body_bytes = 1000");
        assert!(!body.is_empty(), "{:?}", RECORDS.lock().unwrap());

        let mut conn = Conn::to(&server);
        let batch = format!("[{0},{0},{0}]", call("sum", "[1,2]", "1"));
        assert_eq!(conn.roundtrip(&post("/", batch.as_bytes())).status, 200);
        assert!(!logged(log::Level::Warn, "3 requests, more than max_batch = 2").is_empty());

        next_second();
        let held: Vec<Conn> = (0..2).map(|_| Conn::to(&server)).collect();
        assert!(common::wait_until(Duration::from_secs(5), || server.connections() == 2));
        let mut extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
        extra.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = extra.read(&mut [0u8; 64]);
        let full = "connection refused: max_connections = 2 are open";
        assert!(
            common::wait_until(Duration::from_secs(5), || !logged(log::Level::Warn, full).is_empty()),
            "{:?}",
            RECORDS.lock().unwrap()
        );
        drop(held);
    });
}

#[test]
fn a_failed_tls_session_is_logged() {
    keep_records();
    let dir = std::env::temp_dir().join(format!("ucall-logs-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let (pem, key) = (dir.join("server.pem"), dir.join("server.key"));
    common::for_each_engine(move |engine: EngineKind| {
        next_second();
        let tls = TlsConfig::new(&pem, &key);
        let server = common::start(engine, common::builder(engine).tls(tls));
        let before = logged(log::Level::Info, "TLS session failed").len();
        let mut plaintext = TcpStream::connect(server.local_addr()).unwrap();
        plaintext.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = plaintext.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
        let _ = plaintext.read_to_end(&mut Vec::new());
        assert!(
            common::wait_until(Duration::from_secs(5), || logged(
                log::Level::Info,
                "TLS session failed"
            )
            .len()
                > before),
            "{:?}",
            RECORDS.lock().unwrap()
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}
