// SPDX-License-Identifier: Apache-2.0
//! Binary replies (docs/wire.md §1, §3): a reply whose results carry attachments leaves
//! as a binary message, its JSON text then the attachment section, each attachment sent
//! from its own memory (a segment of the output of its own, not a copy).

use super::tcp::one_line;
use super::websocket::commit_ws;
use crate::buffer::OutBuf;
use crate::http1;
use crate::jsonrpc::section::Section;
use crate::wire::{self, Prefix, PREFIX_LEN};
use crate::ws;

/// Attachments shorter than this are copied into the output: a vectored write's segment
/// costs more than copying a few bytes.
const COPY_BELOW: usize = 4 << 10;

/// Append the padding and attachment section after the JSON text written since
/// `json_start` (docs/wire.md §1); returns the body's length.
pub(super) fn write_section(out: &mut OutBuf, json_start: usize, section: Section) -> usize {
    let data = out.data();
    let body_start = json_start;
    data.resize(body_start + wire::align(data.len() - body_start), 0);
    let section_start = data.len() - body_start;
    let mut at = 0;
    for part in section.into_parts() {
        let data = out.data();
        data.resize(data.len() + (part.offset - at), 0);
        at = part.offset + part.bytes.len();
        if part.bytes.len() < COPY_BELOW {
            data.extend_from_slice(&part.bytes);
        } else {
            out.attach_shared(part.bytes);
        }
    }
    section_start + at
}

/// Room for the prefix of a raw TCP or WebSocket binary message (docs/wire.md §3.2) at
/// the end of `data`; returns where the JSON text starts.
pub(super) fn reserve_prefix(data: &mut Vec<u8>) -> usize {
    data.resize(data.len() + PREFIX_LEN, 0);
    data.len()
}

/// Write the JSON text since `json_start` and `section` as a binary message whose prefix
/// goes in the room [`reserve_prefix`] left before `json_start`.
pub(super) fn write_prefixed(out: &mut OutBuf, json_start: usize, section: Section) {
    let json_len = out.data().len() - json_start;
    let body_len = write_section(out, json_start, section);
    let prefix = Prefix::encode(u32::try_from(json_len).unwrap_or(u32::MAX), body_len as u64);
    out.data()[json_start - PREFIX_LEN..json_start].copy_from_slice(&prefix);
}

/// Queue a raw TCP reply whose JSON text starts at `json_start`, after the room for a
/// prefix: a binary message when `section` holds attachments, else the JSON text and a
/// newline (docs/wire.md §3.2).
pub(super) fn commit_tcp_reply(out: &mut OutBuf, json_start: usize, section: Section) {
    if section.is_empty() {
        let data = out.data();
        one_line(&mut data[json_start..]);
        data.push(b'\n');
        let end = data.len();
        out.commit(json_start..end);
    } else {
        write_prefixed(out, json_start, section);
        let end = out.data().len();
        out.commit(json_start - PREFIX_LEN..end);
    }
}

/// Queue a WebSocket reply whose JSON text starts at `json_start`, after the room for a
/// frame header and a prefix: a binary message in a binary frame when `section` holds
/// attachments, else a text frame (docs/wire.md §3.3).
pub(super) fn commit_ws_reply(out: &mut OutBuf, json_start: usize, section: Section) {
    if section.is_empty() {
        commit_ws(out, json_start, ws::Opcode::Text);
    } else {
        write_prefixed(out, json_start, section);
        commit_ws(out, json_start - PREFIX_LEN, ws::Opcode::Binary);
    }
}

/// Append the message `json` and its `section` as one chunk of a streamed HTTP body
/// (`application/vnd.ucall.binary-stream`, docs/wire.md §3.1): a binary message with its
/// prefix, as on raw TCP, the attachments sent from their own memory.
pub(super) fn write_chunk_message(out: &mut OutBuf, json: &[u8], section: Section) {
    let body_len = wire::align(json.len()) + section.len();
    http1::write_chunk_size(out.data(), PREFIX_LEN + body_len);
    let json_start = reserve_prefix(out.data());
    out.data().extend_from_slice(json);
    write_prefixed(out, json_start, section);
    out.data().extend_from_slice(b"\r\n");
}

/// After an HTTP reply's JSON text (from `json_start`): its attachment section, if any;
/// returns the JSON text's length when the reply is thus a binary message (docs/wire.md §3.1).
pub(super) fn finish_http(out: &mut OutBuf, json_start: usize, section: Section) -> Option<usize> {
    if section.is_empty() {
        return None;
    }
    let json_len = out.data().len() - json_start;
    write_section(out, json_start, section);
    Some(json_len)
}
