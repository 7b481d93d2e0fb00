// SPDX-License-Identifier: Apache-2.0
//! Streamed results (docs/streaming.md): a call whose items come as `ucall.stream`
//! notifications before its final reply, read one at a time as they arrive.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ucall_core::jsonrpc::attachment::Attachment;
use ucall_core::jsonrpc::message::object_members;
use ucall_core::jsonrpc::section::Element;

use super::{check, Client};
use crate::conn::Step;
use crate::error::{Error, Result};
use crate::framing::{Protocol, Reply};
use crate::message::{write_attached_request, write_request, Response, RpcError, ToParams};

/// The method of a streamed reply's items.
const ITEM_METHOD: &str = "ucall.stream";
/// The method that asks the server to stop a stream.
const CANCEL_METHOD: &str = "ucall.cancel";
/// The longest wait for what ends an HTTP body after its final message.
const SETTLE: Duration = Duration::from_secs(2);

impl Client {
    /// Call `method`, which streams its result (docs/streaming.md): its items, read as
    /// they arrive, then its final reply ([`Stream::finish`]).
    ///
    /// ```no_run
    /// use ucall_client::{Client, Endpoint};
    /// let mut client = Client::new(Endpoint::parse("http://127.0.0.1:8545")?)?;
    /// let mut stream = client.stream("count", [3])?;
    /// for item in stream.by_ref() {
    ///     let n: u64 = item?.value()?; // 0, 1, 2, each as soon as it is sent
    ///     println!("{n}");
    /// }
    /// let done: String = stream.finish()?.result()?; // the final reply
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The stream reads from the client's connection, so the client makes no other call
    /// until it is over (the borrow says so). Over HTTP the items are the lines of a
    /// chunked `application/jsonl` body, each handed out as its line arrives; over raw
    /// TCP and WebSocket they are messages of their own. Params with attachments go as
    /// [`Client::call`] sends them, and then items with arrays or bytes come as binary
    /// messages ([`StreamItem::attachment`], [`StreamItem::array`]); over HTTP the
    /// request's `Accept` lists `application/vnd.ucall.binary-stream` for that.
    ///
    /// A procedure that does not stream answers with its reply alone: the stream has no
    /// items and [`Stream::finish`] gives the reply. The client's time-out bounds the
    /// wait for each message, not the whole stream.
    ///
    /// # Errors
    /// As [`Client::call`], for the request and the wait for the first message.
    pub fn stream(&mut self, method: &str, params: impl ToParams) -> Result<Stream<'_>> {
        let id = self.next_id();
        let got =
            self.exchange_negotiated_all(params.has_attachments(), true, 1, &mut |out, section| match section {
                Some(section) => write_attached_request(out, method, &params, Some(id), section),
                None => write_request(out, method, &params, Some(id)),
            })?;
        Ok(Stream {
            client: self,
            id,
            queue: got.into(),
            end: None,
            cancelled: false,
        })
    }
}

/// The items of a streamed call ([`Client::stream`]), each `Ok` as it arrives, then
/// `None`; the final reply is [`Stream::finish`]'s.
///
/// An error (a transport failure, the time-out, a message that belongs to no stream of
/// this call) is the last thing the iterator yields; the connection is then closed.
/// Dropped before its end, a stream closes the connection: the server stops the stream
/// when its caller goes, and the client's next call opens a new connection.
pub struct Stream<'c> {
    client: &'c mut Client,
    id: u64,
    /// Messages read and not yet handed out.
    queue: VecDeque<Reply>,
    /// How the stream ended, once it has: its final reply, or why there is none.
    end: Option<Result<Response>>,
    cancelled: bool,
}

/// One item of a streamed result: its JSON value, and for a binary item (docs/wire.md)
/// the attachments its placeholders name, read as a [`Response`]'s result is.
#[derive(Debug, Clone)]
pub struct StreamItem {
    /// The item's message, whose `params.item` reads as its result.
    message: Response,
}

impl StreamItem {
    /// The item's JSON text.
    ///
    /// # Panics
    /// Never: the item's text was checked when it was read.
    #[must_use]
    pub fn json(&self) -> &str {
        self.message.result_json().expect("invariant: an item's text was found")
    }

    /// The item decoded as `T`.
    ///
    /// # Errors
    /// The item is not a `T` (code -32603).
    pub fn value<T: serde::de::DeserializeOwned>(&self) -> std::result::Result<T, RpcError> {
        self.message.result()
    }

    /// The item as bytes: an attachment's, or a base64 string's decoded.
    ///
    /// # Errors
    /// The item is neither (code -32603).
    pub fn bytes(&self) -> std::result::Result<Vec<u8>, RpcError> {
        self.message.result_bytes()
    }

    /// The item as an attachment, where it lies in the message ([`Response::result_attachment`]).
    ///
    /// # Errors
    /// The item is not a placeholder of a binary item (code -32603).
    pub fn attachment(&self) -> std::result::Result<Attachment<'_>, RpcError> {
        self.message.result_attachment()
    }

    /// The attachment a placeholder at the JSON Pointer `pointer` in the item names
    /// ([`Response::result_attachment_at`]).
    ///
    /// # Errors
    /// Nothing at `pointer`, or not a placeholder of a binary item (code -32603).
    pub fn attachment_at(&self, pointer: &str) -> std::result::Result<Attachment<'_>, RpcError> {
        self.message.result_attachment_at(pointer)
    }

    /// The item as an array of `T` ([`Response::result_array`]): an attachment viewed
    /// where it lies, or the base64 `.npy` file a JSON item carries.
    ///
    /// # Errors
    /// The item is not an array of `T` (code -32603).
    pub fn array<T: Element>(&self) -> std::result::Result<crate::Array<'_, T>, RpcError> {
        self.message.result_array()
    }

    /// Whether the item came as a binary message, attachments after its JSON text.
    #[must_use]
    pub fn is_binary(&self) -> bool {
        self.message.is_binary()
    }

    /// The whole `ucall.stream` notification that carried the item.
    #[must_use]
    pub fn message(&self) -> &Response {
        &self.message
    }
}

/// What one message of a stream is.
enum Message {
    Item(StreamItem),
    Final(Response),
}

/// Whether `reply` is an item of a streamed result: a `ucall.stream` notification.
pub(crate) fn is_item(reply: &Reply) -> bool {
    let json = &reply.body[..reply.binary.unwrap_or(reply.body.len())];
    let Some(text) = ucall_core::jsonrpc::as_text(json) else {
        return false;
    };
    matches!(
        object_members(text, &["method", "id"]),
        Ok(Some([Some(method), None])) if method.trim() == "\"ucall.stream\""
    )
}

/// The error of [`Client::call`] on a procedure that streams its result.
pub(crate) fn streams_its_result(method: Option<&str>) -> Error {
    let name = method.map_or(String::new(), |method| format!("{method:?} "));
    Error::streamed(format!(
        "the procedure {name}streams its result (items came in place of one reply): read them \
         with Client::stream (docs/streaming.md); the connection was closed"
    ))
}

/// `reply` read as a message of the stream of call `id`: an item, or its final reply.
fn read_message(reply: Reply, id: u64) -> Result<Message> {
    let json = &reply.body[..reply.binary.unwrap_or(reply.body.len())];
    let text = ucall_core::jsonrpc::as_text(json).ok_or_else(|| Error::protocol("a streamed message is not UTF-8"))?;
    let shown = || String::from_utf8_lossy(&json[..json.len().min(80)]).into_owned();
    let members = object_members(text, &["method", "params"])
        .map_err(|_| Error::protocol(format!("a streamed message is not JSON: {}", shown())))?;
    let Some([Some(method), params]) = members else {
        return check(reply, id).map(Message::Final);
    };
    if method.trim() != format!("\"{ITEM_METHOD}\"") {
        return Err(Error::protocol(format!("a notification in a stream: {}", shown())));
    }
    let of = params.and_then(|params| object_members(params, &["id", "item"]).ok().flatten());
    let Some([Some(of), Some(item)]) = of else {
        return Err(Error::protocol(format!(
            "a stream item without its id and item: {}",
            shown()
        )));
    };
    if of.trim() != itoa::Buffer::new().format(id) {
        return Err(Error::protocol(format!(
            "an item of another call's stream: {}",
            shown()
        )));
    }
    let start = item.as_ptr() as usize - json.as_ptr() as usize;
    let span = (start, start + item.len());
    Ok(Message::Item(StreamItem {
        message: Response::with_result_at(reply, span),
    }))
}

impl Stream<'_> {
    /// The id of the streamed call.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Ask the server to stop the stream. Over raw TCP and WebSocket this sends
    /// `ucall.cancel` with the call's id: the items already on their way still come, then
    /// the final reply, usually the error `-32800` "Request cancelled". Over HTTP, which
    /// has no way to say it on the same connection, it hangs up: the stream ends at once
    /// and [`Stream::finish`] has no final reply to give. Nothing is done once the stream
    /// has ended.
    ///
    /// # Errors
    /// The request cannot be written (the stream then ends with that error).
    pub fn cancel(&mut self) -> Result<()> {
        if self.end.is_some() || self.cancelled {
            return Ok(());
        }
        self.cancelled = true;
        if self.client.conn.endpoint().protocol() == Protocol::Http {
            self.client.conn.close();
            self.end = Some(Err(Error::transport(
                "the stream was cancelled: over HTTP by closing its connection, so no final reply came",
            )));
            return Ok(());
        }
        // `{"jsonrpc":"2.0","method":"ucall.cancel","params":{"id":<id>}}`, a notification.
        let mut body = Vec::with_capacity(64);
        body.extend_from_slice(br#"{"jsonrpc":"2.0","method":""#);
        body.extend_from_slice(CANCEL_METHOD.as_bytes());
        body.extend_from_slice(br#"","params":{"id":"#);
        body.extend_from_slice(itoa::Buffer::new().format(self.id).as_bytes());
        body.extend_from_slice(b"}}");
        self.client.conn.queue(body);
        let deadline = self.client.timeout.map(|t| Instant::now() + t);
        while self.client.conn.pending() > 0 {
            let queue = &mut self.queue;
            match self.client.conn.step(deadline, &mut |reply| queue.push_back(reply)) {
                Ok(Step::TimedOut) => {
                    return Err(self.fail(Error::timeout("cannot send ucall.cancel within the time-out")))
                }
                Ok(_) => {}
                Err(error) => return Err(self.fail(error)),
            }
        }
        Ok(())
    }

    /// Whether [`Stream::cancel`] was called.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The final reply, once the items left are read and dropped: as [`Client::call`]
    /// gives it, a JSON-RPC error reply (one after items, or `-32800` after
    /// [`Stream::cancel`]) as a [`Response`] whose [`Response::result`] is the error.
    ///
    /// # Errors
    /// What ended the stream without a final reply: a transport failure, the time-out, a
    /// message of no stream of this call, or a cancel over HTTP.
    pub fn finish(mut self) -> Result<Response> {
        for next in self.by_ref() {
            next?;
        }
        self.end
            .take()
            .unwrap_or_else(|| Err(Error::protocol("the stream ended without a final reply")))
    }

    /// End the stream with `error`: the connection is closed (it is out of step).
    fn fail(&mut self, error: Error) -> Error {
        self.client.conn.close();
        self.queue.clear();
        self.end = Some(Err(error.clone()));
        error
    }

    /// Read until a message is queued (or the stream fails).
    fn read_more(&mut self) -> Result<()> {
        let deadline = self.client.timeout.map(|t| Instant::now() + t);
        while self.queue.is_empty() {
            if let Some(why) = self.client.conn.ended() {
                return Err(Error::transport(format!(
                    "the server closed the connection during a stream{why}"
                )));
            }
            let queue = &mut self.queue;
            if self.client.conn.step(deadline, &mut |reply| queue.push_back(reply))? == Step::TimedOut {
                let where_ = self.client.conn.endpoint().authority();
                let within = self.client.timeout.map_or(0.0, |t| t.as_secs_f64());
                return Err(Error::timeout(format!(
                    "no streamed message from {where_} within {within} s"
                )));
            }
        }
        Ok(())
    }

    /// After the final reply: an HTTP body's last chunk read too, so that the connection
    /// is at a reply's start for the next call (else it is closed).
    fn settle(&mut self, close: bool) {
        // The last chunk follows the last message at once: a short wait, whatever the time-out.
        let wait = self.client.timeout.map_or(SETTLE, |t| t.min(SETTLE));
        let deadline = Some(Instant::now() + wait);
        let mut stray = false;
        while !close && !stray && self.client.conn.in_reply() && self.client.conn.ended().is_none() {
            match self.client.conn.step(deadline, &mut |_| stray = true) {
                Ok(Step::TimedOut) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if close || stray || self.client.conn.in_reply() || self.client.conn.ended().is_some() || !self.queue.is_empty()
        {
            self.client.conn.close();
            self.queue.clear();
        }
    }
}

impl Iterator for Stream<'_> {
    type Item = Result<StreamItem>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.end.is_some() {
            return None;
        }
        if self.queue.is_empty() {
            if let Err(error) = self.read_more() {
                return Some(Err(self.fail(error)));
            }
        }
        let reply = self.queue.pop_front()?;
        let close = reply.close;
        match read_message(reply, self.id) {
            Ok(Message::Item(item)) => Some(Ok(item)),
            Ok(Message::Final(response)) => {
                self.end = Some(Ok(response));
                self.settle(close);
                None
            }
            Err(error) => Some(Err(self.fail(error))),
        }
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        if self.end.is_none() {
            // The rest of the stream would answer the next call: hang up instead, and the
            // server stops the stream.
            self.client.conn.close();
        }
    }
}
