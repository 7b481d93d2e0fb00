// SPDX-License-Identifier: Apache-2.0
//! Every module of `ucall-core` imports only modules below it (docs/architecture.md):
//! buffers and errors, then the sans-I/O framers and the codec, the call layers, the
//! session, the engines (with the connection), and the server on top. An import upwards,
//! or through a crate-root re-export (which hides where it goes), fails here with its
//! file and line.

use std::path::{Path, PathBuf};

/// Each module and its rank: a module imports only modules of lower rank (or itself).
const RANKS: &[(&str, u32)] = &[
    ("buffer", 0),
    ("error", 0),
    ("date", 0),
    ("ws", 1),
    ("stream", 1),
    ("jsonrpc", 1),
    ("tls", 1),
    ("http1", 2),
    ("params", 2),
    ("defer", 2),
    ("discover", 2),
    ("router", 3),
    ("dispatch", 4),
    ("session", 5),
    ("engine", 6),
    ("server", 7),
];

fn rank(module: &str) -> Option<u32> {
    RANKS.iter().find(|(name, _)| *name == module).map(|(_, rank)| *rank)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
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

/// The top-level module a source file belongs to (`engine/uring/ring.rs` → `engine`).
fn module_of(src: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(src).expect("a file under src");
    let first = relative.components().next().expect("a path").as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// What follows each `crate::` in the code of `line` (comments left out).
fn crate_paths(line: &str) -> Vec<&str> {
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
fn modules_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in sources(&src) {
        let module = module_of(&src, &path);
        if module == "lib" || module == "_fuzzable" {
            continue; // the root re-exports the API; the fuzz entry points drive it all
        }
        let own = rank(&module).unwrap_or_else(|| panic!("{}: module {module} has no rank here", path.display()));
        let text = std::fs::read_to_string(&path).expect("a source file");
        for (number, line) in text.lines().enumerate() {
            for target in crate_paths(line) {
                checked += 1;
                let allowed = target == module || rank(target).is_some_and(|other| other < own);
                if !allowed {
                    wrong.push(format!(
                        "{}:{}: {module} imports crate::{target}",
                        path.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} imports seen: the walk missed the sources");
    assert!(wrong.is_empty(), "imports against the layering:\n{}", wrong.join("\n"));
}

#[test]
fn the_check_reads_code_and_not_comments() {
    assert_eq!(crate_paths("use crate::engine::{Shared}; // crate::server"), ["engine"]);
    assert_eq!(crate_paths("/// [`crate::Server`]"), Vec::<&str>::new());
    assert_eq!(crate_paths("let x = crate::WakeHold(y);"), ["WakeHold"]);
}
