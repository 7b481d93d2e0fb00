// SPDX-License-Identifier: Apache-2.0
//! One call's own cancellation: its caller gave up this call alone while its connection
//! goes on (MCP's `notifications/cancelled`, which names one request). The call sees its
//! caller gone through [`crate::Context::caller`] and [`crate::Deferred::is_abandoned`], as
//! when its connection ends; the calls beside it on the connection do not.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Shared between whoever may cancel the call and the call; the first
/// [`Cancellation::cancel`] counts, later ones change nothing.
#[derive(Debug, Clone, Default)]
pub struct Cancellation(Arc<AtomicBool>);

impl Cancellation {
    /// The caller gave the call up: it sees its caller gone, and its reply is not sent.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the call was cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
