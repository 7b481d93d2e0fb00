// SPDX-License-Identifier: Apache-2.0
//! JSON-RPC 2.0 messages on the client side: requests written straight into their
//! buffer (params, base64 `bytes` included), replies read without copying their result.

use serde::Serialize;

use crate::base64::{base64_decode_into, base64_decoded_len, write_base64};
use crate::error::{Error, Result};

/// Params that write themselves as a JSON array or object.
pub trait ToParams {
    /// Append the params' JSON to `out`; `false` when there are none (no `params` member).
    ///
    /// # Errors
    /// A value with no JSON form.
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool>;

    /// The length of the params' JSON when known without writing it, so that the request
    /// is written into a buffer reserved once (a 2 MB body grown by doubling is copied twice).
    fn len_hint(&self) -> usize {
        0
    }
}

impl<T: Serialize + ?Sized> ToParams for &T {
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool> {
        serde_json::to_writer(&mut *out, *self).map_err(|e| Error::invalid(format!("params: {e}")))?;
        Ok(true)
    }
}

impl<T: Serialize, const N: usize> ToParams for [T; N] {
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool> {
        (&self.as_slice()).write_params(out)
    }
}

impl<T: Serialize> ToParams for Vec<T> {
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool> {
        (&self.as_slice()).write_params(out)
    }
}

/// No params: the request has no `params` member.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoParams;

impl ToParams for NoParams {
    fn write_params(&self, _out: &mut Vec<u8>) -> Result<bool> {
        Ok(false)
    }
}

/// Params built value by value, `bytes` written as base64 straight into the request:
///
/// ```
/// use ucall_client::Params;
/// let by_name = Params::object().named("a", &1).named_bytes("blob", b"\x00\x01");
/// assert_eq!(by_name.as_json(), r#"{"a":1,"blob":"AAE="}"#);
/// let by_position = Params::array().value(&"x").bytes(b"hi");
/// assert_eq!(by_position.as_json(), r#"["x","aGk="]"#);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Params {
    text: Vec<u8>,
    close: u8,
    error: Option<String>,
}

impl Params {
    /// Params by position: `[...]`.
    pub fn array() -> Self {
        Params {
            text: vec![b'['],
            close: b']',
            error: None,
        }
    }

    /// Params by name: `{...}`.
    pub fn object() -> Self {
        Params {
            text: vec![b'{'],
            close: b'}',
            error: None,
        }
    }

    fn comma(&mut self) {
        if self.text.len() > 1 {
            self.text.push(b',');
        }
    }

    fn key(&mut self, name: &str) {
        self.comma();
        if let Err(e) = serde_json::to_writer(&mut self.text, name) {
            self.error.get_or_insert(e.to_string());
        }
        self.text.push(b':');
    }

    /// Append a value (to an array).
    pub fn value(mut self, value: &(impl Serialize + ?Sized)) -> Self {
        self.comma();
        if let Err(e) = serde_json::to_writer(&mut self.text, value) {
            self.error.get_or_insert(e.to_string());
        }
        self
    }

    /// Append bytes as a base64 string (to an array).
    pub fn bytes(mut self, bytes: &[u8]) -> Self {
        self.comma();
        self.base64(bytes);
        self
    }

    /// Add a named value (to an object).
    pub fn named(mut self, name: &str, value: &(impl Serialize + ?Sized)) -> Self {
        self.key(name);
        if let Err(e) = serde_json::to_writer(&mut self.text, value) {
            self.error.get_or_insert(e.to_string());
        }
        self
    }

    /// Add named bytes as a base64 string (to an object).
    pub fn named_bytes(mut self, name: &str, bytes: &[u8]) -> Self {
        self.key(name);
        self.base64(bytes);
        self
    }

    fn base64(&mut self, bytes: &[u8]) {
        // A large payload goes into a buffer the process kept (see `Drop`), in pages
        // already mapped, rather than into fresh ones.
        ucall_core::buffer::reserve(&mut self.text, crate::base64::encoded_len(bytes.len()) + 2);
        write_base64(bytes, &mut self.text);
    }

    /// The params' JSON text.
    #[must_use]
    pub fn as_json(&self) -> String {
        let mut text = self.text.clone();
        text.push(self.close);
        String::from_utf8_lossy(&text).into_owned()
    }
}

impl Drop for Params {
    fn drop(&mut self) {
        ucall_core::buffer::keep(std::mem::take(&mut self.text));
    }
}

impl ToParams for Params {
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool> {
        if let Some(error) = &self.error {
            return Err(Error::invalid(format!("params: {error}")));
        }
        out.extend_from_slice(&self.text);
        out.push(self.close);
        Ok(true)
    }

    fn len_hint(&self) -> usize {
        self.text.len() + 1
    }
}

impl ToParams for Option<&serde_json::value::RawValue> {
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool> {
        match self {
            Some(raw) => {
                out.extend_from_slice(raw.get().as_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn len_hint(&self) -> usize {
        self.map_or(0, |raw| raw.get().len())
    }
}

/// Params written as JSON text by the caller (`None`: no params), checked to be one JSON
/// text when made, and written as they are.
pub(crate) struct CheckedJson<'a>(Option<&'a str>);

impl<'a> CheckedJson<'a> {
    /// Check `text` by the core's rule (SIMD for large texts: serde_json's check took a
    /// sixth of a 1.6 MB array's call); serde_json only says where a bad one goes wrong.
    pub(crate) fn new(text: Option<&'a str>) -> Result<Self> {
        if let Some(text) = text.filter(|text| !ucall_core::jsonrpc::message::is_json(text)) {
            let why = serde_json::from_str::<&serde_json::value::RawValue>(text)
                .err()
                .map_or_else(|| "not a JSON text".to_owned(), |e| e.to_string());
            return Err(Error::invalid(format!("params are not JSON: {why}")));
        }
        Ok(CheckedJson(text))
    }
}

impl ToParams for CheckedJson<'_> {
    fn write_params(&self, out: &mut Vec<u8>) -> Result<bool> {
        let Some(text) = self.0 else { return Ok(false) };
        out.extend_from_slice(text.as_bytes());
        Ok(true)
    }

    fn len_hint(&self) -> usize {
        self.0.map_or(0, str::len)
    }
}

/// Append one request: `{"jsonrpc":"2.0","method":...,"params":...,"id":...}`; no id
/// makes a notification.
///
/// # Errors
/// Params with no JSON form; `out` then holds a partial text.
pub fn write_request(out: &mut Vec<u8>, method: &str, params: &dyn ToParams, id: Option<u64>) -> Result<()> {
    // The envelope, `{"jsonrpc":"2.0","method":"","params":,"id":}` with a 20-digit id, is 65 bytes.
    ucall_core::buffer::reserve(out, 72 + method.len() + params.len_hint());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    serde_json::to_writer(&mut *out, method).map_err(|e| Error::invalid(e.to_string()))?;
    let mark = out.len();
    out.extend_from_slice(b",\"params\":");
    if !params.write_params(out)? {
        out.truncate(mark);
    }
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    }
    out.push(b'}');
    Ok(())
}

/// A JSON-RPC error reply (or a result that is not what was asked for, code -32603).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    /// The error code (JSON-RPC 2.0 §5.1).
    pub code: i64,
    /// The message.
    pub message: String,
    /// The `data` member's JSON text, when present.
    pub data: Option<String>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for RpcError {}

fn internal(message: impl Into<String>) -> RpcError {
    RpcError {
        code: -32603,
        message: message.into(),
        data: None,
    }
}

/// One reply's members as raw JSON text, found without decoding the result.
#[derive(Debug, Default, Clone, Copy)]
pub struct Envelope<'a> {
    /// `id` as JSON text.
    pub id: Option<&'a str>,
    /// `result` as JSON text.
    pub result: Option<&'a str>,
    /// `error` as JSON text.
    pub error: Option<&'a str>,
}

impl<'a> Envelope<'a> {
    /// Check a reply object and find its members, in one read by the core's JSON rule
    /// (what [`Spans::check`] reads too).
    ///
    /// # Errors
    /// The text is not a JSON object.
    pub fn parse(body: &'a [u8]) -> std::result::Result<Self, RpcError> {
        let text = ucall_core::jsonrpc::as_text(body).ok_or_else(|| internal("the reply is not UTF-8"))?;
        let members = ucall_core::jsonrpc::message::object_members(text, &REPLY_MEMBERS)
            .map_err(|_| internal(format!("the reply is not JSON: {}", shown(text))))?;
        let [id, result, error] = members.ok_or_else(|| internal(format!("not a JSON-RPC reply: {}", shown(text))))?;
        Ok(Envelope { id, result, error })
    }

    /// The error member as an [`RpcError`], when there is one.
    #[must_use]
    pub fn rpc_error(&self) -> Option<RpcError> {
        let error = self.error?;
        #[derive(serde::Deserialize)]
        struct Fields<'b> {
            code: Option<i64>,
            #[serde(borrow)]
            message: Option<std::borrow::Cow<'b, str>>,
            #[serde(borrow)]
            data: Option<&'b serde_json::value::RawValue>,
        }
        match serde_json::from_str::<Fields<'_>>(error) {
            Ok(fields) => Some(RpcError {
                code: fields.code.unwrap_or(-32603),
                message: fields.message.map(|m| m.into_owned()).unwrap_or_default(),
                data: fields.data.map(|d| d.get().to_owned()),
            }),
            Err(_) => Some(internal(format!("a malformed error: {}", shown(error)))),
        }
    }
}

/// The members of a reply that matter, in [`Envelope`]'s order.
const REPLY_MEMBERS: [&str; 3] = ["id", "result", "error"];

fn shown(text: &str) -> String {
    let cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        format!("{cut}...")
    } else {
        cut
    }
}

/// One call's reply.
#[derive(Debug, Clone)]
pub struct Response {
    status: Option<u16>,
    body: Vec<u8>,
    /// Where its members are, scanned once: the id check and `result_bytes` each read a
    /// 2 MB reply whole before (UTF-8 and JSON both times).
    scanned: std::cell::OnceCell<std::result::Result<Spans, RpcError>>,
}

impl PartialEq for Response {
    fn eq(&self, other: &Self) -> bool {
        self.status == other.status && self.body == other.body
    }
}

impl Eq for Response {}

/// Where a reply's `id`, `result` and `error` members' values are in its text, as
/// `(start, end)` byte offsets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spans {
    /// The `id` member's value.
    pub id: Option<(usize, usize)>,
    /// The `result` member's value.
    pub result: Option<(usize, usize)>,
    /// The `error` member's value.
    pub error: Option<(usize, usize)>,
}

impl Spans {
    /// Check that `body` is one JSON text by the core's rule (what the servers accept) and
    /// find its members, in one pass: a value that is not an object has none; of repeated
    /// names the last counts, as in a dict. `None` when it is not JSON, or names a member
    /// with a lone surrogate escape (`"\ud800"`), which the caller's slower path reads.
    #[must_use]
    pub fn check(body: &[u8]) -> Option<Spans> {
        let text = ucall_core::jsonrpc::as_text(body)?;
        let members = ucall_core::jsonrpc::message::object_members(text, &REPLY_MEMBERS).ok()?;
        let [id, result, error] = members.unwrap_or_default();
        let span = |member: Option<&str>| member.and_then(|part| offsets(part, body));
        Some(Spans {
            id: span(id),
            result: span(result),
            error: span(error),
        })
    }

    fn of(envelope: &Envelope<'_>, body: &[u8]) -> Self {
        Spans {
            id: envelope.id.and_then(|part| offsets(part, body)),
            result: envelope.result.and_then(|part| offsets(part, body)),
            error: envelope.error.and_then(|part| offsets(part, body)),
        }
    }
}

/// Where `part`, a slice of `whole`, is in it.
fn offsets(part: &str, whole: &[u8]) -> Option<(usize, usize)> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some((start, start + part.len()))
}

impl Drop for Response {
    fn drop(&mut self) {
        // A large body's buffer serves the next large reply or request (fresh pages cost
        // more than the copy into them); the process keeps a few (`ucall_core::buffer`).
        ucall_core::buffer::keep(std::mem::take(&mut self.body));
    }
}

impl Response {
    /// A reply with this HTTP status (if any) and JSON body.
    #[must_use]
    pub fn new(status: Option<u16>, body: Vec<u8>) -> Self {
        Response {
            status,
            body,
            scanned: std::cell::OnceCell::new(),
        }
    }

    /// The reply's JSON text.
    #[must_use]
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The reply's JSON text, moved out.
    #[must_use]
    pub fn into_body(mut self) -> Vec<u8> {
        std::mem::take(&mut self.body)
    }

    /// The HTTP status (`None` over raw TCP and WebSocket).
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The members, scanned.
    ///
    /// # Errors
    /// The reply is not a JSON object.
    pub fn envelope(&self) -> std::result::Result<Envelope<'_>, RpcError> {
        let spans = self.scanned.get_or_init(|| {
            if self.body.is_empty() {
                return Err(internal(format!("an empty reply (HTTP {})", self.status.unwrap_or(0))));
            }
            match Envelope::parse(&self.body) {
                Ok(envelope) => Ok(Spans::of(&envelope, &self.body)),
                Err(mut error) => {
                    if let Some(status) = self.status.filter(|&s| s != 200) {
                        error.message = format!("HTTP {status}: {}", error.message);
                    }
                    Err(error)
                }
            }
        });
        let spans = spans.clone()?;
        // SAFETY: the body was checked to be UTF-8 when it was scanned, and the spans are
        // where the scan found the members, on character boundaries (JSON punctuation).
        let text = unsafe { std::str::from_utf8_unchecked(&self.body) };
        let part = |span: Option<(usize, usize)>| span.map(|(start, end)| &text[start..end]);
        Ok(Envelope {
            id: part(spans.id),
            result: part(spans.result),
            error: part(spans.error),
        })
    }

    /// The result's JSON text, or the error.
    ///
    /// # Errors
    /// The reply is an error (or not a reply).
    pub fn result_json(&self) -> std::result::Result<&str, RpcError> {
        let envelope = self.envelope()?;
        if let Some(error) = envelope.rpc_error() {
            return Err(error);
        }
        envelope
            .result
            .ok_or_else(|| internal("a reply with neither result nor error"))
    }

    /// The result decoded as `T`.
    ///
    /// # Errors
    /// The reply is an error, or its result is not a `T` (code -32603).
    pub fn result<T: serde::de::DeserializeOwned>(&self) -> std::result::Result<T, RpcError> {
        let raw = self.result_json()?;
        serde_json::from_str(raw).map_err(|e| internal(format!("the result {}: {e}", shown(raw))))
    }

    /// The result as bytes: a base64 string decoded (SIMD) with no intermediate string.
    ///
    /// # Errors
    /// The reply is an error, or its result is not a base64 string (code -32603).
    pub fn result_bytes(&self) -> std::result::Result<Vec<u8>, RpcError> {
        let raw = self.result_json()?;
        let text = raw
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .ok_or_else(|| internal(format!("the result is {}, not bytes (a base64 string)", shown(raw))))?;
        let not_base64 = || internal(format!("the result is {}, not bytes (a base64 string)", shown(raw)));
        let len = base64_decoded_len(text.as_bytes()).ok_or_else(not_base64)?;
        let mut out = Vec::with_capacity(len);
        if !base64_decode_into(text.as_bytes(), &mut out.spare_capacity_mut()[..len]) {
            return Err(not_base64());
        }
        // SAFETY: the decoder initialised all `len` bytes (it reported exactly `len` written).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// The reply's id as JSON text.
    #[must_use]
    pub fn id(&self) -> Option<&str> {
        self.envelope().ok().and_then(|e| e.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_written_in_one_buffer() {
        let mut out = Vec::new();
        write_request(&mut out, "sum", &&[1, 2], Some(7)).expect("json");
        assert_eq!(out, br#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":7}"#);
        out.clear();
        write_request(&mut out, "ping", &NoParams, None).expect("json");
        assert_eq!(out, br#"{"jsonrpc":"2.0","method":"ping"}"#);
    }

    #[test]
    fn replies_are_read_without_decoding_the_result() {
        let ok = Response::new(Some(200), br#"{"jsonrpc":"2.0","id":3,"result":"AAEC"}"#.to_vec());
        assert_eq!(ok.id(), Some("3"));
        assert_eq!(ok.result_bytes().expect("bytes"), [0, 1, 2]);
        let error = Response::new(
            None,
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"nope","data":[1]}}"#.to_vec(),
        );
        let error = error.result::<i64>().expect_err("an error");
        assert_eq!(
            (error.code, error.message.as_str(), error.data.as_deref()),
            (-32601, "nope", Some("[1]"))
        );
        let number = Response::new(None, br#"{"jsonrpc":"2.0","id":3,"result":3}"#.to_vec());
        assert!(number
            .result_bytes()
            .expect_err("not bytes")
            .message
            .contains("not bytes"));
        assert!(Response::new(None, b"nope".to_vec()).result::<i64>().is_err());
    }

    #[test]
    fn replies_are_checked_by_the_cores_rule_and_their_members_found() {
        let body = br#" {"id":1,"result":"a","\u0072esult":"b","error":null} "#;
        let spans = Spans::check(body).expect("JSON");
        let text = |span: Option<(usize, usize)>| span.map(|(start, end)| &body[start..end]);
        assert_eq!(text(spans.result), Some(&br#""b""#[..]), "the last of repeated names");
        assert_eq!(text(spans.id), Some(&b"1"[..]));
        assert_eq!(text(spans.error), Some(&b"null"[..]));
        assert_eq!(
            Spans::check(b"[1,2]"),
            Some(Spans::default()),
            "not an object: no members"
        );
        for bad in [&b"{"[..], b"{\"a\":1} x", b"\"\\udjso\"", b"\"\xff\""] {
            assert_eq!(Spans::check(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_reply_is_scanned_once_and_compared_by_its_text() {
        let body = br#"{"jsonrpc":"2.0","id":3,"result":"AAE"}"#.to_vec();
        let (read, unread) = (Response::new(Some(200), body.clone()), Response::new(Some(200), body));
        assert_eq!(read.result_bytes().expect("bytes, unpadded as the rule allows"), [0, 1]);
        assert_eq!(read.result_json().expect("again, from the scan"), r#""AAE""#);
        assert_eq!(read, unread);
        let empty = Response::new(Some(502), Vec::new());
        for _ in 0..2 {
            assert!(empty
                .result_json()
                .expect_err("empty")
                .message
                .contains("an empty reply (HTTP 502)"));
        }
        let cut = Response::new(Some(500), br#"{"jsonrpc":"2.0","#.to_vec());
        assert!(cut
            .result_json()
            .expect_err("not JSON")
            .message
            .starts_with("HTTP 500: "));
    }
}
