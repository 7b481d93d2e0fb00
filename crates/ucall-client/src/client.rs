// SPDX-License-Identifier: Apache-2.0
//! The blocking client: calls, notifications, batches and pipelines on one kept-alive
//! connection, and a pool of them. The exchange under them all (the retry rule, a
//! request's own headers, upload progress) is in `client/exchange.rs`.

mod exchange;
mod stream;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::conn::Connection;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::framing::{Protocol, Reply, RequestKind};
use ucall_core::jsonrpc::section::Section;
use ucall_core::Bytes;

use crate::message::{write_attached_request, write_request, CheckedJson, Envelope, Params, Response, ToParams};
use exchange::Outgoing;
pub use exchange::{AttachedRequest, Progress, UNSENT_AT_MOST};
pub(crate) use stream::{is_item as is_stream_item, streams_its_result};
pub use stream::{Stream, StreamItem};

/// A blocking JSON-RPC client on one connection, opened on first use and again after the
/// server closed it.
///
/// ```no_run
/// use ucall_client::{Client, Endpoint, NoParams, Params};
/// let mut client = Client::new(Endpoint::parse("http://127.0.0.1:8545")?)?;
/// let three: i64 = client.call("sum", [1, 2])?.result()?;
/// let echoed = client.call("echo", Params::array().bytes(b"raw bytes"))?.result_bytes()?;
/// client.notify("log", ["hello"])?;
/// let many = client.pipeline((0..1000).map(|i| ("sum", [i, 1])))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Retries follow one rule, per exchange (a call, a notification, a batch, a pipeline):
/// its requests are sent again (once, on a new connection) only when none of them can have
/// run: a kept-alive connection failed before the first of them was written whole and
/// before any byte of a reply to them came, whatever the connection carried before. Once
/// a request is written whole, a lost reply is an error ([`ErrorKind::Transport`], "the
/// call may have run").
pub struct Client {
    conn: Connection,
    next_id: u64,
    timeout: Option<Duration>,
    binary: Binary,
}

/// What this client knows of the server's binary messages (docs/wire.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binary {
    /// Never sent ([`Endpoint::with_binary`]`(Some(false))`, or the server refused one).
    Off,
    /// Calls with attachments go as binary messages until the server takes or refuses one.
    Try,
    /// The server took one: calls with attachments go as binary messages.
    Taken,
    /// Every call goes as a binary message ([`Endpoint::with_binary`]`(Some(true))`).
    Always,
}

impl Binary {
    /// Where a client of `endpoint` starts.
    pub(crate) fn of(endpoint: &Endpoint) -> Self {
        match endpoint.binary() {
            None => Binary::Try,
            Some(true) => Binary::Always,
            Some(false) => Binary::Off,
        }
    }
}

impl Client {
    /// A client of `endpoint` (nothing is connected yet).
    ///
    /// # Errors
    /// The TLS configuration cannot be built (a missing CA file...).
    pub fn new(mut endpoint: Endpoint) -> Result<Self> {
        endpoint.prepare()?;
        let timeout = endpoint.timeout();
        let binary = Binary::of(&endpoint);
        Ok(Client {
            conn: Connection::new(endpoint)?,
            next_id: 0,
            timeout,
            binary,
        })
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        self.conn.endpoint()
    }

    /// Change the time-out of each call (`None` waits for ever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// A fresh request id.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Call `method` with `params` (anything `Serialize` as an array or object, a
    /// [`crate::Params`], or [`crate::NoParams`]).
    ///
    /// Binary messages (docs/wire.md), unless [`Endpoint::with_binary`] turned them off:
    /// a call whose params hold attachments ([`crate::Params::attachment`],
    /// [`crate::Params::ndarray`]) goes as a binary message, which accepts a binary reply
    /// (read with [`Response::result_attachment`], [`Response::result_array`]). A call
    /// without attachments stays a JSON text with a JSON reply, as before, unless
    /// `with_binary(Some(true))` makes every call accept binary replies. Negotiated, never
    /// forced on a server that reads JSON only:
    /// - HTTP: a call with attachments is sent with the content type
    ///   `application/vnd.ucall.binary` until the server refuses one it never took (`415`,
    ///   or `400` with a `-32700` error): the call is then sent again as plain JSON (the
    ///   refusal shows it did not run), and so is every later one.
    /// - WebSocket: the upgrade offers the subprotocol `ucall.binary.v1`; binary messages
    ///   go only where the server selected it.
    /// - Raw TCP: a call with attachments goes as a binary message; a `-32700` error with
    ///   id `null` in reply (what a JSON-only server answers to its first byte) closes the
    ///   connection and sends the call again as plain JSON, and so every later one.
    ///
    /// Where no binary message goes attachments travel in their plain JSON form: base64,
    /// and an array's `.npy` file in base64. Batches ([`Client::batch`]) and pipelines
    /// ([`Client::pipeline`]) negotiate alike. Attachments are written from where they lie
    /// (the iovecs of a vectored write), not copied into the request.
    ///
    /// A procedure that streams its result (docs/streaming.md) is read with
    /// [`Client::stream`]: called here, its first item comes in place of one reply, and
    /// the call fails with [`ErrorKind::Protocol`](crate::ErrorKind::Protocol) saying so;
    /// the connection is closed (the server then stops the stream) and the next call
    /// opens another.
    ///
    /// # Errors
    /// A transport failure; a JSON-RPC error reply is a `Response` (see
    /// [`Response::result`]).
    pub fn call(&mut self, method: &str, params: impl ToParams) -> Result<Response> {
        let id = self.next_id();
        let reply = self.exchange_negotiated(params.has_attachments(), true, 1, &mut |out, section| match section {
            Some(section) => write_attached_request(out, method, &params, Some(id), section),
            None => write_request(out, method, &params, Some(id)),
        })?;
        if stream::is_item(&reply) {
            // The rest of the stream would answer the next call: hang up instead.
            self.conn.close();
            return Err(stream::streams_its_result(Some(method)));
        }
        check(reply, id)
    }

    /// One request (a call, a notification, a batch) and its reply (`replies`: 0 or 1): a
    /// binary message where [`Client::sends_binary`] says so, its attachments written from
    /// where they lie, else a JSON text. `write` writes the JSON text, each attachment a
    /// placeholder kept in the section it is given, or without one in its plain JSON form.
    /// A JSON-only server's refusal of a first binary message (`probe`: the reply tells)
    /// sends the request again as JSON: the refusal shows it did not run.
    fn exchange_negotiated(
        &mut self,
        attached: bool,
        probe: bool,
        replies: usize,
        write: &mut WriteRequest<'_>,
    ) -> Result<Reply> {
        let mut got = self.exchange_negotiated_all(attached, probe, replies, write)?;
        if got.is_empty() {
            if replies == 0 {
                return Ok(Reply {
                    status: None,
                    body: Vec::new(),
                    close: false,
                    binary: None,
                });
            }
            return Err(Error::protocol("no reply"));
        }
        Ok(got.swap_remove(0))
    }

    /// As [`Client::exchange_negotiated`], with every message read meanwhile: a streamed
    /// reply's first messages may come in one read.
    fn exchange_negotiated_all(
        &mut self,
        attached: bool,
        probe: bool,
        replies: usize,
        write: &mut WriteRequest<'_>,
    ) -> Result<Vec<Reply>> {
        if self.sends_binary(attached, probe)? {
            let mut body = Vec::new();
            let mut attachments = Section::new();
            write(&mut body, Some(&mut attachments))?;
            let kind = RequestKind::Binary(body.len());
            let got = self.exchange_all(Outgoing::new(body, kind, attachments), replies)?;
            if self.binary != Binary::Try || !probe || self.conn.endpoint().protocol() == Protocol::WebSocket {
                return Ok(got);
            }
            if !got.first().is_some_and(refuses_binary) {
                self.binary = Binary::Taken;
                return Ok(got);
            }
            // A server that reads JSON only: its refusal shows the request did not run.
            // Over raw TCP its reading of the stream is out of step: a new connection.
            self.binary = Binary::Off;
            self.conn.close();
        }
        let mut body = Vec::with_capacity(64);
        write(&mut body, None)?;
        let kind = if self.binary == Binary::Always {
            RequestKind::AcceptsBinary
        } else {
            RequestKind::Json
        };
        self.exchange_all(Outgoing::new(body, kind, Section::new()), replies)
    }

    /// How a pipeline's calls go: `Some(true)` as binary messages where they have
    /// attachments (and, under `with_binary(Some(true))` off HTTP, every one); `Some(false)`
    /// as JSON texts; `None` not known yet: the first with attachments goes alone
    /// ([`Client::call`]) to learn it, as a notification waits for a call to learn it.
    fn pipelined_binary(&mut self) -> Result<Option<bool>> {
        if self.binary == Binary::Off {
            return Ok(Some(false));
        }
        if self.conn.endpoint().protocol() == Protocol::WebSocket {
            return self.sends_binary(true, true).map(Some); // known at the upgrade
        }
        Ok((self.binary != Binary::Try).then_some(true))
    }

    /// Whether the next request goes as a binary message: one with `attached` values, or
    /// (raw TCP, WebSocket) any call under `with_binary(Some(true))`; WebSocket only once
    /// the server selected the subprotocol, found by opening the connection. A
    /// notification (`probe` false) learns nothing from its reply: it goes as one only
    /// once the server has taken one.
    fn sends_binary(&mut self, attached: bool, probe: bool) -> Result<bool> {
        let wanted = match self.binary {
            Binary::Off => false,
            Binary::Try => attached && probe,
            Binary::Taken => attached,
            Binary::Always => attached || self.conn.endpoint().protocol() != Protocol::Http,
        };
        if !wanted {
            return Ok(false);
        }
        match self.conn.endpoint().protocol() {
            Protocol::Http | Protocol::Tcp => Ok(true),
            Protocol::WebSocket => self.websocket_binary(),
        }
    }

    /// Send a notification: no id, no reply (over HTTP the server's `204` is awaited).
    ///
    /// # Errors
    /// A transport failure.
    pub fn notify(&mut self, method: &str, params: impl ToParams) -> Result<()> {
        let replies = usize::from(self.conn.replies_to_notifications());
        self.exchange_negotiated(
            params.has_attachments(),
            false,
            replies,
            &mut |out, section| match section {
                Some(section) => write_attached_request(out, method, &params, None, section),
                None => write_request(out, method, &params, None),
            },
        )
        .map(drop)
    }

    /// Send `calls` back to back on the connection, reading replies while writing, and
    /// return their responses in order. Any number of calls of any size completes: the
    /// client never stops reading while it writes, and takes the next call from `calls`
    /// (writing its params) only when the socket has room for it.
    ///
    /// # Errors
    /// A transport failure, or a reply that answers another request. Params that cannot
    /// be written end the pipeline there: the calls before them were sent, and their
    /// replies read, but only the error is returned.
    pub fn pipeline<'m, P: ToParams>(
        &mut self,
        calls: impl IntoIterator<Item = (&'m str, P)>,
    ) -> Result<Vec<Response>> {
        let mut calls = calls.into_iter();
        let mut responses = Vec::new();
        let every = self.binary == Binary::Always && self.conn.endpoint().protocol() != Protocol::Http;
        let json_kind = if self.binary == Binary::Always {
            RequestKind::AcceptsBinary
        } else {
            RequestKind::Json
        };
        loop {
            let binary = self.pipelined_binary()?;
            // The first call with attachments while the server's answer to them is unknown.
            let mut probe = None;
            let (mut last_id, mut ids) = (self.next_id, Vec::new());
            let replies = {
                let mut more = || {
                    let (method, params) = calls.next()?;
                    let attached = params.has_attachments();
                    if attached && binary.is_none() {
                        probe = Some((method, params));
                        return None;
                    }
                    last_id += 1;
                    ids.push(last_id);
                    let mut body = Vec::with_capacity(64);
                    if binary == Some(true) && (attached || every) {
                        let mut attachments = Section::new();
                        let written =
                            write_attached_request(&mut body, method, &params, Some(last_id), &mut attachments);
                        let kind = RequestKind::Binary(body.len());
                        return Some(written.map(|()| Outgoing::new(body, kind, attachments)));
                    }
                    let written = write_request(&mut body, method, &params, Some(last_id));
                    Some(written.map(|()| Outgoing::new(body, json_kind, Section::new())))
                };
                self.exchange_framed(Vec::new(), 0, &mut |_, _| Ok(()), &mut more)
            };
            self.next_id = last_id;
            for (reply, id) in replies?.into_iter().zip(ids) {
                responses.push(check(reply, id)?);
            }
            match probe {
                Some((method, params)) => responses.push(self.call(method, params)?),
                None => return Ok(responses),
            }
        }
    }

    /// Send a batch (one request, one reply); responses come in call order, matched by id.
    /// Its calls' attachments go in one binary message (docs/wire.md §4: one section for
    /// all) where [`Client::call`] would send one, else in their plain JSON form.
    ///
    /// # Errors
    /// A transport failure, or a reply that is not the batch's.
    pub fn batch(&mut self, batch: &Batch) -> Result<Vec<Response>> {
        if batch.count == 0 {
            return Ok(Vec::new());
        }
        let calls = !batch.ids.is_empty();
        let replies = usize::from(calls || self.conn.replies_to_notifications());
        let reply = self.exchange_negotiated(batch.body.has_attachments(), calls, replies, &mut |out, section| {
            batch.body.write_to(out, section)
        })?;
        if !calls {
            return Ok(Vec::new());
        }
        split_batch(reply, &batch.ids)
    }

    /// Call with params already written as JSON text (`None`: no params).
    ///
    /// # Errors
    /// As [`Client::call`], and `params` that is not JSON.
    pub fn call_json(&mut self, method: &str, params: Option<&str>) -> Result<Response> {
        self.call(method, CheckedJson::new(params)?)
    }

    /// Notify with params already written as JSON text (`None`: no params).
    ///
    /// # Errors
    /// As [`Client::notify`], and `params` that is not JSON.
    pub fn notify_json(&mut self, method: &str, params: Option<&str>) -> Result<()> {
        self.notify(method, CheckedJson::new(params)?)
    }

    /// Whether binary messages go on this WebSocket (its server selected `ucall.binary.v1`),
    /// the connection opened to learn it; false for HTTP and raw TCP.
    ///
    /// # Errors
    /// The connection cannot be opened.
    pub fn websocket_binary(&mut self) -> Result<bool> {
        if self.conn.endpoint().protocol() != Protocol::WebSocket {
            return Ok(false);
        }
        if self.conn.is_open() && self.conn.closed_by_peer() {
            self.conn.close();
        }
        self.conn.open(self.timeout.map(|t| Instant::now() + t))?;
        Ok(self.conn.binary_negotiated())
    }

    /// What the open TLS connection agreed on (ALPN, resumption, the server's
    /// certificate); `None` without TLS or before the first call.
    #[must_use]
    pub fn tls_info(&self) -> Option<crate::TlsInfo> {
        self.conn.tls_info()
    }

    /// Close the connection (a WebSocket with its closing frame); calls re-open it.
    pub fn close(&mut self) {
        self.conn.close();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.conn.close();
    }
}

/// Whether `reply` is a JSON-only server's refusal of a binary message: HTTP `415`, or a
/// `-32700` error with no id (the first byte is not JSON).
pub(crate) fn refuses_binary(reply: &Reply) -> bool {
    if reply.status == Some(415) {
        return true;
    }
    if reply.binary.is_some() || !matches!(reply.status, None | Some(400)) {
        return false;
    }
    let Ok(envelope) = Envelope::parse(&reply.body) else {
        return false;
    };
    matches!(envelope.id, None | Some("null")) && envelope.rpc_error().is_some_and(|error| error.code == -32700)
}

/// A reply checked to answer request `id` (errors about the request itself carry no id).
fn check(reply: Reply, id: u64) -> Result<Response> {
    let response = Response::from_reply(reply);
    let envelope = match response.envelope() {
        Ok(envelope) => envelope,
        Err(error) => return Err(Error::protocol(error.message)),
    };
    let expected = itoa::Buffer::new().format(id).to_owned();
    match envelope.id {
        Some(got) if got == expected => Ok(response),
        None | Some("null") if envelope.error.is_some() => Ok(response),
        _ => Err(Error::protocol(format!(
            "a reply to another request: {}",
            String::from_utf8_lossy(&response.body()[..response.body().len().min(80)])
        ))),
    }
}

/// Responses for a batch's calls in request order; a batch refused whole answers each. A
/// binary reply's section is shared by the calls' responses, not copied for each.
fn split_batch(reply: Reply, ids: &[u64]) -> Result<Vec<Response>> {
    let status = reply.status;
    let whole = Bytes::from(reply.body);
    let (json, section) = match reply.binary {
        None => (whole, None),
        Some(json_len) => {
            let start = ucall_core::wire::align(json_len).min(whole.len());
            (whole.slice(..json_len), Some(whole.slice(start..)))
        }
    };
    let response = |body: Vec<u8>| match &section {
        Some(section) => Response::in_batch(status, body, section.clone()),
        None => Response::new(status, body),
    };
    let text = ucall_core::jsonrpc::as_text(&json).ok_or_else(|| Error::protocol("the reply is not UTF-8"))?;
    if text.trim_start().starts_with('{') {
        let whole = response(json.to_vec());
        return Ok(ids.iter().map(|_| whole.clone()).collect());
    }
    let mut by_id = std::collections::HashMap::new();
    for element in sonic_rs::to_array_iter(text) {
        let element = element.map_err(|_| Error::protocol("the batch reply is not JSON"))?;
        let body = element.as_raw_str().as_bytes().to_vec();
        let id = Envelope::parse(&body).ok().and_then(|e| e.id.map(str::to_owned));
        if let Some(id) = id {
            by_id.insert(id, body);
        }
    }
    Ok(ids
        .iter()
        .map(|id| {
            let key = itoa::Buffer::new().format(*id).to_owned();
            let body = by_id.remove(&key).unwrap_or_else(|| {
                format!(r#"{{"jsonrpc":"2.0","id":{key},"error":{{"code":-32603,"message":"no reply in the batch"}}}}"#)
                    .into_bytes()
            });
            response(body)
        })
        .collect())
}

/// Writes a request's JSON text: its attachments as placeholders kept in the section
/// given, or without one in their plain JSON form.
type WriteRequest<'a> = dyn FnMut(&mut Vec<u8>, Option<&mut Section>) -> Result<()> + 'a;

/// Calls and notifications collected for one round trip ([`Client::batch`]).
///
/// ```
/// use ucall_client::{Batch, NoParams};
/// let mut batch = Batch::new();
/// batch.call("sum", [1, 2]).unwrap();
/// batch.notify("log", NoParams).unwrap();
/// assert_eq!(batch.len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct Batch {
    /// `[` and the requests, their attachments kept apart: written as placeholders of one
    /// section, or in their plain JSON form, when the batch is sent.
    body: Params,
    ids: Vec<u64>,
    count: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            body: Params::array(),
            ids: Vec::new(),
            count: 0,
        }
    }
}

impl Batch {
    /// An empty batch.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a call; its response comes at this position among the calls. Its attachments
    /// ([`Params::attachment`], [`Params::ndarray`]) travel as those of a call do.
    ///
    /// # Errors
    /// Params with no JSON form.
    pub fn call(&mut self, method: &str, params: impl ToParams) -> Result<()> {
        let id = self.ids.len() as u64 + 1;
        self.body.push_request(self.count > 0, method, &params, Some(id))?;
        self.count += 1;
        self.ids.push(id);
        Ok(())
    }

    /// Add a notification (no response).
    ///
    /// # Errors
    /// Params with no JSON form.
    pub fn notify(&mut self, method: &str, params: impl ToParams) -> Result<()> {
        self.body.push_request(self.count > 0, method, &params, None)?;
        self.count += 1;
        Ok(())
    }

    /// Requests in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Several connections to one endpoint, shared by threads: each call takes a free one.
///
/// ```no_run
/// use ucall_client::{Endpoint, Pool};
/// let pool = Pool::new(Endpoint::parse("http://127.0.0.1:8545")?, 4)?;
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| pool.call("sum", [1, 2]));
///     }
/// });
/// # Ok::<(), ucall_client::Error>(())
/// ```
pub struct Pool {
    clients: Vec<Mutex<Client>>,
    next: AtomicUsize,
}

impl Pool {
    /// `size` connections (at least one), each opened on first use.
    ///
    /// # Errors
    /// As [`Client::new`].
    pub fn new(endpoint: Endpoint, size: usize) -> Result<Self> {
        let clients = (0..size.max(1))
            .map(|_| Client::new(endpoint.clone()).map(Mutex::new))
            .collect::<Result<_>>()?;
        Ok(Pool {
            clients,
            next: AtomicUsize::new(0),
        })
    }

    /// Run `work` with a free client (or, when all are busy, the next in turn).
    pub fn with<T>(&self, work: impl FnOnce(&mut Client) -> T) -> T {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.clients.len();
        for i in 0..n {
            if let Ok(mut client) = self.clients[(start + i) % n].try_lock() {
                return work(&mut client);
            }
        }
        let mut client = self.clients[start % n].lock().unwrap_or_else(PoisonError::into_inner);
        work(&mut client)
    }

    /// [`Client::call`] on a free connection.
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn call(&self, method: &str, params: impl ToParams) -> Result<Response> {
        self.with(|client| client.call(method, params))
    }
}
