// SPDX-License-Identifier: Apache-2.0
//! Server-side log records through the `log` facade, under the target `ucall`: the
//! start-up and shutdown lines (info, target `ucall::server`), limits hit (warn), failed
//! TLS sessions (info), malformed requests (debug). Nothing per served request.
//!
//! The host picks the logger (`env_logger`, `tracing-log`; the Python package forwards to
//! `logging`). Without one, or with the level off, a record costs one atomic load and
//! formats nothing. Records a client can provoke at will are throttled, so that a flood
//! of bad requests cannot flood the log.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The target of the records the core logs, but for the start-up and shutdown lines.
pub(crate) const TARGET: &str = "ucall";

/// The target of the start-up and shutdown lines: a front end that logs its own (Python's)
/// filters these out.
pub(crate) const SERVER_TARGET: &str = "ucall::server";

/// Requests refused at the transport (too large, malformed, too slow).
pub(crate) static REQUEST_REFUSED: Throttle = Throttle::new();

/// At most one record a second of one kind.
pub(crate) struct Throttle(AtomicU64);

impl Throttle {
    pub(crate) const fn new() -> Self {
        Throttle(AtomicU64::new(0))
    }

    /// Whether a record may go now (the first of this second).
    fn allows(&self) -> bool {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let last = self.0.load(Ordering::Relaxed);
        last != now
            && self
                .0
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Log `message` at `level` unless this throttle let one through this second.
#[cold]
#[inline(never)]
pub(crate) fn throttled(throttle: &Throttle, level: log::Level, message: fmt::Arguments<'_>) {
    if log::log_enabled!(target: TARGET, level) && throttle.allows() {
        log::log!(target: TARGET, level, "{message}");
    }
}

/// The level of an [`crate::EventLog`] event sent to the `log` facade.
pub(crate) fn event_level(event: &str) -> log::Level {
    match event {
        "accept failed" | "worker stopped" => log::Level::Error,
        _ => log::Level::Warn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_record_through_a_second() {
        let throttle = Throttle::new();
        assert!(throttle.allows());
        // Unless the second turned just now, the next is held back.
        let second = throttle.allows();
        let third = throttle.allows();
        assert!(!(second && third), "two more records in the same second");
    }
}
