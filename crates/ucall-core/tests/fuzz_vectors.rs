// SPDX-License-Identifier: Apache-2.0
//! The fuzz targets' checks on stable Rust, without libFuzzer: every regression vector in
//! `tests/vectors/fuzz/<target>/` (an input that once failed) and every request of the
//! shared vectors go through the entry point of `ucall_core::_fuzzable` they are for.

use std::path::Path;

use ucall_core::_fuzzable;

fn vectors_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

#[test]
fn regression_vectors_pass_their_target() {
    let Ok(entries) = std::fs::read_dir(vectors_dir().join("fuzz")) else {
        return; // no vector kept yet
    };
    for entry in entries {
        let dir = entry.expect("entry").path();
        let target = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("folder name")
            .to_owned();
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("folder")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        for file in files {
            let data = std::fs::read(&file).expect("vector");
            assert!(
                _fuzzable::run(&target, &data),
                "{}: no fuzz target is called {target}",
                dir.display()
            );
        }
    }
}

#[test]
fn shared_vectors_pass_every_target() {
    let mut paths: Vec<_> = std::fs::read_dir(vectors_dir().join("jsonrpc"))
        .expect("vectors")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    let mut count = 0;
    for path in paths {
        let vector: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
        let Some(request) = vector.get("request").and_then(|r| r.as_str()) else {
            continue;
        };
        for target in _fuzzable::TARGETS {
            for prefix in [&b"\x00"[..], b"\x01", b"\x05"] {
                let mut data = prefix.to_vec();
                data.extend_from_slice(request.as_bytes());
                assert!(_fuzzable::run(target, &data));
            }
        }
        count += 1;
    }
    assert!(count > 50, "{count} vectors");
}
