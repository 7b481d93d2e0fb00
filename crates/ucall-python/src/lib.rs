// SPDX-License-Identifier: Apache-2.0
//! `ucall._ucall`: the private extension module behind the `ucall` Python package.
//!
//! Thin glue over `ucall-core`: a server whose procedures are Python callables
//! ([`server::NativeServer`]), each registered function with its hooks ([`procedure`]),
//! the threads that run them ([`runtime`]), a call's context ([`context`]), the JSON reader and writer they use
//! ([`convert`]), Python's parameter binding rules ([`params`]), and the clients' native
//! transport ([`client`]). The public API is pure Python in `python/ucall/`.

mod allocator;
mod attachment;
mod batch;
mod client;
mod context;
mod convert;
mod logs;
mod ndarray;
mod npy;
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

/// A JSON Schema (as JSON text) in the few words the /docs page shows for it
/// (`array<integer>`, `base64 application/x-npy`): the core's one wording, for `ucall NAME --help`.
#[pyfunction]
fn type_text(schema: &str) -> PyResult<String> {
    let schema: serde_json::Value = serde_json::from_str(schema)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("not a JSON schema: {e}")))?;
    Ok(ucall_core::type_text(&schema))
}

/// `text` (`str` or `bytes`) decoded from base64 by the core's one rule (padding optional,
/// leftover bits zero), into `bytes` or a writable `bytearray`: SIMD, straight into the
/// new object (`binascii` takes 4.7 ms for a 1.6 MB array, this about 0.2 ms).
#[pyfunction]
#[pyo3(signature = (text, bytearray=false))]
fn b64decode<'py>(py: Python<'py>, text: &Bound<'py, PyAny>, bytearray: bool) -> PyResult<Bound<'py, PyAny>> {
    let text = match text.cast::<pyo3::types::PyBytes>() {
        Ok(bytes) => bytes.as_bytes(),
        Err(_) => utf8(text.cast::<pyo3::types::PyString>()?)?,
    };
    params::decode_base64(py, text, bytearray).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!("not base64: {}", ucall_core::params::base64::problem(text)))
    })
}

extern "C" {
    // In the stable ABI from 3.10, and in every CPython 3 before it with this signature;
    // PyO3 hides it when built for the stable ABI of 3.9.
    fn PyUnicode_AsUTF8AndSize(unicode: *mut pyo3::ffi::PyObject, size: *mut pyo3::ffi::Py_ssize_t) -> *const u8;
}

/// A `str`'s UTF-8 without a copy: CPython keeps an ASCII string's characters as its UTF-8
/// (`to_cow` makes two copies under the stable ABI of 3.9: 2 MB each for a large array).
fn utf8<'a>(text: &'a Bound<'_, pyo3::types::PyString>) -> PyResult<&'a [u8]> {
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `text` is a live `str`; the call returns its UTF-8 buffer, owned by the string
    // and valid while it lives (the borrow of `text` bounds the slice), or null with an
    // exception set (a lone surrogate).
    unsafe {
        let data = PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size);
        if data.is_null() {
            return Err(PyErr::fetch(text.py()));
        }
        Ok(std::slice::from_raw_parts(data, usize::try_from(size).unwrap_or(0)))
    }
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
    m.add("UNSENT_AT_MOST", ucall_client::UNSENT_AT_MOST)?;
    m.add_class::<server::NativeServer>()?;
    m.add_class::<procedure::DeferredReply>()?;
    m.add_class::<streaming::StreamReply>()?;
    m.add_class::<context::Context>()?;
    m.add_class::<batch::BatchReply>()?;
    m.add_class::<client::NativeClient>()?;
    m.add_class::<client::NativeMux>()?;
    m.add_class::<client::ReplyBody>()?;
    m.add_class::<client::BinaryBody>()?;
    m.add_class::<convert::NpyBytes>()?;
    m.add_class::<attachment::AttachmentMemory>()?;
    m.add_function(wrap_pyfunction!(server::dumps, m)?)?;
    m.add_function(wrap_pyfunction!(code_for_http_status, m)?)?;
    m.add_function(wrap_pyfunction!(type_text, m)?)?;
    m.add_function(wrap_pyfunction!(server::check_rate_limit, m)?)?;
    logs::forward(py);
    m.add_function(wrap_pyfunction!(server::loads, m)?)?;
    m.add_function(wrap_pyfunction!(b64decode, m)?)?;
    Ok(())
}
