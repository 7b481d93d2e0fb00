// SPDX-License-Identifier: Apache-2.0
//! `ucall.Context`: how a call reached the server, for a handler that asks for it with a
//! parameter annotated `ucall.Context`.
//!
//! The core's context borrows the request; a Python call runs after the turn that parsed
//! it, so what it says is copied out ([`Owned`]) only for procedures that take it. Python
//! objects are made from it only when a handler reads an attribute.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use ucall_core::{Call, Caller, KeyedLimits, RpcError, Transport};

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
    /// The time the caller allows the call, if it said.
    timeout: Option<std::time::Duration>,
    /// When the call's caller stops waiting (its procedure's `timeout=` or the caller's).
    deadline: Option<Instant>,
    /// Whether the caller has gone (its connection's flag, shared).
    caller: Caller,
    /// The caller's W3C trace context: its `traceparent` (as version 00 writes it) and
    /// `tracestate`, when it sent a valid one.
    trace: Option<(Box<str>, Option<Box<str>>)>,
    /// When the core read the request (`CLOCK_MONOTONIC` nanoseconds), when calls are timed.
    received: Option<u64>,
}

impl Owned {
    /// What `call` says of itself, due by `deadline`; with `params`, its params text too
    /// (for middleware).
    pub fn of(call: &Call<'_>, params: bool, deadline: Option<Instant>) -> Box<Self> {
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
            timeout: context.timeout(),
            deadline,
            caller: context.caller(),
            trace: context.trace().map(|trace| {
                let header = trace.parent.to_header();
                let traceparent = std::str::from_utf8(&header).unwrap_or_default().into();
                (
                    traceparent,
                    trace.tracestate.map(|state| state.into_owned().into_boxed_str()),
                )
            }),
            received: context.received(),
        })
    }

    fn view(&self) -> ucall_core::Context<'_> {
        ucall_core::Context::new(self.transport, self.tls, self.peer, &self.head).with_timeout(self.timeout)
    }
}

/// How a call reached the server. A handler gets it through a parameter annotated
/// `ucall.Context`, which is no part of the procedure's params or schema.
#[pyclass(module = "ucall._ucall", name = "Context", frozen)]
pub struct Context {
    owned: Box<Owned>,
    /// The rate limits the middleware admits the call through, when the server's
    /// `rate_limit_key` is `"middleware"` (empty while no limit is in force).
    limits: Option<Arc<OnceLock<KeyedLimits>>>,
    /// Whether the call went through those limits already (each call does once).
    admitted: AtomicBool,
}

impl Context {
    pub fn new(owned: Box<Owned>, limits: Option<Arc<OnceLock<KeyedLimits>>>) -> Self {
        Context {
            owned,
            limits,
            admitted: AtomicBool::new(false),
        }
    }

    /// Admit the call under `key` (`None`: its peer address) unless it was already;
    /// a refusal raises the over-limit error as a `ucall.HTTPError` (429).
    fn admit(&self, py: Python<'_>, key: Option<&str>) -> PyResult<()> {
        let Some(limits) = self.limits.as_ref().and_then(|cell| cell.get()) else {
            return Ok(());
        };
        if self.admitted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        limits
            .admit(&self.owned.method, key, &self.owned.view())
            .map_err(|refused| over_limit(py, &refused))
    }
}

/// The over-limit error as the `ucall.HTTPError` a handler would raise for it, carrying
/// its `Retry-After` seconds (read back when the error is answered).
fn over_limit(py: Python<'_>, refused: &RpcError) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let data = match refused.data() {
            Some(data) => crate::convert::to_python(py, data)?.unbind(),
            None => py.None(),
        };
        let kwargs = PyDict::new(py);
        kwargs.set_item("code", refused.code())?;
        let status = refused.http_status().unwrap_or(429);
        let error = py
            .import("ucall.exceptions")?
            .getattr("HTTPError")?
            .call((status, refused.message(), data), Some(&kwargs))?;
        error.setattr("retry_after", refused.retry_after())?;
        Ok(PyErr::from_value(error))
    })();
    made.unwrap_or_else(|error| error)
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

    /// The seconds the caller allows the call (its `UCall-Timeout` header or `"timeout"`
    /// member), or `None`.
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.owned.timeout.map(|t| t.as_secs_f64())
    }

    /// When the call's caller stops waiting, on the clock of `time.monotonic()` (the
    /// earlier of the procedure's `timeout=` and the caller's), or `None`.
    #[getter]
    fn deadline(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let Some(deadline) = self.owned.deadline else {
            return Ok(None);
        };
        let now = Instant::now();
        let monotonic: f64 = py.import("time")?.getattr("monotonic")?.call0()?.extract()?;
        // Both clocks are CLOCK_MONOTONIC on Linux; only the distance from now is carried over.
        let left = match deadline.checked_duration_since(now) {
            Some(left) => left.as_secs_f64(),
            None => -now.duration_since(deadline).as_secs_f64(),
        };
        Ok(Some(monotonic + left))
    }

    /// Whether the caller has gone: its connection ended (a reset, a failed write), an
    /// HTTP client stopped sending, a WebSocket client sent Close, or an MCP client
    /// cancelled this call. A raw TCP client that only half-closes may still read its
    /// reply: that alone does not count.
    #[getter]
    fn caller_gone(&self) -> bool {
        self.owned.caller.is_gone()
    }

    /// The caller's W3C `traceparent`, when it sent a valid one (the request's `"_meta"`
    /// member, else the HTTP header field), as version 00 writes it; else `None`.
    #[getter]
    fn traceparent(&self) -> Option<&str> {
        self.owned.trace.as_ref().map(|(parent, _)| &**parent)
    }

    /// The `tracestate` that came with a valid `traceparent`, when valid too; else `None`.
    #[getter]
    fn tracestate(&self) -> Option<&str> {
        self.owned.trace.as_ref().and_then(|(_, state)| state.as_deref())
    }

    /// When the server read the request, on the clock of `time.monotonic_ns()`, when
    /// calls are timed (tracing on); else `None`.
    #[getter]
    fn received_ns(&self) -> Option<u64> {
        self.owned.received
    }

    /// The params as sent, decoded (a list, a dict, or `None`); kept for middleware only.
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.owned.params.as_deref() {
            None => Ok(py.None().into_bound(py)),
            Some(params) => convert::to_python(py, params),
        }
    }

    /// Rate-limit this call as a call of the client `key` names (a tenant, an API key
    /// the middleware checked), when the server's ``rate_limit_key`` is ``"middleware"``:
    /// calls with one key share a bucket per limit, whatever their address. Over the
    /// limit it raises ``ucall.HTTPError`` 429 (code -32029), the call does not run and
    /// its caller gets the usual over-limit error. A call the middleware does not key is
    /// limited by its peer address as it reaches the procedure. Once per call.
    #[pyo3(signature = (key))]
    fn limit_by(&self, py: Python<'_>, key: &str) -> PyResult<()> {
        if self.limits.is_none() {
            return Err(PyRuntimeError::new_err(
                "ctx.limit_by() keys rate limits only when the server has rate_limit_key=\"middleware\"",
            ));
        }
        if self.admitted.load(Ordering::Acquire) {
            return Err(PyRuntimeError::new_err(
                "ctx.limit_by() was called already for this call",
            ));
        }
        self.admit(py, Some(key))
    }

    /// Admit the call by its peer address if the middleware did not key it (run as the
    /// middleware hands the call to its procedure).
    fn _limit_by_peer(&self, py: Python<'_>) -> PyResult<()> {
        self.admit(py, None)
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
