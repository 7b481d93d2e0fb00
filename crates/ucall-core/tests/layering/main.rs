// SPDX-License-Identifier: Apache-2.0
//! Every module of `ucall-core` imports only modules below it (docs/architecture.md):
//! buffers and errors, then the sans-I/O framers and the codec, the call layers, the
//! session, the engines (with the connection), and the server on top. An import upwards,
//! or through a crate-root re-export (which hides where it goes), fails here with its
//! file and line.

mod check;

use std::path::Path;

/// Each module and its rank: a module imports only modules of lower rank (or itself).
const RANKS: &[(&str, u32)] = &[
    ("buffer", 0),
    ("base64_text", 0),
    ("lend", 1),
    ("error", 0),
    ("date", 0),
    ("logs", 0),
    ("wire", 0),
    ("trace_context", 0),
    ("gzip", 0),
    ("cancellation", 0),
    ("context", 1),
    ("mcp_sessions", 1),
    ("deadline", 1),
    ("request_log", 1),
    ("ws", 1),
    ("stream", 1),
    ("jsonrpc", 1),
    ("tls", 1),
    ("streaming", 1),
    ("http1", 2),
    ("params", 2),
    ("defer", 2),
    ("discover", 2),
    ("health", 2),
    ("metrics", 2),
    ("limit", 2),
    ("router", 3),
    ("dispatch", 4),
    ("spans", 4),
    ("batch", 4),
    ("mcp", 5),
    ("session", 6),
    ("engine", 7),
    ("server", 8),
];

#[test]
fn modules_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // The root re-exports the API; the fuzz entry points drive it all.
    let checked = check::check(&src, RANKS, &["lib", "_fuzzable"]);
    assert!(checked > 50, "only {checked} imports seen: the walk missed the sources");
}

#[test]
fn the_check_reads_code_and_not_comments() {
    assert_eq!(
        check::crate_paths("use crate::engine::{Shared}; // crate::server"),
        ["engine"]
    );
    assert_eq!(check::crate_paths("/// [`crate::Server`]"), Vec::<&str>::new());
    assert_eq!(check::crate_paths("let x = crate::WakeHold(y);"), ["WakeHold"]);
    assert_eq!(check::crate_paths("use crate::{router, server};"), [""]);
}

#[test]
#[should_panic(expected = "router imports crate::server")]
fn the_check_fails_on_an_import_upwards() {
    let src = std::env::temp_dir().join(format!("ucall-layering-{}", std::process::id()));
    std::fs::create_dir_all(&src).expect("a temporary folder");
    std::fs::write(
        src.join("router.rs"),
        "use crate::server::Server;\nuse crate::jsonrpc::X;\n",
    )
    .expect("a file");
    std::fs::write(src.join("jsonrpc.rs"), "use crate::jsonrpc::Y;\n".repeat(10)).expect("a file");
    let ranks = [("jsonrpc", 0), ("router", 1), ("server", 2)];
    let result = std::panic::catch_unwind(|| check::check(&src, &ranks, &[]));
    let _ = std::fs::remove_dir_all(&src);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
