// SPDX-License-Identifier: Apache-2.0
//! The server the shared test vectors (`tests/vectors/`) run against.

use ucall_core::Server;

fn main() {
    let builder = ucall_examples::spec::register(Server::builder().config(ucall_examples::config_from_args()));
    if let Err(e) = builder.bind().and_then(Server::run) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
