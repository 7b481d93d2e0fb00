// SPDX-License-Identifier: Apache-2.0
//! The transport under every [`Client`] call: requests written back to back and their
//! replies read under the retry rule, with a request's own HTTP header lines and its
//! upload's progress (the Python clients' `call_with_headers`, traced calls and
//! `call_with_progress` come in here).

use std::sync::Arc;
use std::time::Instant;

use ucall_core::jsonrpc::section::Section;

use super::Client;
use crate::conn::Step;
use crate::error::{Error, ErrorKind, Result};
use crate::framing::{Reply, RequestKind};

/// A request for [`Client::exchange_attached`]: its body, framing, and attachments.
pub type AttachedRequest = (Vec<u8>, RequestKind, Section);

/// While more than this many request bytes wait to be written, a pipeline makes no more
/// ([`Client::exchange_with`]) and the Python `AsyncClient` holds its next call back
/// ([`crate::Multiplexed::unsent`]). Measured: docs/design.md, "The clients' large requests".
pub const UNSENT_AT_MOST: usize = 2 << 20;

impl Client {
    /// One request, and its reply (`replies`: 0 or 1) with any message read with it (the
    /// next items of a streamed reply).
    pub(super) fn exchange_all(&mut self, request: Outgoing, replies: usize) -> Result<Vec<Reply>> {
        self.exchange_framed(vec![request], replies, &mut |_, _| Ok(()), &mut || None)
    }

    /// Send request bodies (JSON texts) and collect `replies` replies, under the retry
    /// rule. The transport under every other method.
    ///
    /// # Errors
    /// Connect, time-out, transport and protocol failures.
    pub fn exchange(&mut self, bodies: Vec<Vec<u8>>, replies: usize) -> Result<Vec<Reply>> {
        self.exchange_with(bodies, replies, &mut || None)
    }

    /// As [`Client::exchange`], then the bodies `more` makes, one each time fewer than
    /// [`UNSENT_AT_MOST`] bytes wait to be written, each getting one reply: a pipeline of
    /// a hundred 2 MB requests is encoded as the socket takes it, into buffers just
    /// written, not into 200 MB of fresh memory first. When `more` fails, nothing more is
    /// sent, the replies to what was are read (the connection stays in step), and its
    /// error is returned.
    ///
    /// # Errors
    /// As [`Client::exchange`], and the first error `more` returns.
    pub fn exchange_with(
        &mut self,
        bodies: Vec<Vec<u8>>,
        replies: usize,
        more: &mut dyn FnMut() -> Option<Result<Vec<u8>>>,
    ) -> Result<Vec<Reply>> {
        let bodies = bodies
            .into_iter()
            .map(|body| (body, RequestKind::Json, Section::new()))
            .collect();
        let mut more = || more().map(|made| made.map(|body| (body, RequestKind::Json, Section::new())));
        self.exchange_attached(bodies, replies, &mut more)
    }

    /// As [`Client::exchange`], each body framed as its kind says: a JSON text, or the body
    /// of a binary message made by [`crate::write_binary_request`] (docs/wire.md).
    /// The replies are as framed: a binary one's body holds its attachments
    /// ([`Reply::binary`], read with [`Response::from_reply`]).
    ///
    /// # Errors
    /// As [`Client::exchange`].
    pub fn exchange_as(&mut self, bodies: Vec<(Vec<u8>, RequestKind)>, replies: usize) -> Result<Vec<Reply>> {
        let bodies = bodies
            .into_iter()
            .map(|(body, kind)| (body, kind, Section::new()))
            .collect();
        self.exchange_attached(bodies, replies, &mut || None)
    }

    /// As [`Client::exchange_with`], each request an [`AttachedRequest`]: a binary message's
    /// attachments follow its JSON text aligned (docs/wire.md §1), written from where they
    /// lie. For front ends that build their own placeholders (the Python clients).
    ///
    /// # Errors
    /// As [`Client::exchange_with`].
    pub fn exchange_attached(
        &mut self,
        bodies: Vec<AttachedRequest>,
        replies: usize,
        more: &mut dyn FnMut() -> Option<Result<AttachedRequest>>,
    ) -> Result<Vec<Reply>> {
        self.exchange_reporting(bodies, replies, &[], &mut |_, _| Ok(()), more)
    }

    /// As [`Client::exchange_attached`], each HTTP request with `headers` too, besides the
    /// endpoint's: a call's own (a trace context, an idempotency key).
    ///
    /// # Errors
    /// As [`Client::exchange_attached`]; nothing sent and [`ErrorKind::Invalid`] for
    /// headers off HTTP or a header [`Endpoint::with_header`] refuses.
    pub fn exchange_with_headers(
        &mut self,
        bodies: Vec<AttachedRequest>,
        replies: usize,
        headers: &[(&str, &str)],
        more: &mut dyn FnMut() -> Option<Result<AttachedRequest>>,
    ) -> Result<Vec<Reply>> {
        self.exchange_reporting(bodies, replies, headers, &mut |_, _| Ok(()), more)
    }

    /// As [`Client::exchange_with_headers`], `progress(sent, total)` told of the requests'
    /// bytes written (HTTP heads included) at each MiB and at the end; its error ends the
    /// exchange there, the connection closed (a request may be half written).
    ///
    /// # Errors
    /// As [`Client::exchange_with_headers`], and the error `progress` returns.
    pub fn exchange_reporting(
        &mut self,
        bodies: Vec<AttachedRequest>,
        replies: usize,
        headers: &[(&str, &str)],
        progress: &mut Progress<'_>,
        more: &mut dyn FnMut() -> Option<Result<AttachedRequest>>,
    ) -> Result<Vec<Reply>> {
        let lines = crate::endpoint::request_lines(self.conn.endpoint().protocol(), headers)?;
        self.conn.set_request_lines(&lines);
        let bodies = bodies
            .into_iter()
            .map(|(body, kind, attachments)| Outgoing::new(body, kind, attachments))
            .collect();
        let mut more =
            || more().map(|made| made.map(|(body, kind, attachments)| Outgoing::new(body, kind, attachments)));
        let result = self.exchange_framed(bodies, replies, progress, &mut more);
        self.conn.set_request_lines("");
        result
    }

    /// As [`Client::exchange_with`], each request framed as its kind says.
    pub(super) fn exchange_framed(
        &mut self,
        given: Vec<Outgoing>,
        replies: usize,
        progress: &mut Progress<'_>,
        more: &mut dyn FnMut() -> Option<Result<Outgoing>>,
    ) -> Result<Vec<Reply>> {
        // Requests `more` made, kept while a resend may need them (until the first request
        // is written whole, or a reply begins).
        let mut made: Vec<Outgoing> = Vec::new();
        let (mut expected, mut exhausted, mut refused) = (replies, false, None);
        if self.conn.is_open() && self.conn.closed_by_peer() {
            self.conn.close(); // closed by the server between calls: an idle time-out, a restart
        }
        let where_ = self.conn.endpoint().authority();
        for attempt in 0..2 {
            let fresh = !self.conn.is_open();
            let deadline = self.timeout.map(|t| Instant::now() + t);
            self.conn.open(deadline)?;
            // This exchange's own bytes: replies to it, and where its first request ends.
            let received_before = self.conn.received();
            let mut first_end = None;
            let written_before = self.conn.written();
            for request in given.iter().chain(&made) {
                self.conn
                    .queue_shared(&request.body, request.kind, &request.attachments);
                first_end = first_end.or(Some(self.conn.queued_end()));
            }
            // (Nothing given over raw TCP: the last request's newline may be unwritten.)
            let mut upload = Upload::new(self.conn.queued_end().saturating_sub(written_before));
            let mut got = Vec::with_capacity(expected);
            let mut sent = false;
            let (mut replied, mut written_whole) = (false, false);
            let failure = loop {
                replied = replied || self.conn.received() > received_before;
                written_whole = written_whole || first_end.is_some_and(|end| self.conn.written() >= end);
                let may_have_run = replied || written_whole;
                if may_have_run {
                    made.clear(); // no resend now: written buffers are kept for reuse instead
                }
                while !exhausted && self.conn.pending() <= UNSENT_AT_MOST {
                    match more() {
                        Some(Ok(request)) if may_have_run => match Arc::try_unwrap(request.body) {
                            // A buffer of its own is kept for reuse once written.
                            Ok(body) if request.attachments.is_empty() => self.conn.queue_as(body, request.kind),
                            Ok(body) => self
                                .conn
                                .queue_shared(&Arc::new(body), request.kind, &request.attachments),
                            Err(body) => self.conn.queue_shared(&body, request.kind, &request.attachments),
                        },
                        Some(Ok(request)) => {
                            self.conn
                                .queue_shared(&request.body, request.kind, &request.attachments);
                            first_end = first_end.or(Some(self.conn.queued_end()));
                            made.push(request);
                        }
                        Some(Err(error)) => {
                            (exhausted, refused) = (true, Some(error));
                            continue;
                        }
                        None => {
                            exhausted = true;
                            continue;
                        }
                    }
                    expected += 1;
                }
                sent = sent || (exhausted && self.conn.pending() == 0);
                if sent && got.len() >= expected {
                    break None;
                }
                if let Some(why) = self.conn.ended() {
                    if got.len() < expected {
                        break Some(Error::transport(format!("the server closed the connection{why}")));
                    }
                }
                match self.conn.step(deadline, &mut |reply| got.push(reply)) {
                    Ok(Step::TimedOut) => {
                        self.conn.close();
                        let after = self
                            .timeout
                            .map_or(String::new(), |t| format!(" within {} s", t.as_secs_f64()));
                        return Err(Error::timeout(format!("no reply from {where_}{after}")));
                    }
                    Ok(_) => {
                        if let Err(error) = upload.report(self.conn.written().saturating_sub(written_before), progress)
                        {
                            self.conn.close();
                            return Err(error);
                        }
                    }
                    Err(error) => {
                        let (written, received) = self.conn.failed();
                        replied = replied || received > received_before;
                        written_whole = written_whole || first_end.is_some_and(|end| written >= end);
                        break Some(error);
                    }
                }
            };
            let Some(error) = failure else {
                if got.last().is_some_and(|reply| reply.close) || self.conn.ended().is_some() {
                    self.conn.close();
                }
                return refused.map_or(Ok(got), Err);
            };
            self.conn.close();
            if error.kind() != ErrorKind::Transport {
                return Err(error);
            }
            let why = error.message();
            if written_whole && fresh && !replied && got.is_empty() {
                return Err(Error::transport(format!(
                    "{where_} closed a new connection before replying (a server at its max_connections, \
                     or shutting down, closes new connections at once): {why}"
                )));
            }
            if written_whole || replied || !got.is_empty() {
                return Err(Error::transport(format!(
                    "connection to {where_} lost after the request was sent (the call may have run): {why}"
                )));
            }
            if fresh || attempt == 1 {
                return Err(Error::transport(format!("connection to {where_} lost: {why}")));
            }
            // The kept-alive connection failed before the first request was written whole
            // and before any reply to this exchange: none of it can have run (a server runs
            // a request only once all of it has come); once more on a new connection.
        }
        Err(Error::transport(format!("connection to {where_} lost")))
    }
}

/// Told `(sent, total)` of an upload's bytes ([`Client::exchange_reporting`]).
pub type Progress<'a> = dyn FnMut(u64, u64) -> Result<()> + 'a;

/// An exchange's given requests as they are written, reported at each MiB and at the end.
struct Upload {
    total: u64,
    reported: u64,
}

impl Upload {
    fn new(total: u64) -> Self {
        Upload { total, reported: 0 }
    }

    fn report(&mut self, written: u64, progress: &mut Progress<'_>) -> Result<()> {
        let sent = written.min(self.total);
        if sent > self.reported && (sent - self.reported >= 1 << 20 || sent == self.total) {
            self.reported = sent;
            progress(sent, self.total)?;
        }
        Ok(())
    }
}

/// A request as it goes out: its body, how it is framed, and the attachments that follow
/// a binary message's JSON text, written from where they lie (kept, as the body is, while
/// a resend may need them).
#[derive(Clone)]
pub(super) struct Outgoing {
    body: Arc<Vec<u8>>,
    kind: RequestKind,
    attachments: Section,
}

impl Outgoing {
    pub(super) fn new(body: Vec<u8>, kind: RequestKind, attachments: Section) -> Self {
        Outgoing {
            body: Arc::new(body),
            kind,
            attachments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Error, Upload};

    #[test]
    fn an_upload_is_reported_at_each_mib_and_at_its_end() {
        let mut told = Vec::new();
        let mut upload = Upload::new(5 << 20);
        for written in [1000, 1 << 20, (1 << 20) + 10, 3 << 20, 6 << 20, 6 << 20] {
            upload
                .report(written, &mut |sent, total| {
                    told.push((sent, total));
                    Ok(())
                })
                .expect("told");
        }
        assert_eq!(told, [(1 << 20, 5 << 20), (3 << 20, 5 << 20), (5 << 20, 5 << 20)]);
        let mut failing = Upload::new(10);
        let error = failing
            .report(10, &mut |_, _| Err(Error::invalid("stop")))
            .expect_err("its error");
        assert_eq!(error.message(), "stop");
    }
}
