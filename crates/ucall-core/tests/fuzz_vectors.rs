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

/// A binary vector's JSON text and attachment section in the form `binary_messages`
/// reads: a split byte, the text's length, the text, the section.
fn binary_input(vector: &serde_json::Value) -> Option<Vec<u8>> {
    let text = vector.get("json")?.as_str()?;
    let mut section = Vec::new();
    for item in vector.get("attachments")?.as_array()? {
        let offset = usize::try_from(item.get("offset")?.as_u64()?).ok()?;
        let hex = item.get("hex")?.as_str()?;
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        section.resize(section.len().max(offset + bytes.len()), 0);
        section[offset..offset + bytes.len()].copy_from_slice(&bytes);
    }
    let mut data = vec![5, u8::try_from(text.len()).ok()?];
    data.extend_from_slice(text.as_bytes());
    data.extend_from_slice(&section);
    Some(data)
}

#[test]
fn binary_vectors_pass_the_binary_messages_target() {
    let mut count = 0;
    let mut paths: Vec<_> = std::fs::read_dir(vectors_dir().join("binary"))
        .expect("binary vectors")
        .map(|e| e.expect("entry").path())
        .filter(|path| path.is_file()) // replies/ holds the reply vectors
        .collect();
    paths.sort();
    for path in paths {
        let vector: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
        if let Some(data) = binary_input(&vector) {
            assert!(_fuzzable::run("binary_messages", &data));
            count += 1;
        }
    }
    assert!(count > 30, "{count} binary vectors");
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
