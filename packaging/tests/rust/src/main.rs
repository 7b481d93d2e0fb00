// SPDX-License-Identifier: Apache-2.0
//! A user's program on the packaged crates: serves sum on a free port, calls it over HTTP,
//! raw TCP and WebSocket with the client crate, prints "ok" and stops.
use ucall_client::{Client, Endpoint};
use ucall_core::Server;

fn main() {
    let server = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .bind()
        .expect("the server binds");
    let port = server.local_addr().port();
    let stopper = server.stopper();
    let serving = std::thread::spawn(move || server.run());
    for scheme in ["http", "tcp", "ws"] {
        let endpoint = Endpoint::parse(&format!("{scheme}://127.0.0.1:{port}/")).expect("a URL");
        let mut client = Client::new(endpoint).expect("a client");
        let sum: i64 = client.call("sum", [1, 2]).expect("a reply").result().expect("a result");
        assert_eq!(sum, 3, "{scheme}");
    }
    stopper.stop();
    serving.join().expect("the server thread").expect("the server ran");
    println!("ok");
}
