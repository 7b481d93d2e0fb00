// SPDX-License-Identifier: Apache-2.0
//! JSON-RPC 2.0 (<https://www.jsonrpc.org/specification>), the codec only: reading a
//! request or a batch into borrowed views ([`message`]), and writing replies and errors
//! straight into an output buffer. Running calls is `dispatch`'s part, above it.
#![forbid(unsafe_code)]

pub mod attachment;
pub mod codes;
mod error;
pub mod message;
pub(crate) mod scan;
pub mod section;

pub use codes::{code_for_http_status, http_status, is_error_status, ErrorCode};
pub use error::RpcError;

/// `bytes` as text when they are valid UTF-8: the one check every message gets.
#[must_use]
pub fn as_text(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

#[cold]
#[inline(never)]
pub(crate) fn write_parse_error(out: &mut Vec<u8>) {
    write_error(
        out,
        None,
        ErrorCode::ParseError.code(),
        "Parse error: the message is not valid JSON",
        None,
    );
}

/// Append `{"jsonrpc":"2.0","id":ID,"result":RESULT}`; both are raw JSON.
pub(crate) fn write_result(out: &mut Vec<u8>, id: &str, result: &[u8]) {
    write_result_opening(out, id);
    out.extend_from_slice(result);
    out.push(b'}');
}

/// Append what precedes the result in the reply to `id` (see [`write_result`]); the
/// result and a closing `}` follow.
pub(crate) fn write_result_opening(out: &mut Vec<u8>, id: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"result\":");
}

/// The method of the notifications that carry a streamed reply's items
/// (docs/streaming.md).
pub const ITEM_METHOD: &str = "ucall.stream";

/// Append the notification that carries one item of the streamed reply to `id`:
/// `{"jsonrpc":"2.0","method":"ucall.stream","params":{"id":ID,"item":ITEM}}`; both are
/// raw JSON.
pub(crate) fn write_item(out: &mut Vec<u8>, id: &str, item: &[u8]) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"");
    out.extend_from_slice(ITEM_METHOD.as_bytes());
    out.extend_from_slice(b"\",\"params\":{\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"item\":");
    out.extend_from_slice(item);
    out.extend_from_slice(b"}}");
}

/// Append the error object `error` as the reply to `id`.
pub fn write_rpc_error(out: &mut Vec<u8>, id: Option<&str>, error: &RpcError) {
    write_error(out, id, error.code(), error.message(), error.data());
}

/// Append `{"jsonrpc":"2.0","id":ID,"error":{...}}`; `id` is raw JSON (`None`: `null`).
pub fn write_error(out: &mut Vec<u8>, id: Option<&str>, code: i32, message: &str, data: Option<&str>) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.unwrap_or("null").as_bytes());
    out.extend_from_slice(b",\"error\":");
    write_error_object(out, code, message, data);
    out.push(b'}');
}

/// Append the bare error object `{"code":..,"message":..,"data":..}` (§5.1).
pub fn write_error_object(out: &mut Vec<u8>, code: i32, message: &str, data: Option<&str>) {
    out.extend_from_slice(b"{\"code\":");
    out.extend_from_slice(itoa::Buffer::new().format(code).as_bytes());
    out.extend_from_slice(b",\"message\":");
    serde_json::to_writer(&mut *out, message).expect("invariant: writing a str to a Vec cannot fail");
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.as_bytes());
    }
    out.push(b'}');
}
