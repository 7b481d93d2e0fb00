// SPDX-License-Identifier: Apache-2.0
//! The layering check both crates run (`ucall-core/tests/layering.rs`,
//! `ucall-capi/tests/layering.rs`): every module imports only modules of lower rank.

use std::path::{Path, PathBuf};

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

/// What follows each `crate::` in the code of `line` (comments left out). `crate::{`
/// gives an empty name, which no rank allows: a grouped import would hide where it goes.
pub fn crate_paths(line: &str) -> Vec<&str> {
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

/// Check every module under `src` against `ranks` (module, rank); the modules in `skip`
/// (the crate root that re-exports, entry points that drive it all) are not checked.
/// Panics with each import against the layering, by file and line; returns how many
/// imports it checked (so a caller can tell that the walk found its sources).
pub fn check(src: &Path, ranks: &[(&str, u32)], skip: &[&str]) -> usize {
    let rank = |module: &str| ranks.iter().find(|(name, _)| *name == module).map(|(_, rank)| *rank);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in sources(src) {
        let module = module_of(src, &path);
        if skip.contains(&module.as_str()) {
            continue;
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
    assert!(wrong.is_empty(), "imports against the layering:\n{}", wrong.join("\n"));
    checked
}
