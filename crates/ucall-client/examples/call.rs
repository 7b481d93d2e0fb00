// SPDX-License-Identifier: Apache-2.0
//! Start a UCall server on a free port, then call it every way the client can: a call,
//! bytes, an array as an attachment, a notification, a batch, a pipeline, raw TCP, a pool
//! and many calls in flight.
//!
//! `cargo run -p ucall-client --example call` (a test runs it too).

use std::sync::mpsc;

use ucall_client::{Batch, Client, Endpoint, Multiplexed, NoParams, Params, Pool, Protocol};
use ucall_core::{Call, Reply, RpcError, Server};

/// The example, run by `main` and by a test.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .procedure("log", |_| Ok(()))
        .handler("echo", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let data = call
                .params()
                .raw_at(0, "data")
                .ok_or_else(|| RpcError::invalid_params("no data"))?;
            reply.raw_trusted(data);
            Ok(())
        })
        // An array param viewed where it lies in the request as a &[f32] (a -32602 naming
        // `x` for anything else), the result written from the new vector's memory.
        .handler("scale", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let x = call.params().array::<f32>(0, "x")?;
            let doubled: Vec<f32> = x.data.iter().map(|v| 2.0 * v).collect();
            reply.array_of(&x.shape, doubled)
        })
        // A bytes param as a &[u8] where it lies (or decoded from a plain caller's base64).
        .procedure("checksum", |call| {
            let data = call.params().bytes_view(0, "data")?;
            Ok(data.iter().map(|&b| u64::from(b)).sum::<u64>())
        })
        .bind()?
        .spawn()?;
    let port = server.port();

    let mut client = Client::new(Endpoint::new("127.0.0.1", port))?;
    let sum: i64 = client.call("sum", [1, 2])?.result()?;
    println!("sum(1, 2) = {sum}");
    let named: i64 = client
        .call("sum", Params::object().named("a", &40).named("b", &2))?
        .result()?;
    println!("sum(a=40, b=2) = {named}");
    let blob: Vec<u8> = (0..=255).collect();
    let echoed = client.call("echo", Params::array().bytes(&blob))?.result_bytes()?;
    println!("echo of {} bytes came back equal: {}", blob.len(), echoed == blob);
    client.notify("log", NoParams)?;

    // Arrays and bytes as attachments of a binary message (docs/wire.md): raw after the
    // JSON text, no base64; the reply's array is viewed where it lies in the reply.
    let image: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let reply = client.call("scale", Params::array().ndarray_of(&[3, 4], image))?;
    let scaled = reply.result_array::<f32>()?;
    println!(
        "scale of a 3x4 float32 array: shape {:?}, last {}",
        scaled.shape, scaled.data[11]
    );
    let checksum: u64 = client.call("checksum", Params::array().attachment(blob))?.result()?;
    println!("checksum of 256 bytes sent as an attachment: {checksum}");

    let mut batch = Batch::new();
    batch.call("sum", [1, 1])?;
    batch.notify("log", NoParams)?;
    batch.call("nope", NoParams)?;
    let answers = client.batch(&batch)?;
    println!(
        "batch: {:?} and {}",
        answers[0].result::<i64>(),
        answers[1].result::<i64>().map_err(|e| e.to_string()).unwrap_err()
    );

    let replies = client.pipeline((0..1000).map(|i| ("sum", [i, 1])))?;
    let total: i64 = replies.iter().map(|r| r.result::<i64>()).sum::<Result<i64, _>>()?;
    println!("pipeline of {} calls, results sum to {total}", replies.len());

    let mut tcp = Client::new(Endpoint::new("127.0.0.1", port).with_protocol(Protocol::Tcp))?;
    println!("over raw TCP: {}", tcp.call("sum", [2, 2])?.result::<i64>()?);

    let pool = Pool::new(Endpoint::new("127.0.0.1", port), 2)?;
    let pool = &pool;
    let pooled: i64 = std::thread::scope(|s| {
        let calls: Vec<_> = (0..4).map(|i| s.spawn(move || pool.call("sum", [i, i]))).collect();
        calls
            .into_iter()
            .map(|c| c.join().expect("a caller").map(|r| r.result::<i64>().unwrap_or(0)))
            .sum::<Result<i64, _>>()
    })?;
    println!("pool of 2, 4 threads: {pooled}");

    let (ready, wait) = mpsc::channel();
    let mux = Multiplexed::new(Endpoint::new("127.0.0.1", port), move || {
        let _ = ready.send(());
    })?;
    for i in 0..100 {
        let mut body = Vec::new();
        ucall_client::write_request(&mut body, "sum", &&[i, 1], Some(i as u64))?;
        mux.submit(body, true);
    }
    let mut done = Vec::new();
    while done.len() < 100 {
        wait.recv()?;
        mux.take(&mut done);
    }
    println!(
        "{} calls in flight on one connection, all answered: {}",
        done.len(),
        done.iter().all(|c| c.result.is_ok())
    );
    drop(mux);
    server.stop();
    server.join();
    Ok(())
}
