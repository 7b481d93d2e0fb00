// SPDX-License-Identifier: Apache-2.0
//! A streamed reply's items (docs/streaming.md): how each is framed on its transport, and
//! how it is queued ahead of the reply's place in the output.

use std::sync::Arc;

use super::attached;
use super::tcp::one_line;
use super::websocket::{commit_ws_text, reserve_ws_header};
use super::{MessageKind, Session};
use crate::buffer::OutBuf;
use crate::http1;
use crate::jsonrpc;
use crate::jsonrpc::section::Section;
use crate::streaming::{Credit, OUTPUT_ROOM};

/// How a streamed reply's messages are framed in an HTTP body (docs/streaming.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lines {
    /// `application/jsonl`: one message per line.
    Json,
    /// `text/event-stream` (server-sent events): one `data:` event per message.
    Events,
    /// `application/vnd.ucall.binary-stream`: messages as on a raw TCP connection, a JSON
    /// text per line and binary messages with their prefix (docs/wire.md §3.1).
    Binary,
}

impl Lines {
    /// The framing a request's `Accept` asks for; binary messages where it lists them.
    pub(super) fn accepted(head: &http1::RequestHead) -> Lines {
        if head.accepts_binary_stream {
            Lines::Binary
        } else if head.event_stream {
            Lines::Events
        } else {
            Lines::Json
        }
    }

    pub(super) fn content_type(self) -> &'static [u8] {
        match self {
            Lines::Json => b"application/jsonl",
            Lines::Events => b"text/event-stream",
            Lines::Binary => crate::wire::STREAM_CONTENT_TYPE.as_bytes(),
        }
    }

    /// Append `message` (a JSON text) as a chunk of a streamed body: with `section`'s
    /// attachments a binary message in a binary stream, else one line or event.
    pub(super) fn write_chunk(self, out: &mut OutBuf, mut message: Vec<u8>, section: Option<Section>) {
        match section.filter(|section| self == Lines::Binary && !section.is_empty()) {
            Some(section) => attached::write_chunk_message(out, &message, section),
            None => {
                one_line(&mut message);
                let mut framed = Vec::with_capacity(message.len() + 8);
                self.frame(&message, &mut framed);
                http1::write_chunk(out.data(), &framed);
            }
        }
    }

    /// Append `message` (one line of JSON) framed as one line or event.
    fn frame(self, message: &[u8], out: &mut Vec<u8>) {
        match self {
            Lines::Json | Lines::Binary => {
                out.extend_from_slice(message);
                out.push(b'\n');
            }
            Lines::Events => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(message);
                out.extend_from_slice(b"\n\n");
            }
        }
    }
}

impl Session {
    /// An item of the streamed reply in `slot` arrived (its JSON text, whose placeholders
    /// name `attachments`): queue it ahead of the reply's place, and give its `credit`
    /// back once the output is short. Returns `false` for a slot this session does not
    /// await (the item is dropped).
    pub fn stream_item(
        &mut self,
        slot: u64,
        (item, attachments): (&[u8], Section),
        credit: Arc<Credit>,
        out: &mut OutBuf,
        date: &[u8],
    ) -> bool {
        let Some((index, at)) = self.calls.find(slot) else {
            credit.give_back();
            return false;
        };
        let message = &mut self.calls.pending[index];
        let slot = &mut message.slots[at];
        // Only a single call with an id streams (`Reply::stream`).
        let Some(id) = slot.id.as_deref() else {
            credit.give_back();
            return false;
        };
        // An MCP tool's items are progress notifications, sent only when asked for, and
        // no more once the client cancelled the call.
        let mut progress = Vec::new();
        if let Some(tool) = slot.tool.as_deref_mut() {
            let Some(token) = tool.progress_token.clone().filter(|_| !tool.is_cancelled()) else {
                credit.give_back();
                return true;
            };
            tool.write_progress(&mut progress, &token, item);
        }
        let write_message = |out: &mut Vec<u8>| {
            if progress.is_empty() {
                jsonrpc::write_item(out, id, item);
            } else {
                out.extend_from_slice(&progress);
            }
        };
        let streamed = &mut message.streamed;
        let (kind, headers) = (message.kind, &message.headers);
        // An item's placeholders count from its own section: a binary message of its own,
        // where the caller takes one (docs/wire.md §3) and the item has attachments.
        let section =
            (message.attachments.is_some() && progress.is_empty() && !attachments.is_empty()).then_some(attachments);
        out.fill_before(message.hole, |out| match (kind, section) {
            (MessageKind::Stream, section) => {
                let json_start = attached::reserve_prefix(out.data());
                write_message(out.data());
                attached::commit_tcp_reply(out, json_start, section.unwrap_or_default());
            }
            (MessageKind::WebSocket, Some(section)) => {
                reserve_ws_header(out.data());
                let json_start = attached::reserve_prefix(out.data());
                write_message(out.data());
                attached::commit_ws_reply(out, json_start, section);
            }
            (MessageKind::WebSocket, None) => {
                let start = reserve_ws_header(out.data());
                write_message(out.data());
                commit_ws_text(out, start);
            }
            (MessageKind::Http(persistence, lines, _), section) => {
                let data = out.data();
                let start = data.len();
                if !*streamed {
                    *streamed = true;
                    http1::write_stream_head(data, persistence, headers, date, lines.content_type());
                }
                let mut message = Vec::with_capacity(item.len() + 64);
                write_message(&mut message);
                lines.write_chunk(out, message, section);
                let end = out.data().len();
                out.commit(start..end);
            }
        });
        if out.pending() <= OUTPUT_ROOM {
            credit.give_back();
        } else {
            self.calls.owed.push(credit);
        }
        true
    }
}
