// SPDX-License-Identifier: Apache-2.0
//! Streamed replies: a call that sends items before its final reply.
//!
//! A handler calls [`crate::Reply::stream`] and gets a [`crate::Deferred`] that also
//! carries items: [`crate::Deferred::send_item`] from any thread, then one of the usual
//! completions for the final reply. This module holds what the layers below the router
//! share about streams: the window of items in flight ([`Credit`]) and the streams of a
//! connection that `ucall.cancel` can reach ([`Streams`]). On the wire (docs/streaming.md), each item is a JSON-RPC notification
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
//! [`StreamError::Gone`], and that the caller cancelled the call (a `ucall.cancel` call
//! on the same connection naming its id) from [`StreamError::Cancelled`], and stops.
//! Subscriptions in jsonrpsee's style are streamed calls: the call subscribes, its items
//! are the notifications, `ucall.cancel` unsubscribes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The method that cancels a streamed call on the same connection: params `{"id": ID}`
/// (the call's id as sent); its result says whether such a stream was under way.
pub const CANCEL_METHOD: &str = "ucall.cancel";

/// The error code of a streamed call's final reply after it was cancelled: `-32800`,
/// "Request cancelled" as the Language Server Protocol has it (outside JSON-RPC's
/// reserved range).
pub const CANCELLED: i32 = -32800;

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
    /// The caller cancelled the call (`ucall.cancel`): stop producing, and end the call
    /// (with `ucall_core::defer::cancelled()`, say).
    Cancelled,
    /// This reply was made with [`crate::Reply::defer`], not [`crate::Reply::stream`].
    NotStreamed,
    /// The item cannot be serialized, or is not one valid JSON text: why.
    Invalid(String),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Gone => f.write_str("the caller has gone"),
            StreamError::Cancelled => f.write_str("the caller cancelled the call"),
            StreamError::NotStreamed => f.write_str("the reply is not a stream"),
            StreamError::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StreamError {}

/// A stream's items on their way to its connection (see [`WINDOW`]), and whether its
/// caller cancelled it.
#[derive(Debug, Default)]
pub struct Credit {
    taken: Mutex<usize>,
    room: Condvar,
    /// The caller cancelled the call (`ucall.cancel`).
    cancelled: AtomicBool,
}

impl Credit {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Credit::default())
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take one credit: at once if there is room, else (with `wait`) once there is, as
    /// long as `present` says the caller is there. `Ok(false)`: no room, not waiting.
    pub(crate) fn take(&self, present: impl Fn() -> bool, wait: bool) -> Result<bool, StreamError> {
        let mut taken = self.lock();
        loop {
            self.check(&present)?;
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

    /// Wait up to `timeout` for room for one more item (none is taken); whether there is.
    pub(crate) fn wait_for_room(&self, present: impl Fn() -> bool, timeout: Duration) -> Result<bool, StreamError> {
        let until = Instant::now() + timeout;
        let mut taken = self.lock();
        loop {
            self.check(&present)?;
            if *taken < WINDOW {
                return Ok(true);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            taken = self
                .room
                .wait_timeout(taken, left.min(PRESENCE_CHECK))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Why no item may be sent any more, if so.
    pub(crate) fn check(&self, present: impl Fn() -> bool) -> Result<(), StreamError> {
        if self.is_cancelled() {
            Err(StreamError::Cancelled)
        } else if present() {
            Ok(())
        } else {
            Err(StreamError::Gone)
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
        let _taken = self.lock();
        self.room.notify_all();
    }

    pub(crate) fn has_room(&self) -> bool {
        *self.lock() < WINDOW
    }

    /// An item left the window: its producer may send another.
    pub(crate) fn give_back(&self) {
        let mut taken = self.lock();
        *taken = taken.saturating_sub(1);
        drop(taken);
        self.room.notify_one();
    }
}

/// The streamed calls of one connection under way, by id, for `ucall.cancel`.
#[derive(Debug, Default)]
pub struct Streams(Mutex<Vec<(Box<str>, Weak<Credit>)>>);

impl Streams {
    pub(crate) fn register(&self, id: &str, credit: &Arc<Credit>) {
        let mut streams = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        streams.retain(|(_, credit)| credit.strong_count() > 0);
        streams.push((id.into(), Arc::downgrade(credit)));
    }

    /// Cancel the streamed call `id` (raw JSON, as sent); whether one was under way.
    pub(crate) fn cancel(&self, id: &str) -> bool {
        let streams = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut found = false;
        for credit in streams
            .iter()
            .filter(|(sent, _)| &**sent == id)
            .filter_map(|(_, c)| c.upgrade())
        {
            credit.cancel();
            found = true;
        }
        found
    }
}
