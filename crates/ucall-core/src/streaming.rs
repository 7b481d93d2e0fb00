// SPDX-License-Identifier: Apache-2.0
//! Streamed replies: a call that sends items before its final reply.
//!
//! A handler calls [`crate::Reply::stream`] and gets a [`Deferred`] that also carries
//! items: [`Deferred::send_item`] from any thread, then one of the usual completions for
//! the final reply. On the wire (docs/streaming.md), each item is a JSON-RPC notification
//! tied to the call by its id,
//!
//! ```text
//! {"jsonrpc":"2.0","method":"ucall.stream","params":{"id":<the call's id>,"item":<item>}}
//! ```
//!
//! sent as a WebSocket text message, a raw TCP line, or over HTTP/1.1 a line of a chunked
//! `application/jsonl` body whose last line is the final reply.
//!
//! Back-pressure: a stream holds at most [`WINDOW`] items on their way to its connection;
//! an item leaves that count once it is in the connection's output while that output is
//! short (else once it has drained). A producer that sends more waits, so a slow reader
//! costs the server a bounded amount of memory. A producer learns that its caller has gone
//! (the connection ended, or an HTTP or WebSocket client stopped sending) from
//! [`StreamError::Gone`], and stops.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::defer::Deferred;
use crate::jsonrpc::{ErrorCode, RpcError};

pub use crate::jsonrpc::ITEM_METHOD;

/// Most items of one stream on their way to its connection at once.
pub const WINDOW: usize = 32;

/// Output (bytes queued on the connection) up to which a placed item gives its credit
/// back at once; beyond it, the credit waits until the output has drained below it.
pub const OUTPUT_ROOM: usize = 256 << 10;

/// How often a producer waiting for room checks whether its caller is still there.
const PRESENCE_CHECK: Duration = Duration::from_millis(20);

/// Why an item was not sent.
#[derive(Debug, Clone)]
pub enum StreamError {
    /// The caller has gone (disconnected or stopped sending): stop producing.
    Gone,
    /// This reply was made with [`crate::Reply::defer`], not [`crate::Reply::stream`].
    NotStreamed,
    /// The item cannot be serialized, or is not one valid JSON text.
    Invalid(RpcError),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Gone => f.write_str("the caller has gone"),
            StreamError::NotStreamed => f.write_str("the reply is not a stream"),
            StreamError::Invalid(error) => f.write_str(error.message()),
        }
    }
}

impl std::error::Error for StreamError {}

/// A stream's items on their way to its connection (see [`WINDOW`]).
#[derive(Debug, Default)]
pub struct Credit {
    taken: Mutex<usize>,
    room: Condvar,
}

impl Credit {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Credit::default())
    }

    /// Take one credit: at once if there is room, else (with `wait`) once there is, as
    /// long as `present` says the caller is there. `Ok(false)`: no room, not waiting.
    fn take(&self, present: impl Fn() -> bool, wait: bool) -> Result<bool, StreamError> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if !present() {
                return Err(StreamError::Gone);
            }
            if *taken < WINDOW {
                *taken += 1;
                return Ok(true);
            }
            if !wait {
                return Ok(false);
            }
            taken = self
                .room
                .wait_timeout(taken, PRESENCE_CHECK)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn has_room(&self) -> bool {
        *self.taken.lock().unwrap_or_else(PoisonError::into_inner) < WINDOW
    }

    /// An item left the window: its producer may send another.
    pub(crate) fn give_back(&self) {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        *taken = taken.saturating_sub(1);
        drop(taken);
        self.room.notify_one();
    }
}

/// The error a call that cannot stream is answered with (in a batch, as a notification,
/// over HTTP/1.0 or a REST-style URL).
pub(crate) fn not_streamable() -> RpcError {
    RpcError::new(
        ErrorCode::InvalidRequest.code(),
        "Invalid Request: this method streams its result; call it alone and with an id \
         (not in a batch, not as a notification, not over HTTP/1.0 or a REST-style URL)",
    )
}

/// Sending the items of a streamed reply (made with [`crate::Reply::stream`]).
impl Deferred {
    /// Whether this reply carries items before its final reply.
    #[must_use]
    pub fn is_streamed(&self) -> bool {
        self.stream.is_some()
    }

    /// Send `item`, serialized to JSON, waiting while [`WINDOW`] items are on their way.
    ///
    /// # Errors
    /// [`StreamError::Gone`] once the caller has gone (stop producing then);
    /// [`StreamError::Invalid`] when `item` cannot be serialized.
    pub fn send_item<T: Serialize + ?Sized>(&self, item: &T) -> Result<(), StreamError> {
        let json = serde_json::to_vec(item).map_err(|e| {
            StreamError::Invalid(RpcError::internal(format!(
                "Internal error: an item cannot be serialized: {e}"
            )))
        })?;
        self.send_item_trusted(json)
    }

    /// Send `json`, checked to be one valid JSON text, as the next item (see
    /// [`Deferred::send_item`]).
    ///
    /// # Errors
    /// As [`Deferred::send_item`].
    pub fn send_item_raw(&self, json: &str) -> Result<(), StreamError> {
        if serde_json::from_str::<serde::de::IgnoredAny>(json).is_err() {
            return Err(StreamError::Invalid(RpcError::internal(
                "Internal error: the procedure streamed invalid JSON",
            )));
        }
        self.send_item_trusted(json.trim().as_bytes().to_vec())
    }

    /// Send `json` as the next item without checking it: the caller guarantees one valid
    /// JSON text. Waits while [`WINDOW`] items are on their way.
    ///
    /// # Errors
    /// [`StreamError::Gone`] once the caller has gone; [`StreamError::NotStreamed`] for a
    /// reply made with [`crate::Reply::defer`].
    pub fn send_item_trusted(&self, json: Vec<u8>) -> Result<(), StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        credit.take(|| !self.is_abandoned(), true)?;
        self.push_item(credit, json);
        Ok(())
    }

    /// Send `json` (trusted, as [`Deferred::send_item_trusted`]) only if there is room
    /// now; `Ok(false)` (nothing sent) when [`WINDOW`] items are on their way. For
    /// producers that must not block (an event loop): they wait with
    /// [`Deferred::wait_for_room`] on a thread of their own, or try again later.
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn try_send_item_trusted(&self, json: Vec<u8>) -> Result<bool, StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        if !credit.take(|| !self.is_abandoned(), false)? {
            return Ok(false);
        }
        self.push_item(credit, json);
        Ok(true)
    }

    /// Whether an item could be sent now without waiting.
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn has_room(&self) -> Result<bool, StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        if self.is_abandoned() {
            return Err(StreamError::Gone);
        }
        Ok(credit.has_room())
    }

    /// Wait up to `timeout` for room for one more item; whether there is.
    ///
    /// # Errors
    /// As [`Deferred::send_item_trusted`].
    pub fn wait_for_room(&self, timeout: Duration) -> Result<bool, StreamError> {
        let credit = self.stream.as_ref().ok_or(StreamError::NotStreamed)?;
        let until = Instant::now() + timeout;
        let mut taken = credit.taken.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.is_abandoned() {
                return Err(StreamError::Gone);
            }
            if *taken < WINDOW {
                return Ok(true);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            taken = credit
                .room
                .wait_timeout(taken, left.min(PRESENCE_CHECK))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    pub(crate) fn make_streamed(&mut self) {
        self.stream = Some(Credit::new());
    }
}
