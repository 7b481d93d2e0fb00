// SPDX-License-Identifier: Apache-2.0
//! The clients' native transport: `NativeClient` (blocking, the GIL released while it
//! waits) and `NativeMux` (many calls in flight, an I/O thread of its own, completions
//! announced through a socket an event loop watches), both on `ucall-client`.
//!
//! Requests are written here, params included (bytes and `.npy` arrays as base64 written
//! straight into the request); replies go back as bytes for the Python package to read.
//! Errors become the package's exceptions (`ucall.exceptions`).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use ucall_client::{
    AttachedRequest as Request, Client, Completion, Endpoint, Error, ErrorKind, Multiplexed, Protocol, Reply,
    RequestKind, Spans, TlsRefusal, UNSENT_AT_MOST,
};
use ucall_core::jsonrpc::section::Section;

use crate::convert::{attachment_bytes, write_json};

/// TLS as the Python clients' keywords say it (`tls=None`: plaintext). The files were
/// checked by the package already, which names them in its errors.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct TlsSettings {
    cacert: Option<String>,
    insecure: bool,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    server_hostname: Option<String>,
    resumption: bool,
}

#[allow(clippy::too_many_arguments)] // the constructors' keywords, passed on
fn endpoint(
    host: &str,
    port: u16,
    protocol: &str,
    path: &str,
    timeout: Option<f64>,
    tls: Option<TlsSettings>,
    headers: Vec<(String, String)>,
    max_reply_size: Option<usize>,
) -> PyResult<Endpoint> {
    let protocol = match protocol {
        "http" => Protocol::Http,
        "tcp" => Protocol::Tcp,
        "ws" => Protocol::WebSocket,
        other => return Err(PyValueError::new_err(format!("unknown protocol {other:?}"))),
    };
    let mut endpoint = Endpoint::new(host, port)
        .with_protocol(protocol)
        .with_path(path)
        .with_timeout(seconds(timeout)?)
        .with_max_reply_size(max_reply_size.unwrap_or(usize::MAX));
    for (name, value) in &headers {
        endpoint = endpoint
            .with_header(name, value)
            .map_err(|e| PyValueError::new_err(e.message().to_owned()))?;
    }
    if let Some(tls) = tls {
        endpoint = endpoint.tls();
        if let Some(cacert) = tls.cacert {
            endpoint = endpoint.cacert(cacert);
        }
        if tls.insecure {
            endpoint = endpoint.insecure();
        }
        if let Some(cert) = tls.tls_cert {
            endpoint = endpoint.client_cert(cert, tls.tls_key.map(Into::into));
        }
        if let Some(name) = tls.server_hostname {
            endpoint = endpoint.server_name(name);
        }
        if !tls.resumption {
            endpoint = endpoint.no_resumption();
        }
    }
    Ok(endpoint)
}

fn seconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    timeout
        .map(|t| Duration::try_from_secs_f64(t.max(0.0)))
        .transpose()
        .map_err(|e| PyValueError::new_err(format!("timeout: {e}")))
}

/// The exception of `ucall.exceptions` for a transport failure.
fn exception(py: Python<'_>, error: &Error) -> PyErr {
    if error.streams_its_result() {
        // Worded for Python (its `stream()`) where the Python client words it.
        let made = py
            .import("ucall.client")
            .and_then(|module| module.getattr("_streams_error"))
            .and_then(|words| words.call1((py.None(),)));
        return match made {
            Ok(instance) => PyErr::from_value(instance),
            Err(failure) => failure,
        };
    }
    let name = match error.kind() {
        ErrorKind::Connect => "ConnectError",
        ErrorKind::Timeout => "TimeoutError",
        ErrorKind::Transport => "TransportError",
        ErrorKind::Protocol => "ProtocolError",
        ErrorKind::Invalid => return PyValueError::new_err(error.message().to_owned()),
    };
    let message = match error.tls_refusal() {
        Some(TlsRefusal::ClientCertificate) => {
            error
                .message()
                .replacen("it trusts:", "it trusts (tls_cert=, tls_key=):", 1)
        }
        _ => error.message().to_owned(),
    };
    let made = py
        .import("ucall.exceptions")
        .and_then(|module| module.getattr(name))
        .and_then(|class| class.call1((message,)));
    let instance = match made {
        Ok(instance) => instance,
        Err(failure) => return failure,
    };
    if error.tls_refusal() == Some(TlsRefusal::ServerCertificate) {
        // As with Python's ssl: the verification error is the cause (what `ucall`'s
        // command line looks for to suggest --cacert), built from rustls's reason.
        if let Err(failure) = certificate_cause(py, &instance, error.message()) {
            return failure;
        }
    }
    PyErr::from_value(instance)
}

fn certificate_cause(py: Python<'_>, instance: &Bound<'_, PyAny>, message: &str) -> PyResult<()> {
    let why = message
        .split_once("TLS certificate of ")
        .map_or(message, |(_, rest)| rest.split_once(": ").map_or(rest, |(_, why)| why));
    let cause = py
        .import("ssl")?
        .getattr("SSLCertVerificationError")?
        .call1((1, format!("certificate verify failed: {why}")))?;
    cause.setattr("verify_message", why)?;
    cause.setattr("reason", "CERTIFICATE_VERIFY_FAILED")?;
    instance.setattr("__cause__", cause)
}

/// Serialize `obj` whole (a request object or a batch of them).
fn json_body(obj: &Bound<'_, PyAny>, encode: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    write_json(obj, encode, &mut out).map_err(|e| unserializable(&e.0))?;
    Ok(out)
}

fn unserializable(why: &str) -> PyErr {
    // As json.dumps: a value out of range is a ValueError, an unknown type a TypeError.
    if why.contains("no JSON form") {
        PyValueError::new_err(format!("cannot serialize {why}"))
    } else {
        PyTypeError::new_err(format!("cannot serialize {why}"))
    }
}

/// One call's request: `{"jsonrpc":"2.0","method":...,"params":...,"id":...}`, with the
/// client's `timeout` (seconds) as its deadline member `"timeout"` when it has one.
fn call_body(
    method: &str,
    params: Option<&Bound<'_, PyAny>>,
    id: Option<u64>,
    encode: Option<&Bound<'_, PyAny>>,
    timeout: Option<f64>,
) -> PyResult<Vec<u8>> {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    serde_json::to_writer(&mut out, method).map_err(|e| PyValueError::new_err(e.to_string()))?;
    if let Some(params) = params.filter(|p| !p.is_none()) {
        out.extend_from_slice(b",\"params\":");
        write_json(params, encode, &mut out).map_err(|e| unserializable(&e.0))?;
    }
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    }
    if let Some(seconds) = timeout.filter(|s| s.is_finite() && *s > 0.0) {
        out.extend_from_slice(b",\"timeout\":");
        out.extend_from_slice(ryu::Buffer::new().format_finite(seconds).as_bytes());
    }
    out.push(b'}');
    Ok(out)
}

/// A JSON text's request.
fn json_request(body: Vec<u8>) -> Request {
    (body, RequestKind::Json, Section::new())
}

/// A binary message's request (docs/wire.md): `text`, a request or batch whose binary
/// values are placeholders, and `attachments`, the buffers they name, laid out in order
/// each at the next multiple of 64 (as the package's `Attachments` places them), written
/// from their own memory and referenced until written.
fn binary_request(text: &Bound<'_, PyBytes>, attachments: &Bound<'_, PyList>) -> PyResult<Request> {
    let mut section = Section::new();
    for attachment in attachments.iter() {
        section.attach(attachment_bytes(&attachment)?);
    }
    let text = text.as_bytes().to_vec();
    let kind = RequestKind::Binary(text.len());
    Ok((text, kind, section))
}

/// A pipeline item's request: a `(method, params, id)` call, its params written here, a
/// `(text, attachments)` binary message ([`binary_request`]), or a request object (a dict,
/// serialized whole: a call with members of its own, such as a trace context's `_meta`).
fn item_request(item: &Bound<'_, PyAny>, encode: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<Request> {
    if item.is_instance_of::<PyDict>() {
        return json_body(item, Some(encode)).map(json_request);
    }
    let item = item.cast::<PyTuple>()?;
    if item.len() == 2 {
        return binary_request(item.get_item(0)?.cast()?, item.get_item(1)?.cast()?);
    }
    let (method, params, id): (String, Bound<'_, PyAny>, Option<u64>) = item.extract()?;
    call_body(&method, Some(&params), id, Some(encode), timeout).map(json_request)
}

/// `(status, body, close, json_length)`, the body read as [`any_reply_body`] does.
fn reply_tuple(py: Python<'_>, reply: Reply) -> PyResult<Bound<'_, PyTuple>> {
    let status = reply.status.into_pyobject(py)?.into_any();
    let close = pyo3::types::PyBool::new(py, reply.close).to_owned().into_any();
    let (body, json_length) = any_reply_body(py, reply)?;
    PyTuple::new(py, [status, body, close, json_length])
}

/// Replies from this size on are checked once and read when asked ([`ReplyBody`]).
const LARGE_REPLY: usize = 64 << 10;

/// A reply body as its Python value when it is JSON (a [`ReplyBody`] when large), else as
/// `bytes`.
fn reply_body(py: Python<'_>, body: Vec<u8>) -> PyResult<Bound<'_, PyAny>> {
    if body.len() >= LARGE_REPLY {
        let value = match Spans::check(&body) {
            Some(spans) => Bound::new(py, ReplyBody { body, spans })?.into_any(),
            None => PyBytes::new(py, &body).into_any(),
        };
        return Ok(value);
    }
    Ok(crate::convert::from_json(py, &body).unwrap_or_else(|_| PyBytes::new(py, &body).into_any()))
}

/// A large JSON reply, checked and kept as its text: `.numpy` and `.bytes` decode its
/// result's base64 straight from here (a 1.6 MB array's reply was otherwise copied into a
/// 2 MB `str` first, fresh pages and all), and `value()` builds the whole Python value
/// for everything else.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct ReplyBody {
    /// One JSON text (checked when made).
    body: Vec<u8>,
    /// Where its members are.
    spans: Spans,
}

impl ReplyBody {
    fn text(&self) -> &str {
        // SAFETY: `body` was checked to be UTF-8 when this was made, and never changes.
        unsafe { std::str::from_utf8_unchecked(&self.body) }
    }

    fn member(&self, span: Option<(usize, usize)>) -> Option<ucall_core::Param<'_>> {
        span.map(|(start, end)| ucall_core::Param::new(&self.text()[start..end]))
    }
}

impl Drop for ReplyBody {
    fn drop(&mut self) {
        // Its buffer serves the next large reply, in pages already mapped.
        ucall_client::reply_buffers::give(std::mem::take(&mut self.body));
    }
}

#[pymethods]
impl ReplyBody {
    /// The whole reply as its Python value (what a small reply is handed over as).
    fn value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::convert::to_python(py, self.text())
    }

    /// Whether this is a result (no error) for the call with this id.
    fn answers(&self, id: &Bound<'_, PyAny>) -> bool {
        let ours = self.member(self.spans.id).and_then(ucall_core::Param::as_i64);
        self.spans.result.is_some() && self.spans.error.is_none() && ours.is_some() && id.extract::<i64>().ok() == ours
    }

    /// The result decoded from base64 into `bytes` or a `bytearray` (SIMD, straight into
    /// the new object); None when it is not a base64 string, for `value()` to say why.
    #[pyo3(signature = (bytearray=false))]
    fn result_base64<'py>(&self, py: Python<'py>, bytearray: bool) -> Option<Bound<'py, PyAny>> {
        self.member(self.spans.result)?
            .with_base64(|text| crate::params::decode_base64(py, text, bytearray))
    }

    fn __len__(&self) -> usize {
        self.body.len()
    }
}

/// A binary reply's body (docs/wire.md): its JSON text, padding and attachment section in
/// the one buffer it was read into. numpy views it where it lies (`__array_interface__`:
/// the module is built on the limited API, which has no buffer protocol), so the arrays
/// the package makes of its attachments are not copies.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct BinaryBody {
    body: Vec<u8>,
    json_len: usize,
}

impl Drop for BinaryBody {
    fn drop(&mut self) {
        // Its buffer serves the next large reply, in pages already mapped.
        ucall_client::reply_buffers::give(std::mem::take(&mut self.body));
    }
}

#[pymethods]
impl BinaryBody {
    /// The JSON text, as `bytes`.
    fn text<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body[..self.json_len])
    }

    /// `length` bytes of the attachment section from `offset`, copied into a `bytes`
    /// (for a reader without numpy); ValueError past the section's end.
    fn section_bytes<'py>(&self, py: Python<'py>, offset: usize, length: usize) -> PyResult<Bound<'py, PyBytes>> {
        let start = ucall_core::wire::align(self.json_len).min(self.body.len());
        offset
            .checked_add(length)
            .and_then(|end| self.body[start..].get(offset..end))
            .map(|bytes| PyBytes::new(py, bytes))
            .ok_or_else(|| PyValueError::new_err("past the end of the attachment section"))
    }

    /// The whole body as numpy's array interface (version 3): read-only bytes.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let interface = pyo3::types::PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", (self.body.len(),))?;
        interface.set_item("typestr", "|u1")?;
        interface.set_item("data", (self.body.as_ptr() as usize, true))?;
        Ok(interface)
    }

    fn __len__(&self) -> usize {
        self.body.len()
    }
}

/// A reply's body for the package: a [`BinaryBody`] for a binary message, else as
/// [`reply_body`] gives it.
fn any_reply_body(py: Python<'_>, reply: Reply) -> PyResult<(Bound<'_, PyAny>, Bound<'_, PyAny>)> {
    match reply.binary {
        Some(json_len) => Ok((
            Bound::new(
                py,
                BinaryBody {
                    body: reply.body,
                    json_len,
                },
            )?
            .into_any(),
            json_len.into_pyobject(py)?.into_any(),
        )),
        None => Ok((reply_body(py, reply.body)?, py.None().into_bound(py))),
    }
}

/// What [`NativeClient::run`] sends: requests, their own header fields, and the Python
/// callable told of their upload.
type Exchange<'a> = (Vec<Request>, &'a [(String, String)], Option<Py<PyAny>>);

/// A blocking client's connection (HTTP, raw TCP or WebSocket, plain or over TLS).
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NativeClient {
    client: Mutex<Client>,
}

impl NativeClient {
    fn lock(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Send `requests`, then those `more` makes as the socket takes them, and read
    /// `replies` replies plus one per request made, each HTTP request with `headers` too,
    /// `progress(sent, total)` (a Python callable) told of the requests written
    /// ([`Client::exchange_reporting`]); the GIL is released meanwhile.
    fn run<'py>(
        &self,
        py: Python<'py>,
        (requests, headers, progress): Exchange<'_>,
        replies: usize,
        timeout: Option<f64>,
        more: &mut (dyn FnMut() -> Option<ucall_client::Result<Request>> + Send),
    ) -> PyResult<Bound<'py, PyList>> {
        let timeout = seconds(timeout)?;
        let headers = header_pairs(headers);
        let mut raised = None::<PyErr>;
        let mut report = |sent: u64, total: u64| {
            let Some(progress) = &progress else {
                return Ok(());
            };
            Python::attach(|py| progress.bind(py).call1((sent, total)).map(drop)).map_err(|error| {
                raised = Some(error);
                Error::new(ErrorKind::Invalid, "the progress callback raised")
            })
        };
        let result = py.detach(|| {
            let mut client = self.lock();
            client.set_timeout(timeout);
            client.exchange_reporting(requests, replies, &headers, &mut report, more)
        });
        if let Some(error) = raised {
            return Err(error);
        }
        let replies = result.map_err(|e| exception(py, &e))?;
        let list = PyList::empty(py);
        for reply in replies {
            list.append(reply_tuple(py, reply)?)?;
        }
        Ok(list)
    }
}

#[pymethods]
impl NativeClient {
    #[new]
    #[pyo3(signature = (host, port, protocol, path, timeout, tls=None, headers=Vec::new(), max_reply_size=None))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keywords
    fn new(
        host: &str,
        port: u16,
        protocol: &str,
        path: &str,
        timeout: Option<f64>,
        tls: Option<TlsSettings>,
        headers: Vec<(String, String)>,
        max_reply_size: Option<usize>,
    ) -> PyResult<Self> {
        let client = Client::new(endpoint(
            host,
            port,
            protocol,
            path,
            timeout,
            tls,
            headers,
            max_reply_size,
        )?)
        .map_err(|e| Python::attach(|py| exception(py, &e)))?;
        Ok(NativeClient {
            client: Mutex::new(client),
        })
    }

    /// Send `(method, params, id)` calls and `(text, attachments)` binary messages
    /// ([`NativeClient::send_binary`]) back to back, reading replies while writing;
    /// `[(status, body, close, json_length)]` in order, a binary reply's body a
    /// [`BinaryBody`] whose JSON text is `json_length` long (None for any other).
    ///
    /// Calls are encoded up front while they total at most [`UNSENT_AT_MOST`] bytes (a
    /// thousand small ones: all of them, with nothing sent if one fails), the rest one by
    /// one as the socket takes them, the GIL taken for each: a hundred 1.6 MB arrays are
    /// not encoded into 200 MB of fresh memory first. One of those that cannot be encoded
    /// ends the exchange there, once the replies to those sent are read. Over HTTP each
    /// request has `headers` `[(name, value)]` too (a trace context), besides the client's.
    #[pyo3(signature = (calls, encode, timeout, headers=Vec::new()))]
    fn calls<'py>(
        &self,
        py: Python<'py>,
        calls: &Bound<'py, PyList>,
        encode: &Bound<'py, PyAny>,
        timeout: Option<f64>,
        headers: Vec<(String, String)>,
    ) -> PyResult<Bound<'py, PyList>> {
        let (mut bodies, mut total) = (Vec::with_capacity(calls.len()), 0);
        while bodies.len() < calls.len() && total <= UNSENT_AT_MOST {
            let request = item_request(&calls.get_item(bodies.len())?, encode, timeout)?;
            total += request.0.len() + request.2.len();
            bodies.push(request);
        }
        let replies = bodies.len();
        if replies == calls.len() {
            return self.run(py, (bodies, &headers, None), replies, timeout, &mut || None);
        }
        let (rest, encode) = (calls.clone().unbind(), encode.clone().unbind());
        let (mut next, mut failed) = (replies, None::<PyErr>);
        let mut more = || {
            Python::attach(|py| {
                let (calls, encode) = (rest.bind(py), encode.bind(py));
                let call = calls.get_item(next).ok()?;
                next += 1;
                Some(item_request(&call, encode, timeout).map_err(|error| {
                    failed = Some(error);
                    Error::new(ErrorKind::Invalid, "a call could not be encoded")
                }))
            })
        };
        let result = self.run(py, (bodies, &headers, None), replies, timeout, &mut more);
        match failed {
            Some(error) => Err(error),
            None => result,
        }
    }

    /// Send request objects (each serialized whole) and read `replies` replies; over
    /// HTTP each request has `headers` `[(name, value)]` too, besides the client's;
    /// `progress(sent, total)` is called as the requests are written (each MiB, and at
    /// the end), and what it raises ends the exchange, the connection closed.
    #[pyo3(signature = (requests, replies, encode, timeout, headers=Vec::new(), progress=None))]
    #[allow(clippy::too_many_arguments)] // the Python method's keywords
    fn send<'py>(
        &self,
        py: Python<'py>,
        requests: &Bound<'py, PyList>,
        replies: usize,
        encode: &Bound<'py, PyAny>,
        timeout: Option<f64>,
        headers: Vec<(String, String)>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let bodies = requests
            .iter()
            .map(|request| json_body(&request, Some(encode)).map(json_request))
            .collect::<PyResult<Vec<_>>>()?;
        self.run(py, (bodies, &headers, progress), replies, timeout, &mut || None)
    }

    /// Send a binary message (docs/wire.md), `text` and the `attachments` its placeholders
    /// name ([`NativeMux::send_binary`] lays them out alike), and read `replies` replies;
    /// `headers` and `progress` as [`NativeClient::send`] takes them.
    #[pyo3(signature = (text, attachments, replies, timeout, headers=Vec::new(), progress=None))]
    #[allow(clippy::too_many_arguments)] // the Python method's keywords
    fn send_binary<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyBytes>,
        attachments: &Bound<'py, PyList>,
        replies: usize,
        timeout: Option<f64>,
        headers: Vec<(String, String)>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let request = binary_request(text, attachments)?;
        self.run(py, (vec![request], &headers, progress), replies, timeout, &mut || None)
    }

    /// Whether binary messages go on this WebSocket: the server selected the subprotocol
    /// at the upgrade (the connection is opened to learn it); false for HTTP and raw TCP.
    fn websocket_binary(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.lock().websocket_binary())
            .map_err(|e| exception(py, &e))
    }

    /// Close the connection; calls open a new one.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.lock().close());
    }

    /// What the open TLS connection agreed on, `(alpn, resumed, server certificate
    /// DER)`; None without TLS or a connection.
    fn tls_info<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(info) = self.lock().tls_info() else {
            return Ok(None);
        };
        let alpn = match &info.alpn {
            Some(alpn) => String::from_utf8_lossy(alpn).into_pyobject(py)?.into_any(),
            None => py.None().into_bound(py),
        };
        let cert = match &info.peer_certificate {
            Some(der) => PyBytes::new(py, der).into_any(),
            None => py.None().into_bound(py),
        };
        let resumed = pyo3::types::PyBool::new(py, info.resumed).to_owned().into_any();
        PyTuple::new(py, [alpn, resumed, cert]).map(Some)
    }
}

/// One connection with many calls in flight, for an event loop.
///
/// Completions are announced by a byte written to `notify_fd` (once per burst) and taken
/// with `take()`. The object owns `notify_fd` from then on and closes it once its I/O
/// thread has ended, so no wake-up can reach a descriptor the number was reused for.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NativeMux {
    mux: Mutex<Option<Multiplexed>>,
    notify_fd: i32,
}

impl Drop for NativeMux {
    fn drop(&mut self) {
        drop(self.mux.get_mut().unwrap_or_else(PoisonError::into_inner).take());
        // SAFETY: the descriptor was handed over at construction and is closed only here,
        // after the only thread that writes to it has been joined.
        unsafe { libc::close(self.notify_fd) };
    }
}

impl NativeMux {
    /// Submit a JSON text, with `headers` of its own over HTTP (ValueError for one
    /// refused, nothing submitted).
    fn submit(
        &self,
        py: Python<'_>,
        body: Vec<u8>,
        expects_reply: bool,
        headers: &[(String, String)],
    ) -> PyResult<u64> {
        let guard = self.mux.lock().unwrap_or_else(PoisonError::into_inner);
        let mux = guard
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the client is closed"))?;
        if headers.is_empty() {
            return Ok(mux.submit(body, expects_reply));
        }
        mux.submit_with_headers(body, expects_reply, &header_pairs(headers))
            .map_err(|e| exception(py, &e))
    }
}

/// `[(name, value)]` as `ucall-client` takes them.
fn header_pairs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
}

#[pymethods]
impl NativeMux {
    #[new]
    #[pyo3(signature = (host, port, protocol, path, timeout, notify_fd, tls=None, headers=Vec::new(), max_reply_size=None))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keywords
    fn new(
        host: &str,
        port: u16,
        protocol: &str,
        path: &str,
        timeout: Option<f64>,
        notify_fd: i32,
        tls: Option<TlsSettings>,
        headers: Vec<(String, String)>,
        max_reply_size: Option<usize>,
    ) -> PyResult<Self> {
        let endpoint = match endpoint(host, port, protocol, path, timeout, tls, headers, max_reply_size) {
            Ok(endpoint) => endpoint,
            Err(error) => {
                // SAFETY: the descriptor was handed over and no thread uses it.
                unsafe { libc::close(notify_fd) };
                return Err(error);
            }
        };
        let notify = move || {
            let byte = 1u8;
            // SAFETY: `notify_fd` belongs to the `NativeMux`, which closes it only after
            // joining this thread; the buffer is one readable byte. A full socket (EAGAIN)
            // already holds a wake-up, which is all that is needed.
            let _ = unsafe { libc::write(notify_fd, std::ptr::from_ref(&byte).cast(), 1) };
        };
        let mux = match Multiplexed::new(endpoint, notify) {
            Ok(mux) => mux,
            Err(error) => {
                // SAFETY: the descriptor was handed over and no thread uses it.
                unsafe { libc::close(notify_fd) };
                return Err(Python::attach(|py| exception(py, &error)));
            }
        };
        Ok(NativeMux {
            mux: Mutex::new(Some(mux)),
            notify_fd,
        })
    }

    /// Submit a call; its ticket. With `unsent_at_most`, None (and nothing encoded) while
    /// more bytes than that are waiting to be written: the caller holds the call back.
    #[pyo3(signature = (method, params, id, encode, timeout=None, unsent_at_most=None))]
    fn call(
        &self,
        method: &str,
        params: &Bound<'_, PyAny>,
        id: Option<u64>,
        encode: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        unsent_at_most: Option<usize>,
    ) -> PyResult<Option<u64>> {
        if let Some(limit) = unsent_at_most {
            let unsent = self
                .mux
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(Multiplexed::unsent);
            if unsent.is_some_and(|unsent| unsent > limit) {
                return Ok(None);
            }
        }
        let body = call_body(method, Some(params), id, Some(encode), timeout)?;
        self.submit(params.py(), body, id.is_some(), &[]).map(Some)
    }

    /// Submit a binary message (docs/wire.md): `text` and the `attachments` its
    /// placeholders name, as [`binary_request`] takes them. With `unsent_at_most`, None
    /// (nothing submitted) while more than that waits to be written. `plain`, the same
    /// request object with its values unpacked (serialized with `encode`), goes instead on
    /// a WebSocket whose server did not select the subprotocol; without it such a
    /// message fails with ProtocolError. Over HTTP, `headers` `[(name, value)]` go in this
    /// request's head only, besides the client's (ValueError for one refused, nothing sent).
    #[pyo3(signature = (text, attachments, expects_reply, unsent_at_most=None, plain=None, encode=None, headers=Vec::new()))]
    #[allow(clippy::too_many_arguments)] // the Python method's keywords
    fn send_binary(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyBytes>,
        attachments: &Bound<'_, PyList>,
        expects_reply: bool,
        unsent_at_most: Option<usize>,
        plain: Option<&Bound<'_, PyAny>>,
        encode: Option<&Bound<'_, PyAny>>,
        headers: Vec<(String, String)>,
    ) -> PyResult<Option<u64>> {
        let guard = self.mux.lock().unwrap_or_else(PoisonError::into_inner);
        let mux = guard
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the client is closed"))?;
        if unsent_at_most.is_some_and(|limit| mux.unsent() > limit) {
            return Ok(None);
        }
        let (text, _, section) = binary_request(text, attachments)?;
        if !headers.is_empty() {
            let submitted = mux.submit_binary_with_headers(text, section, expects_reply, &header_pairs(&headers));
            return submitted.map(Some).map_err(|e| exception(py, &e));
        }
        let plain = plain.map(|plain| json_body(plain, encode)).transpose()?;
        Ok(Some(mux.submit_binary_or(text, section, plain, expects_reply)))
    }

    /// Whether the last WebSocket opened carries binary messages (its server selected the
    /// subprotocol); None before one opened, and for HTTP and raw TCP.
    fn websocket_binary(&self) -> Option<bool> {
        self.mux
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(Multiplexed::websocket_binary)
    }

    /// Submit a request object (or batch), serialized whole; its ticket. Over HTTP,
    /// `headers` `[(name, value)]` go in this request's head only, besides the client's
    /// (ValueError for one refused, nothing sent).
    #[pyo3(signature = (request, expects_reply, encode, headers=Vec::new()))]
    fn send(
        &self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        expects_reply: bool,
        encode: &Bound<'_, PyAny>,
        headers: Vec<(String, String)>,
    ) -> PyResult<u64> {
        let body = json_body(request, Some(encode))?;
        self.submit(py, body, expects_reply, &headers)
    }

    /// Every completion so far: `[(ticket, status, body, close, error, json_length)]`,
    /// `error` an exception instance (and `body` None) when the request failed. `body` is
    /// the reply already parsed (a dict, a list...) when it is JSON; `bytes` otherwise (a
    /// 204's empty body, a proxy's HTML page), for the caller's error message; a
    /// `BinaryBody` for a binary message, whose JSON text is `json_length` long (None for
    /// any other reply). Parsing it here saves a copy of the body into a `bytes` and a
    /// call into Python per reply.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut done: Vec<Completion> = Vec::new();
        if let Some(mux) = self.mux.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            mux.take(&mut done);
        }
        let list = PyList::empty(py);
        for completion in done {
            let ticket = completion.ticket.into_pyobject(py)?.into_any();
            let item = match completion.result {
                Ok(reply) => {
                    let status = reply.status.into_pyobject(py)?.into_any();
                    let close = pyo3::types::PyBool::new(py, reply.close).to_owned().into_any();
                    let (body, json_length) = any_reply_body(py, reply)?;
                    PyTuple::new(py, [ticket, status, body, close, py.None().into_bound(py), json_length])?
                }
                Err(error) => PyTuple::new(
                    py,
                    [
                        ticket,
                        py.None().into_bound(py),
                        py.None().into_bound(py),
                        pyo3::types::PyBool::new(py, true).to_owned().into_any(),
                        exception(py, &error).into_value(py).into_bound(py).into_any(),
                        py.None().into_bound(py),
                    ],
                )?,
            };
            list.append(item)?;
        }
        Ok(list)
    }

    /// Drop the connection, failing what is in flight with a time-out (`timeout=True`)
    /// or a transport error, saying `message`.
    #[pyo3(signature = (message, timeout))]
    fn reset(&self, message: &str, timeout: bool) {
        if let Some(mux) = self.mux.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            mux.reset(Error::new(
                if timeout {
                    ErrorKind::Timeout
                } else {
                    ErrorKind::Transport
                },
                message,
            ));
        }
    }

    /// Requests submitted and not yet taken.
    fn in_flight(&self) -> usize {
        self.mux
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, Multiplexed::in_flight)
    }

    /// Stop the I/O thread and close the connection; what is in flight fails. (The
    /// wake-up descriptor is closed when the object goes.)
    fn close(&self, py: Python<'_>) {
        let mux = self.mux.lock().unwrap_or_else(PoisonError::into_inner).take();
        py.detach(move || drop(mux));
    }
}
