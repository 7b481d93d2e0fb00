// SPDX-License-Identifier: Apache-2.0
//! `ucall._ucall`: the private extension module behind the `ucall` Python package.
//!
//! Thin glue over `ucall-core`: a server whose procedures are Python callables
//! ([`server::NativeServer`]), each registered function with its hooks ([`procedure`]),
//! the threads that run them ([`runtime`]), a call's context ([`context`]), the JSON reader and writer they use
//! ([`convert`]), Python's parameter binding rules ([`params`]), and the clients' native
//! transport ([`client`]). The public API is pure Python in `python/ucall/`.

mod allocator;
mod batch;
mod client;
mod context;
mod convert;
mod logs;
mod params;
mod procedure;
mod runtime;
mod server;
mod streaming;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use ucall_core::jsonrpc::codes::{ErrorCode, SERVER_ERROR_MAX, SERVER_ERROR_MIN};

/// The JSON-RPC code an error given only the HTTP `status` carries (the core's one table).
#[pyfunction]
fn code_for_http_status(status: u16) -> i32 {
    ucall_core::jsonrpc::code_for_http_status(status)
}

/// The crate version in PEP 440 form (`0.1.0-alpha.1` → `0.1.0a1`).
fn python_version() -> String {
    let version = env!("CARGO_PKG_VERSION");
    version
        .replace("-alpha.", "a")
        .replace("-beta.", "b")
        .replace("-rc.", "rc")
}

/// `ParseError` → `PARSE_ERROR`.
fn upper_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[pymodule]
fn _ucall(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", python_version())?;
    let codes = PyDict::new(py);
    for code in ErrorCode::ALL {
        codes.set_item(upper_snake(&format!("{code:?}")), code.code())?;
    }
    m.add("ERROR_CODES", codes)?;
    m.add("SERVER_ERROR_MIN", SERVER_ERROR_MIN)?;
    m.add("SERVER_ERROR_MAX", SERVER_ERROR_MAX)?;
    let exceeded = ucall_core::RpcError::deadline_exceeded();
    m.add(
        "DEADLINE_EXCEEDED",
        (exceeded.rest_status(), exceeded.message().to_owned()),
    )?;
    m.add_class::<server::NativeServer>()?;
    m.add_class::<procedure::DeferredReply>()?;
    m.add_class::<streaming::StreamReply>()?;
    m.add_class::<context::Context>()?;
    m.add_class::<batch::BatchReply>()?;
    m.add_class::<client::NativeClient>()?;
    m.add_class::<client::NativeMux>()?;
    m.add_function(wrap_pyfunction!(server::dumps, m)?)?;
    m.add_function(wrap_pyfunction!(code_for_http_status, m)?)?;
    logs::forward(py);
    m.add_function(wrap_pyfunction!(server::loads, m)?)?;
    Ok(())
}
