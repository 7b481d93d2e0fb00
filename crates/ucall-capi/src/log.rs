// SPDX-License-Identifier: Apache-2.0
//! Log lines to the caller's file descriptor (`logs_file_descriptor`, `logs_format`).
//!
//! Lifecycle events only (listening, serving, stopping, freed) and refused API calls. The
//! per-call lines of `log_requests` are the core's request log, written to a duplicate
//! of the same descriptor (`config.rs`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;

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
