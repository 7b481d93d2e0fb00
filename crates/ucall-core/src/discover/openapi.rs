// SPDX-License-Identifier: Apache-2.0
//! The OpenAPI 3.1 document of the REST-style routes: `GET /name?a=1&b=2` and
//! `POST /name {"a":1,"b":2}` call `name` with named params and answer the bare result
//! (or a JSON-RPC error object, with a 4xx or 5xx status); and of `POST /`, JSON-RPC as
//! JSON text or as a binary message.

use serde_json::{json, Map, Value};

use super::openrpc::schema_of;
use super::schema::{to_2020_12, COMPONENTS};
use super::{Discovery, MethodDoc, ParamStructure};
use crate::wire::{CONTENT_TYPE, JSON_LENGTH_NAME};

/// The name of the error object's schema among the components.
const ERROR: &str = "ucall.ErrorObject";

pub(super) fn document(
    settings: &Discovery,
    methods: &[MethodDoc],
    components: &Map<String, Value>,
    url: &str,
) -> Value {
    let mut info = json!({"title": settings.title, "version": settings.version});
    if let Some(description) = &settings.description {
        info["description"] = json!(description);
    }
    let mut paths = Map::new();
    paths.insert("/".into(), jsonrpc_endpoint());
    let mut ids = std::collections::HashSet::new();
    for doc in methods {
        // A REST call passes named params: a method that takes them only by position has no route.
        if doc.param_structure != ParamStructure::ByPosition {
            // Operation ids are unique (OpenAPI 3.1 §4.8.10.1): `a.b` and `a_b` both read `a_b`.
            let mut id = operation_id(&doc.name);
            while !ids.insert(id.clone()) {
                id.push('_');
            }
            paths.insert(format!("/{}", path_segment(&doc.name)), route(doc, &id));
        }
    }
    let mut schemas = components.clone();
    schemas.insert(
        ERROR.into(),
        json!({
            "type": "object",
            "description": "A JSON-RPC 2.0 error object (§5.1)",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
        }),
    );
    let mut components = json!({"schemas": schemas});
    to_2020_12(&mut components);
    json!({
        "openapi": "3.1.0",
        "info": info,
        "servers": [{"url": url}],
        "paths": paths,
        "components": components,
    })
}

/// `POST /`: JSON-RPC as JSON text, or as a binary message (docs/wire.md §3.1) whose
/// attachments the per-method schemas mark with `x-ucall-attachment`.
fn jsonrpc_endpoint() -> Value {
    let json_text = json!({"schema": {"type": ["object", "array"]}});
    // Bytes no JSON Schema describes: a media type without a schema (as OpenAPI 3.1's
    // application/octet-stream examples).
    let binary = json!({});
    let json_length = |whose: &str| {
        format!(
            "The length in bytes of the {whose}'s JSON text, in decimal digits; sent with a {CONTENT_TYPE} body only (docs/wire.md §3.1)"
        )
    };
    json!({"post": {
        "operationId": "jsonrpc",
        "summary": "JSON-RPC 2.0: one request, or a batch (an array of them)",
        "description": format!(
            "The request is JSON text (application/json) or a binary message ({CONTENT_TYPE}): the JSON text, \
             zero bytes up to a multiple of 64, then the attachments its params' placeholders name \
             (docs/wire.md). A caller that lists {CONTENT_TYPE} in Accept gets a binary message when the \
             reply has an attachment, else JSON text."
        ),
        "parameters": [{
            "name": JSON_LENGTH_NAME,
            "in": "header",
            "required": false,
            "description": json_length("request"),
            "schema": {"type": "integer", "minimum": 0},
        }],
        "requestBody": {"required": true, "content": {"application/json": json_text, CONTENT_TYPE: binary}},
        "responses": {
            "200": {"description": "The response, or the array of responses to a batch",
                    "headers": {JSON_LENGTH_NAME: {"description": json_length("reply"), "schema": {"type": "integer", "minimum": 0}}},
                    "content": {"application/json": json_text, CONTENT_TYPE: binary}},
            "204": {"description": "Notifications only: nothing to answer"},
            "400": {"description": format!("A {CONTENT_TYPE} body whose framing is broken: an error -32700 with id null"),
                    "content": {"application/json": {"schema": {"type": "object"}}}},
        },
    }})
}

fn route(doc: &MethodDoc, id: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut query = Vec::new();
    for param in &doc.params {
        let mut schema = schema_of(param);
        to_2020_12(&mut schema);
        properties.insert(param.name.clone(), schema.clone());
        if param.required {
            required.push(json!(param.name));
        }
        // The query's values are read as JSON where they parse, else as strings. A number
        // or a boolean is spelled the same either way; anything else (a string too: `0`
        // would read as a number) travels as JSON text, as the document says.
        let mut parameter = json!({"name": param.name, "in": "query", "required": param.required});
        if is_number_or_boolean(&schema) {
            parameter["schema"] = schema;
        } else {
            parameter["content"] = json!({"application/json": {"schema": schema}});
        }
        if let Some(description) = param.description.as_ref().or(param.summary.as_ref()) {
            parameter["description"] = json!(description);
        }
        query.push(parameter);
    }
    let mut body = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        body["required"] = json!(required);
    }
    if doc.described {
        body["additionalProperties"] = json!(false);
    }
    let mut result = doc.result.as_ref().map_or_else(|| json!({}), |r| r.schema.clone());
    to_2020_12(&mut result);
    let error_body = json!({"application/json": {"schema": {"$ref": format!("{COMPONENTS}{ERROR}")}}});
    let mut responses = json!({
        "200": {"description": "The result", "content": {"application/json": {"schema": result}}},
        "default": {"description": "A JSON-RPC error object: 400 for invalid params, 404 for an unknown method, 422 for an application's own error (a code outside -32768..-32000), the status an error names, else 500",
                    "content": error_body.clone()},
    });
    // The errors the procedure says it answers with, under the status they get.
    let own: Vec<String> = doc
        .errors
        .iter()
        .filter(|error| crate::jsonrpc::codes::is_application_error(error.code))
        .map(|error| format!("{} ({})", error.code, error.message))
        .collect();
    if !own.is_empty() {
        let status = crate::jsonrpc::codes::APPLICATION_ERROR_STATUS.to_string();
        responses[status] =
            json!({"description": format!("The procedure's own errors: {}", own.join(", ")), "content": error_body});
    }
    let mut get = json!({"operationId": format!("{id}_get"), "parameters": query, "responses": responses});
    let mut post = json!({
        "operationId": format!("{id}_post"),
        "requestBody": {"required": !required.is_empty(), "content": {"application/json": {"schema": body}}},
        "responses": responses,
    });
    for operation in [&mut get, &mut post] {
        if let Some(summary) = &doc.summary {
            operation["summary"] = json!(summary);
        }
        if let Some(description) = &doc.description {
            operation["description"] = json!(description);
        }
        if !doc.tags.is_empty() {
            operation["tags"] = json!(doc.tags);
        }
        if doc.deprecated {
            operation["deprecated"] = json!(true);
        }
    }
    json!({"get": get, "post": post})
}

fn is_number_or_boolean(schema: &Value) -> bool {
    matches!(
        schema.get("type").and_then(Value::as_str),
        Some("integer" | "number" | "boolean")
    )
}

/// `name` as one path segment (RFC 3986 §3.3): what is not unreserved is percent-encoded.
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn operation_id(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}
