// SPDX-License-Identifier: Apache-2.0
//! Every module of the Python binding imports only modules below it: numpy's C API
//! (`ndarray`), conversions, then
//! parameters, then the procedure types that the runtime and the server share, the
//! runtime, batch procedures (a lone call runs in the runtime's group), and the server
//! and client on top (the check is `ucall-core`'s).

#[path = "../../ucall-core/tests/layering/check.rs"]
mod check;

use std::path::Path;

const RANKS: &[(&str, u32)] = &[
    ("ndarray", 0),
    ("convert", 1),
    ("logs", 1),
    ("allocator", 1),
    ("attachment", 1),
    ("npy", 1),
    ("context", 2),
    ("params", 2),
    ("streaming", 2),
    ("procedure", 3),
    ("runtime", 4),
    ("batch", 5),
    ("server", 6),
    ("client", 6),
];

#[test]
fn modules_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let checked = check::check(&src, RANKS, &["lib"]);
    assert!(checked > 5, "only {checked} imports seen: the walk missed the sources");
}
