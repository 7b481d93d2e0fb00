// SPDX-License-Identifier: Apache-2.0
//! Raw TCP: one JSON text or binary message (docs/wire.md §3.2) in, one reply line out.

use super::{attached, Calls, Context, MessageKind, Step};
use crate::buffer::OutBuf;
use crate::context::Transport;
use crate::dispatch::Outcome;
use crate::jsonrpc::section::Section;
use crate::jsonrpc::{self, ErrorCode};
use crate::metrics::Refusal;
use crate::stream::{Frame, Framer};
use crate::wire::{self, Prefix, PREFIX_LEN};

/// A raw TCP connection's state: where the JSON text or binary message being received
/// stands.
#[derive(Debug, Default)]
pub(super) struct Stream {
    framer: Framer,
    /// The whole length of the binary message under way (prefix and body), 0 when none.
    message_len: usize,
}

impl Stream {
    /// Whether a JSON text or binary message is partly received.
    pub(super) fn in_text(&self) -> bool {
        self.framer.in_text() || self.message_len != 0
    }

    /// The bytes the binary message under way needs in all (0 when none).
    pub(super) fn message_wanted(&self) -> usize {
        self.message_len
    }

    /// The peer will send nothing more; `rest` is the input not consumed. A bare word
    /// (`42`, `null`) ends with the input and is answered as any text; any other text cut
    /// short can never be completed: it is answered `-32700` (id `null`).
    pub(super) fn end_of_input(&mut self, calls: &mut Calls, rest: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) {
        if let Some(range) = self.framer.finish(rest) {
            self.answer_text(calls, &rest[range], out, ctx);
            return;
        }
        if self.in_text() || rest.trim_ascii_start().first() == Some(&wire::MAGIC) {
            refused(ctx, Refusal::ParseError);
            error_line(
                out,
                ErrorCode::ParseError,
                "Parse error: the input ended inside a JSON text or binary message",
            );
        }
    }

    pub(super) fn step(
        &mut self,
        calls: &mut Calls,
        rest: &[u8],
        out: &mut OutBuf,
        ctx: &mut Context<'_>,
    ) -> (usize, Step) {
        if !self.framer.in_text() {
            if let Some(start) = rest.iter().position(|c| !c.is_ascii_whitespace()) {
                if rest[start] == wire::MAGIC {
                    let (used, step) = self.step_binary(calls, &rest[start..], out, ctx);
                    return (start + used, step);
                }
            }
        }
        match self.framer.next(rest, ctx.limits.max_body_bytes) {
            Frame::Complete(range) => {
                let step = self.answer_text(calls, &rest[range.clone()], out, ctx);
                (range.end, step)
            }
            Frame::Incomplete { skip } => (skip, Step::NeedMore),
            Frame::Invalid => {
                refused(ctx, Refusal::ParseError);
                error_line(out, ErrorCode::ParseError, "Parse error: not the start of a JSON text");
                (0, Step::Close)
            }
            Frame::TooLarge => (0, too_large(out, ctx)),
        }
    }

    /// A binary message at the start of `input`: answered once whole. Framing that says
    /// where the message ends costs it a `-32700` and the stream goes on; framing that
    /// does not (an unknown version) closes it.
    fn step_binary(
        &mut self,
        calls: &mut Calls,
        input: &[u8],
        out: &mut OutBuf,
        ctx: &mut Context<'_>,
    ) -> (usize, Step) {
        let prefix = match Prefix::parse(input) {
            Ok(Some(prefix)) => prefix,
            Ok(None) => return (0, Step::NeedMore),
            Err(malformed) => {
                refused(ctx, Refusal::ParseError);
                error_line(out, ErrorCode::ParseError, malformed.message());
                return (0, Step::Close);
            }
        };
        let limit = ctx.limits.max_body_bytes;
        let Some(body_len) = usize::try_from(prefix.body_len).ok().filter(|&len| len <= limit) else {
            return (0, too_large(out, ctx));
        };
        let end = PREFIX_LEN + body_len;
        if input.len() < end {
            self.message_len = end;
            return (0, Step::NeedMore);
        }
        self.message_len = 0;
        let step = match wire::split_body(&input[PREFIX_LEN..end], prefix.json_len) {
            Ok((json, section)) => self.answer_binary(calls, json, section, out, ctx),
            Err(malformed) => {
                refused(ctx, Refusal::ParseError);
                error_line(out, ErrorCode::ParseError, malformed.message());
                Step::Progressed
            }
        };
        (end, step)
    }

    /// Answer one raw TCP text with one reply line (none for notifications). A text is
    /// not a binary message: nothing here keeps room for a prefix or gathers attachments.
    fn answer_text(&mut self, calls: &mut Calls, text: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> Step {
        self.framer.reset();
        let data = out.data();
        let start = data.len();
        let outcome = calls.run_text(Transport::Tcp, text, (None, None), data, ctx);
        if outcome != Outcome::Silent {
            one_line(&mut data[start..]);
            data.push(b'\n');
        }
        let deferred = &mut ctx.scratch.jsonrpc.deferred;
        if deferred.is_empty() {
            let end = data.len();
            out.commit(start..end);
        } else {
            calls.hold(out, (start, start), MessageKind::Stream, deferred, None);
        }
        let last = calls.count_exchange(ctx);
        // A text that is not JSON leaves the stream's framing lost.
        if outcome == Outcome::ParseError || last {
            Step::Close
        } else {
            Step::Progressed
        }
    }

    /// Answer the JSON text of a binary message whose attachment section is `section`:
    /// in one binary message when the reply has attachments, room for its prefix kept
    /// before the reply (docs/wire.md §3.2). The prefix said where the message ends, so
    /// the stream goes on after a text that is not JSON.
    #[inline(never)]
    fn answer_binary(
        &mut self,
        calls: &mut Calls,
        text: &[u8],
        section: &[u8],
        out: &mut OutBuf,
        ctx: &mut Context<'_>,
    ) -> Step {
        self.framer.reset();
        let data = out.data();
        let reserved = data.len();
        let start = attached::reserve_prefix(data);
        let mut attachments = Section::new();
        let outcome = calls.run_text(Transport::Tcp, text, (Some(section), Some(&mut attachments)), data, ctx);
        let deferred = &mut ctx.scratch.jsonrpc.deferred;
        if !deferred.is_empty() {
            calls.hold(out, (reserved, start), MessageKind::Stream, deferred, Some(attachments));
        } else if outcome == Outcome::Silent {
            out.data().truncate(reserved);
        } else {
            attached::commit_tcp_reply(out, start, attachments);
        }
        if calls.count_exchange(ctx) {
            Step::Close
        } else {
            Step::Progressed
        }
    }
}

/// Refuse a text or message beyond the size limit: the stream cannot go on.
fn too_large(out: &mut OutBuf, ctx: &Context<'_>) -> Step {
    refused(ctx, Refusal::Limit);
    let message = format!("Invalid Request: request exceeds {} bytes", ctx.limits.max_body_bytes);
    crate::logs::throttled(
        &crate::logs::REQUEST_REFUSED,
        log::Level::Warn,
        format_args!(
            "request refused: more than max_body_bytes = {}",
            ctx.limits.max_body_bytes
        ),
    );
    error_line(out, ErrorCode::InvalidRequest, &message);
    Step::Close
}

/// Count a text refused before any call ran.
fn refused(ctx: &Context<'_>, why: Refusal) {
    if let Some(metrics) = ctx.router.metrics() {
        metrics.refused(why);
    }
}

/// Queue an error reply line with id `null` (the text it answers has no id to read).
#[cold]
fn error_line(out: &mut OutBuf, code: ErrorCode, message: &str) {
    let data = out.data();
    let start = data.len();
    jsonrpc::write_error(data, None, code.code(), message, None);
    data.push(b'\n');
    let end = data.len();
    out.commit(start..end);
}

/// Keep a raw TCP reply on one line. Procedures may pass raw JSON through (an echoed
/// argument keeps the caller's formatting); in valid JSON a CR or LF byte can only be
/// insignificant whitespace (strings hold them escaped), so a space replaces it.
pub(super) fn one_line(reply: &mut [u8]) {
    // memchr: a reply echoing megabytes has no line break to find, and finds none fast.
    let mut at = 0;
    while let Some(found) = memchr::memchr2(b'\n', b'\r', &reply[at..]) {
        at += found;
        reply[at] = b' ';
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn one_line_blanks_every_line_break() {
        let mut reply = b"{\"a\":\r\n[1,\n2]}".to_vec();
        reply.extend(std::iter::repeat_n(b' ', 100));
        reply.extend_from_slice(b"\n\r");
        one_line(&mut reply);
        assert!(!reply.contains(&b'\n') && !reply.contains(&b'\r'));
        assert_eq!(&reply[..15], b"{\"a\":  [1, 2]} ");
    }
}
