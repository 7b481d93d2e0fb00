// SPDX-License-Identifier: Apache-2.0
//! The call-handling layers import only downwards: `jsonrpc` (the codec) <- `params`,
//! `defer` <- `router` <- `dispatch` <- the session and the engines. A type two layers
//! share moves down to the lower one; an import upwards fails here, naming the file.

use std::path::{Path, PathBuf};

/// Each layer and its rank: a layer imports only layers of lower rank.
const LAYERS: &[(&str, u32)] = &[
    ("jsonrpc", 0),
    ("params", 1),
    ("defer", 1),
    ("router", 2),
    ("dispatch", 3),
];

fn rank(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(name, _)| *name == module).map(|(_, rank)| *rank)
}

/// The `.rs` files of module `name`: `name.rs`, or every file under `name/`.
fn files(src: &Path, name: &str) -> Vec<PathBuf> {
    let single = src.join(format!("{name}.rs"));
    if single.exists() {
        return vec![single];
    }
    let mut found = Vec::new();
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a layer's folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The crate modules named by `crate::NAME` in `line` (code, not comments).
fn imported(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or("");
    code.match_indices("crate::")
        .map(|(at, _)| {
            let rest = &code[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn call_layers_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    for &(layer, own) in LAYERS {
        let paths = files(&src, layer);
        assert!(!paths.is_empty(), "no source for layer {layer}");
        for path in paths {
            let text = std::fs::read_to_string(&path).expect("a source file");
            for (number, line) in text.lines().enumerate() {
                for module in imported(line) {
                    // Lower layers, and modules outside the stack below them (`buffer`,
                    // `error`) are fine; another layer of the stack must rank lower.
                    let allowed = match rank(module) {
                        Some(other) => other < own,
                        // `use crate::{a, b}` would hide what it imports from this check.
                        None if module.is_empty() => false,
                        None => !matches!(
                            module,
                            "session" | "engine" | "server" | "stream" | "ws" | "http1" | "tls"
                        ),
                    };
                    if !allowed {
                        upward.push(format!("{}:{}: {layer} imports {module}", path.display(), number + 1));
                    }
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_import() {
    assert_eq!(
        imported("use crate::router::{Call, Reply}; // crate::session"),
        ["router"]
    );
    assert_eq!(imported("    /// see [`crate::dispatch`]"), Vec::<&str>::new());
}
