// SPDX-License-Identifier: Apache-2.0
//! `ucall.Context`: how a call reached the server, for a handler that asks for it with a
//! parameter annotated `ucall.Context`.
//!
//! The core's context borrows the request; a Python call runs after the turn that parsed
//! it, so what it says is copied out ([`Owned`]) only for procedures that take it. Python
//! objects are made from it only when a handler reads an attribute.

use std::net::SocketAddr;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use ucall_core::{Call, Transport};

use crate::convert;

/// A call's context, copied out of the request.
#[derive(Debug, Clone)]
pub struct Owned {
    transport: Transport,
    tls: bool,
    peer: Option<SocketAddr>,
    head: Box<[u8]>,
    tls_subject: Option<Box<str>>,
    method: Box<str>,
    id: Option<Box<str>>,
    /// The params as sent, for middleware (`None` when not kept, or none were sent).
    params: Option<Box<str>>,
}

impl Owned {
    /// What `call` says of itself; with `params`, its params text too (for middleware).
    pub fn of(call: &Call<'_>, params: bool) -> Box<Self> {
        let context = call.context();
        Box::new(Owned {
            transport: context.transport(),
            tls: context.is_tls(),
            peer: context.peer(),
            head: context.head().into(),
            tls_subject: context.tls_subject().map(Box::from),
            method: call.method().into(),
            id: call.id().map(Box::from),
            params: call.params().raw().filter(|_| params).map(Box::from),
        })
    }

    fn view(&self) -> ucall_core::Context<'_> {
        ucall_core::Context::new(self.transport, self.tls, self.peer, &self.head)
    }
}

/// How a call reached the server. A handler gets it through a parameter annotated
/// `ucall.Context`, which is no part of the procedure's params or schema.
#[pyclass(module = "ucall._ucall", name = "Context", frozen)]
pub struct Context {
    owned: Box<Owned>,
}

impl Context {
    pub fn new(owned: Box<Owned>) -> Self {
        Context { owned }
    }
}

#[pymethods]
impl Context {
    /// `"http"`, `"tcp"` or `"websocket"`.
    #[getter]
    fn transport(&self) -> &'static str {
        self.owned.transport.as_str()
    }

    /// Whether TLS carried the call.
    #[getter]
    fn tls(&self) -> bool {
        self.owned.tls
    }

    /// The subject of the client's TLS certificate (mutual TLS, `tls_client_ca=`), as
    /// RFC 4514 writes it: `"CN=alice, O=Example"`; `None` without one.
    #[getter]
    fn tls_subject(&self) -> Option<&str> {
        self.owned.tls_subject.as_deref()
    }

    /// The peer's `(host, port)`.
    #[getter]
    fn peer(&self) -> Option<(String, u16)> {
        self.owned.peer.map(|peer| (peer.ip().to_string(), peer.port()))
    }

    /// The request's header fields, names in lower case (an HTTP call's own; a WebSocket
    /// call's, the upgrade request's; none over raw TCP). A field sent more than once has
    /// its values joined with ", " (RFC 9110 §5.3).
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut fields: Vec<(String, String)> = Vec::new();
        for (name, value) in self.owned.view().headers() {
            let name = name.to_ascii_lowercase();
            let value = String::from_utf8_lossy(value);
            match fields.iter_mut().find(|(known, _)| *known == name) {
                Some((_, earlier)) => {
                    earlier.push_str(", ");
                    earlier.push_str(&value);
                }
                None => fields.push((name, value.into_owned())),
            }
        }
        let dict = PyDict::new(py);
        for (name, value) in fields {
            dict.set_item(name, value)?;
        }
        Ok(dict)
    }

    /// The JSON-RPC method name (the procedure's name for a REST-style call).
    #[getter]
    fn method(&self) -> &str {
        &self.owned.method
    }

    /// The JSON-RPC id as sent (`None` for a notification and a REST-style call).
    #[getter]
    fn id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.owned.id.as_deref() {
            None | Some("null") => Ok(py.None().into_bound(py)),
            Some(id) => convert::to_python(py, id),
        }
    }

    /// The params as sent, decoded (a list, a dict, or `None`); kept for middleware only.
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.owned.params.as_deref() {
            None => Ok(py.None().into_bound(py)),
            Some(params) => convert::to_python(py, params),
        }
    }

    fn __repr__(&self) -> String {
        let peer = self.owned.peer.map_or_else(|| "None".to_owned(), |p| p.to_string());
        format!(
            "Context(transport={:?}, tls={}, peer={peer}, method={:?})",
            self.owned.transport.as_str(),
            if self.owned.tls { "True" } else { "False" },
            self.owned.method
        )
    }
}
