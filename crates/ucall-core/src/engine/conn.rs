// SPDX-License-Identifier: Apache-2.0
//! One connection, sans-I/O: what both engines drive and neither duplicates.
//!
//! A [`Conn`] owns the session, the unconsumed input, the output buffer, the optional TLS
//! session and the clocks, and says in one [`Phase`] where the connection stands. An
//! engine only moves bytes: it hands received bytes in ([`Conn::deliver`],
//! [`Conn::received_in_place`], [`Conn::receive_tls`]), tells the end of input
//! ([`Conn::answer_end_of_input`]), sends what [`Conn::has_output`] says is queued
//! (sealing it with [`Conn::seal_into`] where it hands buffers to the kernel), and asks
//! what comes next ([`Conn::wants_input`], [`Conn::close_now`], [`Conn::deadline`]).
//! Nothing here touches a socket, a clock or a thread: the tests below hold whole
//! conversations in memory.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::Clocks;
use crate::buffer::{self, OutBuf};
use crate::defer::{Completion, Sink};
use crate::metrics::Metrics;
use crate::session::{Context, Session};
use crate::tls::{Received, TlsSession};

/// Stop processing a connection's requests while this much output waits to be sent.
pub(crate) const OUTPUT_HIGH_WATER: usize = 1 << 20;
/// Most bytes read into a connection's input at once beyond the rest of the message being
/// received. Requests read ahead wait there, unanswered, while the output is over
/// [`OUTPUT_HIGH_WATER`], and nothing more is read meanwhile: so a peer that pipelines
/// calls and never reads their replies leaves at most this much of them in memory
/// (docs/reliability.md, "Slow and hostile peers").
pub(crate) const INPUT_HIGH_WATER: usize = 1 << 20;
/// Output capacity a connection keeps after a large reply has gone.
pub(crate) const OUTPUT_KEEP: usize = 64 << 10;
/// Slices per vectored send.
pub(crate) const MAX_IOV: usize = 64;
/// Least time between two time-out scans.
pub(crate) const SCAN_GRANULARITY: Duration = Duration::from_millis(50);
/// Input capacity a connection keeps once its input is all consumed.
const INPUT_KEEP: usize = 128 << 10;
/// How long a connection stays idle before its buffers go back to the allocator. Between
/// calls a busy keep-alive connection keeps them (no allocation per request); one left
/// idle holds its table slot only, which halves its memory (docs/design.md).
pub(crate) const IDLE_TRIM: Duration = Duration::from_secs(1);

/// Where a connection stands. Exactly one holds at a time; the engine's own facts (a
/// receive armed, a send in flight) stay with the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Reading and answering.
    Open,
    /// `input` holds whole requests left unprocessed while the output was over
    /// [`OUTPUT_HIGH_WATER`] or the session awaited too many replies: they go first, as
    /// soon as there is room, before anything more is read. A client that reads its
    /// replies slowly so cannot make the server buffer all it sends.
    Backlogged,
    /// No further request is processed; the connection closes once its output is sent.
    Closing,
    /// Closing in stages (see [`super::LINGER`]): the sending side is shut, what arrives
    /// is dropped until the client closes or `until` passes.
    Lingering {
        /// When the connection is cut anyway.
        until: Instant,
    },
    /// An error or a reset: close now.
    Failed,
}

/// The TLS layer refused what arrived (a failed handshake, a bad record, plaintext on a
/// TLS port). The alert rustls queued is in [`Conn::has_output`]; nobody else is affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TlsFailed;

/// One connection's state, shared by both engines.
pub(crate) struct Conn {
    pub(crate) session: Session,
    /// Unconsumed input (the tail of an unfinished request, or a backlog), empty when
    /// between requests.
    pub(crate) input: Vec<u8>,
    /// Replies written by the session, not yet sent (or handed to the kernel).
    pub(crate) out: OutBuf,
    /// TLS state, on a TLS port: ciphertext on the wire, plaintext in `input` and `out`.
    pub(crate) tls: Option<Box<TlsSession>>,
    /// Time-out clocks (idle, header).
    pub(crate) clocks: Clocks,
    pub(crate) phase: Phase,
    /// The peer shut its sending side (or sent TLS `close_notify`).
    pub(crate) input_ended: bool,
    /// Input arrived once closing and was dropped unread: the close must linger.
    pub(crate) dropped_input: bool,
    /// Tells this connection from an earlier one in the same slot, so that a late
    /// deferred reply never reaches the wrong client.
    pub(crate) generation: u64,
    /// Listed in the worker's [`super::HeldBack`].
    pub(crate) held: bool,
    /// TLS: the client's certificate has been read into the session (after the handshake).
    subject_read: bool,
    /// The connection's place in its peer's count (`max_connections_per_peer`), given
    /// back when the connection is dropped.
    pub(crate) peer_slot: super::Admitted,
}

impl Conn {
    /// A connection from `peer` (when known) accepted at `now`; a TLS one starts with its handshake, which must
    /// finish within the header time-out.
    pub(crate) fn new(generation: u64, tls: Option<Box<TlsSession>>, peer: Option<SocketAddr>, now: Instant) -> Self {
        Conn {
            session: Session::with_origin(peer, tls.is_some()),
            input: Vec::new(),
            out: OutBuf::new(),
            clocks: Clocks {
                last_progress: now,
                head_started: tls.is_some().then_some(now),
            },
            tls,
            phase: Phase::Open,
            input_ended: false,
            dropped_input: false,
            generation,
            held: false,
            subject_read: false,
            peer_slot: None,
        }
    }

    /// Closing in any way: no further request is processed.
    pub(crate) fn is_closing(&self) -> bool {
        matches!(self.phase, Phase::Closing | Phase::Lingering { .. } | Phase::Failed)
    }

    pub(crate) fn is_backlogged(&self) -> bool {
        self.phase == Phase::Backlogged
    }

    /// When a lingering connection is cut, if it lingers.
    pub(crate) fn lingering_until(&self) -> Option<Instant> {
        match self.phase {
            Phase::Lingering { until } => Some(until),
            _ => None,
        }
    }

    /// Close once the output is sent (unless already closing).
    pub(crate) fn close_when_sent(&mut self) {
        if matches!(self.phase, Phase::Open | Phase::Backlogged) {
            self.phase = Phase::Closing;
        }
    }

    /// Whether output waits to be sent: plaintext before the first hole, or ciphertext.
    pub(crate) fn has_output(&self) -> bool {
        self.out.has_sendable() || self.tls.as_ref().is_some_and(|tls| tls.wants_write())
    }

    /// Whether the output (with `in_flight` bytes the engine has handed on and not yet
    /// seen leave) leaves room for more replies, and the session may take more requests.
    pub(crate) fn has_room(&self, in_flight: usize, sink: Option<&Sink>) -> bool {
        self.out.pending() + in_flight <= OUTPUT_HIGH_WATER && !self.session.is_saturated(sink)
    }

    /// Whether more input is wanted now: open with room, or lingering (to see the
    /// client's close), or closing at the client's request (whatever it still sends is
    /// seen, and makes the close linger).
    pub(crate) fn wants_input(&self, in_flight: usize, sink: Option<&Sink>) -> bool {
        if self.input_ended {
            return false;
        }
        match self.phase {
            Phase::Open => self.has_room(in_flight, sink),
            Phase::Lingering { .. } => true,
            Phase::Closing => self.session.close_was_asked(),
            Phase::Backlogged | Phase::Failed => false,
        }
    }

    /// Hand the buffered input to the session, as far as the output has room.
    pub(crate) fn feed(&mut self, ctx: &mut Context<'_>, in_flight: usize) {
        let budget = OUTPUT_HIGH_WATER.saturating_sub(in_flight);
        self.out.prepare(self.input.len());
        // Calls may keep bytes of the input in place (`crate::lend`).
        ctx.scratch.feeding_input(&self.input);
        let progress = self.session.feed(&self.input, &mut self.out, ctx, budget);
        ctx.scratch.input_fed(&mut self.input, progress.consumed);
        self.settle(progress.close, ctx, in_flight);
        if self.input.is_empty() && self.input.capacity() > INPUT_KEEP {
            buffer::keep(std::mem::take(&mut self.input));
        }
    }

    /// The phase after feeding: closing when the session says so, backlogged when input
    /// is left while there is no room.
    fn settle(&mut self, close: bool, ctx: &Context<'_>, in_flight: usize) {
        if close {
            self.close_when_sent();
        } else if !self.is_closing() {
            self.phase = if !self.input.is_empty() && !self.has_room(in_flight, ctx.worker()) {
                Phase::Backlogged
            } else {
                Phase::Open
            };
        }
    }

    /// Feed a backlog if there is room for it now.
    pub(crate) fn feed_backlog(&mut self, ctx: &mut Context<'_>, in_flight: usize) {
        if self.is_backlogged() && self.has_room(in_flight, ctx.worker()) {
            self.feed(ctx, in_flight);
        }
    }

    /// Bytes received (plaintext) outside `input`: fed straight from where they are when
    /// nothing is buffered, and only what the session leaves is copied in. Dropped once
    /// closing.
    pub(crate) fn deliver(&mut self, bytes: &[u8], ctx: &mut Context<'_>, now: Instant, in_flight: usize) {
        self.clocks.last_progress = now;
        if self.is_closing() {
            self.dropped_input |= !bytes.is_empty();
            return;
        }
        if self.input.is_empty() && !self.is_backlogged() {
            let budget = OUTPUT_HIGH_WATER.saturating_sub(in_flight);
            let progress = self.session.feed(bytes, &mut self.out, ctx, budget);
            let left = &bytes[progress.consumed..];
            if !left.is_empty() {
                super::reserve_input(&mut self.input, &self.session, left.len());
                self.input.extend_from_slice(left);
            }
            self.settle(progress.close, ctx, in_flight);
        } else {
            super::reserve_input(&mut self.input, &self.session, bytes.len());
            self.input.extend_from_slice(bytes);
            if !self.is_backlogged() {
                self.feed(ctx, in_flight);
            }
        }
        self.count_received(bytes.len(), ctx);
    }

    /// `read` bytes were received straight into `input`'s spare capacity and appended.
    pub(crate) fn received_in_place(&mut self, read: usize, ctx: &mut Context<'_>, now: Instant, in_flight: usize) {
        if read == 0 {
            return;
        }
        self.clocks.last_progress = now;
        if self.is_closing() {
            self.dropped_input = true;
            self.input.clear(); // nobody reads it any more, as `deliver` drops it
        } else if !self.is_backlogged() {
            self.feed(ctx, in_flight);
        }
        self.count_received(read, ctx);
    }

    /// Count `bytes` received, under the transport the session speaks (the first bytes
    /// once they told it).
    fn count_received(&self, bytes: usize, ctx: &Context<'_>) {
        if let Some(metrics) = ctx.router.metrics() {
            // Whitespace alone does not tell a transport yet: it is counted as HTTP's.
            let transport = self.session.transport().unwrap_or(crate::metrics::Transport::Http);
            metrics.received(transport, bytes);
        }
    }

    /// Count `bytes` sent.
    pub(crate) fn count_sent(&self, bytes: usize, metrics: Option<&Metrics>) {
        if let (Some(metrics), Some(transport)) = (metrics, self.session.transport()) {
            metrics.sent(transport, bytes);
        }
    }

    /// TLS: decrypt `ciphertext` into `input` and feed it. On a failure the connection
    /// closes once the alert rustls queued is sent.
    pub(crate) fn receive_tls(
        &mut self,
        ciphertext: &[u8],
        ctx: &mut Context<'_>,
        now: Instant,
        in_flight: usize,
    ) -> Result<(), TlsFailed> {
        self.clocks.last_progress = now;
        let closing = self.is_closing();
        let tls = self.tls.as_mut().expect("invariant: called for TLS connections");
        if closing {
            // Still decrypted: a `close_notify` ends the input, and plaintext that arrives
            // is dropped unread, which makes the close linger.
            let mut dropped = Vec::new();
            let received = tls.receive(ciphertext, &mut dropped);
            self.dropped_input |= !dropped.is_empty();
            return match received {
                Ok(Received::Closed) => {
                    self.input_ended = true;
                    Ok(())
                }
                Ok(Received::Open) => Ok(()),
                Err(_) => Err(TlsFailed),
            };
        }
        // The plaintext is never longer than the records it came in.
        super::reserve_input(&mut self.input, &self.session, ciphertext.len());
        match tls.receive(ciphertext, &mut self.input) {
            Ok(Received::Open) => {}
            Ok(Received::Closed) => self.input_ended = true,
            Err(error) => {
                static FAILED: crate::logs::Throttle = crate::logs::Throttle::new();
                crate::logs::throttled(&FAILED, log::Level::Info, format_args!("TLS session failed: {error}"));
                self.close_when_sent();
                return Err(TlsFailed);
            }
        }
        if !self.subject_read && !tls.is_handshaking() {
            // Once per connection, before its first request: the client's certificate.
            self.subject_read = true;
            self.session.set_tls_subject(tls.client_subject());
        }
        if !self.input.is_empty() && !self.is_backlogged() {
            self.feed(ctx, in_flight);
        }
        self.count_received(ciphertext.len(), ctx);
        Ok(())
    }

    /// Half-closed by the client and nothing held back: what it sent is answered, the
    /// rest is never coming. Returns whether it did so (the connection now closes).
    pub(crate) fn answer_end_of_input(&mut self, ctx: &mut Context<'_>) -> bool {
        if !self.input_ended || !matches!(self.phase, Phase::Open) {
            return false;
        }
        self.session.end_of_input(&self.input, &mut self.out, ctx);
        self.phase = Phase::Closing;
        true
    }

    /// A deferred reply, or an item of a streamed one, arrived: put it in place. Returns
    /// whether it was this session's; input held back while replies were awaited may
    /// then go on.
    pub(crate) fn complete(&mut self, completion: Completion, date: &[u8]) -> bool {
        let Completion {
            slot,
            outcome,
            item,
            attachments,
            ..
        } = completion;
        let placed = match (item, outcome) {
            (Some(credit), Ok(json)) => {
                self.session
                    .stream_item(slot, (&json, attachments), credit, &mut self.out, date)
            }
            (Some(credit), Err(_)) => {
                credit.give_back();
                false
            }
            (None, outcome) => self
                .session
                .complete_attached(slot, outcome, attachments, &mut self.out, date),
        };
        if placed {
            self.mark_backlog();
        }
        placed
    }

    /// Some output has left (`in_flight` bytes of it are still with the engine): streamed
    /// replies whose items wait for room may go on.
    #[inline]
    pub(crate) fn output_left(&mut self, in_flight: usize) {
        self.session.give_back_credits(self.out.pending() + in_flight);
    }

    /// Input held back may go on now (a reply or room arrived): a backlog if any.
    pub(crate) fn mark_backlog(&mut self) {
        if self.phase == Phase::Open && !self.input.is_empty() {
            self.phase = Phase::Backlogged;
        }
    }

    /// Once a closing connection's output is all sent: whether to close in stages rather
    /// than at once (see [`super::must_linger`]); `unread` input may wait in the socket.
    pub(crate) fn must_linger(&self, unread: bool) -> bool {
        !self.input_ended
            && super::must_linger(
                &self.session,
                unread || !self.input.is_empty() || self.dropped_input,
                self.tls.is_some(),
            )
    }

    /// Start closing in stages at `now` (the engine shuts its sending side).
    pub(crate) fn linger(&mut self, now: Instant) {
        self.phase = Phase::Lingering {
            until: now + super::LINGER,
        };
        buffer::keep(std::mem::take(&mut self.input));
    }

    /// The client took too long: queue the reply it gets, if any (a `408` answers a
    /// request partly received; an idle connection closes silently, or a client could
    /// read the 408 as the reply to its next request), and close once it is sent.
    pub(crate) fn time_out(&mut self, date: &[u8], metrics: Option<&Metrics>) {
        if !self.input.is_empty() || !self.session.is_between_requests() {
            if let Some(metrics) = metrics {
                metrics.refused(crate::metrics::Refusal::Timeout);
            }
            self.session.time_out(&mut self.out, date);
        }
        self.phase = Phase::Closing;
    }

    /// Track the header clock after serving at `now`.
    pub(crate) fn track_clocks(&mut self, now: Instant) {
        let in_head = super::head_under_way(&self.session, &self.input, self.is_backlogged(), self.tls.as_deref());
        self.clocks.track_head(in_head, now);
    }

    /// When the connection times out if nothing happens; `None` while it waits on the
    /// server (deferred replies), when no client time-out applies.
    pub(crate) fn deadline(&self, config: &super::Config) -> Option<Instant> {
        self.lingering_until()
            .or_else(|| (!self.session.has_pending()).then(|| self.clocks.deadline(config)))
    }

    /// When this connection, idle and still holding buffers, gives them back ([`IDLE_TRIM`],
    /// [`Conn::release`]). `also_held`: the engine holds buffers of its own for it.
    pub(crate) fn trim_at(&self, also_held: bool) -> Option<Instant> {
        let holds = also_held || self.input.capacity() > 0 || self.out.holds_memory() || self.session.holds_buffers();
        (holds && self.is_idle() && self.lingering_until().is_none()).then(|| self.clocks.last_progress + IDLE_TRIM)
    }

    /// Between requests with nothing buffered either way: a drain closes it at once.
    pub(crate) fn is_idle(&self) -> bool {
        self.input.is_empty() && self.out.is_empty() && self.session.is_between_requests()
    }

    /// The server is draining: queue this idle connection's goodbye (WebSocket 1001) and
    /// close once it is sent, or say that it can close at once (`false`).
    pub(crate) fn going_away(&mut self) -> bool {
        let queued = self.session.going_away(&mut self.out);
        if queued {
            self.close_when_sent();
        }
        queued
    }

    /// The server is draining and this connection awaits deferred replies with nothing
    /// more received: the last of them closes it.
    pub(crate) fn last_reply_closes(&mut self) {
        if self.input.is_empty() && self.session.last_reply_closes() {
            self.close_when_sent();
        }
    }

    /// Move what is ready to leave into `sending` (empty, or all sent): sealed by TLS up
    /// to a large send's worth, else the sendable replies (the whole buffer, without
    /// copying, when no deferred reply leaves a hole in it).
    pub(crate) fn seal_into(&mut self, sending: &mut OutBuf) {
        debug_assert!(sending.is_empty());
        if let Some(tls) = self.tls.as_mut() {
            seal_tls(tls, &mut self.out, sending);
        } else if !self.out.has_sendable() {
        } else if self.session.has_pending() {
            // `out` holds holes for deferred replies, which must stay where the session
            // fills them: move what precedes the first hole.
            self.out.move_sendable(sending);
        } else {
            std::mem::swap(&mut self.out, sending);
        }
    }

    /// Give the buffers back (the large ones to the kept ones): once idle, and on close.
    pub(crate) fn release_buffers(&mut self) {
        buffer::keep(std::mem::take(&mut self.input));
        self.out.release();
        self.session.release_buffers();
    }

    /// On close: give the buffers back and count the close.
    pub(crate) fn release(&mut self, metrics: Option<&Metrics>) {
        if let (Some(metrics), Some(transport)) = (metrics, self.session.transport()) {
            metrics.closed(transport);
        }
        self.release_buffers();
    }
}

/// TLS: encrypt the replies queued in `out` (up to the first hole) into `sending`, until
/// the plaintext is all sealed or `sending` holds a large send's worth. rustls takes a
/// bounded amount of plaintext at a time, so this alternates sealing and draining.
fn seal_tls(tls: &mut TlsSession, out: &mut OutBuf, sending: &mut OutBuf) {
    struct Into<'a>(&'a mut OutBuf);
    impl io::Write for Into<'_> {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.push(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    loop {
        // Writing into memory cannot fail or block.
        let _ = tls.write_to(&mut Into(sending));
        if !out.has_sendable() || sending.pending() >= OUTPUT_HIGH_WATER {
            return;
        }
        tls.seal(out);
        if !tls.wants_write() {
            return;
        }
    }
}
