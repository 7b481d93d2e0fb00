// SPDX-License-Identifier: Apache-2.0
//! Log lines to the caller's file descriptor (`logs_file_descriptor`, `logs_format`).
//!
//! Lifecycle events (listening, serving, stopping, freed), refused API calls, and the
//! core's own records ([`CoreRecords`]: limits hit, TLS failures, a batch procedure that
//! failed). The per-call lines of `log_requests` are the core's request log, written to a
//! duplicate of the same descriptor (`config.rs`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};

/// How the server logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines of text.
    Human,
    /// One JSON object per line.
    Json,
}

/// Where and how to log; `None` logs nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Logger(Option<(i32, LogFormat)>);

/// The logs of the servers alive that get the core's records, by registration.
static FORWARDED_TO: Mutex<Vec<(u64, Logger)>> = Mutex::new(Vec::new());

/// The core's records through the `log` facade (target `ucall`): a C host has no logger of
/// its own, so without this they went nowhere. Each record at info level or above goes to
/// the log of every server alive as the event `log`, with its `level` and `message`
/// (`ucall: log level=warn message=batch refused: ...`). Records are rare (limits hit and
/// TLS failures are at most one a second each), so a lock per record costs nothing a
/// call pays.
struct Forward;

static FORWARD: Forward = Forward;

impl log::Log for Forward {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        // Not the core's start-up and shutdown lines (target `ucall::server`): the library
        // logs its own (`listening`, `serving`, `freed`).
        metadata.level() <= log::Level::Info && metadata.target() == "ucall"
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let (level, message) = (record.level().as_str().to_ascii_lowercase(), record.args().to_string());
        for (_, logger) in FORWARDED_TO.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            logger.event("log", &[("level", &level), ("message", &message)]);
        }
    }

    fn flush(&self) {}
}

/// One server's log among those that get the core's records, until dropped (with the
/// server). The forwarder is installed by the first server with a log, unless the process
/// has a `log` logger already (a Rust program linking the C library keeps its own).
pub(crate) struct CoreRecords(u64);

impl CoreRecords {
    /// Forward the core's records to `logger`; `None` when it logs nowhere.
    pub(crate) fn to(logger: Logger) -> Option<Self> {
        logger.0?;
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            if log::set_logger(&FORWARD).is_ok() {
                log::set_max_level(log::LevelFilter::Info);
            }
        });
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        FORWARDED_TO
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, logger));
        Some(CoreRecords(id))
    }
}

impl Drop for CoreRecords {
    fn drop(&mut self) {
        let mut forwarded = FORWARDED_TO.lock().unwrap_or_else(PoisonError::into_inner);
        forwarded.retain(|(id, _)| *id != self.0);
    }
}

impl Logger {
    pub(crate) fn new(target: Option<(i32, LogFormat)>) -> Self {
        Logger(target)
    }

    /// Write one event with its fields (`(name, value)`; values are text, or JSON numbers
    /// when they parse as integers).
    pub(crate) fn event(&self, event: &str, fields: &[(&str, &str)]) {
        let Some((fd, format)) = self.0 else { return };
        let mut line = String::new();
        match format {
            LogFormat::Human => {
                let _ = write!(line, "ucall: {event}");
                for (name, value) in fields {
                    let _ = write!(line, " {name}={value}");
                }
            }
            LogFormat::Json => {
                line.push_str("{\"event\":");
                push_json_string(&mut line, event);
                for (name, value) in fields {
                    line.push(',');
                    push_json_string(&mut line, name);
                    line.push(':');
                    if value.parse::<i64>().is_ok() {
                        line.push_str(value);
                    } else {
                        push_json_string(&mut line, value);
                    }
                }
                line.push('}');
            }
        }
        line.push('\n');
        // SAFETY: the descriptor is the caller's (config.logs_file_descriptor, positive);
        // `ManuallyDrop` keeps us from ever closing it. An invalid descriptor only makes
        // the write fail, which is ignored: logging never fails a server.
        let mut file = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
        let _ = file.write_all(line.as_bytes());
    }
}

fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
