// SPDX-License-Identifier: Apache-2.0
//! The procedures the shared test vectors (`tests/vectors/`) expect: those of the JSON-RPC
//! 2.0 specification's examples, plus a few that exercise errors.
//!
//! Used by the `spec_server` binary and, through `#[path]`, by ucall-core's integration
//! tests, so that every suite runs the vectors against one definition.

use serde_json::value::RawValue;
use ucall_core::{Call, Reply, RpcError, ServerBuilder};

/// Register the vector procedures on `builder`.
pub fn register(builder: ServerBuilder) -> ServerBuilder {
    builder
        .procedure("subtract", |call| {
            call.params().expect_only(&["minuend", "subtrahend"])?;
            Ok(number(
                call.get::<f64>(0, "minuend")? - call.get::<f64>(1, "subtrahend")?,
            ))
        })
        .procedure("sum", sum)
        .procedure("update", |_| Ok(()))
        .procedure("notify_hello", |_| Ok(()))
        .procedure("notify_sum", |_| Ok(()))
        .procedure("get_data", |call| {
            call.params().expect_only(&[])?;
            Ok(("hello", 5))
        })
        .procedure("echo", |call| Ok(call.get::<&RawValue>(0, "data")?.to_owned()))
        .procedure("hex", |call| Ok(hex(&call.params().bytes(0, "data")?)))
        // Results that are binary values (docs/wire.md): attachments for a caller that
        // accepts binary replies, base64 for any other.
        .handler("unhex", |call: &Call<'_>, reply: &mut Reply<'_>| {
            reply.bytes(unhex(call.get::<&str>(0, "text")?)?);
            Ok(())
        })
        .handler("unhex_later", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let bytes = unhex(call.get::<&str>(0, "text")?)?;
            let deferred = reply.defer()?;
            std::thread::spawn(move || deferred.bytes(bytes));
            Ok(())
        })
        .handler("floats", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let count = call.get::<u32>(0, "n")?;
            reply.array_of(&[count as usize], (0..count).map(|i| i as f32).collect::<Vec<f32>>())
        })
        // Streamed results (docs/streaming.md): `count(n, fail)` streams 0..n, then "done"
        // or, with `fail`, the error `boom`; `frames(n)` streams float32 arrays [i, i + 4).
        .handler("count", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let n = call.get::<u32>(0, "n")?;
            let fail = call.params().get_optional::<bool>(1, "fail")?.unwrap_or(false);
            let stream = reply.stream()?;
            std::thread::spawn(move || {
                if (0..n).all(|i| stream.send_item(&i).is_ok()) && !fail {
                    stream.json("done");
                } else {
                    stream.error(RpcError::new(-32001, "boom"));
                }
            });
            Ok(())
        })
        .handler("frames", |call: &Call<'_>, reply: &mut Reply<'_>| {
            let n = call.get::<u32>(0, "n")?;
            let stream = reply.stream()?;
            std::thread::spawn(move || {
                for i in 0..n {
                    let values: Vec<u8> = (i..i + 4).flat_map(|v| (v as f32).to_le_bytes()).collect();
                    if stream
                        .send_item_array(ucall_core::Dtype::Float32, &[4], values)
                        .is_err()
                    {
                        return;
                    }
                }
                stream.json("done");
            });
            Ok(())
        })
        .procedure("fail", |_| -> Result<(), RpcError> {
            Err(RpcError::new(-32001, "boom").with_data(&serde_json::json!({"why": "asked to fail"})))
        })
        .procedure("panic", |_| -> Result<(), RpcError> { panic!("asked to panic") })
}

/// Integral results print as integers (`19`, not `19.0`).
fn number(value: f64) -> serde_json::Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        serde_json::Value::from(value as i64)
    } else {
        serde_json::Value::from(value)
    }
}

/// The sum of every parameter, by position or by name: integers stay exact integers.
fn sum(call: &Call<'_>) -> Result<serde_json::Value, RpcError> {
    let params = call.params();
    let values: Vec<ucall_core::Param<'_>> = params.values().collect();
    let integers: Option<Vec<i64>> = values.iter().map(|v| v.as_i64()).collect();
    if let Some(total) = integers.and_then(|ints| ints.into_iter().try_fold(0i64, i64::checked_add)) {
        return Ok(total.into());
    }
    let mut total = 0.0;
    for (i, value) in values.iter().enumerate() {
        total += value
            .as_f64()
            .ok_or_else(|| RpcError::invalid_params(format!("Invalid params: parameter {i} is not a number")))?;
    }
    if !total.is_finite() {
        // JSON has no infinity: serde_json would write null.
        return Err(RpcError::invalid_params(
            "Invalid params: the sum is too large for a double",
        ));
    }
    Ok(total.into())
}

/// The bytes a hex text spells.
fn unhex(text: &str) -> Result<Vec<u8>, RpcError> {
    let invalid = || RpcError::invalid_params("Invalid params: 'text' is not an even number of hex digits");
    if text.len() % 2 == 1 {
        return Err(invalid());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2).ok_or_else(invalid)?, 16).map_err(|_| invalid()))
        .collect()
}

/// Bytes as lowercase hex, so that a vector shows what a bytes parameter decoded to.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
