// SPDX-License-Identifier: Apache-2.0
//! The request log: one line per call (time, peer, transport, method, id, code, HTTP
//! status, duration, bytes in and out), as logfmt text or JSON lines, appended to a file
//! descriptor. Off by default: a call then costs one branch.
//!
//! Each worker formats its lines into a buffer of its own ([`Lines`]) and writes it once
//! per turn, in whole lines, with no lock: several workers, and several processes that
//! opened the same file with `O_APPEND`, never interleave inside a line. Lines name the
//! time the call's reply was ready, read from the monotonic clock the metrics use (no
//! second clock read per call) and turned into wall-clock time with an offset refreshed
//! once per turn.
//!
//! What a line counts (docs/operations.md, "Request log"):
//! - one line per call: each element of a batch, notifications included; a message
//!   refused whole (not JSON, an empty or too large batch) gets one line without a method;
//! - `bytes_in`: the call's JSON text (a batch element's own text); over HTTP a REST call's
//!   body (none for `GET`);
//! - `bytes_out`: the call's reply object (0 for a notification); a REST call's body;
//! - `duration_us`: from the handler's start to its result (a deferred call: to its
//!   completion); 0 when no handler ran (unknown method, invalid request);
//! - `status` (HTTP only): the status of the HTTP reply that carried the call;
//! - `trace_id`: the caller's W3C trace id, when it sent a valid trace context (the
//!   request's `"_meta"` member or the `traceparent` header field); absent otherwise.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;

use crate::date::monotonic_nanos;

/// How the lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// logfmt: `time=… peer=… transport=http method="sum" id=1 code=0 status=200 …`;
    /// strings are JSON strings, so a line stays one line whatever a client sends.
    #[default]
    Text,
    /// One JSON object per line (JSON lines), with the same keys.
    Json,
}

impl LogFormat {
    /// Parse `text` (or `human`, `logfmt`) or `json`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "text" | "human" | "logfmt" => Some(LogFormat::Text),
            "json" | "jsonl" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// Where the request log goes, and its format. Cheap to clone (shared).
#[derive(Clone)]
pub struct RequestLog(Arc<Writer>);

struct Writer {
    file: File,
    format: LogFormat,
    /// Most bytes one `write` may carry and still land whole: a pipe or socket only
    /// guarantees it up to `PIPE_BUF`; a regular file opened `O_APPEND` for any size.
    atomic: usize,
}

impl RequestLog {
    /// Append to the file at `path` (created if missing), opened `O_APPEND`, so that
    /// several processes may log to the same file.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(path: impl AsRef<Path>, format: LogFormat) -> io::Result<Self> {
        let file = OpenOptions::new().append(true).create(true).open(path)?;
        Ok(Self::to_file(file, format))
    }

    /// Write to `file` (open it with `O_APPEND` when others write to it too).
    #[must_use]
    pub fn to_file(file: File, format: LogFormat) -> Self {
        let atomic = match file.metadata() {
            Ok(meta) if meta.is_file() => usize::MAX,
            _ => libc::PIPE_BUF,
        };
        RequestLog(Arc::new(Writer { file, format, atomic }))
    }

    /// Write to a duplicate of the descriptor `fd`, which the caller keeps and may close.
    ///
    /// # Errors
    /// When `fd` cannot be duplicated (not an open descriptor).
    pub fn to_fd(fd: BorrowedFd<'_>, format: LogFormat) -> io::Result<Self> {
        Ok(Self::to_file(File::from(fd.try_clone_to_owned()?), format))
    }

    /// The lines' format.
    #[must_use]
    pub fn format(&self) -> LogFormat {
        self.0.format
    }

    /// Write `lines` (whole lines only), each `write` a run of whole lines that lands
    /// whole. A failed write drops the lines (a warning says so, at most once a second):
    /// the log must not stop the server.
    fn write(&self, lines: &[u8]) {
        let mut rest = lines;
        while !rest.is_empty() {
            let mut end = rest.len();
            if end > self.0.atomic {
                // The last line end within the limit; a longer line goes alone.
                end = memchr::memrchr(b'\n', &rest[..self.0.atomic])
                    .or_else(|| memchr::memchr(b'\n', rest))
                    .map_or(rest.len(), |i| i + 1);
            }
            if let Err(e) = (&self.0.file).write_all(&rest[..end]) {
                write_failed(&e);
                return;
            }
            rest = &rest[end..];
        }
    }
}

#[cold]
#[inline(never)]
fn write_failed(e: &io::Error) {
    static FAILED: crate::logs::Throttle = crate::logs::Throttle::new();
    crate::logs::throttled(
        &FAILED,
        log::Level::Warn,
        format_args!("request log lines dropped: {e}"),
    );
}

impl fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestLog")
            .field("fd", &self.0.file.as_raw_fd())
            .field("format", &self.0.format)
            .finish()
    }
}

/// How the HTTP reply that carries a call gets its status (over HTTP only; the rule is
/// `dispatch::http_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// Raw TCP or WebSocket: no status.
    Stream,
    /// A message of one call: 204 for a notification, else the status its error names, or 200.
    Single,
    /// A batch element: the batch's status (200, or 204 when all are notifications).
    Batch(u16),
    /// A REST-style call: 200, or its error's REST status.
    Rest,
}

/// One line's fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    /// When the reply was ready, on the monotonic clock (`date::monotonic_nanos`).
    pub(crate) ended: u64,
    pub(crate) peer: Option<SocketAddr>,
    /// `http`, `tcp` or `websocket`.
    pub(crate) transport: &'static str,
    /// `None` when the request named none (invalid, or not JSON).
    pub(crate) method: Option<&'a str>,
    /// The id as sent (raw JSON); `None`: no id is written (a notification, a REST call).
    pub(crate) id: Option<&'a str>,
    /// 0, or the JSON-RPC error code.
    pub(crate) code: i32,
    pub(crate) status: Option<u16>,
    pub(crate) nanos: u64,
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: usize,
    /// The caller's trace id, when it sent one.
    pub(crate) trace_id: Option<[u8; 16]>,
}

/// What a deferred call's line needs once its completion arrives, carried by its
/// [`crate::Deferred`] (made only when the log is on and the call defers).
#[derive(Debug)]
pub struct Pending {
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) transport: &'static str,
    pub(crate) method: Box<str>,
    pub(crate) id: Option<Box<str>>,
    pub(crate) carrier: Carrier,
    pub(crate) bytes_in: usize,
    pub(crate) trace_id: Option<[u8; 16]>,
}

/// What a call's line needs should its handler defer (see [`Pending`]), borrowed until then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seed<'a> {
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) transport: &'static str,
    pub(crate) method: &'a str,
    pub(crate) id: Option<&'a str>,
    pub(crate) carrier: Carrier,
    pub(crate) bytes_in: usize,
    pub(crate) trace_id: Option<[u8; 16]>,
}

impl<'a> Seed<'a> {
    pub(crate) fn keep(&self) -> Box<Pending> {
        Box::new(Pending {
            peer: self.peer,
            transport: self.transport,
            method: self.method.into(),
            id: self.id.map(Box::from),
            carrier: self.carrier,
            bytes_in: self.bytes_in,
            trace_id: self.trace_id,
        })
    }

    /// The same, borrowed from a deferred call's `pending` fields.
    pub(crate) fn of(pending: &'a Pending) -> Self {
        Seed {
            peer: pending.peer,
            transport: pending.transport,
            method: &pending.method,
            id: pending.id.as_deref(),
            carrier: pending.carrier,
            bytes_in: pending.bytes_in,
            trace_id: pending.trace_id,
        }
    }

    /// The line of a call that ended at `ended` after `nanos` with `code` (0: a result),
    /// carried by an HTTP reply of `status` (if HTTP), having replied `bytes_out` bytes.
    pub(crate) fn entry(&self, ended: u64, nanos: u64, code: i32, status: Option<u16>, bytes_out: usize) -> Entry<'_> {
        Entry {
            ended,
            peer: self.peer,
            transport: self.transport,
            method: Some(self.method),
            id: if self.carrier == Carrier::Rest { None } else { self.id },
            code,
            status,
            nanos,
            bytes_in: self.bytes_in,
            bytes_out,
            trace_id: self.trace_id,
        }
    }
}

/// Flush a worker's lines once they pass this size, without waiting for its turn to end.
const FLUSH_AT: usize = 64 << 10;

/// One worker's lines not yet written, and its clock.
#[derive(Default)]
pub struct Lines {
    buf: Vec<u8>,
    /// Wall-clock nanoseconds minus monotonic ones, refreshed when the lines are written.
    offset: Option<u64>,
    /// The second `prefix` formats (`YYYY-MM-DDTHH:MM:SS`), in Unix seconds.
    second: Option<i64>,
    prefix: [u8; 19],
    /// The last peer written, and its text: a connection's calls come in runs.
    peer: Option<(SocketAddr, Vec<u8>)>,
    /// Where a deferred call's reply is measured (see `dispatch::log_completed`).
    pub(crate) measure: Vec<u8>,
}

impl Lines {
    /// Append the line for `entry`, and write the lines out once they are many.
    pub(crate) fn push(&mut self, log: &RequestLog, entry: &Entry<'_>) {
        let json = log.format() == LogFormat::Json;
        let wall = self.wall(entry.ended);
        let buf = &mut self.buf;
        let mut itoa = itoa::Buffer::new();
        buf.extend_from_slice(if json { b"{\"time\":\"" } else { b"time=" });
        buf.extend_from_slice(&self.prefix);
        buf.push(b'.');
        let millis = u32::try_from(wall % 1_000_000_000 / 1_000_000).unwrap_or(0);
        buf.extend_from_slice(&[
            b'0' + (millis / 100) as u8,
            b'0' + (millis / 10 % 10) as u8,
            b'0' + (millis % 10) as u8,
            b'Z',
        ]);
        if json {
            buf.push(b'"');
        }
        key(buf, json, "peer");
        match entry.peer {
            Some(peer) => {
                if self.peer.as_ref().is_none_or(|(last, _)| *last != peer) {
                    let mut text = Vec::with_capacity(48);
                    // An address has no character that needs escaping.
                    let _ = write!(text, "{peer}");
                    self.peer = Some((peer, text));
                }
                let text = self.peer.as_ref().map_or(&[][..], |(_, text)| text);
                if json {
                    buf.push(b'"');
                }
                buf.extend_from_slice(text);
                if json {
                    buf.push(b'"');
                }
            }
            None => buf.extend_from_slice(b"null"),
        }
        key(buf, json, "transport");
        if json {
            buf.push(b'"');
        }
        buf.extend_from_slice(entry.transport.as_bytes());
        if json {
            buf.push(b'"');
        }
        key(buf, json, "method");
        match entry.method {
            Some(method) => {
                let _ = serde_json::to_writer(&mut *buf, method);
            }
            None => buf.extend_from_slice(b"null"),
        }
        if let Some(id) = entry.id {
            key(buf, json, "id");
            // Raw JSON as the parser validated it: a number, a string (escaped), or null.
            buf.extend_from_slice(id.as_bytes());
        }
        key(buf, json, "code");
        buf.extend_from_slice(itoa.format(entry.code).as_bytes());
        if let Some(status) = entry.status {
            key(buf, json, "status");
            buf.extend_from_slice(itoa.format(status).as_bytes());
        }
        key(buf, json, "duration_us");
        buf.extend_from_slice(itoa.format(entry.nanos / 1000).as_bytes());
        key(buf, json, "bytes_in");
        buf.extend_from_slice(itoa.format(entry.bytes_in).as_bytes());
        key(buf, json, "bytes_out");
        buf.extend_from_slice(itoa.format(entry.bytes_out).as_bytes());
        if let Some(trace_id) = entry.trace_id {
            key(buf, json, "trace_id");
            if json {
                buf.push(b'"');
            }
            buf.extend_from_slice(&crate::trace_context::hex_trace_id(&trace_id));
            if json {
                buf.push(b'"');
            }
        }
        if json {
            buf.push(b'}');
        }
        buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            self.flush(log);
        }
    }

    /// Write the lines out (a worker does at the end of each turn).
    pub(crate) fn flush(&mut self, log: &RequestLog) {
        if !self.buf.is_empty() {
            log.write(&self.buf);
            self.buf.clear();
        }
        // Refreshed here, once per turn with lines: the wall clock may be stepped.
        self.offset = None;
    }

    /// Wall-clock nanoseconds at the monotonic instant `mono`, with the second's prefix ready.
    fn wall(&mut self, mono: u64) -> u64 {
        let offset = *self.offset.get_or_insert_with(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            // Wrapping: the monotonic clock counts from boot, the wall clock from 1970,
            // and their sum below wraps back.
            now.wrapping_sub(monotonic_nanos())
        });
        let wall = mono.wrapping_add(offset);
        let second = i64::try_from(wall / 1_000_000_000).unwrap_or(0);
        if self.second != Some(second) {
            self.second = Some(second);
            format_second(second, &mut self.prefix);
        }
        wall
    }
}

impl fmt::Debug for Lines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lines").field("buffered", &self.buf.len()).finish()
    }
}

/// The separator and key of a field after the first.
fn key(buf: &mut Vec<u8>, json: bool, name: &str) {
    if json {
        buf.extend_from_slice(b",\"");
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b"\":");
    } else {
        buf.push(b' ');
        buf.extend_from_slice(name.as_bytes());
        buf.push(b'=');
    }
}

/// `YYYY-MM-DDTHH:MM:SS` (RFC 3339, UTC) of Unix second `second`.
fn format_second(second: i64, into: &mut [u8; 19]) {
    let time = time::OffsetDateTime::from_unix_timestamp(second).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let mut text = [0u8; 19];
    let mut cursor = &mut text[..];
    let _ = write!(
        cursor,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        time.year(),
        u8::from(time.month()),
        time.day(),
        time.hour(),
        time.minute(),
        time.second()
    );
    *into = text;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            ended: monotonic_nanos(),
            peer: Some("127.0.0.1:4000".parse().expect("an address")),
            transport: "http",
            method: Some("a \"b\"\n"),
            id: Some("\"x y\""),
            code: -32601,
            status: Some(200),
            nanos: 12_345,
            bytes_in: 10,
            bytes_out: 20,
            trace_id: None,
        }
    }

    fn lines_of(format: LogFormat, entries: &[Entry<'_>]) -> String {
        // A socket, as a pipe would be: writes of whole lines up to PIPE_BUF each.
        let (reader, writer) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        let log = RequestLog::to_file(File::from(std::os::fd::OwnedFd::from(writer)), format);
        let mut lines = Lines::default();
        for entry in entries {
            lines.push(&log, entry);
        }
        lines.flush(&log);
        drop(log);
        io::read_to_string(reader).expect("the lines")
    }

    #[test]
    fn formats_text_and_json_lines() {
        let text = lines_of(LogFormat::Text, &[entry()]);
        let line = text.strip_suffix('\n').expect("one line");
        assert!(!line.contains('\n'));
        let rest = line.split_once(' ').expect("fields").1;
        assert_eq!(
            rest,
            "peer=127.0.0.1:4000 transport=http method=\"a \\\"b\\\"\\n\" id=\"x y\" code=-32601 status=200 duration_us=12 bytes_in=10 bytes_out=20"
        );
        let json = lines_of(LogFormat::Json, &[entry()]);
        let value: serde_json::Value = serde_json::from_str(json.trim_end()).expect("JSON");
        assert_eq!(value["method"], "a \"b\"\n");
        assert_eq!(value["id"], "x y");
        assert_eq!(value["duration_us"], 12);
        let time = value["time"].as_str().expect("a time");
        let parsed = time::OffsetDateTime::parse(time, &time::format_description::well_known::Rfc3339);
        let age = time::OffsetDateTime::now_utc() - parsed.expect("RFC 3339");
        assert!(age.whole_seconds().abs() < 5, "{time} is not now");
        assert!(time.len() == 24 && time.ends_with('Z'), "{time}");
    }

    #[test]
    fn a_line_names_the_callers_trace_id() {
        let traced = Entry {
            trace_id: Some([0xab; 16]),
            ..entry()
        };
        let text = lines_of(LogFormat::Text, &[traced]);
        assert!(
            text.trim_end().ends_with(" trace_id=abababababababababababababababab"),
            "{text}"
        );
        let json = lines_of(LogFormat::Json, &[traced]);
        let value: serde_json::Value = serde_json::from_str(json.trim_end()).expect("JSON");
        assert_eq!(value["trace_id"], "abababababababababababababababab");
    }

    #[test]
    fn formats_the_second_as_rfc3339() {
        let mut prefix = [0u8; 19];
        format_second(784_111_777, &mut prefix);
        assert_eq!(&prefix, b"1994-11-06T08:49:37");
    }

    #[test]
    fn a_socket_gets_whole_lines_per_write() {
        let many: Vec<Entry<'_>> = (0..200).map(|_| entry()).collect();
        let text = lines_of(LogFormat::Json, &many);
        assert_eq!(text.lines().count(), 200);
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).expect("each line is JSON");
        }
    }
}
