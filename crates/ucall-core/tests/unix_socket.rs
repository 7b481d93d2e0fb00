// SPDX-License-Identifier: Apache-2.0
//! The Unix domain socket listener beside the TCP port: HTTP (keep-alive, pipelined),
//! raw TCP and WebSocket over it on each engine, and the life of its file (a stale one
//! replaced, a live one refused, removed at stop).

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{assert_result, call, parse_response, post, show, Response, IO_TIMEOUT};
use ucall_core::EngineKind;

/// A fresh folder for one test's socket on one engine.
fn socket_path(test: &str, engine: EngineKind) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ucall-uds-{}-{test}-{}", std::process::id(), engine.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir.join("api.sock")
}

/// A client of the Unix socket; every read is bounded by [`IO_TIMEOUT`].
struct Client {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(path: &Path) -> Client {
        let stream = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect to {}: {e}", path.display()));
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("a read time-out");
        stream.set_write_timeout(Some(IO_TIMEOUT)).expect("a write time-out");
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Read until `complete` finds what it wants at the start of the buffer (returning
    /// it and the bytes it used), within [`IO_TIMEOUT`].
    fn until<T>(&mut self, mut complete: impl FnMut(&[u8]) -> Option<(T, usize)>) -> T {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            if let Some((found, used)) = complete(&self.buf) {
                self.buf.drain(..used);
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "nothing whole within {IO_TIMEOUT:?}: {}",
                show(&self.buf)
            );
            let mut chunk = [0u8; 64 << 10];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("closed before a whole reply: {}", show(&self.buf)),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}; received: {}", show(&self.buf)),
            }
        }
    }

    fn response(&mut self) -> Response {
        self.until(|buf| parse_response(buf).unwrap_or_else(|e| panic!("{e}")))
    }

    fn line(&mut self) -> Vec<u8> {
        self.until(|buf| {
            buf.iter()
                .position(|&b| b == b'\n')
                .map(|at| (buf[..at].to_vec(), at + 1))
        })
    }

    /// One unfragmented server frame under 126 bytes: (opcode, payload).
    fn small_frame(&mut self) -> (u8, Vec<u8>) {
        self.until(|buf| {
            let len = usize::from(*buf.get(1)?);
            assert!(len < 126, "a small frame expected: {}", show(buf));
            (buf.len() >= 2 + len).then(|| ((buf[0], buf[2..2 + len].to_vec()), 2 + len))
        })
    }
}

#[test]
fn http_keep_alive_and_pipelined_requests_over_the_unix_socket() {
    common::for_each_engine(|engine| {
        let path = socket_path("http", engine);
        let server = common::start(engine, common::builder(engine).unix_socket(&path));
        assert_eq!(server.unix_socket(), Some(path.as_path()));
        let mut client = Client::connect(&path);
        for id in 1..=2 {
            client.send(&post("/", call("sum", "[1,2]", &id.to_string()).as_bytes()));
            let response = client.response();
            assert_eq!(response.status, 200);
            assert!(!response.says_close(), "keep-alive");
            assert_result(&response.body, "3", &id.to_string());
        }
        let pipelined: Vec<u8> = (3..=5)
            .flat_map(|id| post("/", call("subtract", &format!("[{id},1]"), &id.to_string()).as_bytes()))
            .collect();
        client.send(&pipelined);
        for id in 3..=5 {
            assert_result(&client.response().body, &(id - 1).to_string(), &id.to_string());
        }
        // A reply larger than a socket buffer, and the built-in routes.
        let data = "x".repeat(300_000);
        client.send(&post("/", call("echo", &format!("[\"{data}\"]"), "6").as_bytes()));
        assert_result(&client.response().body, &format!("\"{data}\""), "6");
        client.send(&common::get("/healthz"));
        assert_eq!(client.response().status, 200);
        // The TCP port serves beside it.
        let mut tcp = common::Conn::to(&server);
        assert_result(
            &tcp.roundtrip(&post("/", call("sum", "[2,2]", "7").as_bytes())).body,
            "4",
            "7",
        );
        drop(server);
        assert!(!path.exists(), "the socket file is removed at stop");
    });
}

#[test]
fn raw_tcp_and_websocket_over_the_unix_socket() {
    common::for_each_engine(|engine| {
        let path = socket_path("streams", engine);
        let server = common::start(engine, common::builder(engine).unix_socket(&path));
        let mut raw = Client::connect(&path);
        raw.send(format!("{}\n{}", call("sum", "[1,1]", "1"), call("subtract", "[9,4]", "2")).as_bytes());
        assert_result(&raw.line(), "2", "1");
        assert_result(&raw.line(), "5", "2");

        let mut ws = Client::connect(&path);
        ws.send(
            b"GET /rpc HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        );
        let upgrade = ws.response();
        assert_eq!(upgrade.status, 101, "{upgrade:?}");
        for id in 1..=2 {
            ws.send(&common::ws_text(&call("sum", "[20,22]", &id.to_string())));
            let (opcode, payload) = ws.small_frame();
            assert_eq!(opcode, 0x81, "a final text frame");
            assert_result(&payload, "42", &id.to_string());
        }
        drop(server);
    });
}

#[test]
fn a_stale_file_is_replaced_a_live_one_refused_and_the_file_removed_at_stop() {
    common::for_each_engine(|engine| {
        let path = socket_path("life", engine);
        // What a killed server leaves behind: the file, nobody listening.
        drop(UnixListener::bind(&path).expect("bind"));
        let server = common::start(engine, common::builder(engine).unix_socket(&path));
        let refused = common::builder(engine)
            .unix_socket(&path)
            .bind()
            .err()
            .expect("refused");
        assert!(
            refused.to_string().contains("another server listens on it"),
            "{refused}"
        );
        // The first server still serves on it.
        let mut client = Client::connect(&path);
        client.send(&post("/", call("sum", "[3,4]", "1").as_bytes()));
        assert_result(&client.response().body, "7", "1");
        server.stop();
        server.join();
        assert!(!path.exists(), "removed at stop");

        std::fs::write(&path, b"not a socket").expect("a plain file");
        let refused = common::builder(engine)
            .unix_socket(&path)
            .bind()
            .err()
            .expect("refused");
        assert!(refused.to_string().contains("is not a socket"), "{refused}");
        assert_eq!(std::fs::read(&path).expect("kept"), b"not a socket");
    });
}

#[test]
fn the_socket_files_mode_is_set_and_a_unix_peer_has_no_address() {
    common::for_each_engine(|engine| {
        let path = socket_path("peer", engine);
        let builder = common::builder(engine)
            .unix_socket(&path)
            .unix_socket_mode(0o600)
            .keep_context()
            .procedure("peer", |call| Ok(call.context().peer().map(|addr| addr.to_string())));
        let server = common::start(engine, builder);
        let mode = std::fs::metadata(&path).expect("the socket file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut client = Client::connect(&path);
        client.send(&post("/", call("peer", "[]", "1").as_bytes()));
        assert_result(&client.response().body, "null", "1");
        let mut tcp = common::Conn::to(&server);
        let over_tcp = tcp.roundtrip(&post("/", call("peer", "[]", "2").as_bytes())).json();
        let shown = over_tcp.get("result").and_then(|r| r.as_str()).map(str::to_owned);
        assert!(shown.is_some_and(|peer| peer.starts_with("127.0.0.1:")), "{over_tcp}");
        drop(server);
    });
    let error = common::builder(EngineKind::Poll)
        .unix_socket_mode(0o600)
        .bind()
        .err()
        .expect("refused");
    assert!(error.to_string().contains("needs unix_socket"), "{error}");
}
