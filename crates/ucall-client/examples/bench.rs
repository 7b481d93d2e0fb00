// SPDX-License-Identifier: Apache-2.0
//! The Rust client's side of `benches/client_bench.py`: echo calls pipelined on one
//! connection, the payload sent as base64 and the result decoded back to bytes.
//!
//! `bench --port P --calls N --bytes B --samples S [--protocol http|tcp]` prints one JSON
//! line: `{"calls":..,"seconds":..,"cpu_seconds":..}` over the samples after a warm-up.

use std::time::Instant;

use ucall_client::{Client, Endpoint, Params, Protocol};

fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is writable for one `rusage`, which getrusage fills.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut port = 8545u16;
    let (mut calls, mut bytes, mut samples) = (1000usize, 16usize, 5usize);
    let mut protocol = Protocol::Http;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
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
