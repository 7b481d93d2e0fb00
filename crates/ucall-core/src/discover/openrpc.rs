// SPDX-License-Identifier: Apache-2.0
//! The OpenRPC 1.3 document (<https://spec.open-rpc.org/>), served by `rpc.discover`.

use serde_json::{json, Map, Value};

use super::{Discovery, ExampleDoc, MethodDoc, ParamDoc, ParamStructure};

/// The OpenRPC version the document follows.
const OPENRPC: &str = "1.3.2";

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
    let mut document = json!({
        "openrpc": OPENRPC,
        "info": info,
        "servers": [{"name": "this server", "url": url}],
        "methods": methods.iter().map(method).collect::<Vec<_>>(),
    });
    if !components.is_empty() {
        document["components"] = json!({"schemas": components});
    }
    document
}

fn method(doc: &MethodDoc) -> Value {
    let mut method = Map::new();
    method.insert("name".into(), json!(doc.name));
    if let Some(summary) = &doc.summary {
        method.insert("summary".into(), json!(summary));
    }
    if let Some(description) = &doc.description {
        method.insert("description".into(), json!(description));
    }
    if !doc.tags.is_empty() {
        let tags: Vec<Value> = doc.tags.iter().map(|name| json!({"name": name})).collect();
        method.insert("tags".into(), json!(tags));
    }
    method.insert("paramStructure".into(), json!(doc.param_structure));
    method.insert("params".into(), doc.params.iter().map(param).collect());
    if let Some(result) = &doc.result {
        let mut descriptor = json!({
            "name": if result.name.is_empty() { "result" } else { &result.name },
            "schema": result.schema,
        });
        if let Some(description) = &result.description {
            descriptor["description"] = json!(description);
        }
        method.insert("result".into(), descriptor);
    }
    if !doc.errors.is_empty() {
        method.insert("errors".into(), json!(doc.errors));
    }
    if !doc.examples.is_empty() {
        let examples: Vec<Value> = doc
            .examples
            .iter()
            .enumerate()
            .map(|(n, example)| pairing(doc, n, example))
            .collect();
        method.insert("examples".into(), json!(examples));
    }
    if doc.deprecated {
        method.insert("deprecated".into(), json!(true));
    }
    if !doc.described {
        // Registered without a description: the params are not known (any may be given).
        method.insert("x-undescribed".into(), json!(true));
    }
    Value::Object(method)
}

pub(super) fn param(doc: &ParamDoc) -> Value {
    let mut descriptor = json!({"name": doc.name, "required": doc.required, "schema": schema_of(doc)});
    if let Some(summary) = &doc.summary {
        descriptor["summary"] = json!(summary);
    }
    if let Some(description) = &doc.description {
        descriptor["description"] = json!(description);
    }
    if doc.deprecated {
        descriptor["deprecated"] = json!(true);
    }
    descriptor
}

/// The param's schema with its default in it (JSON Schema's `default`).
pub(super) fn schema_of(doc: &ParamDoc) -> Value {
    let mut schema = doc.schema.clone();
    if let (Some(default), Value::Object(members)) = (&doc.default, &mut schema) {
        members.entry("default").or_insert_with(|| default.clone());
    }
    schema
}

/// An example as an OpenRPC example pairing: params listed by name, in positional order.
fn pairing(doc: &MethodDoc, n: usize, example: &ExampleDoc) -> Value {
    let name_at = |i: usize| doc.params.get(i).map_or_else(|| format!("arg{i}"), |p| p.name.clone());
    let params: Vec<Value> = match &example.params {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, value)| json!({"name": name_at(i), "value": value}))
            .collect(),
        Value::Object(members) => {
            // Positional order first, then any others as given.
            let mut ordered: Vec<(&String, &Value)> = Vec::new();
            for p in &doc.params {
                if let Some((key, value)) = members.get_key_value(&p.name) {
                    ordered.push((key, value));
                }
            }
            for (key, value) in members {
                if !doc.params.iter().any(|p| &p.name == key) {
                    ordered.push((key, value));
                }
            }
            ordered
                .into_iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect()
        }
        _ => Vec::new(),
    };
    let mut pairing = json!({
        "name": if example.name.is_empty() { format!("example {}", n + 1) } else { example.name.clone() },
        "params": params,
    });
    if let Some(summary) = &example.summary {
        pairing["summary"] = json!(summary);
    }
    if let Some(result) = &example.result {
        pairing["result"] = json!({"name": "result", "value": result});
    }
    if doc.param_structure == ParamStructure::ByPosition || example.params.is_array() {
        pairing["x-by-position"] = json!(true);
    }
    pairing
}
