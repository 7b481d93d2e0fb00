// SPDX-License-Identifier: Apache-2.0
//! Many calls in flight on one connection, from any thread: a background thread owns the
//! socket, takes submitted requests and hands back completions.
//!
//! Submitting is a lock and a push (the I/O thread is woken only when it sleeps); the
//! owner learns of completions through its `notify` callback, called once per burst of
//! them, and takes them all at once. This is what an event loop needs: the Python
//! `AsyncClient` wakes asyncio through a socket and settles a thousand futures per wakeup.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use mio::Waker;

use ucall_core::jsonrpc::section::Section;

use crate::client::{refuses_binary, Binary};
use crate::conn::Connection;
use crate::endpoint::{request_lines, Endpoint};
use crate::error::{Error, Result};
use crate::framing::{Protocol, Reply, RequestKind};
use crate::message::{Params, ToParams};

/// A submitted request's number, handed back with its completion.
pub type Ticket = u64;

/// A request's outcome: its reply, or why there is none.
#[derive(Debug)]
pub struct Completion {
    /// The ticket [`Multiplexed::submit`] returned.
    pub ticket: Ticket,
    /// The reply (an empty body for a notification that gets none).
    pub result: Result<Reply>,
}

/// A submitted request: a JSON text, or a request whose attachments are written as a
/// binary message or in plain JSON form when it is sent.
enum Submission {
    Body(Vec<u8>),
    Request(Params),
    /// A binary message built by the caller: its JSON text, the attachments it names, and
    /// the same request as a JSON text for a WebSocket without the subprotocol, if any.
    Binary(Arc<Vec<u8>>, Section, Option<Vec<u8>>),
    /// A request with header lines of its own (checked), for its HTTP head only.
    Headed(Box<Submission>, String),
}

impl Submission {
    fn len(&self) -> usize {
        match self {
            Submission::Body(body) => body.len(),
            Submission::Request(request) => request.wire_len(),
            Submission::Binary(json, section, _) if section.is_empty() => json.len(),
            Submission::Binary(json, section, _) => ucall_core::wire::align(json.len()) + section.len(),
            Submission::Headed(submission, lines) => submission.len() + lines.len(),
        }
    }
}

#[derive(Default)]
struct State {
    submitted: Vec<(Ticket, Submission, bool)>,
    /// The bytes of `submitted`.
    submitted_bytes: usize,
    done: Vec<Completion>,
    next: Ticket,
    sleeping: bool,
    notified: bool,
    reset: Option<Error>,
    closing: bool,
    in_flight: usize,
}

struct Shared {
    state: Mutex<State>,
    notify: Box<dyn Fn() + Send + Sync>,
    /// Bytes the I/O thread has taken and not yet written to the socket.
    unwritten: AtomicUsize,
    /// What the last WebSocket opened said of binary messages: 0 none opened yet, 1 the
    /// server did not select the subprotocol, 2 it did.
    websocket_binary: AtomicU8,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One connection with a background I/O thread: submit from any thread, take
/// completions when notified.
///
/// ```no_run
/// use std::sync::mpsc;
/// use ucall_client::{Endpoint, Multiplexed};
/// let (tx, rx) = mpsc::channel();
/// let mux = Multiplexed::new(Endpoint::parse("tcp://127.0.0.1:8545")?, move || { let _ = tx.send(()); })?;
/// for i in 0..1000 {
///     mux.submit(format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[{i},1],"id":{i}}}"#).into_bytes(), true);
/// }
/// let mut done = Vec::new();
/// while done.len() < 1000 {
///     rx.recv().unwrap();
///     mux.take(&mut done);
/// }
/// # Ok::<(), ucall_client::Error>(())
/// ```
///
/// Replies complete in request order. A request is never sent twice; when the connection
/// fails, every request in flight completes with the error and the next submission opens
/// a new connection. Time-outs are the caller's: [`Multiplexed::reset`] fails what is in
/// flight.
pub struct Multiplexed {
    shared: Arc<Shared>,
    protocol: Protocol,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Multiplexed {
    /// Start the I/O thread for `endpoint`; `notify` is called (from that thread) when
    /// completions are waiting and none were waiting before.
    ///
    /// # Errors
    /// The TLS configuration or the poller cannot be built, or no thread can start.
    pub fn new(mut endpoint: Endpoint, notify: impl Fn() + Send + Sync + 'static) -> Result<Self> {
        endpoint.prepare()?;
        let protocol = endpoint.protocol();
        let conn = Connection::new(endpoint)?;
        let waker = Arc::new(conn.waker()?);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            notify: Box::new(notify),
            unwritten: AtomicUsize::new(0),
            websocket_binary: AtomicU8::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ucall-client-io".into())
            .spawn(move || run(conn, &thread_shared))
            .map_err(|e| Error::connect(format!("cannot start the I/O thread: {e}")))?;
        Ok(Multiplexed {
            shared,
            protocol,
            waker,
            thread: Some(thread),
        })
    }

    /// Whether the last WebSocket opened carries binary messages (its server selected
    /// `ucall.binary.v1`); `None` before one opened, and for HTTP and raw TCP.
    #[must_use]
    pub fn websocket_binary(&self) -> Option<bool> {
        match self.shared.websocket_binary.load(Ordering::Relaxed) {
            0 => None,
            said => Some(said == 2),
        }
    }

    /// Queue a request body (one JSON text); `expects_reply` is false for notifications.
    pub fn submit(&self, body: Vec<u8>, expects_reply: bool) -> Ticket {
        self.push(Submission::Body(body), expects_reply)
    }

    /// Queue a call to `method` (`id` given) or a notification (`id` `None`) with `params`,
    /// whose attachments ([`crate::Params::attachment`], [`crate::Params::ndarray`]) go as a
    /// binary message of its own (docs/wire.md), written from where they lie, where the
    /// server takes one, else in their plain JSON form, negotiated as [`crate::Client::call`]
    /// says: while the server's answer is unknown (HTTP, raw TCP), the first call with
    /// attachments goes alone and later submissions wait for its reply; a refusal sends it
    /// again as JSON (it did not run), and JSON from then on. Notifications go binary only
    /// once the server has taken a binary message. The completion's reply is read with
    /// [`crate::Response::from_reply`].
    ///
    /// # Errors
    /// Params with no JSON form (nothing is queued).
    pub fn submit_call(&self, method: &str, params: impl ToParams, id: Option<u64>) -> Result<Ticket> {
        let request = Params::request(method, &params, id)?;
        Ok(self.push(Submission::Request(request), id.is_some()))
    }

    /// Queue a binary message (docs/wire.md) built by the caller: `json`, a request or
    /// batch whose binary values are placeholders naming the attachments of `section`
    /// (`Section::attach` places each), written from where they lie, in submission order
    /// with the rest. Its reply may be a binary message ([`Reply::binary`]). It goes as it
    /// is, without [`Multiplexed::submit_call`]'s negotiation (which may send a call as
    /// JSON, and sends one again when refused): for a server known to take binary messages.
    /// On a WebSocket whose server did not select the subprotocol it fails with a protocol error.
    pub fn submit_binary(&self, json: Vec<u8>, section: Section, expects_reply: bool) -> Ticket {
        self.submit_binary_or(json, section, None, expects_reply)
    }

    /// As [`Multiplexed::submit_binary`], with `plain`, the same request as a JSON text
    /// (attachments in their plain form), sent instead on a WebSocket whose server did not
    /// select the subprotocol (known once the connection is open).
    pub fn submit_binary_or(
        &self,
        json: Vec<u8>,
        section: Section,
        plain: Option<Vec<u8>>,
        expects_reply: bool,
    ) -> Ticket {
        self.push(Submission::Binary(Arc::new(json), section, plain), expects_reply)
    }

    /// As [`Multiplexed::submit`], with `headers` in this request's HTTP head only, after
    /// the endpoint's: a call's own (a trace context, an idempotency key).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Invalid`], nothing queued: headers off HTTP, or a header
    /// [`Endpoint::with_header`] refuses.
    pub fn submit_with_headers(&self, body: Vec<u8>, expects_reply: bool, headers: &[(&str, &str)]) -> Result<Ticket> {
        self.push_headed(Submission::Body(body), expects_reply, headers)
    }

    /// As [`Multiplexed::submit_binary`], with `headers` in this request's HTTP head only
    /// ([`Multiplexed::submit_with_headers`]).
    ///
    /// # Errors
    /// As [`Multiplexed::submit_with_headers`].
    pub fn submit_binary_with_headers(
        &self,
        json: Vec<u8>,
        section: Section,
        expects_reply: bool,
        headers: &[(&str, &str)],
    ) -> Result<Ticket> {
        self.push_headed(
            Submission::Binary(Arc::new(json), section, None),
            expects_reply,
            headers,
        )
    }

    fn push_headed(&self, submission: Submission, expects_reply: bool, headers: &[(&str, &str)]) -> Result<Ticket> {
        let lines = request_lines(self.protocol, headers)?;
        if lines.is_empty() {
            return Ok(self.push(submission, expects_reply));
        }
        Ok(self.push(Submission::Headed(Box::new(submission), lines), expects_reply))
    }

    fn push(&self, submission: Submission, expects_reply: bool) -> Ticket {
        let mut state = self.shared.lock();
        state.next += 1;
        let ticket = state.next;
        state.submitted_bytes += submission.len();
        state.submitted.push((ticket, submission, expects_reply));
        state.in_flight += 1;
        if state.sleeping {
            state.sleeping = false;
            drop(state);
            let _ = self.waker.wake();
        }
        ticket
    }

    /// Move every waiting completion into `out`; the next one notifies again.
    pub fn take(&self, out: &mut Vec<Completion>) {
        let mut state = self.shared.lock();
        state.notified = false;
        state.in_flight -= state.done.len();
        out.append(&mut state.done);
    }

    /// Drop the connection, failing every request in flight with `error`.
    pub fn reset(&self, error: Error) {
        let mut state = self.shared.lock();
        state.reset = Some(error);
        state.sleeping = false;
        drop(state);
        let _ = self.waker.wake();
    }

    /// Requests submitted and not yet taken as completions.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.shared.lock().in_flight
    }

    /// Bytes submitted and not yet written to the socket: a caller with many large
    /// requests to make holds the next one back while this is above
    /// [`crate::UNSENT_AT_MOST`], so that each is encoded shortly before it is sent.
    #[must_use]
    pub fn unsent(&self) -> usize {
        self.shared.lock().submitted_bytes + self.shared.unwritten.load(Ordering::Relaxed)
    }
}

impl Drop for Multiplexed {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.closing = true;
        }
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn complete(shared: &Shared, done: &mut Vec<Completion>) {
    if done.is_empty() {
        return;
    }
    let mut state = shared.lock();
    state.done.append(done);
    let first = !state.notified;
    state.notified = true;
    drop(state);
    if first {
        (shared.notify)();
    }
}

fn fail_all(in_flight: &mut VecDeque<(Ticket, bool)>, error: &Error, done: &mut Vec<Completion>) {
    done.extend(in_flight.drain(..).map(|(ticket, _)| Completion {
        ticket,
        result: Err(error.clone()),
    }));
}

/// How the I/O thread sends requests with attachments, and what it holds back meanwhile.
struct Negotiation {
    binary: Binary,
    /// Submissions waiting for `probe`'s reply, in order.
    held: VecDeque<(Ticket, Submission, bool)>,
    /// The first binary call while the server's answer is unknown: its ticket, and the
    /// request, to send again as JSON if refused.
    probe: Option<(Ticket, Params)>,
}

impl Negotiation {
    /// Whether held submissions can go now.
    fn ready(&self) -> bool {
        !self.held.is_empty() && self.probe.is_none()
    }

    /// Queue held submissions on the open `conn` until one goes as a probe; each that
    /// expects a reply goes to `in_flight`, a notification without one completes.
    fn queue(&mut self, conn: &mut Connection, in_flight: &mut VecDeque<(Ticket, bool)>, done: &mut Vec<Completion>) {
        let protocol = conn.endpoint().protocol();
        let replies_to_notifications = conn.replies_to_notifications();
        while self.probe.is_none() {
            let Some((ticket, submission, expects)) = self.held.pop_front() else {
                break;
            };
            // (Only HTTP takes header lines: a headed submission is never a WebSocket's.)
            let (submission, lines) = match submission {
                Submission::Headed(submission, lines) => (*submission, lines),
                submission => (submission, String::new()),
            };
            match submission {
                Submission::Body(body) if lines.is_empty() => conn.queue(body),
                Submission::Body(body) => {
                    conn.queue_headed(&Arc::new(body), RequestKind::Json, &Section::new(), &lines)
                }
                Submission::Binary(json, section, plain) => {
                    if protocol != Protocol::WebSocket || conn.binary_negotiated() {
                        conn.queue_headed(&json, RequestKind::Binary(json.len()), &section, &lines);
                    } else if let Some(plain) = plain {
                        conn.queue(plain);
                    } else {
                        let why = format!(
                            "{} does not take binary messages (it did not select the WebSocket subprotocol {})",
                            conn.endpoint().authority(),
                            ucall_core::wire::SUBPROTOCOL
                        );
                        done.push(Completion {
                            ticket,
                            result: Err(Error::protocol(why)),
                        });
                        continue;
                    }
                }
                Submission::Request(request) => {
                    let attached = request.has_attachments();
                    let (binary, probe) = if protocol == Protocol::WebSocket {
                        let on = self.binary != Binary::Off && (attached || self.binary == Binary::Always);
                        (on && conn.binary_negotiated(), false)
                    } else {
                        match self.binary {
                            Binary::Off => (false, false),
                            Binary::Try => (attached && expects, attached && expects),
                            Binary::Taken => (attached, false),
                            Binary::Always => (attached || protocol != Protocol::Http, false),
                        }
                    };
                    let mut body = Vec::with_capacity(64);
                    let mut attachments = Section::new();
                    let written = request.write_to(&mut body, binary.then_some(&mut attachments));
                    if let Err(error) = written {
                        done.push(Completion {
                            ticket,
                            result: Err(error),
                        });
                        continue;
                    }
                    let kind = match (binary, self.binary) {
                        (true, _) => RequestKind::Binary(body.len()),
                        (false, Binary::Always) => RequestKind::AcceptsBinary,
                        (false, _) => RequestKind::Json,
                    };
                    conn.queue_shared(&Arc::new(body), kind, &attachments);
                    if probe {
                        self.probe = Some((ticket, request));
                    }
                }
                Submission::Headed(..) => unreachable!("a headed submission is unwrapped above"),
            }
            if expects || replies_to_notifications {
                in_flight.push_back((ticket, expects));
            } else {
                done.push(Completion {
                    ticket,
                    result: Ok(Reply {
                        status: None,
                        body: Vec::new(),
                        close: false,
                        binary: None,
                    }),
                });
            }
        }
    }

    /// Whether `reply` to `ticket` is the probe's refusal: the request is then held again,
    /// first, to go as JSON (over raw TCP on a new connection: `conn` is closed).
    fn refused(&mut self, ticket: Ticket, reply: &Reply, conn: &mut Connection) -> bool {
        if self.probe.as_ref().is_none_or(|(probe, _)| *probe != ticket) {
            return false;
        }
        let Some((_, request)) = self.probe.take() else {
            return false;
        };
        if !refuses_binary(reply) {
            self.binary = Binary::Taken;
            return false;
        }
        self.binary = Binary::Off;
        if conn.endpoint().protocol() == Protocol::Tcp {
            conn.close();
        }
        self.held.push_front((ticket, Submission::Request(request), true));
        true
    }

    /// Fail everything held with `error`.
    fn fail(&mut self, error: &Error, done: &mut Vec<Completion>) {
        self.probe = None;
        done.extend(self.held.drain(..).map(|(ticket, _, _)| Completion {
            ticket,
            result: Err(error.clone()),
        }));
    }
}

/// The I/O thread.
fn run(mut conn: Connection, shared: &Shared) {
    let mut in_flight: VecDeque<(Ticket, bool)> = VecDeque::new();
    let mut done = Vec::new();
    let mut replies = Vec::new();
    let mut negotiation = Negotiation {
        binary: Binary::of(conn.endpoint()),
        held: VecDeque::new(),
        probe: None,
    };
    loop {
        let (submitted, reset, closing) = {
            let mut state = shared.lock();
            shared
                .unwritten
                .fetch_add(std::mem::take(&mut state.submitted_bytes), Ordering::Relaxed);
            (std::mem::take(&mut state.submitted), state.reset.take(), state.closing)
        };
        if let Some(error) = reset {
            conn.close();
            fail_all(&mut in_flight, &error, &mut done);
            negotiation.fail(&error, &mut done);
        }
        if closing {
            conn.close();
            let error = Error::transport("the client closed the connection");
            fail_all(&mut in_flight, &error, &mut done);
            negotiation.held.extend(submitted);
            negotiation.fail(&error, &mut done);
            complete(shared, &mut done);
            return;
        }
        negotiation.held.extend(submitted);
        if negotiation.ready() {
            if conn.is_open() && in_flight.is_empty() && conn.pending() == 0 && conn.closed_by_peer() {
                conn.close(); // closed by the server while idle: a new connection, not a lost call
            }
            let opened = if conn.is_open() {
                Ok(())
            } else {
                let deadline = conn.endpoint().timeout().map(|t| Instant::now() + t);
                let opened = conn.open(deadline);
                if opened.is_ok() && conn.endpoint().protocol() == Protocol::WebSocket {
                    let said = if conn.binary_negotiated() { 2 } else { 1 };
                    shared.websocket_binary.store(said, Ordering::Relaxed);
                }
                opened
            };
            match opened {
                Ok(()) => negotiation.queue(&mut conn, &mut in_flight, &mut done),
                Err(error) => negotiation.fail(&error, &mut done),
            }
        }
        shared.unwritten.store(conn.pending(), Ordering::Relaxed);
        complete(shared, &mut done);
        if !conn.is_open() {
            if !negotiation.ready() {
                idle(&mut conn, shared);
            }
            continue;
        }
        let moved = conn.advance(&mut |reply| replies.push(reply));
        shared.unwritten.store(conn.pending(), Ordering::Relaxed);
        let mut closed = false;
        for reply in replies.drain(..) {
            closed |= reply.close;
            match in_flight.pop_front() {
                Some((ticket, _)) if negotiation.refused(ticket, &reply, &mut conn) => {}
                Some((ticket, _)) if crate::client::is_stream_item(&reply) => {
                    // A streamed result (docs/streaming.md): its other messages would
                    // answer the calls after it, so the connection goes with it.
                    done.push(Completion {
                        ticket,
                        result: Err(crate::client::streams_its_result(None)),
                    });
                    closed = true;
                    break;
                }
                Some((ticket, _)) => done.push(Completion {
                    ticket,
                    result: Ok(reply),
                }),
                None => {
                    closed = true;
                    break;
                }
            }
        }
        match moved {
            Err(error) => {
                fail_all(&mut in_flight, &error, &mut done);
                negotiation.probe = None; // failed with the rest: the next call probes again
            }
            Ok(_) if (closed || conn.ended().is_some()) && conn.is_open() => {
                let why = conn.ended().unwrap_or_default();
                conn.close();
                let error = Error::transport(format!("the server closed the connection{why}"));
                fail_all(&mut in_flight, &error, &mut done);
                negotiation.probe = None; // failed with the rest: the next call probes again
            }
            Ok(true) => {}
            Ok(false) => {
                complete(shared, &mut done);
                if !negotiation.ready() {
                    idle(&mut conn, shared);
                }
            }
        }
        complete(shared, &mut done);
    }
}

/// Sleep until the socket is ready or a submission, a reset or the end wakes the thread.
fn idle(conn: &mut Connection, shared: &Shared) {
    {
        let mut state = shared.lock();
        if !state.submitted.is_empty() || state.reset.is_some() || state.closing {
            return;
        }
        state.sleeping = true;
    }
    conn.wait(None);
    shared.lock().sleeping = false;
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Duration;

    use ucall_core::jsonrpc::section::Section;

    use super::Multiplexed;
    use crate::endpoint::Endpoint;
    use crate::error::ErrorKind;
    use crate::framing::Protocol;

    /// An HTTP server on loopback that answers `count` requests on one connection and
    /// hands back each request's head.
    fn recording_server(count: usize) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("bound").port();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("a connection");
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("a time-out");
            let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
            let mut writer = stream;
            let mut heads = Vec::new();
            for _ in 0..count {
                let mut head = String::new();
                while !head.ends_with("\r\n\r\n") {
                    assert!(
                        reader.read_line(&mut head).expect("a head line") > 0,
                        "the client hung up"
                    );
                }
                let length = head
                    .lines()
                    .find_map(|line| line.strip_prefix("Content-Length: "))
                    .and_then(|n| n.parse::<usize>().ok())
                    .expect("a length");
                reader.read_exact(&mut vec![0; length]).expect("the body");
                let reply = r#"{"jsonrpc":"2.0","id":1,"result":1}"#;
                let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{reply}", reply.len());
                writer.write_all(answer.as_bytes()).expect("the reply");
                heads.push(head);
            }
            heads
        });
        (port, server)
    }

    #[test]
    fn a_submissions_headers_go_in_its_request_head_only() {
        let (port, server) = recording_server(4);
        let (tx, rx) = mpsc::channel();
        let endpoint = Endpoint::new("127.0.0.1", port)
            .with_header("X-Client", "all")
            .expect("a header");
        let mux = Multiplexed::new(endpoint, move || {
            let _ = tx.send(());
        })
        .expect("a mux");
        let call = br#"{"jsonrpc":"2.0","method":"m","id":1}"#;
        let mut attachments = Section::new();
        attachments.attach(ucall_core::Bytes::from(vec![7u8; 100]));
        let placeholder =
            br#"{"jsonrpc":"2.0","method":"m","params":[{"$ucall":"bytes","offset":0,"length":100}],"id":1}"#;
        let tickets = [
            mux.submit(call.to_vec(), true),
            mux.submit_with_headers(call.to_vec(), true, &[("X-Key", "a")])
                .expect("queued"),
            mux.submit_binary_with_headers(
                placeholder.to_vec(),
                attachments,
                true,
                &[("X-Key", "b"), ("X-Other", "c")],
            )
            .expect("queued"),
            mux.submit(call.to_vec(), true),
        ];
        let refused = mux.submit_with_headers(call.to_vec(), true, &[("Host", "elsewhere")]);
        assert_eq!(refused.expect_err("refused").kind(), ErrorKind::Invalid);
        let mut done = Vec::new();
        while done.len() < tickets.len() {
            rx.recv_timeout(Duration::from_secs(10)).expect("completions");
            mux.take(&mut done);
        }
        assert_eq!(done.iter().map(|c| c.ticket).collect::<Vec<_>>(), tickets, "in order");
        assert!(done
            .iter()
            .all(|c| c.result.as_ref().is_ok_and(|reply| reply.status == Some(200))));
        let heads = server.join().expect("the server");
        let own = |head: &String| {
            head.lines()
                .filter(|line| line.starts_with("X-"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let owns: Vec<String> = heads.iter().map(own).collect();
        assert_eq!(
            owns,
            [
                "X-Client: all",
                "X-Client: all,X-Key: a",
                "X-Client: all,X-Key: b,X-Other: c",
                "X-Client: all"
            ]
        );
        assert!(
            heads[2].contains("application/vnd.ucall.binary"),
            "a binary message: {}",
            heads[2]
        );
    }

    #[test]
    fn headers_go_over_http_only() {
        let endpoint = Endpoint::new("127.0.0.1", 9).with_protocol(Protocol::Tcp);
        let mux = Multiplexed::new(endpoint, || {}).expect("a mux");
        let refused = mux.submit_with_headers(b"{}".to_vec(), true, &[("X-Key", "a")]);
        assert_eq!(
            refused.expect_err("refused").message(),
            "only HTTP sends headers with each call"
        );
        assert_eq!(mux.in_flight(), 0, "nothing queued");
    }
}
