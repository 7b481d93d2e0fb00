// SPDX-License-Identifier: Apache-2.0
//! Every module of `ucall-capi` imports only modules below it: the C boundary (`ffi`,
//! the thread's last `error`), then `panic` and `log`, then TLS, the settings and the call
//! and client APIs, and the server on top. An import upwards fails here with its file
//! and line (the check is `ucall-core`'s).

#[path = "../../ucall-core/tests/layering/check.rs"]
mod check;

use std::path::Path;

const RANKS: &[(&str, u32)] = &[
    ("ffi", 0),
    ("error", 0),
    ("panic", 1),
    ("log", 1),
    ("tls", 2),
    ("config", 3),
    ("call", 3),
    ("client", 3),
    ("server", 4),
];

#[test]
fn modules_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let checked = check::check(&src, RANKS, &["lib"]);
    assert!(checked > 10, "only {checked} imports seen: the walk missed the sources");
}
