// SPDX-License-Identifier: Apache-2.0
//! `ucall._ucall`: the private extension module behind the `ucall` Python package.
//!
//! Thin glue over `ucall-core`: a server whose procedures are Python callables
//! ([`server::NativeServer`]), each registered function with its hooks ([`procedure`]),
//! the threads that run them ([`runtime`]), the JSON reader and writer they use
//! ([`convert`]), Python's parameter binding rules ([`params`]), and the clients' native
//! transport ([`client`]). The public API is pure Python in `python/ucall/`.

mod client;
mod convert;
mod params;
mod procedure;
mod runtime;
mod server;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use ucall_core::jsonrpc::codes::{ErrorCode, SERVER_ERROR_MAX, SERVER_ERROR_MIN};

/// Forgets the logging levels the bridge cached, so that a server started after
/// `logging` was configured (`ucall serve --log-level`) logs at the levels in force.
static LOG_LEVELS: std::sync::OnceLock<pyo3_log::ResetHandle> = std::sync::OnceLock::new();

/// Send the core's log records (target `ucall`: limits hit, failed TLS sessions, engine
/// events) to Python's `logging`, logger `ucall`. Other crates' records (rustls) from
/// warnings up. The core's start-up and shutdown lines (`ucall::server`) are left out:
/// the package logs its own, which say more.
fn forward_logs(py: Python<'_>) {
    let logger = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels).map(|logger| {
        logger
            .filter(log::LevelFilter::Warn)
            .filter_target("ucall".to_owned(), log::LevelFilter::Debug)
            .filter_target("ucall::server".to_owned(), log::LevelFilter::Off)
    });
    // Another extension in the process may have installed a logger first; the core then
    // logs through that one.
    if let Ok(handle) = logger.map_err(drop).and_then(|logger| logger.install().map_err(drop)) {
        let _ = LOG_LEVELS.set(handle);
    }
}

/// See [`LOG_LEVELS`].
pub(crate) fn reload_log_levels() {
    if let Some(handle) = LOG_LEVELS.get() {
        handle.reset();
    }
}

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
    m.add_class::<server::NativeServer>()?;
    m.add_class::<procedure::DeferredReply>()?;
    m.add_class::<client::NativeClient>()?;
    m.add_class::<client::NativeMux>()?;
    m.add_function(wrap_pyfunction!(server::dumps, m)?)?;
    m.add_function(wrap_pyfunction!(code_for_http_status, m)?)?;
    forward_logs(py);
    m.add_function(wrap_pyfunction!(server::loads, m)?)?;
    Ok(())
}
