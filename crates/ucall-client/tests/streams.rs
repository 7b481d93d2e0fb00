// SPDX-License-Identifier: Apache-2.0
//! Streamed results (docs/streaming.md) against a live server on loopback, over HTTP, raw
//! TCP and WebSocket, plain and TLS: items in order as they are sent, the final reply, an
//! error after items, cancel, a stream dropped midway, binary items, and `call` on a
//! streaming procedure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use ucall_client::{Client, Endpoint, ErrorKind, Multiplexed, Params, Protocol};
use ucall_core::jsonrpc::attachment::Dtype;
use ucall_core::{Call, EngineKind, Reply, RpcError, Server, ServerHandle, StreamError, TlsConfig};

/// What the server's procedures share with a test.
#[derive(Default)]
struct Shared {
    /// `gated` sends its second item once this gives a value.
    gate: Mutex<Option<Receiver<()>>>,
    /// `endless` learned that its caller went or cancelled.
    stopped: AtomicBool,
}

/// Item `i` of `frames`: two float32, `i` and `-i`.
fn frame(i: u32) -> Vec<u8> {
    [i as f32, -(i as f32)].iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `count(n)`: items 0..n, then `"done"`. `failing`: items 0 and 1, then an error.
/// `endless`: items until the caller goes or cancels. `gated`: item 0, then item 1 once
/// the test opens the gate, then `"open"`. `frames(n)`: n float32 arrays, then the bytes
/// `end`. `blobs(n)`: two items of n bytes each. `sum`: an ordinary procedure.
fn serve(shared: &Arc<Shared>, tls: Option<TlsConfig>) -> ServerHandle {
    let count = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: u64 = call.get(0, "n")?;
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..n {
                if stream.send_item(&i).is_err() {
                    return;
                }
            }
            stream.json("done");
        });
        Ok(())
    };
    let failing = |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..2u32 {
                if stream.send_item(&i).is_err() {
                    return;
                }
            }
            stream.error(RpcError::internal("broke after two"));
        });
        Ok(())
    };
    let endless_shared = Arc::clone(shared);
    let endless = move |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let stream = reply.stream()?;
        let shared = Arc::clone(&endless_shared);
        std::thread::spawn(move || {
            let mut i = 0u64;
            loop {
                match stream.send_item(&i) {
                    Ok(()) => std::thread::sleep(Duration::from_millis(2)),
                    Err(StreamError::Cancelled) => {
                        shared.stopped.store(true, Ordering::SeqCst);
                        return stream.error(ucall_core::defer::cancelled());
                    }
                    Err(_) => {
                        shared.stopped.store(true, Ordering::SeqCst);
                        return stream.error(RpcError::internal("gone"));
                    }
                }
                i += 1;
            }
        });
        Ok(())
    };
    let gated_shared = Arc::clone(shared);
    let gated = move |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let stream = reply.stream()?;
        let gate = gated_shared
            .gate
            .lock()
            .expect("the gate")
            .take()
            .expect("a gate per call");
        std::thread::spawn(move || {
            if stream.send_item(&0).is_err() {
                return;
            }
            if gate.recv_timeout(Duration::from_secs(10)).is_err() {
                return stream.error(RpcError::internal("the gate never opened"));
            }
            if stream.send_item(&1).is_err() {
                return;
            }
            stream.json("open");
        });
        Ok(())
    };
    let frames = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: u32 = call.get(0, "n")?;
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..n {
                if stream.send_item_array(Dtype::Float32, &[2], frame(i)).is_err() {
                    return;
                }
            }
            stream.bytes(&b"end"[..]);
        });
        Ok(())
    };
    let blobs = |call: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
        let n: usize = call.get(0, "n")?;
        let stream = reply.stream()?;
        std::thread::spawn(move || {
            for i in 0..2u8 {
                if stream.send_item_bytes(vec![i; n]).is_err() {
                    return;
                }
            }
            stream.json("done");
        });
        Ok(())
    };
    let mut builder = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(EngineKind::Poll)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .handler("count", count)
        .handler("failing", failing)
        .handler("endless", endless)
        .handler("gated", gated)
        .handler("frames", frames)
        .handler("blobs", blobs);
    if let Some(tls) = tls {
        builder = builder.tls(tls);
    }
    builder.bind().expect("bind").spawn().expect("spawn")
}

/// A server and a client of it for each transport, each with a time-out.
fn with_each_transport(test: impl Fn(&Arc<Shared>, Client)) {
    let shared = Arc::new(Shared::default());
    let server = serve(&shared, None);
    let port = server.port();
    for endpoint in [
        Endpoint::new("127.0.0.1", port),
        Endpoint::new("127.0.0.1", port).with_protocol(Protocol::Tcp),
        Endpoint::parse(&format!("ws://127.0.0.1:{port}/")).expect("a URL"),
    ] {
        let mut client = Client::new(endpoint).expect("a client");
        client.set_timeout(Some(Duration::from_secs(10)));
        test(&shared, client);
    }
    server.stop();
    server.join();
}

fn url(client: &Client) -> String {
    client.endpoint().url()
}

fn sum_works(client: &mut Client) {
    let url = url(client);
    let three = client.call("sum", [1, 2]).expect(&url).result::<i64>();
    assert_eq!(three, Ok(3), "{url}");
}

/// Reads `count(n)` whole: its items, and its final result.
fn count(client: &mut Client, n: u64) -> (Vec<u64>, String) {
    let url = url(client);
    let mut stream = client.stream("count", [n]).expect(&url);
    let items = stream
        .by_ref()
        .map(|item| item.expect(&url).value::<u64>().expect("a number"))
        .collect();
    let result = stream.finish().expect(&url).result::<String>().expect("a result");
    (items, result)
}

#[test]
fn items_come_in_order_then_the_result() {
    with_each_transport(|_, mut client| {
        let url = url(&client);
        assert_eq!(count(&mut client, 5), ((0..5).collect(), "done".to_owned()), "{url}");
        // Again on the same connection, and an ordinary call between.
        sum_works(&mut client);
        assert_eq!(
            count(&mut client, 300),
            ((0..300).collect(), "done".to_owned()),
            "{url}"
        );
        // No items: HTTP answers as an ordinary call.
        assert_eq!(count(&mut client, 0), (Vec::new(), "done".to_owned()), "{url}");
        sum_works(&mut client);
        // `finish` before the end reads the rest.
        let stream = client.stream("count", [4]).expect(&url);
        assert_eq!(stream.finish().expect(&url).result::<String>().as_deref(), Ok("done"));
        sum_works(&mut client);
    });
}

#[test]
fn a_procedure_that_does_not_stream_gives_its_reply() {
    with_each_transport(|_, mut client| {
        let url = url(&client);
        let mut stream = client.stream("sum", [2, 3]).expect(&url);
        assert!(stream.next().is_none(), "{url}");
        assert_eq!(stream.finish().expect(&url).result::<i64>(), Ok(5), "{url}");
    });
}

#[test]
fn an_error_after_items_is_the_final_reply() {
    with_each_transport(|_, mut client| {
        let url = url(&client);
        let mut stream = client.stream("failing", [0]).expect(&url);
        let items: Vec<u32> = stream
            .by_ref()
            .map(|item| item.expect(&url).value().expect("u32"))
            .collect();
        assert_eq!(items, [0, 1], "{url}");
        let error = stream.finish().expect(&url).result::<String>().expect_err("an error");
        assert_eq!(
            (error.code, error.message.as_str()),
            (-32603, "broke after two"),
            "{url}"
        );
        sum_works(&mut client);
    });
}

#[test]
fn items_are_handed_out_as_they_arrive() {
    with_each_transport(|shared, mut client| {
        let url = url(&client);
        let (open, gate) = sync_channel(1);
        *shared.gate.lock().expect("the gate") = Some(gate);
        let mut stream = client.stream("gated", [0]).expect(&url);
        // The server holds the rest of the stream until the first item is read here.
        let first = stream.next().expect("an item").expect(&url);
        assert_eq!(first.value::<u32>(), Ok(0), "{url}");
        open.send(()).expect("the gate opens");
        let second = stream.next().expect("an item").expect(&url);
        assert_eq!(second.value::<u32>(), Ok(1), "{url}");
        assert!(stream.next().is_none(), "{url}");
        assert_eq!(stream.finish().expect(&url).result::<String>().as_deref(), Ok("open"));
        sum_works(&mut client);
    });
}

#[test]
fn cancel_stops_the_stream_and_the_client_goes_on() {
    with_each_transport(|shared, mut client| {
        let url = url(&client);
        shared.stopped.store(false, Ordering::SeqCst);
        let mut stream = client.stream("endless", [0]).expect(&url);
        for expected in 0..3u64 {
            let item = stream.next().expect("an item").expect(&url);
            assert_eq!(item.value::<u64>(), Ok(expected), "{url}");
        }
        stream.cancel().expect(&url);
        assert!(stream.is_cancelled());
        // The items already on their way, then the end.
        for item in stream.by_ref() {
            item.expect(&url);
        }
        let end = stream.finish();
        if client.endpoint().protocol() == Protocol::Http {
            // Over HTTP a cancel hangs up: no final reply.
            assert_eq!(end.expect_err("no final reply").kind(), ErrorKind::Transport, "{url}");
        } else {
            let error = end.expect(&url).result::<u64>().expect_err("cancelled");
            assert_eq!(error.code, -32800, "{url}: {error}");
        }
        wait_until(|| shared.stopped.load(Ordering::SeqCst), &url);
        sum_works(&mut client);
    });
}

#[test]
fn a_stream_dropped_midway_leaves_the_client_usable() {
    with_each_transport(|shared, mut client| {
        let url = url(&client);
        shared.stopped.store(false, Ordering::SeqCst);
        let mut stream = client.stream("endless", [0]).expect(&url);
        for _ in 0..3 {
            stream.next().expect("an item").expect(&url);
        }
        drop(stream);
        sum_works(&mut client);
        wait_until(|| shared.stopped.load(Ordering::SeqCst), &url);
        assert_eq!(count(&mut client, 3), ((0..3).collect(), "done".to_owned()), "{url}");
    });
}

#[test]
fn call_on_a_streaming_procedure_says_to_stream_it() {
    with_each_transport(|_, mut client| {
        let url = url(&client);
        for _ in 0..2 {
            let error = client.call("count", [3]).expect_err("a streamed result");
            assert_eq!(error.kind(), ErrorKind::Protocol, "{url}: {error}");
            assert!(
                error.message().contains("streams its result") && error.streams_its_result(),
                "{url}: {error}"
            );
            assert!(error.message().contains("Client::stream"), "{url}: {error}");
            sum_works(&mut client);
        }
    });
}

#[test]
fn a_multiplexed_call_on_a_streaming_procedure_fails_alone() {
    let shared = Arc::new(Shared::default());
    let server = serve(&shared, None);
    let port = server.port();
    for scheme in ["http", "tcp", "ws"] {
        let endpoint = Endpoint::parse(&format!("{scheme}://127.0.0.1:{port}")).expect("a URL");
        let mux = Multiplexed::new(endpoint, || {}).expect("a connection");
        let take = |ticket| {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut out = Vec::new();
            loop {
                mux.take(&mut out);
                if let Some(done) = out.iter().position(|c: &ucall_client::Completion| c.ticket == ticket) {
                    return out.swap_remove(done).result;
                }
                assert!(Instant::now() < deadline, "{scheme}: no completion");
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        let streamed = mux.submit_call("count", [3], Some(1)).expect("submitted");
        let error = take(streamed).expect_err("a streamed result");
        assert_eq!(error.kind(), ErrorKind::Protocol, "{scheme}: {error}");
        assert!(
            error.message().contains("streams its result") && error.streams_its_result(),
            "{scheme}: {error}"
        );
        let sum = mux.submit_call("sum", [1, 2], Some(2)).expect("submitted");
        let reply = ucall_client::Response::from_reply(take(sum).expect(scheme));
        assert_eq!(reply.result::<i64>(), Ok(3), "{scheme}");
    }
    server.stop();
    server.join();
}

#[test]
fn binary_items_come_as_attachments() {
    let shared = Arc::new(Shared::default());
    let server = serve(&shared, None);
    let port = server.port();
    for endpoint in [
        Endpoint::new("127.0.0.1", port),
        Endpoint::new("127.0.0.1", port).with_protocol(Protocol::Tcp),
        Endpoint::parse(&format!("ws://127.0.0.1:{port}/")).expect("a URL"),
    ] {
        let endpoint = endpoint.with_binary(Some(true));
        let mut client = Client::new(endpoint).expect("a client");
        client.set_timeout(Some(Duration::from_secs(10)));
        let url = url(&client);
        // A call with an attachment goes as a binary message on every transport.
        let params = || Params::array().value(&3).attachment(vec![0u8; 8]);
        let mut stream = client.stream("frames", params()).expect(&url);
        let mut seen = 0;
        for (i, item) in stream.by_ref().enumerate() {
            let item = item.expect(&url);
            assert!(item.is_binary(), "{url}: item {i} {}", item.json());
            let array = item.array::<f32>().expect("an array");
            assert_eq!(array.shape, [2], "{url}");
            assert_eq!(&*array.data, [i as f32, -(i as f32)], "{url}");
            seen += 1;
        }
        assert_eq!(seen, 3, "{url}");
        let end = stream.finish().expect(&url);
        assert_eq!(end.result_bytes().expect("bytes"), b"end", "{url}");
        let mut stream = client
            .stream("blobs", Params::array().value(&100_000).attachment(vec![1u8; 4]))
            .expect(&url);
        for i in 0..2u8 {
            let item = stream.next().expect("an item").expect(&url);
            assert_eq!(
                item.attachment().expect("an attachment").bytes,
                vec![i; 100_000],
                "{url}"
            );
            assert_eq!(item.bytes().expect("bytes"), vec![i; 100_000], "{url}");
        }
        assert_eq!(stream.finish().expect(&url).result::<String>().as_deref(), Ok("done"));
        sum_works(&mut client);
    }
    server.stop();
    server.join();
}

#[test]
fn streams_work_over_tls() {
    let certs = common::certs();
    let shared = Arc::new(Shared::default());
    let server = serve(
        &shared,
        Some(TlsConfig::new(certs.0.join("server.pem"), certs.0.join("server.key"))),
    );
    let port = server.port();
    let ca = certs.0.join("ca.pem");
    for url in [
        format!("https://127.0.0.1:{port}"),
        format!("tls://localhost:{port}"),
        format!("wss://127.0.0.1:{port}"),
    ] {
        let mut client = Client::new(Endpoint::parse(&url).expect("a URL").cacert(&ca)).expect("a client");
        client.set_timeout(Some(Duration::from_secs(10)));
        assert_eq!(count(&mut client, 50), ((0..50).collect(), "done".to_owned()), "{url}");
        sum_works(&mut client);
        let mut stream = client.stream("endless", [0]).expect(&url);
        stream.next().expect("an item").expect(&url);
        drop(stream);
        sum_works(&mut client);
    }
    server.stop();
    server.join();
}

fn wait_until(done: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: the server's stream never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
}
