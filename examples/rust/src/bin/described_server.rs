// SPDX-License-Identifier: Apache-2.0
//! A server that describes itself: every procedure registered with a [`MethodDoc`], its
//! param and result schemas derived from the Rust types with `schemars`.
//!
//! ```sh
//! cargo run -p ucall-examples --bin described_server -- --port 8545
//! curl -s localhost:8545/openrpc.json      # the OpenRPC document (also: rpc.discover)
//! curl -s localhost:8545/openapi.json      # OpenAPI 3.1 of GET /sum?a=1&b=2, POST /sum
//! open http://localhost:8545/docs          # the methods, with a form to call each
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use ucall_core::{Discovery, MethodDoc, RpcError, Server};

/// A point in the plane.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Point {
    /// Abscissa.
    x: f64,
    /// Ordinate.
    y: f64,
}

/// How to greet.
#[derive(Deserialize, Serialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Tone {
    Warm,
    Formal,
}

/// The application error `divide` answers with.
const DIVISION_BY_ZERO: i32 = 1;

fn main() {
    let config = ucall_examples::config_from_args();
    let server = Server::builder()
        .config(config)
        .discovery(Discovery {
            title: "Described example".into(),
            version: "1.2.0".into(),
            description: Some("Procedures registered with their descriptions.".into()),
            ..Discovery::default()
        })
        .described(
            MethodDoc::new("sum")
                .summary("Add two integers")
                .param::<i64>("a")
                .param::<i64>("b")
                .result::<i64>()
                .example(json!({"a": 1, "b": 2}), json!(3))
                .example(json!([40, 2]), json!(42)),
            |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?),
        )
        .described(
            MethodDoc::new("divide")
                .summary("Divide a by b")
                .param::<f64>("a")
                .param::<f64>("b")
                .result::<f64>()
                .error(DIVISION_BY_ZERO, "division by zero")
                .example(json!({"a": 1.0, "b": 4.0}), json!(0.25)),
            |call| {
                let (a, b): (f64, f64) = (call.get(0, "a")?, call.get(1, "b")?);
                if b == 0.0 {
                    return Err(RpcError::new(DIVISION_BY_ZERO, "division by zero"));
                }
                Ok(a / b)
            },
        )
        .described(
            MethodDoc::new("scale")
                .summary("Scale a point about the origin")
                .param::<Point>("point")
                .param_default::<f64>("factor", 2.0)
                .result::<Point>()
                .example(
                    json!({"point": {"x": 1.0, "y": -2.0}, "factor": 3.0}),
                    json!({"x": 3.0, "y": -6.0}),
                ),
            |call| {
                let point: Point = call.get(0, "point")?;
                let factor = call.params().get_optional::<f64>(1, "factor")?.unwrap_or(2.0);
                Ok(Point {
                    x: point.x * factor,
                    y: point.y * factor,
                })
            },
        )
        .described(
            MethodDoc::new("greet")
                .summary("Greet someone")
                .param::<String>("name")
                .param_default::<Tone>("tone", Tone::Warm)
                .result::<String>()
                .example(json!({"name": "Ada"}), json!("Hello, Ada!")),
            |call| {
                let name: String = call.get(0, "name")?;
                let tone = call.params().get_optional::<Tone>(1, "tone")?.unwrap_or(Tone::Warm);
                Ok(match tone {
                    Tone::Warm => format!("Hello, {name}!"),
                    Tone::Formal => format!("Good day, {name}."),
                })
            },
        )
        // Registered without a description: listed by name, called with raw JSON.
        .procedure("uptime", |_| Ok(0))
        .bind();
    if let Err(e) = server.and_then(Server::run) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
