// SPDX-License-Identifier: Apache-2.0
//! Every module of the Python binding imports only modules below it: conversions, then
//! parameters, then the procedure types that the runtime and the server share, the
//! runtime, batch procedures (a lone call runs in the runtime's group), and the server
//! and client on top (the check is `ucall-core`'s).

#[path = "../../ucall-core/tests/layering/check.rs"]
mod check;

use std::path::Path;

const RANKS: &[(&str, u32)] = &[
    ("convert", 0),
    ("logs", 0),
    ("allocator", 0),
    ("attachment", 0),
    ("context", 1),
    ("params", 1),
    ("streaming", 1),
    ("procedure", 2),
    ("runtime", 3),
    ("batch", 4),
    ("server", 5),
    ("client", 5),
];

#[test]
fn modules_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let checked = check::check(&src, RANKS, &["lib"]);
    assert!(checked > 5, "only {checked} imports seen: the walk missed the sources");
}
