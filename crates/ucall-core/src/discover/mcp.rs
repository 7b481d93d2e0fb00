// SPDX-License-Identifier: Apache-2.0
//! The procedures as Model Context Protocol tools: the settings of the MCP endpoint and
//! the tool descriptions `tools/list` answers, built once when serving starts from the
//! same [`MethodDoc`]s that feed OpenRPC.
//!
//! Each tool's `inputSchema` is an object schema of its named params (shared schemas
//! under `$defs`); its `outputSchema`, when the result is described, is the result's
//! schema when that is an object, else `{"result": <schema>}`, the shape `tools/call`'s
//! `structuredContent` then takes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{openrpc, schema, MethodDoc};
use crate::jsonrpc::{self, RpcError};
use crate::mcp_sessions::{InFlight, Sessions};

/// The MCP endpoint's settings: where it is served and who may reach it from a browser.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// The endpoint's path (`/mcp`).
    pub path: String,
    /// Browser origins (`https://app.example.com`) allowed besides those on loopback
    /// (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`). A request whose
    /// `Origin` is neither is refused with 403 (DNS rebinding, MCP "Security Warning");
    /// `"*"` allows any.
    pub allowed_origins: Vec<String>,
    /// `serverInfo.name`; empty: the discovery title.
    pub name: String,
    /// `serverInfo.version`; empty: the discovery version.
    pub version: String,
    /// `instructions` for the model, if any.
    pub instructions: Option<String>,
    /// Tools per `tools/list` page (a `nextCursor` leads to the next).
    pub page_size: usize,
    /// Mint an `Mcp-Session-Id` at `initialize` (session-era revisions): later requests
    /// must carry it (400 without, 404 once ended), `DELETE` ends it, and a
    /// `notifications/cancelled` posted in it reaches the tool call it names. Off: every
    /// request stands alone, and any process behind a load balancer can answer it.
    pub sessions: bool,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            path: "/mcp".into(),
            allowed_origins: Vec::new(),
            name: String::new(),
            version: String::new(),
            instructions: None,
            page_size: 100,
            sessions: false,
        }
    }
}

impl McpSettings {
    /// Read the JSON form (`{"path": "/mcp", "allowed_origins": [...]}`; missing members
    /// keep their defaults).
    ///
    /// # Errors
    /// The JSON is malformed, names an unknown member, the path does not start with `/`,
    /// or the page size is 0.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let settings: McpSettings = serde_json::from_str(text).map_err(|e| format!("invalid MCP settings: {e}"))?;
        settings.check()?;
        Ok(settings)
    }

    /// Whether the settings can be served.
    ///
    /// # Errors
    /// The path does not start with `/` (or holds `?`, `#` or a space), or the page size is 0.
    pub fn check(&self) -> Result<(), String> {
        if !self.path.starts_with('/') || self.path.contains(['?', '#', ' ']) {
            return Err(format!(
                "the MCP path {:?} must start with '/' and hold no '?', '#' or space",
                self.path
            ));
        }
        if self.page_size == 0 {
            return Err("the MCP page size must be at least 1".into());
        }
        Ok(())
    }

    /// Whether a browser page from `origin` may call the endpoint.
    #[must_use]
    pub fn allows_origin(&self, origin: &str) -> bool {
        is_loopback_origin(origin)
            || self
                .allowed_origins
                .iter()
                .any(|allowed| allowed == "*" || allowed == origin)
    }
}

/// `http(s)://localhost[:port]`, `127.0.0.1` or `[::1]`: a page served from this machine.
fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if rest.starts_with('[') {
        rest.split_inclusive(']').next().unwrap_or(rest)
    } else {
        rest.split(':').next().unwrap_or(rest)
    };
    let port_ok = rest[host.len()..]
        .strip_prefix(':')
        .map_or(rest.len() == host.len(), |port| {
            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        });
    port_ok && matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// How a tool's result becomes its `structuredContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The result is an object (its schema says so): it is the structured content.
    Object,
    /// Any other result: `{"result": <result>}`.
    Wrapped,
    /// Not described: an object as it is, anything else wrapped.
    AsItComes,
}

/// One tool: its name, how its result is shaped and its description's JSON text.
#[derive(Debug, Clone)]
pub struct Tool {
    /// The procedure's name.
    pub name: Box<str>,
    /// How its result becomes `structuredContent`.
    pub shape: Shape,
    /// The `Tool` object `tools/list` lists.
    pub json: String,
}

/// How a `tools/call`'s reply is written, kept with a call whose result comes later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolReply {
    /// How the result becomes `structuredContent`.
    pub shape: Shape,
    /// The revision is 2026-07-28 or later: results carry `resultType`.
    pub modern: bool,
    /// The request's `_meta.progressToken` (raw JSON), when the client asked for progress.
    pub progress_token: Option<Box<str>>,
    /// Progress notifications sent so far (each item of a streamed result is one).
    pub progress: u64,
    /// The call under way in its session, which a `notifications/cancelled` can reach
    /// until this reply is written (with sessions on).
    pub in_flight: Option<Arc<InFlight>>,
}

impl ToolReply {
    /// Whether the client cancelled the call (`notifications/cancelled` in its session):
    /// no reply is sent for it ("Receivers of cancellation notifications SHOULD ... Not
    /// send a response for the cancelled request").
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.in_flight.as_ref().is_some_and(|call| call.is_cancelled())
    }

    /// Append the reply to `id` (raw JSON) for a call that ended with `outcome`: a
    /// `CallToolResult` (the procedure's error is a result with `isError: true`), or a
    /// JSON-RPC error for a refusal the HTTP status must show (a hook's 401, 403, 429,
    /// an overload's 503), whose status is returned.
    pub fn write(&self, out: &mut Vec<u8>, id: &str, outcome: Result<&[u8], &RpcError>) -> Option<u16> {
        match outcome {
            Ok(result) => {
                jsonrpc::write_result_opening(out, id);
                self.write_result(out, result);
                out.push(b'}');
                None
            }
            Err(error) => match error.http_status().filter(|status| is_refusal(*status)) {
                Some(status) => {
                    jsonrpc::write_rpc_error(out, Some(id), error);
                    Some(status)
                }
                None => {
                    jsonrpc::write_result_opening(out, id);
                    self.write_error_result(out, error);
                    out.push(b'}');
                    None
                }
            },
        }
    }

    /// Append the `CallToolResult` of `result` (raw JSON).
    pub fn write_result(&self, out: &mut Vec<u8>, result: &[u8]) {
        let wrapped = match self.shape {
            Shape::Object => false,
            Shape::Wrapped => true,
            Shape::AsItComes => !result.trim_ascii_start().starts_with(b"{"),
        };
        out.extend_from_slice(b"{\"content\":[{\"type\":\"text\",\"text\":");
        // The text block is the structured content serialized (MCP: "a tool that returns
        // structured content SHOULD also return the serialized JSON in a TextContent").
        let text = std::str::from_utf8(result).unwrap_or("null");
        if wrapped {
            let mut structured = String::with_capacity(text.len() + 12);
            structured.push_str("{\"result\":");
            structured.push_str(text);
            structured.push('}');
            write_string(out, &structured);
        } else {
            write_string(out, text);
        }
        out.extend_from_slice(b"}],\"structuredContent\":");
        if wrapped {
            out.extend_from_slice(b"{\"result\":");
            out.extend_from_slice(result);
            out.push(b'}');
        } else {
            out.extend_from_slice(result);
        }
        out.extend_from_slice(b",\"isError\":false");
        self.close(out);
    }

    /// Append the `CallToolResult` that reports `error` to the model (`isError: true`).
    pub fn write_error_result(&self, out: &mut Vec<u8>, error: &RpcError) {
        out.extend_from_slice(b"{\"content\":[{\"type\":\"text\",\"text\":");
        let text = match error.data() {
            Some(data) => format!("{} (code {}, data {data})", error.message(), error.code()),
            None => format!("{} (code {})", error.message(), error.code()),
        };
        write_string(out, &text);
        out.extend_from_slice(b"}],\"isError\":true");
        self.close(out);
    }

    /// Append the progress notification for `item` (raw JSON), the next of the stream.
    pub fn write_progress(&mut self, out: &mut Vec<u8>, token: &str, item: &[u8]) {
        self.progress += 1;
        out.extend_from_slice(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":",
        );
        out.extend_from_slice(token.as_bytes());
        out.extend_from_slice(b",\"progress\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.progress).as_bytes());
        out.extend_from_slice(b",\"message\":");
        // A string item is the message as it is; any other is its JSON text.
        let text = std::str::from_utf8(item).unwrap_or("null");
        match serde_json::from_str::<String>(text) {
            Ok(string) => write_string(out, &string),
            Err(_) => write_string(out, text),
        }
        out.extend_from_slice(b"}}");
    }

    fn close(&self, out: &mut Vec<u8>) {
        if self.modern {
            out.extend_from_slice(b",\"resultType\":\"complete\"");
        }
        out.push(b'}');
    }
}

/// Statuses a refusal names that the HTTP reply must carry rather than a tool result:
/// credentials missing or refused, rate limits, overload.
fn is_refusal(status: u16) -> bool {
    matches!(status, 401 | 403 | 429 | 503)
}

/// Append `text` as a JSON string.
pub fn write_string(out: &mut Vec<u8>, text: &str) {
    // Writing a `str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// What the MCP endpoint serves, built once when serving starts.
#[derive(Debug, Clone)]
pub struct McpTools {
    /// The settings, with the server's name and version filled in.
    pub settings: McpSettings,
    /// The tools, by name.
    pub tools: Vec<Tool>,
    /// The sessions open, when the settings ask for them.
    pub sessions: Option<Arc<Sessions>>,
}

impl McpTools {
    /// The tool called `name`.
    #[must_use]
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools
            .binary_search_by(|tool| (*tool.name).cmp(name))
            .ok()
            .and_then(|at| self.tools.get(at))
    }
}

/// The tools for `methods` (sorted by name, `rpc.` methods left out by the caller).
pub(super) fn tools(settings: McpSettings, methods: &[MethodDoc]) -> McpTools {
    let tools = methods.iter().map(tool).collect();
    let sessions = settings.sessions.then(Arc::default);
    McpTools {
        settings,
        tools,
        sessions,
    }
}

fn tool(doc: &MethodDoc) -> Tool {
    // One method at a time: its shared schemas go under its own `$defs`.
    let mut one = [doc.clone()];
    let defs = schema::gather(&mut one);
    let [doc] = one;
    let mut properties = Map::new();
    let mut required = Vec::new();
    for param in &doc.params {
        let mut schema = openrpc::schema_of(param);
        if let (Some(text), Value::Object(members)) =
            (param.description.as_ref().or(param.summary.as_ref()), &mut schema)
        {
            members.entry("description").or_insert_with(|| json!(text));
        }
        properties.insert(param.name.clone(), schema);
        if param.required {
            required.push(json!(param.name));
        }
    }
    let mut input = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        input["required"] = json!(required);
    }
    if !doc.described {
        // Known only by name: any arguments may be given.
        input = json!({"type": "object"});
    }
    let mut object = json!({"name": doc.name, "inputSchema": input});
    let description = match (&doc.summary, &doc.description) {
        (Some(summary), Some(more)) => Some(format!("{summary}\n\n{more}")),
        (one, other) => one.clone().or_else(|| other.clone()),
    };
    if let Some(description) = description {
        object["description"] = json!(description);
    }
    let shape = match &doc.result {
        Some(result) if object_root(&result.schema, &defs).is_some() => {
            object["outputSchema"] = object_root(&result.schema, &defs).cloned().unwrap_or_default();
            Shape::Object
        }
        Some(result) => {
            object["outputSchema"] = json!({
                "type": "object",
                "properties": {"result": result.schema},
                "required": ["result"],
            });
            Shape::Wrapped
        }
        None => Shape::AsItComes,
    };
    if !defs.is_empty() {
        for key in ["inputSchema", "outputSchema"] {
            if let Some(Value::Object(members)) = object.get_mut(key) {
                members.insert("$defs".into(), Value::Object(defs.clone()));
            }
        }
    }
    if doc.deprecated {
        object["annotations"] = json!({"title": format!("{} (deprecated)", doc.name)});
    }
    // Shared schemas were gathered for the documents' `components`; here they are the
    // tool's own `$defs`.
    let json = object
        .to_string()
        .replace(&format!("\"{}", schema::COMPONENTS), "\"#/$defs/");
    Tool {
        name: doc.name.as_str().into(),
        shape,
        json,
    }
}

/// `schema` itself, or the one its `$ref` names, when every value it allows is a JSON
/// object (`"type": "object"`): it can then be `structuredContent` as it is, and
/// `outputSchema` (whose root MCP requires to say `"type": "object"`).
fn object_root<'s>(schema: &'s Value, defs: &'s Map<String, Value>) -> Option<&'s Value> {
    let root = match schema.get("$ref").and_then(Value::as_str) {
        Some(target) => defs.get(target.strip_prefix(schema::COMPONENTS)?)?,
        None => schema,
    };
    (root.get("type") == Some(&json!("object"))).then_some(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::ParamDoc;

    #[test]
    fn loopback_origins_are_allowed_and_others_only_when_listed() {
        let settings = McpSettings {
            allowed_origins: vec!["https://app.example.com".into()],
            ..McpSettings::default()
        };
        for origin in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8443",
            "http://[::1]:5173",
            "https://app.example.com",
        ] {
            assert!(settings.allows_origin(origin), "{origin}");
        }
        for origin in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example:80",
            "http://localhost:80@evil.example",
            "null",
            "https://app.example.com:444",
        ] {
            assert!(!settings.allows_origin(origin), "{origin}");
        }
    }

    #[test]
    fn params_make_an_object_schema_and_a_scalar_result_is_wrapped() {
        let mut doc = MethodDoc::new("sum")
            .summary("Add two integers")
            .param::<i64>("a")
            .param_default::<i64>("b", 0)
            .result::<i64>();
        doc.params[0].description = Some("the first".into());
        let tool = tool(&doc);
        let value: Value = serde_json::from_str(&tool.json).expect("JSON");
        assert_eq!(value["description"], "Add two integers");
        assert_eq!(value["inputSchema"]["type"], "object");
        assert_eq!(value["inputSchema"]["required"], json!(["a"]));
        assert_eq!(value["inputSchema"]["properties"]["a"]["description"], "the first");
        assert_eq!(value["inputSchema"]["properties"]["b"]["default"], 0);
        assert_eq!(value["outputSchema"]["required"], json!(["result"]));
        assert_eq!(tool.shape, Shape::Wrapped);
    }

    #[test]
    fn an_object_result_is_the_structured_content_and_shared_schemas_are_defs() {
        let point = json!({"type": "object", "properties": {"x": {"type": "number"}}});
        let mut doc = MethodDoc::new("move").param_schema("to", json!({"$ref": "#/definitions/Point"}), true);
        doc.definitions.insert("Point".into(), point.clone());
        doc = doc.result_schema(json!({"$ref": "#/definitions/Point"}));
        doc.params.push(ParamDoc {
            name: "fast".into(),
            schema: json!({"type": "boolean"}),
            ..ParamDoc::default()
        });
        let tool = tool(&doc);
        let value: Value = serde_json::from_str(&tool.json).expect("JSON");
        assert_eq!(tool.shape, Shape::Object);
        assert_eq!(value["inputSchema"]["properties"]["to"]["$ref"], "#/$defs/Point");
        assert_eq!(value["inputSchema"]["$defs"]["Point"], point);
        assert_eq!(value["outputSchema"]["type"], "object");
        assert_eq!(value["outputSchema"]["properties"], point["properties"]);
    }
}
