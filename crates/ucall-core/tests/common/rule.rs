// SPDX-License-Identifier: Apache-2.0
//! The comparison rule of `tests/vectors/README.md`, shared by the JSON-RPC and the
//! binary-message vector suites: what a vector expects and where a reply differs.

use std::path::{Path, PathBuf};

use super::json::{self, Json};
use super::{call, show};

/// One vector file.
pub struct Vector {
    pub name: String,
    pub request: Vec<u8>,
    /// `None`: no reply at all must be sent.
    pub reply: Option<Json>,
    pub reply_text_contains: Vec<String>,
    pub error_message_contains: Option<String>,
    pub error_exact: bool,
}

impl Vector {
    /// Whether the expected reply is a `-32700` error: the text cannot be delimited.
    pub fn is_parse_error(&self) -> bool {
        self.reply
            .as_ref()
            .and_then(|reply| reply.get("error"))
            .and_then(|error| error.get("code"))
            .and_then(Json::as_i64)
            == Some(-32700)
    }
}

/// The comparison rule of `tests/vectors/README.md`: where `reply_text` differs.
pub fn reply_differences(vector: &Vector, reply_text: &[u8]) -> Vec<String> {
    let Some(expected) = &vector.reply else {
        return vec![format!("expected no reply, got {}", show(reply_text))];
    };
    let actual = match json::parse(reply_text) {
        Ok(actual) => actual,
        Err(e) => return vec![format!("the reply is not strict JSON ({e}): {}", show(reply_text))],
    };
    let mut out = Vec::new();
    match (expected, &actual) {
        (Json::Array(expected), Json::Array(actual)) if expected.len() == actual.len() => {
            for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
                response_differences(e, a, vector, &format!("$[{i}]"), &mut out);
            }
        }
        (Json::Array(expected), _) => out.push(format!(
            "$: expected a batch reply of {} responses, got {actual}",
            expected.len()
        )),
        (expected, actual) => response_differences(expected, actual, vector, "$", &mut out),
    }
    let text = String::from_utf8_lossy(reply_text);
    for substring in &vector.reply_text_contains {
        if !text.contains(substring.as_str()) {
            out.push(format!("the reply text does not contain {substring:?}"));
        }
    }
    if !out.is_empty() {
        out.push(format!("reply text: {}", show(reply_text)));
    }
    out
}

fn response_differences(expected: &Json, actual: &Json, vector: &Vector, path: &str, out: &mut Vec<String>) {
    let Some(expected_error) = expected.get("error") else {
        json::differences(expected, actual, path, out);
        return;
    };
    let Json::Object(members) = actual else {
        out.push(format!("{path}: expected an error Response object, got {actual}"));
        return;
    };
    let mut names: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    if names != ["error", "id", "jsonrpc"] {
        out.push(format!("{path}: members must be jsonrpc, error, id; got {names:?}"));
    }
    for key in ["jsonrpc", "id"] {
        if let (Some(e), Some(a)) = (expected.get(key), actual.get(key)) {
            json::differences(e, a, &format!("{path}.{key}"), out);
        }
    }
    let error = match actual.get("error") {
        Some(error @ Json::Object(_)) => error,
        other => {
            out.push(format!("{path}.error: expected an object, got {other:?}"));
            return;
        }
    };
    if vector.error_exact {
        json::differences(expected_error, error, &format!("{path}.error"), out);
        return;
    }
    match (expected_error.get("code"), error.get("code")) {
        (Some(e), Some(a)) => json::differences(e, a, &format!("{path}.error.code"), out),
        _ => out.push(format!("{path}.error.code: missing in {error}")),
    }
    match error.get("message").and_then(Json::as_str) {
        None => out.push(format!("{path}.error.message: expected a string in {error}")),
        Some(message) => {
            if let Some(needle) = &vector.error_message_contains {
                if !message.contains(needle.as_str()) {
                    out.push(format!("{path}.error.message: {message:?} does not contain {needle:?}"));
                }
            }
        }
    }
    if let Json::Object(members) = error {
        for (name, _) in members {
            if !matches!(name.as_str(), "code" | "message" | "data") {
                out.push(format!("{path}.error: unexpected member {name:?}"));
            }
        }
    }
}

/// Every `*.json` file of `dir`, sorted by name, as `load(name, file)` reads it; fails
/// once, listing every malformed file, or when there is none.
pub fn load_dir<T>(dir: &Path, mut load: impl FnMut(&str, &Json) -> Result<T, String>) -> Vec<T> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut problems = Vec::new();
    let mut vectors = Vec::new();
    for path in paths {
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        match json::parse(&bytes).and_then(|file| load(&name, &file)) {
            Ok(vector) => vectors.push(vector),
            Err(problem) => problems.push(format!("{name}: {problem}")),
        }
    }
    assert!(
        problems.is_empty(),
        "malformed vector files in {}:\n{}",
        dir.display(),
        problems.join("\n")
    );
    assert!(!vectors.is_empty(), "no vector in {}", dir.display());
    vectors
}

/// Run `check` on every vector and fail once, listing every vector that failed.
pub fn check_all(how: &str, vectors: &[Vector], mut check: impl FnMut(&Vector) -> Vec<String>) {
    let mut failed = Vec::new();
    for vector in vectors {
        let problems = check(vector);
        if !problems.is_empty() {
            failed.push(format!("--- {}\n  {}", vector.name, problems.join("\n  ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} vectors fail {how}:\n{}",
        failed.len(),
        vectors.len(),
        failed.join("\n")
    );
}

/// Sent after a vector on the same connection: its reply must come next.
pub fn follow_up() -> String {
    call("echo", r#"["follow-up"]"#, r#""follow-up""#)
}

pub const FOLLOW_UP_RESULT: &str = r#"{"jsonrpc":"2.0","result":"follow-up","id":"follow-up"}"#;

pub fn follow_up_differences(reply: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    match json::parse(reply) {
        Ok(actual) => json::differences(&json::json(FOLLOW_UP_RESULT), &actual, "follow-up", &mut out),
        Err(e) => out.push(format!("follow-up reply is not JSON ({e}): {}", show(reply))),
    }
    out
}
