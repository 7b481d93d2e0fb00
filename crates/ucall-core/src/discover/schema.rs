// SPDX-License-Identifier: Apache-2.0
//! Shared schemas: each description may name its own (`#/definitions/X`, `#/$defs/X`);
//! the documents keep them all once, under `components.schemas`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::MethodDoc;

/// Where the documents keep shared schemas.
pub(super) const COMPONENTS: &str = "#/components/schemas/";

/// Move every shared schema of `methods` into one map, renaming where two methods give
/// different schemas one name, and point their `$ref`s there.
pub(super) fn gather(methods: &mut [MethodDoc]) -> Map<String, Value> {
    let mut components = Map::new();
    for method in methods {
        let mut local = std::mem::take(&mut method.definitions);
        for schema in schemas_of(method) {
            if let Value::Object(members) = schema {
                for key in ["definitions", "$defs"] {
                    if let Some(Value::Object(inner)) = members.remove(key) {
                        local.extend(inner);
                    }
                }
            }
        }
        if local.is_empty() {
            continue;
        }
        // Same name and same schema (after pointing its refs at the same names): one entry.
        let identity: HashMap<String, String> = local.keys().map(|k| (k.clone(), key(k))).collect();
        let mut names = HashMap::new();
        for (name, schema) in &local {
            let mut rewritten = schema.clone();
            rewrite(&mut rewritten, &identity);
            let mut chosen = key(name);
            let mut n = 1;
            while components.get(&chosen).is_some_and(|existing| *existing != rewritten) {
                n += 1;
                chosen = format!("{}_{n}", key(name));
            }
            names.insert(name.clone(), chosen);
        }
        for (name, mut schema) in local {
            rewrite(&mut schema, &names);
            components.insert(names[&name].clone(), schema);
        }
        for schema in schemas_of(method) {
            rewrite(schema, &names);
        }
    }
    components
}

fn schemas_of(method: &mut MethodDoc) -> impl Iterator<Item = &mut Value> {
    method
        .params
        .iter_mut()
        .map(|p| &mut p.schema)
        .chain(method.result.iter_mut().map(|r| &mut r.schema))
}

/// A name OpenAPI takes as a component key (`^[a-zA-Z0-9.\-_]+$`).
fn key(name: &str) -> String {
    let key: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if key.is_empty() {
        "_".into()
    } else {
        key
    }
}

/// Point `$ref`s to `#/definitions/X` or `#/$defs/X` at `#/components/schemas/names[X]`.
fn rewrite(schema: &mut Value, names: &HashMap<String, String>) {
    match schema {
        Value::Object(members) => {
            if let Some(Value::String(target)) = members.get_mut("$ref") {
                let rest = target
                    .strip_prefix("#/definitions/")
                    .or_else(|| target.strip_prefix("#/$defs/"));
                if let Some(rest) = rest {
                    let (name, tail) = rest.split_once('/').map_or((rest, ""), |(n, t)| (n, t));
                    let name = name.replace("~1", "/").replace("~0", "~");
                    let chosen = names.get(&name).cloned().unwrap_or_else(|| key(&name));
                    let tail = if tail.is_empty() {
                        String::new()
                    } else {
                        format!("/{tail}")
                    };
                    *target = format!("{COMPONENTS}{chosen}{tail}");
                }
            }
            for value in members.values_mut() {
                rewrite(value, names);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rewrite(item, names)),
        _ => {}
    }
}

/// `schema` in JSON Schema 2020-12, the dialect of OpenAPI 3.1: draft-07 tuples
/// (`items: [...]`, `additionalItems`) become `prefixItems` and `items`.
pub(super) fn to_2020_12(schema: &mut Value) {
    match schema {
        Value::Object(members) => {
            if let Some(Value::Array(_)) = members.get("items") {
                let tuple = members.remove("items").unwrap_or_default();
                members.insert("prefixItems".into(), tuple);
                if let Some(rest) = members.remove("additionalItems") {
                    members.insert("items".into(), rest);
                }
            }
            for value in members.values_mut() {
                to_2020_12(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_2020_12),
        _ => {}
    }
}

/// The JSON Schema keyword that marks a value a binary message may carry as an attachment
/// (docs/wire.md §5): `"bytes"` or `"ndarray"`.
pub(crate) const ATTACHMENT_MARK: &str = "x-ucall-attachment";

/// A param's or result's schema in a few words, the one description every place that
/// shows a schema gives (the /docs page, `ucall NAME --help`): `integer`, `array<string>`,
/// `[integer, string]`, `object<string, number>`, `Point`, `"a" | "b"`,
/// `base64 application/x-npy` (a .npy file's bytes), `base64 bytes`, `any`. A value marked
/// as an attachment says both forms: `base64 bytes (plain JSON) or a bytes attachment
/// (binary message)`.
#[must_use]
pub fn type_text(schema: &Value) -> String {
    words(schema, 0)
}

fn words(schema: &Value, depth: usize) -> String {
    let plain = json_words(schema, depth);
    match schema.get(ATTACHMENT_MARK).and_then(Value::as_str) {
        Some("bytes") => format!("{plain} (plain JSON) or a bytes attachment (binary message)"),
        Some("ndarray") => format!("{plain} (plain JSON) or an ndarray attachment (binary message)"),
        _ => plain,
    }
}

/// The words for the plain JSON form of `schema`.
fn json_words(schema: &Value, depth: usize) -> String {
    let Some(object) = schema.as_object().filter(|_| depth <= 6) else {
        return "any".into();
    };
    let each = |schemas: &[Value], separator: &str| {
        schemas
            .iter()
            .map(|s| words(s, depth + 1))
            .collect::<Vec<_>>()
            .join(separator)
    };
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    if let Some(reference) = text("$ref") {
        return reference.rsplit('/').next().unwrap_or(reference).to_owned();
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        return values.iter().map(Value::to_string).collect::<Vec<_>>().join(" | ");
    }
    if let Some(value) = object.get("const") {
        return value.to_string();
    }
    if let Some(Value::Array(options)) = object.get("anyOf").or_else(|| object.get("oneOf")) {
        return each(options, " | ");
    }
    let kind = match object.get("type") {
        Some(Value::Array(kinds)) => {
            return kinds
                .iter()
                .map(|k| k.as_str().unwrap_or("any"))
                .collect::<Vec<_>>()
                .join(" | ");
        }
        Some(Value::String(kind)) => kind.as_str(),
        _ => return "any".into(),
    };
    match kind {
        "string" if text("contentEncoding") == Some("base64") => {
            format!("base64 {}", text("contentMediaType").unwrap_or("bytes"))
        }
        "array" => match (object.get("prefixItems"), object.get("items")) {
            (Some(Value::Array(items)), _) | (None, Some(Value::Array(items))) => format!("[{}]", each(items, ", ")),
            (_, items) => format!("array<{}>", words(items.unwrap_or(&Value::Null), depth + 1)),
        },
        "object"
            if object.get("additionalProperties").is_some_and(Value::is_object)
                && !object.contains_key("properties") =>
        {
            format!("object<string, {}>", words(&object["additionalProperties"], depth + 1))
        }
        "object" if text("title").is_some() => text("title").unwrap_or(kind).to_owned(),
        "integer" if text("format").is_some() => format!("integer ({})", text("format").unwrap_or("")),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn method(definitions: Value, schema: Value) -> MethodDoc {
        let mut doc = MethodDoc::new("m").param_schema("p", schema, true);
        doc.definitions = definitions.as_object().cloned().unwrap_or_default();
        doc
    }

    #[test]
    fn shared_schemas_move_to_components_and_clashes_are_renamed() {
        let point = json!({"type": "object", "properties": {"x": {"type": "number"}}});
        let other = json!({"type": "string"});
        let mut methods = vec![
            method(json!({"Point": point}), json!({"$ref": "#/definitions/Point"})),
            method(json!({}), json!({"$ref": "#/$defs/Point", "$defs": {"Point": point}})),
            method(
                json!({"Point": other}),
                json!({"items": {"$ref": "#/definitions/Point"}}),
            ),
        ];
        let components = gather(&mut methods);
        assert_eq!(components["Point"], point);
        assert_eq!(components["Point_2"], other);
        assert_eq!(
            methods[0].params[0].schema,
            json!({"$ref": "#/components/schemas/Point"})
        );
        assert_eq!(
            methods[1].params[0].schema,
            json!({"$ref": "#/components/schemas/Point"})
        );
        assert_eq!(
            methods[2].params[0].schema,
            json!({"items": {"$ref": "#/components/schemas/Point_2"}})
        );
    }

    #[test]
    fn tuples_become_prefix_items() {
        let mut schema = json!({"type": "array", "items": [{"type": "integer"}], "additionalItems": false});
        to_2020_12(&mut schema);
        assert_eq!(
            schema,
            json!({"type": "array", "prefixItems": [{"type": "integer"}], "items": false})
        );
    }

    #[test]
    fn type_text_words_each_kind_of_schema() {
        let numpy = json!({"anyOf": [
            {"type": "array", "items": {"type": ["number", "boolean", "array"]}},
            {"type": "string", "contentEncoding": "base64", "contentMediaType": "application/x-npy"},
        ], ATTACHMENT_MARK: "ndarray"});
        let bytes = json!({"type": "string", "contentEncoding": "base64", ATTACHMENT_MARK: "bytes"});
        for (schema, words) in [
            (
                numpy,
                "array<number | boolean | array> | base64 application/x-npy (plain JSON) or an ndarray attachment (binary message)",
            ),
            (bytes.clone(), "base64 bytes (plain JSON) or a bytes attachment (binary message)"),
            (
                json!({"type": "array", "items": bytes}),
                "array<base64 bytes (plain JSON) or a bytes attachment (binary message)>",
            ),
            (json!({"type": "string", "contentEncoding": "base64"}), "base64 bytes"),
            (json!({"type": "array", "items": {"type": "string"}}), "array<string>"),
            (json!({"type": "array"}), "array<any>"),
            (
                json!({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false}),
                "[integer, string]",
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "number"}}),
                "object<string, number>",
            ),
            (json!({"type": "object", "title": "Point", "properties": {}}), "Point"),
            (json!({"type": "object"}), "object"),
            (json!({"$ref": "#/components/schemas/Point"}), "Point"),
            (json!({"enum": ["first", "last"]}), "\"first\" | \"last\""),
            (json!({"const": 3}), "3"),
            (json!({"type": ["string", "null"]}), "string | null"),
            (json!({"type": "integer", "format": "int64"}), "integer (int64)"),
            (json!({}), "any"),
            (json!(true), "any"),
        ] {
            assert_eq!(type_text(&schema), words, "{schema}");
        }
    }
}
