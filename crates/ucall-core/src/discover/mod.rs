// SPDX-License-Identifier: Apache-2.0
//! Self-description: what each procedure takes and returns, and the documents built from
//! it once when serving starts: OpenRPC 1.3 (the method `rpc.discover` and
//! `GET /openrpc.json`), OpenAPI 3.1 for the REST-style routes (`GET /openapi.json`) and
//! a self-contained page that lists and calls the methods (`GET /docs`).
//!
//! Every front end describes procedures with a [`MethodDoc`]: Rust builds one with
//! [`MethodDoc::new`] (parameter schemas derived with `schemars`), C and Python hand its
//! JSON form (see [`MethodDoc::from_json`]). A procedure without one still appears, by name.

pub mod mcp;
mod openapi;
mod openrpc;
mod schema;

pub use schema::type_text;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The JSON-RPC method that answers the OpenRPC document (OpenRPC 1.3 §"Service Discovery Method").
pub const DISCOVER_METHOD: &str = "rpc.discover";

/// Where and whether the server describes itself. Every part is on by default;
/// [`Discovery::off`] turns all of them off, and each path may be `None` on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Discovery {
    /// `info.title` of both documents.
    pub title: String,
    /// `info.version`: the version of the API, not of UCall.
    pub version: String,
    /// `info.description`.
    pub description: Option<String>,
    /// Answer the method `rpc.discover` with the OpenRPC document.
    pub rpc_discover: bool,
    /// Path of the OpenRPC document (`/openrpc.json`).
    pub openrpc_path: Option<String>,
    /// Path of the OpenAPI document for the REST-style routes (`/openapi.json`).
    pub openapi_path: Option<String>,
    /// Path of the page that lists and calls the methods (`/docs`).
    pub docs_path: Option<String>,
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery {
            title: "UCall server".into(),
            version: "1.0.0".into(),
            description: None,
            rpc_discover: true,
            openrpc_path: Some("/openrpc.json".into()),
            openapi_path: Some("/openapi.json".into()),
            docs_path: Some("/docs".into()),
        }
    }
}

impl Discovery {
    /// A server that does not describe itself: no `rpc.discover`, no documents, no page.
    #[must_use]
    pub fn off() -> Self {
        Discovery {
            rpc_discover: false,
            openrpc_path: None,
            openapi_path: None,
            docs_path: None,
            ..Discovery::default()
        }
    }

    /// Read the JSON form (`{"title": ..., "docs_path": null, ...}`; missing members keep
    /// their defaults).
    ///
    /// # Errors
    /// The JSON is malformed, names an unknown member, or a path does not start with `/`.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let discovery: Discovery =
            serde_json::from_str(text).map_err(|e| format!("invalid discovery settings: {e}"))?;
        discovery.check()?;
        Ok(discovery)
    }

    fn check(&self) -> Result<(), String> {
        for path in [&self.openrpc_path, &self.openapi_path, &self.docs_path]
            .into_iter()
            .flatten()
        {
            if !path.starts_with('/') || path.contains(['?', '#', ' ']) {
                return Err(format!(
                    "the path {path:?} must start with '/' and hold no '?', '#' or space"
                ));
            }
        }
        Ok(())
    }
}

/// How a method takes its params (OpenRPC `paramStructure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParamStructure {
    /// An object of named params only.
    ByName,
    /// An array of params in order only.
    ByPosition,
    /// Either form.
    #[default]
    Either,
}

/// One parameter: its name, JSON Schema (draft-07) and whether it must be given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParamDoc {
    /// The name (the member of named params; positional params follow the list's order).
    pub name: String,
    /// A line about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// More about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its JSON Schema (draft-07); `{}` takes any value.
    pub schema: Value,
    /// Whether the call must give it.
    pub required: bool,
    /// The value taken when it is not given (`null` included).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub default: Option<Value>,
    /// Whether it is on its way out.
    pub deprecated: bool,
}

/// The result: its JSON Schema and a name for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResultDoc {
    /// A name (`result` when empty).
    pub name: String,
    /// What it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its JSON Schema (draft-07).
    pub schema: Value,
}

/// An application error the method may answer with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDoc {
    /// The JSON-RPC error code.
    pub code: i32,
    /// Its message.
    pub message: String,
    /// Its `data`, if it has a fixed one.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub data: Option<Value>,
}

/// A call and what it answers, shown in the documents and checked by the tests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExampleDoc {
    /// A name (`example 1`, `example 2`, ... when empty).
    pub name: String,
    /// A line about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The params: an object by name, or an array by position.
    pub params: Value,
    /// The result this call answers, when it is fixed (`null` included).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub result: Option<Value>,
}

/// A member that is there, even as `null`, is `Some` (serde reads `null` as `None`).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// What a procedure takes and returns: the input of every self-description document.
///
/// The JSON form has the same members (`paramStructure` in camelCase, as in OpenRPC):
///
/// ```json
/// {"name": "sum", "summary": "Add two integers",
///  "params": [{"name": "a", "schema": {"type": "integer"}, "required": true},
///             {"name": "b", "schema": {"type": "integer"}, "default": 0}],
///  "result": {"schema": {"type": "integer"}},
///  "examples": [{"params": {"a": 1, "b": 2}, "result": 3}]}
/// ```
///
/// Schemas may refer to shared ones with `{"$ref": "#/definitions/Point"}` (or `#/$defs/`),
/// given in `definitions` (or inside the schema, as generators write them); the documents
/// gather them under `components.schemas`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MethodDoc {
    /// The method name; empty when the name is given beside it.
    pub name: String,
    /// A line about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// More about it (Markdown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its params, in positional order.
    pub params: Vec<ParamDoc>,
    /// Its result; `None` when not described.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultDoc>,
    /// Application errors it answers with.
    pub errors: Vec<ErrorDoc>,
    /// Example calls.
    pub examples: Vec<ExampleDoc>,
    /// Whether params go by name, by position or either way.
    pub param_structure: ParamStructure,
    /// Schemas the others refer to by `#/definitions/NAME`.
    pub definitions: Map<String, Value>,
    /// Whether it is on its way out.
    pub deprecated: bool,
    /// Tags grouping methods.
    pub tags: Vec<String>,
    /// Whether `params` says all there is: `false` for a procedure known only by name.
    #[serde(skip)]
    pub described: bool,
}

impl MethodDoc {
    /// A description of `name`, to fill in with the chained setters.
    ///
    /// ```
    /// use ucall_core::MethodDoc;
    /// let sum = MethodDoc::new("sum")
    ///     .summary("Add two integers")
    ///     .param::<i64>("a")
    ///     .param_default::<i64>("b", 0)
    ///     .result::<i64>()
    ///     .example(serde_json::json!({"a": 1, "b": 2}), serde_json::json!(3));
    /// ```
    #[must_use]
    pub fn new(name: &str) -> Self {
        MethodDoc {
            name: name.into(),
            described: true,
            ..MethodDoc::default()
        }
    }

    /// Read the JSON form (see [`MethodDoc`]).
    ///
    /// # Errors
    /// The JSON is malformed or names an unknown member.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let mut doc: MethodDoc = serde_json::from_str(text).map_err(|e| format!("invalid method description: {e}"))?;
        doc.described = true;
        Ok(doc)
    }

    /// A line about the method.
    #[must_use]
    pub fn summary(mut self, summary: &str) -> Self {
        self.summary = Some(summary.into());
        self
    }

    /// More about the method (Markdown).
    #[must_use]
    pub fn description(mut self, description: &str) -> Self {
        self.description = Some(description.into());
        self
    }

    /// A required param of type `T`, its schema derived from `T`'s [`JsonSchema`].
    #[must_use]
    pub fn param<T: JsonSchema>(mut self, name: &str) -> Self {
        let schema = self.schema_of::<T>();
        self.param_schema(name, schema, true)
    }

    /// An optional param of type `T` that takes `default` when not given.
    #[must_use]
    pub fn param_default<T: JsonSchema + Serialize>(mut self, name: &str, default: T) -> Self {
        let schema = self.schema_of::<T>();
        let mut doc = self.param_schema(name, schema, false);
        if let Some(param) = doc.params.last_mut() {
            param.default = serde_json::to_value(default).ok();
        }
        doc
    }

    /// A param with a schema written by hand.
    #[must_use]
    pub fn param_schema(mut self, name: &str, schema: Value, required: bool) -> Self {
        self.params.push(ParamDoc {
            name: name.into(),
            schema,
            required,
            ..ParamDoc::default()
        });
        self
    }

    /// The result is a `T`.
    #[must_use]
    pub fn result<T: JsonSchema>(mut self) -> Self {
        let schema = self.schema_of::<T>();
        self.result_schema(schema)
    }

    /// The result's schema, written by hand.
    #[must_use]
    pub fn result_schema(mut self, schema: Value) -> Self {
        self.result = Some(ResultDoc {
            schema,
            ..ResultDoc::default()
        });
        self
    }

    /// An application error the method may answer with.
    #[must_use]
    pub fn error(mut self, code: i32, message: &str) -> Self {
        self.errors.push(ErrorDoc {
            code,
            message: message.into(),
            data: None,
        });
        self
    }

    /// An example call (`params` by name or by position) and its result.
    #[must_use]
    pub fn example(mut self, params: Value, result: Value) -> Self {
        self.examples.push(ExampleDoc {
            params,
            result: Some(result),
            ..ExampleDoc::default()
        });
        self
    }

    /// Whether params go by name, by position or either way.
    #[must_use]
    pub fn param_structure(mut self, structure: ParamStructure) -> Self {
        self.param_structure = structure;
        self
    }

    /// `T`'s schema (draft-07); the types it names by `$ref` go to `definitions`.
    fn schema_of<T: JsonSchema>(&mut self) -> Value {
        let mut generator = schemars::generate::SchemaSettings::draft07().into_generator();
        let schema = generator.subschema_for::<T>().to_value();
        self.definitions.extend(generator.take_definitions(true));
        schema
    }
}

/// A document the server answers a `GET` with.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// Its `Content-Type`.
    pub content_type: &'static [u8],
    /// Its bytes.
    pub body: &'a [u8],
    /// Its entity tag (RFC 9110 §8.8.3), quoted: the same bytes, the same tag.
    pub etag: &'a str,
    /// The same, gzipped (`Content-Encoding: gzip`), for clients that take it.
    pub gzip: &'a [u8],
    /// The gzipped representation's own entity tag (a strong tag names one set of bytes).
    pub gzip_etag: &'a str,
}

/// The documents, built once when serving starts, and their entity tags.
#[derive(Debug)]
struct Pages {
    settings: Discovery,
    openrpc: Arc<str>,
    openapi: Vec<u8>,
    docs: Vec<u8>,
    etags: [String; 3],
    /// Each document gzipped, and its tag.
    gzipped: [(Vec<u8>, String); 3],
}

impl Pages {
    /// The document `index` (0 OpenRPC, 1 OpenAPI, 2 the page) as served.
    fn page<'a>(&'a self, index: usize, content_type: &'static [u8], body: &'a [u8]) -> Page<'a> {
        let (gzip, gzip_etag) = &self.gzipped[index];
        Page {
            content_type,
            body,
            etag: &self.etags[index],
            gzip,
            gzip_etag,
        }
    }
}

/// A strong entity tag for `bytes`: a 64-bit hash, so that a client's cached copy is
/// revalidated with `If-None-Match` rather than fetched again.
fn etag(bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new()` has fixed keys: every worker and restart gives the same tag.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("\"{:016x}\"", hasher.finish())
}

/// The descriptions and settings a router carries until serving starts, then the
/// documents built from them.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    settings: Discovery,
    methods: BTreeMap<String, MethodDoc>,
    pages: Option<Arc<Pages>>,
}

impl Catalog {
    /// Describe the procedure `doc.name` (registered before or after).
    pub fn describe(&mut self, doc: MethodDoc) {
        self.methods.insert(doc.name.clone(), doc);
    }

    /// Where and whether the server describes itself.
    #[must_use]
    pub fn settings(&self) -> &Discovery {
        &self.settings
    }

    /// Set where and whether the server describes itself.
    pub fn set_settings(&mut self, discovery: Discovery) {
        self.settings = discovery;
    }

    /// Build the documents for the procedures `names` (those whose names start with
    /// `rpc.` are left out), for a server reached at `addr` (`https` when `tls`). Returns
    /// the OpenRPC document when `rpc.discover` should answer it. `/docs` names the MCP
    /// endpoint at `mcp_path`, when it is served.
    pub fn publish<'n>(
        &mut self,
        names: impl Iterator<Item = &'n str>,
        addr: SocketAddr,
        tls: bool,
        mcp_path: Option<&str>,
    ) -> Option<Arc<str>> {
        let settings = self.settings.clone();
        let wanted = settings.rpc_discover
            || settings.openrpc_path.is_some()
            || settings.openapi_path.is_some()
            || settings.docs_path.is_some();
        if !wanted {
            self.pages = None;
            return None;
        }
        let methods = self.methods_of(names);
        let url = format!("{}://{addr}", if tls { "https" } else { "http" });
        let pages = Arc::new(build(settings, methods, &url, mcp_path));
        let openrpc = pages.settings.rpc_discover.then(|| Arc::clone(&pages.openrpc));
        self.pages = Some(pages);
        openrpc
    }

    /// The procedures `names` as MCP tools (those whose names start with `rpc.` are left
    /// out), served as `settings` say; the server's name and version default to the
    /// documents' title and version.
    #[must_use]
    pub fn mcp_tools<'n>(&self, names: impl Iterator<Item = &'n str>, mut settings: mcp::McpSettings) -> mcp::McpTools {
        if settings.name.is_empty() {
            settings.name.clone_from(&self.settings.title);
        }
        if settings.version.is_empty() {
            settings.version.clone_from(&self.settings.version);
        }
        if settings.instructions.is_none() {
            settings.instructions.clone_from(&self.settings.description);
        }
        mcp::tools(settings, &self.methods_of(names))
    }

    /// The descriptions of `names` (sorted, `rpc.` methods left out), each by name only
    /// where none was given.
    fn methods_of<'n>(&self, names: impl Iterator<Item = &'n str>) -> Vec<MethodDoc> {
        let mut names: Vec<&str> = names.filter(|name| !name.starts_with("rpc.")).collect();
        names.sort_unstable();
        names
            .into_iter()
            .map(|name| match self.methods.get(name) {
                Some(doc) => MethodDoc {
                    name: name.into(),
                    ..doc.clone()
                },
                None => MethodDoc {
                    name: name.into(),
                    ..MethodDoc::default()
                },
            })
            .collect()
    }

    /// The document served at `target` (query ignored), if any.
    #[must_use]
    pub fn page(&self, target: &str) -> Option<Page<'_>> {
        let pages = self.pages.as_deref()?;
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        let is = |wanted: &Option<String>| wanted.as_deref() == Some(path);
        if is(&pages.settings.openrpc_path) {
            Some(pages.page(0, b"application/json", pages.openrpc.as_bytes()))
        } else if is(&pages.settings.openapi_path) {
            Some(pages.page(1, b"application/json", &pages.openapi))
        } else if is(&pages.settings.docs_path) {
            Some(pages.page(2, b"text/html; charset=utf-8", &pages.docs))
        } else {
            None
        }
    }
}

/// The page, with `__UCALL_TITLE__` and `__UCALL_DATA__` to fill in.
const DOCS_TEMPLATE: &str = include_str!("docs.html");

fn build(settings: Discovery, mut methods: Vec<MethodDoc>, url: &str, mcp_path: Option<&str>) -> Pages {
    let components = schema::gather(&mut methods);
    let openrpc = openrpc::document(&settings, &methods, &components, url);
    let openapi = openapi::document(&settings, &methods, &components, url);
    let openrpc_text = openrpc.to_string();
    let data = serde_json::json!({
        "types": types(&openrpc),
        "openrpc": openrpc,
        "openrpcPath": settings.openrpc_path,
        "openapiPath": settings.openapi_path,
        "mcpPath": mcp_path,
    });
    let docs = DOCS_TEMPLATE
        .replace("__UCALL_TITLE__", &html_escape(&settings.title))
        .replace("__UCALL_DATA__", &script_safe(&data.to_string()));
    let openapi = openapi.to_string().into_bytes();
    let gzipped = |bytes: &[u8]| {
        let packed = crate::gzip::gzip(bytes);
        let tag = etag(&packed);
        (packed, tag)
    };
    Pages {
        etags: [etag(openrpc_text.as_bytes()), etag(&openapi), etag(docs.as_bytes())],
        gzipped: [
            gzipped(openrpc_text.as_bytes()),
            gzipped(&openapi),
            gzipped(docs.as_bytes()),
        ],
        openrpc: openrpc_text.into(),
        openapi,
        docs: docs.into_bytes(),
        settings,
    }
}

/// What the page shows for each method's params and result: `{"sum": {"params": {"a":
/// "integer"}, "result": "integer"}}`, worded by [`type_text`] as `ucall NAME --help` words them.
fn types(openrpc: &serde_json::Value) -> serde_json::Value {
    let methods = openrpc["methods"].as_array().map_or(&[][..], Vec::as_slice);
    let words = |described: &serde_json::Value| type_text(&described["schema"]);
    let types = methods.iter().filter_map(|method| {
        let params: serde_json::Map<String, serde_json::Value> = (method["params"].as_array().into_iter().flatten())
            .filter_map(|param| Some((param["name"].as_str()?.to_owned(), words(param).into())))
            .collect();
        let result = method.get("result").map(words);
        Some((
            method["name"].as_str()?.to_owned(),
            serde_json::json!({"params": params, "result": result}),
        ))
    });
    serde_json::Value::Object(types.collect())
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON text that can sit inside `<script>`: no `<` (so no `</script>`), and no U+2028
/// or U+2029, which old parsers take for line ends. Inside JSON strings the escapes
/// mean the same characters; outside strings JSON has none of them.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}
