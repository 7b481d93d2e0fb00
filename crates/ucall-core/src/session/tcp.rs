// SPDX-License-Identifier: Apache-2.0
//! Raw TCP: one JSON text in, one reply line out.

use super::{Context, MessageKind, Session, Step};
use crate::buffer::OutBuf;
use crate::dispatch::{self, Deferrals, Outcome};
use crate::jsonrpc::{self, ErrorCode};
use crate::stream::Frame;

impl Session {
    pub(super) fn step_stream(&mut self, rest: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> (usize, Step) {
        match self.framer.next(rest, ctx.limits.max_body_bytes) {
            Frame::Complete(range) => {
                let step = self.answer_text(&rest[range.clone()], out, ctx);
                (range.end, step)
            }
            Frame::Incomplete { skip } => (skip, Step::NeedMore),
            Frame::Invalid => {
                let data = out.data();
                let start = data.len();
                jsonrpc::write_error(
                    data,
                    None,
                    ErrorCode::ParseError.code(),
                    "Parse error: not the start of a JSON text",
                    None,
                );
                data.push(b'\n');
                let end = data.len();
                out.commit(start..end);
                (0, Step::Close)
            }
            Frame::TooLarge => {
                let data = out.data();
                let start = data.len();
                let message = format!("Invalid Request: request exceeds {} bytes", ctx.limits.max_body_bytes);
                jsonrpc::write_error(data, None, ErrorCode::InvalidRequest.code(), &message, None);
                data.push(b'\n');
                let end = data.len();
                out.commit(start..end);
                (0, Step::Close)
            }
        }
    }

    /// Answer one raw TCP text with one reply line (none for notifications).
    pub(super) fn answer_text(&mut self, text: &[u8], out: &mut OutBuf, ctx: &mut Context<'_>) -> Step {
        self.framer.reset();
        let data = out.data();
        let start = data.len();
        let mut deferrals = Deferrals {
            target: ctx.defer,
            next_slot: &mut self.next_slot,
        };
        let scratch = &mut ctx.scratch.jsonrpc;
        let outcome = dispatch::process(text, ctx.router, ctx.limits.max_batch, scratch, &mut deferrals, data);
        if outcome != Outcome::Silent {
            one_line(&mut data[start..]);
            data.push(b'\n');
        }
        if scratch.deferred.is_empty() {
            let end = data.len();
            out.commit(start..end);
        } else {
            self.hold(out, start, MessageKind::Stream, &mut ctx.scratch.jsonrpc.deferred);
        }
        let last = self.count_exchange(ctx);
        if outcome == Outcome::ParseError || last {
            Step::Close
        } else {
            Step::Progressed
        }
    }
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
