// SPDX-License-Identifier: Apache-2.0
//! The smallest UCall server: `sum(a, b)` and `echo(data)`.
//!
//! ```sh
//! cargo run --release -p ucall-examples --bin sum_server -- --port 8545
//! curl -s localhost:8545 -d '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
//! curl -s 'localhost:8545/sum?a=1&b=2'
//! ```

use ucall_core::Server;

fn main() {
    let config = ucall_examples::config_from_args();
    let server = Server::builder()
        .config(config)
        // Params may come by name ({"a":1,"b":2}) or by position ([1,2]).
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        // The argument is passed back as raw JSON text, never decoded.
        .handler(
            "echo",
            |call: &ucall_core::Call<'_>, reply: &mut ucall_core::Reply<'_>| {
                let data = call
                    .params()
                    .raw_at(0, "data")
                    .ok_or_else(|| ucall_core::RpcError::invalid_params("missing parameter 'data'"))?;
                reply.raw_trusted(data);
                Ok(())
            },
        )
        .bind();
    match server.and_then(Server::run) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
