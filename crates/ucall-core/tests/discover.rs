// SPDX-License-Identifier: Apache-2.0
//! Self-description over loopback: `rpc.discover`, `GET /openrpc.json`, `/openapi.json`
//! and `/docs` built from the registered procedures, and each one turned off.

mod common;

use common::{call, get, post, Conn};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ucall_core::{Discovery, EngineKind, MethodDoc, ServerBuilder};

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
/// A point in the plane.
struct Point {
    x: f64,
    y: f64,
}

fn described(engine: EngineKind) -> ServerBuilder {
    ucall_core::Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .engine(engine)
        .described(
            MethodDoc::new("sum")
                .summary("Add two integers")
                .param::<i64>("a")
                .param_default::<i64>("b", 0)
                .result::<i64>()
                .example(json!({"a": 1, "b": 2}), json!(3)),
            |call| Ok(call.get::<i64>(0, "a")? + call.params().get_optional::<i64>(1, "b")?.unwrap_or(0)),
        )
        .described(
            MethodDoc::new("scale")
                .param::<Point>("point")
                .param::<f64>("factor")
                .result::<Point>(),
            |call| {
                let point: Point = call.get(0, "point")?;
                let factor: f64 = call.get(1, "factor")?;
                Ok(Point {
                    x: point.x * factor,
                    y: point.y * factor,
                })
            },
        )
        .procedure("ping", |_| Ok("pong"))
}

fn document(conn: &mut Conn, path: &str) -> Value {
    let response = conn.roundtrip(&get(path));
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    serde_json::from_slice(&response.body).expect("a JSON document")
}

fn names(openrpc: &Value) -> Vec<&str> {
    openrpc["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect()
}

#[test]
fn documents_describe_every_registered_procedure() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, described(engine));
        let mut conn = Conn::to(&server);
        let openrpc = document(&mut conn, "/openrpc.json");
        assert_eq!(openrpc["openrpc"], "1.3.2");
        assert_eq!(
            names(&openrpc),
            ["ping", "scale", "sum"],
            "sorted, without rpc.discover"
        );
        assert_eq!(openrpc["servers"][0]["url"], format!("http://{}", server.local_addr()));
        let sum = &openrpc["methods"][2];
        assert_eq!(sum["summary"], "Add two integers");
        assert_eq!(
            sum["params"][0],
            json!({"name": "a", "required": true, "schema": {"type": "integer", "format": "int64"}})
        );
        assert_eq!(sum["params"][1]["schema"]["default"], 0);
        assert_eq!(sum["params"][1]["required"], false);
        assert_eq!(
            sum["examples"][0]["params"],
            json!([{"name": "a", "value": 1}, {"name": "b", "value": 2}])
        );
        assert_eq!(sum["examples"][0]["result"]["value"], 3);
        // A derived type is shared under components, and referred to from there.
        let scale = &openrpc["methods"][1];
        assert_eq!(scale["params"][0]["schema"]["$ref"], "#/components/schemas/Point");
        assert_eq!(scale["result"]["schema"]["$ref"], "#/components/schemas/Point");
        let point = &openrpc["components"]["schemas"]["Point"];
        assert_eq!(point["required"], json!(["x", "y"]), "{point}");
        assert_eq!(point["description"], "A point in the plane.");
        // Registered without a description: listed by name all the same.
        let ping = &openrpc["methods"][0];
        assert_eq!(ping["params"], json!([]));
        assert_eq!(ping["x-undescribed"], true);

        // rpc.discover answers the same document.
        let reply = conn.roundtrip(&post("/", call("rpc.discover", "[]", "7").as_bytes()));
        let reply: Value = serde_json::from_slice(&reply.body).expect("JSON");
        assert_eq!(reply["result"], openrpc);

        let openapi = document(&mut conn, "/openapi.json");
        assert_eq!(openapi["openapi"], "3.1.0");
        let paths = openapi["paths"].as_object().expect("paths");
        assert_eq!(paths.keys().collect::<Vec<_>>(), ["/", "/ping", "/scale", "/sum"]);
        let get_sum = &openapi["paths"]["/sum"]["get"];
        assert_eq!(get_sum["parameters"][0]["in"], "query");
        assert_eq!(get_sum["parameters"][0]["schema"]["type"], "integer");
        let body = &openapi["paths"]["/scale"]["post"]["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(body["required"], json!(["point", "factor"]));
        assert_eq!(body["properties"]["point"]["$ref"], "#/components/schemas/Point");

        let page = conn.roundtrip(&get("/docs"));
        assert_eq!(page.status, 200);
        assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
        let html = String::from_utf8(page.body).expect("UTF-8");
        assert!(
            html.contains("<title>UCall server</title>"),
            "{}",
            &html[..200.min(html.len())]
        );
        assert!(html.contains("\"openrpc\":\"1.3.2\""));
        assert!(html.contains("\"mcpPath\":null"), "no MCP endpoint to name");

        // The connection is still served, and the REST routes still work.
        let reply = conn.roundtrip(&get("/sum?a=4&b=5"));
        assert_eq!((reply.status, reply.body.as_slice()), (200, b"9".as_slice()));
    });
}

#[test]
fn documents_are_revalidated_by_their_entity_tags() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, described(engine));
        let mut conn = Conn::to(&server);
        for path in ["/openrpc.json", "/openapi.json", "/docs"] {
            let first = conn.roundtrip(&get(path));
            assert_eq!(first.status, 200, "{path}: {first:?}");
            let etag = first
                .header("etag")
                .unwrap_or_else(|| panic!("{path}: no ETag: {first:?}"));
            assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
            assert_eq!(first.header("cache-control"), Some("no-cache"), "{path}");
            // The same document, the same tag.
            assert_eq!(conn.roundtrip(&get(path)).header("etag"), Some(etag));
            // RFC 9110 §13.1.2: a tag the client holds (weak or strong, in a list) is a 304
            // without content; another tag gets the document.
            for held in [etag.to_owned(), format!("\"x\", W/{etag}"), "*".to_owned()] {
                let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nIf-None-Match: {held}\r\n\r\n");
                let unchanged = conn.roundtrip(request.as_bytes());
                assert_eq!(unchanged.status, 304, "{path} {held}: {unchanged:?}");
                assert!(unchanged.body.is_empty());
                assert_eq!(unchanged.header("etag"), Some(etag));
            }
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"other\"\r\n\r\n");
            let changed = conn.roundtrip(request.as_bytes());
            assert_eq!((changed.status, changed.body.len()), (200, first.body.len()), "{path}");
        }
    });
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).expect("gzip");
    out
}

#[test]
fn documents_and_metrics_are_gzipped_for_clients_that_take_it() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, described(engine));
        let mut conn = Conn::to(&server);
        let with_gzip = |path: &str, extra: &str| {
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br, gzip;q=0.8\r\n{extra}\r\n").into_bytes()
        };
        for path in ["/openrpc.json", "/openapi.json", "/docs"] {
            let plain = conn.roundtrip(&get(path));
            assert_eq!(plain.header("content-encoding"), None, "{path}");
            assert_eq!(plain.header("vary"), Some("Accept-Encoding"), "{path}");
            let packed = conn.roundtrip(&with_gzip(path, ""));
            assert_eq!(packed.status, 200, "{path}: {packed:?}");
            assert_eq!(packed.header("content-encoding"), Some("gzip"), "{path}");
            assert_eq!(packed.header("vary"), Some("Accept-Encoding"), "{path}");
            assert_eq!(packed.header("content-type"), plain.header("content-type"), "{path}");
            assert!(
                packed.body.len() < plain.body.len(),
                "{path}: {} bytes gzipped",
                packed.body.len()
            );
            assert_eq!(gunzip(&packed.body), plain.body, "{path}");
            // Each representation has its own tag, and a 304 answers the one held.
            let (etag, plain_etag) = (
                packed.header("etag").expect("ETag"),
                plain.header("etag").expect("ETag"),
            );
            assert_ne!(etag, plain_etag, "{path}");
            let unchanged = conn.roundtrip(&with_gzip(path, &format!("If-None-Match: {etag}\r\n")));
            assert_eq!((unchanged.status, unchanged.body.len()), (304, 0), "{path}");
            let other = conn.roundtrip(&with_gzip(path, &format!("If-None-Match: {plain_etag}\r\n")));
            assert_eq!(
                other.status, 200,
                "{path}: the plain tag does not name the gzipped bytes"
            );
            // A client that refuses gzip gets the plain bytes.
            let refused = conn
                .roundtrip(format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0\r\n\r\n").as_bytes());
            assert_eq!(
                (refused.header("content-encoding"), refused.body.len()),
                (None, plain.body.len())
            );
        }
        let packed = conn.roundtrip(&with_gzip("/metrics", ""));
        assert_eq!(packed.header("content-encoding"), Some("gzip"));
        assert_eq!(packed.header("vary"), Some("Accept-Encoding"));
        let text = String::from_utf8(gunzip(&packed.body)).expect("UTF-8");
        assert!(text.contains("ucall_calls_handled_total"), "{text}");
        let plain = conn.roundtrip(&get("/metrics"));
        assert_eq!(plain.header("content-encoding"), None);
        assert!(String::from_utf8_lossy(&plain.body).contains("ucall_calls_handled_total"));
    });
}

#[test]
fn a_string_query_value_is_declared_as_json_text() {
    // A REST query value is read as JSON where it parses (`?a=1` is a number), so the
    // document must not call a string param a plain string: `?name=0` would be a number.
    let builder = described(EngineKind::Poll).described(
        MethodDoc::new("greet").param::<String>("name").result::<String>(),
        |call| Ok(format!("Hello, {}!", call.get::<String>(0, "name")?)),
    );
    let server = common::start(EngineKind::Poll, builder);
    let mut conn = Conn::to(&server);
    let openapi = document(&mut conn, "/openapi.json");
    let name = &openapi["paths"]["/greet"]["get"]["parameters"][0];
    assert!(name.get("schema").is_none(), "{name}");
    assert_eq!(
        name["content"]["application/json"]["schema"]["type"], "string",
        "{name}"
    );
    // What the document says a client sends: the JSON text of the string.
    let reply = conn.roundtrip(&get("/greet?name=%220%22"));
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, br#""Hello, 0!""#.as_slice())
    );
    // Numbers keep their plain schema: their JSON text and their form text are one.
    let a = &openapi["paths"]["/sum"]["get"]["parameters"][0];
    assert_eq!(a["schema"]["type"], "integer", "{a}");
}

#[test]
fn each_part_can_be_turned_off_or_moved() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, described(engine).discovery(Discovery::off()));
        let mut conn = Conn::to(&server);
        for path in ["/openrpc.json", "/openapi.json", "/docs"] {
            // Not a document: a REST call to a procedure that does not exist.
            assert_eq!(conn.roundtrip(&get(path)).status, 404, "{path}");
        }
        let reply = conn.roundtrip(&post("/", call("rpc.discover", "[]", "1").as_bytes()));
        common::assert_error(&reply.body, -32601, "1");
        drop(server);

        let moved = Discovery {
            title: "Geometry <API>".into(),
            version: "2.1.0".into(),
            docs_path: Some("/help".into()),
            openapi_path: None,
            ..Discovery::default()
        };
        let server = common::start(engine, described(engine).discovery(moved));
        let mut conn = Conn::to(&server);
        assert_eq!(conn.roundtrip(&get("/openapi.json")).status, 404);
        assert_eq!(conn.roundtrip(&get("/docs")).status, 404);
        let page = conn.roundtrip(&get("/help?x=1"));
        assert_eq!(page.status, 200);
        let html = String::from_utf8(page.body).expect("UTF-8");
        assert!(
            html.contains("<title>Geometry &lt;API&gt;</title>"),
            "the title is escaped"
        );
        let openrpc = document(&mut conn, "/openrpc.json");
        assert_eq!(openrpc["info"], json!({"title": "Geometry <API>", "version": "2.1.0"}));
        // POST to a document's path is a REST call as before.
        assert_eq!(conn.roundtrip(&post("/help", b"{}")).status, 404);
    });
}

#[test]
fn a_procedure_named_rpc_discover_is_kept() {
    let builder = described(EngineKind::Poll).procedure("rpc.discover", |_| Ok("mine"));
    let server = common::start(EngineKind::Poll, builder);
    let mut conn = Conn::to(&server);
    let reply = conn.roundtrip(&post("/", call("rpc.discover", "[]", "1").as_bytes()));
    common::assert_result(&reply.body, "\"mine\"", "1");
}

#[test]
fn descriptions_in_json_are_checked() {
    let doc = MethodDoc::from_json(r#"{"name": "f", "params": [{"name": "x", "schema": {"type": "string"}}]}"#)
        .expect("a valid description");
    assert_eq!(doc.params[0].name, "x");
    assert_eq!(doc.params[0].default, None);
    // A null default (or example result) is a value, not an absence.
    let doc = MethodDoc::from_json(
        r#"{"params": [{"name": "x", "default": null}], "examples": [{"params": {}, "result": null}]}"#,
    )
    .expect("valid");
    assert_eq!(doc.params[0].default, Some(Value::Null));
    assert_eq!(doc.examples[0].result, Some(Value::Null));
    let error = MethodDoc::from_json(r#"{"name": "f", "parms": []}"#).expect_err("a misspelt member");
    assert!(error.contains("unknown field `parms`"), "{error}");
    let error = Discovery::from_json(r#"{"docs_path": "docs"}"#).expect_err("a relative path");
    assert!(error.contains("must start with '/'"), "{error}");
    let off = Discovery::from_json(r#"{"rpc_discover": false, "openrpc_path": null}"#).expect("valid");
    assert!(!off.rpc_discover && off.openrpc_path.is_none() && off.docs_path.is_some());
}
