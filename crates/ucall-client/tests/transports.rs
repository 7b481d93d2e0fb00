// SPDX-License-Identifier: Apache-2.0
//! The client against a live server on loopback, every transport, and against scripted
//! servers for what a real one rarely does (chunked replies, a lost connection).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::certs;
use ucall_client::{Client, Endpoint, ErrorKind, NoParams, Params, Protocol, TlsRefusal};
use ucall_core::{Call, EngineKind, Reply, RpcError, Server, ServerHandle, TlsConfig};

fn serve(tls: Option<TlsConfig>) -> ServerHandle {
    let mut builder = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(EngineKind::Poll)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .procedure("nap", |call| {
            std::thread::sleep(Duration::from_millis(call.get::<u64>(0, "ms")?));
            Ok(())
        })
        .handler("echo", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let data = call
                .params()
                .raw_at(0, "data")
                .ok_or_else(|| RpcError::invalid_params("no data"))?;
            reply.raw_trusted(data);
            Ok(())
        });
    if let Some(tls) = tls {
        builder = builder.tls(tls);
    }
    builder.bind().expect("bind").spawn().expect("spawn")
}

fn exercise(endpoint: Endpoint) {
    let url = endpoint.url();
    let mut client = Client::new(endpoint).expect("a client");
    assert_eq!(client.call("sum", [1, 2]).expect(&url).result::<i64>(), Ok(3), "{url}");
    let blob: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let echoed = client.call("echo", Params::array().bytes(&blob)).expect(&url);
    assert_eq!(echoed.result_bytes().expect("bytes"), blob, "{url}");
    client.notify("sum", [1, 1]).expect(&url);
    client.notify_json("sum", Some("[1, 1]")).expect(&url);
    assert_eq!(
        client.call_json("sum", Some("[2,3]")).expect(&url).result::<i64>(),
        Ok(5),
        "{url}"
    );
    for bad in ["[1,", "[1] x"] {
        let refused = client.notify_json("sum", Some(bad)).expect_err("not JSON");
        assert!(refused.message().starts_with("params are not JSON"), "{url}: {refused}");
    }
    let replies = client.pipeline((0..500).map(|i| ("sum", [i, 1]))).expect(&url);
    let results: Vec<i64> = replies.iter().map(|r| r.result().expect("a result")).collect();
    assert_eq!(results, (1..=500).collect::<Vec<i64>>(), "{url}");
    let missing = client
        .call("missing", NoParams)
        .expect(&url)
        .result::<i64>()
        .expect_err("no such method");
    assert_eq!(missing.code, -32601, "{url}");
}

#[test]
fn every_transport_plain_and_tls() {
    let plain = serve(None);
    let port = plain.port();
    exercise(Endpoint::new("127.0.0.1", port));
    exercise(Endpoint::new("127.0.0.1", port).with_protocol(Protocol::Tcp));
    exercise(Endpoint::parse(&format!("ws://127.0.0.1:{port}/")).expect("a URL"));
    plain.stop();
    plain.join();

    let certs = certs();
    let tls = serve(Some(TlsConfig::new(
        certs.0.join("server.pem"),
        certs.0.join("server.key"),
    )));
    let port = tls.port();
    let ca = certs.0.join("ca.pem");
    exercise(
        Endpoint::parse(&format!("https://127.0.0.1:{port}"))
            .expect("a URL")
            .cacert(&ca),
    );
    exercise(
        Endpoint::parse(&format!("tls://localhost:{port}"))
            .expect("a URL")
            .cacert(&ca),
    );
    exercise(
        Endpoint::parse(&format!("wss://127.0.0.1:{port}"))
            .expect("a URL")
            .cacert(&ca),
    );
    // Verified by default: the system's CAs do not know this one.
    let mut unknown =
        Client::new(Endpoint::parse(&format!("https://127.0.0.1:{port}")).expect("a URL")).expect("a client");
    let error = unknown.call("sum", [1, 2]).expect_err("an unknown CA");
    assert_eq!(error.kind(), ErrorKind::Connect);
    assert_eq!(error.tls_refusal(), Some(TlsRefusal::ServerCertificate));
    assert!(error.message().contains("cannot verify the TLS certificate"), "{error}");
    assert!(error.message().contains("unknown issuer"), "{error}");
    let mut wrong_name = Client::new(
        Endpoint::parse(&format!("https://127.0.0.1:{port}"))
            .expect("a URL")
            .cacert(&ca)
            .server_name("example.com"),
    )
    .expect("a client");
    let error = wrong_name.call("sum", [1, 2]).expect_err("another name");
    assert!(error.message().contains("hostname mismatch"), "{error}");
    // Sessions resume on reconnection, from the tickets of the connection before.
    let https = Endpoint::parse(&format!("https://127.0.0.1:{port}"))
        .expect("a URL")
        .cacert(&ca);
    for resume in [true, false] {
        let endpoint = if resume {
            https.clone()
        } else {
            https.clone().no_resumption()
        };
        let mut client = Client::new(endpoint).expect("a client");
        assert_eq!(client.call("sum", [1, 2]).expect("a call").result::<i64>(), Ok(3));
        let first = client.tls_info().expect("a TLS connection");
        assert_eq!((first.alpn.as_deref(), first.resumed), (Some(&b"http/1.1"[..]), false));
        client.close();
        assert_eq!(client.call("sum", [1, 2]).expect("a call").result::<i64>(), Ok(3));
        assert_eq!(client.tls_info().expect("a TLS connection").resumed, resume);
    }
    let mut insecure = Client::new(
        Endpoint::parse(&format!("https://127.0.0.1:{port}"))
            .expect("a URL")
            .insecure(),
    )
    .expect("a client");
    assert_eq!(
        insecure.call("sum", [1, 2]).expect("any certificate").result::<i64>(),
        Ok(3)
    );
    tls.stop();
    tls.join();
}

/// A pipeline far larger than the socket buffers on both sides: the server stops reading
/// a client that does not read its replies, so a client that wrote everything first
/// would wait for ever.
#[test]
fn a_pipeline_of_large_calls_completes() {
    let server = serve(None);
    for protocol in [Protocol::Http, Protocol::Tcp] {
        let mut client = Client::new(
            Endpoint::new("127.0.0.1", server.port())
                .with_protocol(protocol)
                .with_timeout(Some(Duration::from_secs(60))),
        )
        .expect("a client");
        let blob = vec![7u8; 1 << 20];
        let calls: Vec<_> = (0..24).map(|_| ("echo", Params::array().bytes(&blob))).collect();
        let replies = client.pipeline(calls).expect("the pipeline completes");
        assert_eq!(replies.len(), 24);
        assert!(replies.iter().all(|r| r.result_bytes().is_ok_and(|b| b == blob)));
    }
    server.stop();
    server.join();
}

/// Params that cannot be written when `fail` is set.
struct Flaky(i64, bool);

impl ucall_client::ToParams for Flaky {
    fn write_params(&self, out: &mut Vec<u8>) -> ucall_client::Result<bool> {
        if self.1 {
            return Err(ucall_client::Error::new(ErrorKind::Invalid, "no JSON form"));
        }
        out.extend_from_slice(format!("[{},{}]", self.0, self.0).as_bytes());
        Ok(true)
    }
}

#[test]
fn a_pipeline_stops_at_params_that_cannot_be_written_and_stays_in_step() {
    let server = serve(None);
    let mut client = Client::new(Endpoint::new("127.0.0.1", server.port())).expect("a client");
    let calls = [Flaky(1, false), Flaky(2, false), Flaky(3, true), Flaky(4, false)];
    let error = client
        .pipeline(calls.into_iter().map(|params| ("sum", params)))
        .expect_err("the third cannot be written");
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    // The replies to the two sent were read: the next call gets its own.
    assert_eq!(client.call("sum", [5, 5]).expect("a reply").result::<i64>(), Ok(10));
    let replies = client
        .pipeline((0..3).map(|i| ("sum", Flaky(i, false))))
        .expect("replies");
    assert_eq!(
        replies
            .iter()
            .map(|r| r.result::<i64>().expect("sums"))
            .collect::<Vec<_>>(),
        [0, 2, 4]
    );
    server.stop();
    server.join();
}

#[test]
fn a_call_that_outlives_the_time_out_fails_and_the_next_one_works() {
    let server = serve(None);
    let mut client =
        Client::new(Endpoint::new("127.0.0.1", server.port()).with_timeout(Some(Duration::from_millis(100))))
            .expect("a client");
    let error = client.call("nap", [1000]).expect_err("too slow");
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    client.set_timeout(Some(Duration::from_secs(5)));
    assert_eq!(client.call("sum", [1, 2]).expect("a reply").result::<i64>(), Ok(3));
    server.stop();
    server.join();
}

#[test]
fn a_multiplexed_connection_counts_what_it_has_not_written() {
    // A server that reads nothing for a while: what the socket does not take stays unsent.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("an address").port();
    let reader = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("a connection");
        std::thread::sleep(Duration::from_millis(500));
        let mut sink = vec![0u8; 1 << 20];
        let mut total = 0;
        while total < 16 << 20 {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        total
    });
    let mux = ucall_client::Multiplexed::new(Endpoint::new("127.0.0.1", port), || {}).expect("a connection");
    assert_eq!(mux.unsent(), 0);
    let body = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"]}}"#,
        "A".repeat(4 << 20)
    )
    .into_bytes();
    for _ in 0..4 {
        mux.submit(body.clone(), false);
    }
    assert!(
        mux.unsent() > 4 << 20,
        "the socket cannot take 16 MB unread: {}",
        mux.unsent()
    );
    assert!(reader.join().expect("the reader") >= 16 << 20);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while mux.unsent() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(mux.unsent(), 0, "all written once the server read it");
}

#[test]
fn a_reply_over_max_reply_size_fails_its_call_and_the_next_one_works() {
    let server = serve(None);
    let port = server.local_addr().port();
    for scheme in ["http", "tcp", "ws"] {
        let endpoint = Endpoint::parse(&format!("{scheme}://127.0.0.1:{port}"))
            .expect("a URL")
            .with_max_reply_size(1000);
        assert_eq!(endpoint.max_reply_size(), 1000);
        let mut client = Client::new(endpoint).expect("a client");
        let error = client.call("echo", ["x".repeat(2000)]).expect_err("over the limit");
        assert_eq!(error.kind(), ErrorKind::Protocol, "{scheme}: {error}");
        assert!(
            error
                .message()
                .contains("over the client's max_reply_size of 1000 bytes"),
            "{scheme}: {error}"
        );
        assert_eq!(
            client.call("sum", [1, 2]).expect("a reply").result::<i64>(),
            Ok(3),
            "{scheme}"
        );
        let taken = client.call("echo", ["x".repeat(900)]).expect("under the limit");
        assert_eq!(taken.result::<String>().map(|s| s.len()), Ok(900), "{scheme}");
    }
    let default = Endpoint::new("127.0.0.1", port);
    assert_eq!(default.max_reply_size(), 64 << 20);
}

/// A one-connection-at-a-time HTTP server run by `script(connection number, stream)`.
fn scripted(script: impl Fn(usize, &mut TcpStream) + Send + 'static) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("an address").port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { return };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            script(n, &mut stream);
        }
    });
    (port, connections)
}

/// Read one HTTP request; its body.
fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    let mut byte = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
            let length: usize = head
                .split("content-length:")
                .nth(1)?
                .split("\r\n")
                .next()?
                .trim()
                .parse()
                .ok()?;
            while data.len() < end + 4 + length {
                let n = stream.read(&mut byte).ok().filter(|&n| n > 0)?;
                data.extend_from_slice(&byte[..n]);
            }
            return Some(data[end + 4..end + 4 + length].to_vec());
        }
        let n = stream.read(&mut byte).ok().filter(|&n| n > 0)?;
        data.extend_from_slice(&byte[..n]);
    }
}

fn id_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.rsplit("\"id\":")
        .next()
        .unwrap_or("0")
        .trim_end_matches('}')
        .to_owned()
}

#[test]
fn a_call_the_server_may_have_run_is_not_sent_again() {
    let (port, connections) = scripted(|n, stream| {
        if n > 1 {
            let _ = read_request(stream); // a second attempt: what this test rules out
            return;
        }
        let first = read_request(stream).expect("a request");
        let body = format!(r#"{{"jsonrpc":"2.0","id":{},"result":"first"}}"#, id_of(&first));
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = read_request(stream); // read, maybe run, then the connection is lost
    });
    let mut client = Client::new(Endpoint::new("127.0.0.1", port)).expect("a client");
    assert_eq!(
        client.call("transfer", [1]).expect("a reply").result::<String>(),
        Ok("first".into())
    );
    let error = client.call("transfer", [2]).expect_err("lost");
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.message().contains("may have run"), "{error}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// Read 64 KiB of a large request, then close with the rest unread (the kernel answers
/// the client with a reset): the request was cut short. Returns whether they came.
fn cut_short(stream: &mut TcpStream) -> bool {
    let (mut got, mut byte) = (0, [0u8; 4096]);
    // A debug build takes seconds to encode a large request.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    while got < 64 << 10 {
        match stream.read(&mut byte) {
            Ok(n) if n > 0 => got += n,
            _ => return false,
        }
    }
    let _ = stream.set_nonblocking(true);
    let _ = stream.read(&mut byte); // leave it unread: a close then resets
    let _ = stream.set_nonblocking(false);
    std::thread::sleep(Duration::from_millis(50));
    true
}

fn answer(stream: &mut TcpStream, request: &[u8], result: &str) {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{},"result":"{result}"}}"#, id_of(request));
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// 32 MB of base64: more than loopback's socket buffers hold, so that writing it waits for the server.
fn large() -> Params {
    Params::array().bytes(&vec![7u8; 24 << 20])
}

#[test]
fn a_request_cut_short_on_a_connection_that_carried_replies_is_sent_again() {
    static CUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let (port, connections) = scripted(|n, stream| {
        if n == 1 {
            for i in 0..3 {
                let request = read_request(stream).expect("a request");
                answer(stream, &request, &format!("reply {i}"));
            }
            // The fourth: the server dies while it arrives.
            CUT.store(cut_short(stream), Ordering::SeqCst);
            return;
        }
        let request = read_request(stream).expect("the request again");
        answer(stream, &request, &format!("on connection {n}, {} bytes", request.len()));
    });
    let mut client = Client::new(Endpoint::new("127.0.0.1", port)).expect("a client");
    for i in 0..3 {
        let reply = client.call("small", [i]).expect("a reply");
        assert_eq!(reply.result::<String>(), Ok(format!("reply {i}")));
    }
    // The connection carried three replies; the fourth request was not written whole when
    // it failed, so it cannot have run and goes again on a new connection.
    let reply = client.call("large", large()).expect("sent again");
    let text = reply.result::<String>().expect("a result");
    assert!(text.starts_with("on connection 2, "), "{text}");
    assert!(
        CUT.load(Ordering::SeqCst),
        "the first connection took part of the request"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[test]
fn a_pipeline_whose_first_request_was_written_whole_is_not_sent_again() {
    let (port, connections) = scripted(|n, stream| {
        if n > 1 {
            let _ = read_request(stream); // a second attempt: what this test rules out
            return;
        }
        let request = read_request(stream).expect("a request");
        answer(stream, &request, "first");
        let _ = read_request(stream).expect("the pipeline's first request, whole");
        assert!(cut_short(stream), "its second, cut short: the first may have run");
    });
    let mut client = Client::new(Endpoint::new("127.0.0.1", port)).expect("a client");
    assert_eq!(
        client.call("small", [0]).expect("a reply").result::<String>(),
        Ok("first".into())
    );
    let error = client
        .pipeline([("transfer", Params::array().value(&1)), ("large", large())])
        .expect_err("lost");
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.message().contains("may have run"), "{error}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[test]
fn a_connection_the_server_closed_is_not_used_for_the_next_call() {
    let (port, connections) = scripted(|n, stream| {
        let request = read_request(stream).expect("a request");
        let body = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{n}}}"#, id_of(&request));
        // Chunked, in two chunks, as a proxy might send it.
        let (a, b) = body.split_at(5);
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        if n == 1 {
            let _ = stream.shutdown(std::net::Shutdown::Write); // as an idle time-out does
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
            assert!(rest.is_empty(), "a call was sent into a closed connection");
        }
    });
    let mut client = Client::new(Endpoint::new("127.0.0.1", port)).expect("a client");
    assert_eq!(client.call("ping", NoParams).expect("a reply").result::<i64>(), Ok(1));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(client.call("ping", NoParams).expect("a reply").result::<i64>(), Ok(2));
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[test]
fn no_server_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let mut client = Client::new(Endpoint::new("127.0.0.1", port)).expect("a client");
    assert_eq!(
        client.call("sum", [1, 2]).expect_err("refused").kind(),
        ErrorKind::Connect
    );
}

#[test]
fn a_server_that_requires_a_client_certificate() {
    let certs = certs();
    let mut config = TlsConfig::new(certs.0.join("server.pem"), certs.0.join("server.key"));
    config.client_ca = Some(certs.0.join("ca.pem"));
    let server = serve(Some(config));
    let https = Endpoint::parse(&format!("https://127.0.0.1:{}", server.port()))
        .expect("a URL")
        .cacert(certs.0.join("ca.pem"));
    for protocol in [Protocol::Http, Protocol::Tcp] {
        let mut without = Client::new(https.clone().with_protocol(protocol)).expect("a client");
        let error = without.call("sum", [1, 2]).expect_err("no client certificate");
        assert_eq!(error.kind(), ErrorKind::Connect, "{error}");
        assert_eq!(error.tls_refusal(), Some(TlsRefusal::ClientCertificate), "{error}");
        assert!(
            error.message().contains("requires a client certificate it trusts"),
            "{error}"
        );
        let mine = https
            .clone()
            .with_protocol(protocol)
            .client_cert(certs.0.join("client.pem"), Some(certs.0.join("client.key")));
        let mut with = Client::new(mine).expect("a client");
        assert_eq!(
            with.call("sum", [1, 2]).expect("a trusted certificate").result::<i64>(),
            Ok(3)
        );
    }
    server.stop();
    server.join();
}
