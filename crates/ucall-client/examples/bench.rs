// SPDX-License-Identifier: Apache-2.0
//! The Rust client's side of `benches/client_bench.py`: echo calls pipelined on one
//! connection, the payload sent as base64 and the result decoded back to bytes.
//!
//! `bench --port P --calls N --bytes B --samples S [--protocol http|tcp]` prints one JSON
//! line: `{"calls":..,"seconds":..,"cpu_seconds":..}` over the samples after a warm-up.
//!
//! `bench --attach --bytes B --samples S [--protocol http|tcp] [--copy]` instead starts a
//! server in the process that echoes a float32 array attachment (`echo_array`), calls it
//! S times one at a time with B bytes as an attachment of a binary message, reads the
//! binary reply's array where it lies, and prints `cpu_seconds` of the calling thread
//! only (the client's: its I/O runs on it). `--copy` copies the array into the call each
//! time, as the C client did before it lent its pointer.

use std::time::Instant;

use ucall_client::{Client, Endpoint, Params, Protocol};

fn cpu_seconds() -> f64 {
    cpu_seconds_of(libc::RUSAGE_SELF)
}

fn cpu_seconds_of(who: libc::c_int) -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is writable for one `rusage`, which getrusage fills.
    let usage = unsafe {
        libc::getrusage(who, usage.as_mut_ptr());
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut port = 8545u16;
    let (mut calls, mut bytes, mut samples) = (1000usize, 16usize, 5usize);
    let mut protocol = Protocol::Http;
    let (mut attach, mut copy) = (false, false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--attach" => attach = true,
            "--copy" => copy = true,
            _ => {}
        }
        if flag == "--attach" || flag == "--copy" {
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--port" => port = value.parse()?,
            "--calls" => calls = value.parse()?,
            "--bytes" => bytes = value.parse()?,
            "--samples" => samples = value.parse()?,
            "--protocol" => protocol = if value == "tcp" { Protocol::Tcp } else { Protocol::Http },
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    if attach {
        return attachments(protocol, bytes / 4, samples, copy);
    }
    let payload: Vec<u8> = (0..bytes).map(|i| (i * 7 % 251) as u8).collect();
    let mut client = Client::new(Endpoint::new("127.0.0.1", port).with_protocol(protocol))?;
    let sample = |client: &mut Client| -> Result<(), Box<dyn std::error::Error>> {
        let replies = client.pipeline((0..calls).map(|_| ("echo", Params::object().named_bytes("data", &payload))))?;
        for reply in replies {
            if reply.result_bytes()?.len() != payload.len() {
                return Err("an echo of another length".into());
            }
        }
        Ok(())
    };
    sample(&mut client)?; // warm-up
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    for _ in 0..samples {
        sample(&mut client)?;
    }
    let seconds = wall.elapsed().as_secs_f64();
    println!(
        "{{\"calls\":{},\"seconds\":{seconds},\"cpu_seconds\":{}}}",
        calls * samples,
        cpu_seconds() - cpu
    );
    Ok(())
}

/// `samples` echoes of a float32 array of `n` elements as attachments, one at a time, to a
/// server in this process; the calling thread's CPU.
fn attachments(protocol: Protocol, n: usize, samples: usize, copy: bool) -> Result<(), Box<dyn std::error::Error>> {
    use ucall_client::{Bytes, Dtype};
    use ucall_core::{Call, EngineKind, Reply, RpcError, Server};
    let server = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(EngineKind::Poll)
        .handler("echo_array", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let found = call.params().attachment(0, "x")?;
            let info = found
                .array
                .ok_or_else(|| RpcError::invalid_params("x is not an array"))?;
            let shape: Vec<usize> = info.shape().collect();
            reply.array(info.dtype, &shape, Bytes::copy_from_slice(found.bytes))
        })
        .bind()?
        .spawn()?;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let shared = Bytes::copy_from_slice(bytemuck::cast_slice::<f32, u8>(&data));
    let mut client = Client::new(Endpoint::new("127.0.0.1", server.port()).with_protocol(protocol))?;
    let one = |client: &mut Client| -> Result<(), Box<dyn std::error::Error>> {
        let bytes = if copy {
            Bytes::copy_from_slice(bytemuck::cast_slice::<f32, u8>(&data))
        } else {
            shared.clone()
        };
        let reply = client.call("echo_array", Params::array().ndarray(Dtype::Float32, &[n], bytes))?;
        if !reply.is_binary() || reply.result_array::<f32>()?.data.len() != n {
            return Err("not the array sent".into());
        }
        Ok(())
    };
    for _ in 0..10 {
        one(&mut client)?; // warm-up
    }
    let (cpu, wall) = (cpu_seconds_of(libc::RUSAGE_THREAD), Instant::now());
    for _ in 0..samples {
        one(&mut client)?;
    }
    let seconds = wall.elapsed().as_secs_f64();
    println!(
        "{{\"calls\":{samples},\"bytes\":{},\"copy\":{copy},\"seconds\":{seconds},\"cpu_seconds\":{}}}",
        n * 4,
        cpu_seconds_of(libc::RUSAGE_THREAD) - cpu
    );
    server.stop();
    server.join();
    Ok(())
}
