// SPDX-License-Identifier: Apache-2.0
//! The core's `log` records into Python's `logging` (logger `ucall`), through `pyo3-log`.

use pyo3::Python;

/// Forgets the logging levels the bridge cached, so that a server started after
/// `logging` was configured (`ucall serve --log-level`) logs at the levels in force.
static LOG_LEVELS: std::sync::OnceLock<pyo3_log::ResetHandle> = std::sync::OnceLock::new();

/// Send the core's log records (target `ucall`: limits hit, failed TLS sessions, engine
/// events) to Python's `logging`, logger `ucall`. Other crates' records (rustls) from
/// warnings up. The core's start-up and shutdown lines (`ucall::server`) are left out:
/// the package logs its own, which say more.
pub(crate) fn forward(py: Python<'_>) {
    let logger = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels).map(|logger| {
        logger
            .filter(log::LevelFilter::Warn)
            .filter_target("ucall".to_owned(), log::LevelFilter::Debug)
            .filter_target("ucall::server".to_owned(), log::LevelFilter::Off)
    });
    // Another extension in the process may have installed a logger first; the core then
    // logs through that one.
    if let Ok(handle) = logger.map_err(drop).and_then(|logger| logger.install().map_err(drop)) {
        let _ = LOG_LEVELS.set(handle);
    }
}

/// See [`LOG_LEVELS`].
pub(crate) fn reload_levels() {
    if let Some(handle) = LOG_LEVELS.get() {
        handle.reset();
    }
}
