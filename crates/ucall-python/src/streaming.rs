// SPDX-License-Identifier: Apache-2.0
//! Generator and async-generator handlers: their items become a streamed reply
//! (`ucall_core::streaming`, docs/streaming.md).
//!
//! A plain generator runs on the thread that ran the call: each item is serialized with
//! the GIL held and sent with it released (waiting there while the stream's window is
//! full). An async generator is driven by `ucall._streaming.drive` on the server's
//! asyncio loop, through a [`StreamReply`]. When the caller goes, the generator is closed
//! (`close()` / `aclose()`, so its `finally` blocks run) and the call ends. Items and the
//! final result carry their arrays and bytes as attachments where the caller takes them
//! (docs/wire.md), as a plain call's result does.

use std::sync::{Arc, Mutex, PoisonError};

use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use ucall_core::jsonrpc::section::Section;
use ucall_core::{Deferred, RpcError, StreamError};

/// What driving a stream needs of the server's Python hooks: the procedures' hooks
/// implement it, so that this module, below them, names nothing of theirs.
pub(crate) trait StreamHooks: Send + Sync {
    /// Serialize a value the handler yielded or returned into `out`, its binary values as
    /// attachments in `section` when given.
    fn serialize(
        &self,
        value: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
        section: Option<&mut Section>,
    ) -> Result<(), RpcError>;
    /// The JSON-RPC error for an exception `method`'s handler raised (logged as any).
    fn error(&self, py: Python<'_>, error: &PyErr, method: &str) -> RpcError;
    /// Whether the server runs an asyncio loop for async handlers.
    fn has_loop(&self) -> bool;
}

type Hooks = Arc<dyn StreamHooks>;

/// `value`, an item or the final result, as JSON and the attachments it names (none
/// unless the caller takes them: `binary`, [`Deferred::accepts_attachments`]).
fn serialize(hooks: &Hooks, binary: bool, value: &Bound<'_, PyAny>) -> Result<(Vec<u8>, Section), RpcError> {
    let mut json = Vec::with_capacity(32);
    let mut section = Section::new();
    hooks.serialize(value, &mut json, binary.then_some(&mut section))?;
    Ok((json, section))
}

/// Complete `reply` with `value` as its final result.
fn finish(hooks: &Hooks, reply: Deferred, value: &Bound<'_, PyAny>) {
    match serialize(hooks, reply.accepts_attachments(), value) {
        Ok((json, section)) => reply.complete_attached(json, section),
        Err(error) => reply.error(error),
    }
}

/// The final reply of a stream that ended because of `why`: cancelled by its caller
/// (`-32800`), or its caller has gone (nobody reads it).
fn stopped(why: &StreamError) -> RpcError {
    match why {
        StreamError::Cancelled => ucall_core::defer::cancelled(),
        _ => RpcError::internal("Internal error: the caller has gone"),
    }
}

/// Stream the items of `source`, what a streaming procedure returned, then complete
/// `reply`. For an async generator, returns `(coroutine, reply, None)` to start on the
/// asyncio loop instead (as an `async def` call's, with no deadline).
pub(crate) fn drive<'py>(
    py: Python<'py>,
    hooks: &Hooks,
    method: &Arc<str>,
    source: Bound<'py, PyAny>,
    reply: Deferred,
) -> Option<Bound<'py, PyAny>> {
    // An async generator, or an awaitable of one (async middleware around the handler).
    let is_async = source.hasattr("__anext__").unwrap_or(false) || source.hasattr("__await__").unwrap_or(false);
    if is_async && hooks.has_loop() {
        let stream = StreamReply {
            reply: Mutex::new(Some(reply)),
            hooks: Arc::clone(hooks),
            method: Arc::clone(method),
        };
        let started = py
            .import("ucall._streaming")
            .and_then(|module| module.getattr("drive"))
            .and_then(|drive| {
                let stream = Bound::new(py, stream)?;
                let coroutine = drive.call1((source, stream.clone()))?;
                // (coroutine, reply, seconds left): a stream has no deadline.
                PyTuple::new(py, [coroutine, stream.into_any(), py.None().into_bound(py)])
            });
        return match started {
            Ok(pair) => Some(pair.into_any()),
            Err(error) => {
                // The reply went with the `StreamReply`, which answers -32603 when dropped.
                error.write_unraisable(py, None);
                None
            }
        };
    }
    if !source.hasattr("__next__").unwrap_or(false) {
        // Not a generator after all: its value is the reply.
        finish(hooks, reply, &source);
        return None;
    }
    loop {
        match source.call_method0("__next__") {
            Ok(item) => {
                let (json, section) = match serialize(hooks, reply.accepts_attachments(), &item) {
                    Ok(serialized) => serialized,
                    Err(error) => {
                        close(&source, "close");
                        reply.error(error);
                        return None;
                    }
                };
                if let Err(why) = py.detach(|| reply.send_item_attached(json, section)) {
                    close(&source, "close");
                    reply.error(stopped(&why));
                    return None;
                }
            }
            Err(error) if error.is_instance_of::<PyStopIteration>(py) => {
                // `return value` in a generator: the final reply's result.
                let value = error
                    .value(py)
                    .getattr("value")
                    .unwrap_or_else(|_| py.None().into_bound(py));
                finish(hooks, reply, &value);
                return None;
            }
            Err(error) => {
                reply.error(hooks.error(py, &error, method));
                return None;
            }
        }
    }
}

/// Close a generator whose caller has gone, so that its `finally` blocks run; what it
/// raises then is reported as unraisable (nobody is there to receive it).
fn close(source: &Bound<'_, PyAny>, how: &str) {
    if let Err(error) = source.call_method0(how) {
        error.write_unraisable(source.py(), None);
    }
}

/// The streamed reply of an async generator, fed by `ucall._streaming.drive`.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct StreamReply {
    reply: Mutex<Option<Deferred>>,
    hooks: Hooks,
    method: Arc<str>,
}

impl StreamReply {
    fn with<T>(&self, use_reply: impl FnOnce(&Deferred) -> T) -> Option<T> {
        self.reply
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(use_reply)
    }
}

#[pymethods]
impl StreamReply {
    /// Send `item` if the stream has room now: `True` sent, `False` full (wait and offer
    /// again), `None` the caller has gone.
    fn offer(&self, item: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
        // Serialized without the reply's lock, as the handler's own code may run (`encode`).
        let binary = self.with(Deferred::accepts_attachments).unwrap_or(false);
        let (json, section) =
            serialize(&self.hooks, binary, item).map_err(|e| PyValueError::new_err(e.message().to_string()))?;
        Ok(match self.with(|reply| reply.try_send_item_attached(json, section)) {
            Some(Ok(sent)) => Some(sent),
            Some(Err(StreamError::Invalid(why))) => return Err(PyValueError::new_err(why)),
            Some(Err(_)) | None => None,
        })
    }

    /// Complete the reply from the finished driver task (a done-callback): its result is
    /// the final reply's; an exception or a cancellation ends the stream with an error.
    fn settle(&self, py: Python<'_>, task: &Bound<'_, PyAny>) {
        let Some(reply) = self.reply.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        if task
            .call_method0("cancelled")
            .and_then(|c| c.is_truthy())
            .unwrap_or(false)
        {
            let error = if reply.is_cancelled() {
                stopped(&StreamError::Cancelled)
            } else if reply.is_abandoned() {
                stopped(&StreamError::Gone)
            } else {
                RpcError::internal("Internal error: the call was cancelled")
            };
            reply.error(error);
            return;
        }
        match task.call_method0("exception") {
            Ok(exception) if !exception.is_none() => {
                reply.error(self.hooks.error(py, &PyErr::from_value(exception), &self.method));
            }
            Ok(_) => match task.call_method0("result") {
                Ok(result) => finish(&self.hooks, reply, &result),
                Err(e) => reply.error(self.hooks.error(py, &e, &self.method)),
            },
            Err(e) => reply.error(self.hooks.error(py, &e, &self.method)),
        }
    }
}
