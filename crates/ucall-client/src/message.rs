// SPDX-License-Identifier: Apache-2.0
//! JSON-RPC 2.0 messages on the client side: requests written straight into their
//! buffer (params, base64 `bytes` included), replies read without copying their result.

use serde::Serialize;
use ucall_core::jsonrpc::attachment::{self, Attachment, Dtype};
use ucall_core::jsonrpc::section::{self, Element, Section};
use ucall_core::Bytes;

use crate::base64::{base64_decode_into, base64_decoded_len, write_base64};
use crate::error::{Error, Result};
use crate::framing::Reply;

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

    /// Whether some value is an attachment ([`Params::attachment`], [`Params::ndarray`]),
    /// which a binary message carries apart from the JSON text.
    fn has_attachments(&self) -> bool {
        false
    }

    /// Append the params' JSON as [`ToParams::write_params`] does, but with each attachment
    /// written as a placeholder and its bytes kept in `section` (docs/wire.md §2); `base` is
    /// where the JSON text starts in `out`.
    ///
    /// # Errors
    /// As [`ToParams::write_params`].
    fn write_binary(&self, out: &mut Vec<u8>, base: usize, section: &mut Section) -> Result<bool> {
        let _ = (base, section);
        self.write_params(out)
    }

    /// These params as [`Params`], when they are: a [`crate::Batch`] keeps their
    /// attachments apart from its text, to send them in either form.
    #[doc(hidden)]
    fn as_params(&self) -> Option<&Params> {
        None
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
///
/// Attachments ([`Params::attachment`], [`Params::ndarray`], [`Params::ndarray_of`])
/// travel as raw bytes after the JSON text where the call goes as a binary message
/// (docs/wire.md), and in their plain JSON form anywhere else: base64 for bytes, the
/// base64 of an array's `.npy` form (what UCall servers read for an array):
///
/// ```
/// use ucall_client::{Dtype, Params};
/// let params = Params::array().attachment(b"hi".to_vec()).ndarray_of(&[2], vec![1.5f32, -2.0]);
/// assert!(params.as_json().starts_with(r#"["aGk=","k05VTVBZ"#)); // base64 of b"\x93NUMPY"
/// let raw = Params::object().named_ndarray("x", Dtype::Uint8, &[2, 2], vec![1u8, 2, 3, 4]);
/// assert!(raw.as_json().starts_with(r#"{"x":""#));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Params {
    text: Vec<u8>,
    /// What ends the text: `]`, `}`, or nothing (a whole request).
    close: &'static [u8],
    error: Option<String>,
    /// Attachments, each where its value goes in `text`, in order.
    holes: Vec<Hole>,
}

/// An attachment of [`Params`]: its bytes, where its value goes, and for an array its
/// dtype and shape.
#[derive(Debug, Clone)]
struct Hole {
    at: usize,
    bytes: Bytes,
    array: Option<(Dtype, Vec<usize>)>,
}

impl Params {
    /// Params by position: `[...]`.
    pub fn array() -> Self {
        Params {
            text: vec![b'['],
            close: b"]",
            error: None,
            holes: Vec::new(),
        }
    }

    /// Params by name: `{...}`.
    pub fn object() -> Self {
        Params {
            text: vec![b'{'],
            close: b"}",
            error: None,
            holes: Vec::new(),
        }
    }

    /// Params that start as `json`, a JSON array or object (as text), to which more values
    /// are appended: positional ones to an array, named ones to an object.
    ///
    /// # Errors
    /// `json` is not one JSON text, or not an array or object.
    pub fn from_json(json: &str) -> Result<Self> {
        CheckedJson::new(Some(json))?;
        let json = json.trim_matches([' ', '\t', '\r', '\n']);
        let mut params = match json.as_bytes().first() {
            Some(b'[') => Params::array(),
            Some(b'{') => Params::object(),
            _ => return Err(Error::invalid("params are neither a JSON array nor an object")),
        };
        let inner = json[1..json.len() - 1].trim_matches([' ', '\t', '\r', '\n']);
        params.text.extend_from_slice(inner.as_bytes());
        Ok(params)
    }

    fn comma(&mut self) {
        if self.text.len() > 1 || !self.holes.is_empty() {
            self.text.push(b',');
        }
    }

    fn hole(&mut self, bytes: Bytes, array: Option<(Dtype, &[usize])>) {
        if let Some((dtype, shape)) = array {
            let size = shape.iter().try_fold(dtype.size(), |size, &dim| size.checked_mul(dim));
            if size != Some(bytes.len()) {
                self.error.get_or_insert(format!(
                    "an array of {} bytes is not {shape:?} {} elements",
                    bytes.len(),
                    dtype.name()
                ));
            }
        }
        self.holes.push(Hole {
            at: self.text.len(),
            bytes,
            array: array.map(|(dtype, shape)| (dtype, shape.to_vec())),
        });
    }

    /// Append bytes (to an array), an attachment of a binary message: `data` is kept, not
    /// copied, until the request is written (`Vec<u8>` and `Bytes` move in; copy a slice
    /// with `Bytes::copy_from_slice`). Base64 where the call goes as plain JSON.
    pub fn attachment(mut self, data: impl Into<Bytes>) -> Self {
        self.comma();
        self.hole(data.into(), None);
        self
    }

    /// Add named bytes (to an object), as [`Params::attachment`].
    pub fn named_attachment(mut self, name: &str, data: impl Into<Bytes>) -> Self {
        self.key(name);
        self.hole(data.into(), None);
        self
    }

    /// Append an n-dimensional array (to an array): `data` holds `shape`'s elements of
    /// `dtype` in C order, little-endian. An attachment of a binary message, the base64
    /// of its `.npy` form in plain JSON. Data whose length does not match fails the call
    /// when it is made.
    pub fn ndarray(mut self, dtype: Dtype, shape: &[usize], data: impl Into<Bytes>) -> Self {
        self.comma();
        self.hole(data.into(), Some((dtype, shape)));
        self
    }

    /// Add a named array (to an object), as [`Params::ndarray`].
    pub fn named_ndarray(mut self, name: &str, dtype: Dtype, shape: &[usize], data: impl Into<Bytes>) -> Self {
        self.key(name);
        self.hole(data.into(), Some((dtype, shape)));
        self
    }

    /// Append a typed array (to an array): a `Vec<f32>` (or of any `i8` .. `u64`, `f64`)
    /// of `shape`, sent from the vector's own memory.
    pub fn ndarray_of<T: Element>(self, shape: &[usize], data: Vec<T>) -> Self {
        self.ndarray(T::DTYPE, shape, section::typed_bytes(data))
    }

    /// Add a named typed array (to an object), as [`Params::ndarray_of`].
    pub fn named_ndarray_of<T: Element>(self, name: &str, shape: &[usize], data: Vec<T>) -> Self {
        self.named_ndarray(name, T::DTYPE, shape, section::typed_bytes(data))
    }

    /// Write the text with each hole filled: a placeholder with `section`, else the plain
    /// JSON form.
    fn write_filled(&self, out: &mut Vec<u8>, base: usize, mut section: Option<&mut Section>) -> Result<()> {
        if let Some(error) = &self.error {
            return Err(Error::invalid(format!("params: {error}")));
        }
        let mut copied = 0;
        for hole in &self.holes {
            out.extend_from_slice(&self.text[copied..hole.at]);
            copied = hole.at;
            let writer = section.as_deref_mut();
            match &hole.array {
                None => section::write_bytes(out, base, writer, hole.bytes.clone()),
                Some((dtype, shape)) => section::write_array(out, base, writer, *dtype, shape, hole.bytes.clone())
                    .map_err(|why| Error::invalid(format!("params: {why}")))?,
            }
        }
        out.extend_from_slice(&self.text[copied..]);
        out.extend_from_slice(self.close);
        Ok(())
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

    /// The length of the text around the attachments (a placeholder is under 128 bytes).
    fn text_hint(&self) -> usize {
        self.text.len() + 1 + 128 * self.holes.len()
    }

    /// Append one request to the text (a batch's element, `self` the batch's `[...`), the
    /// attachments of `params` kept as this text's own, to be written in either form.
    pub(crate) fn push_request(
        &mut self,
        separated: bool,
        method: &str,
        params: &dyn ToParams,
        id: Option<u64>,
    ) -> Result<()> {
        let Params { text, holes, .. } = self;
        let mark = (text.len(), holes.len());
        if separated {
            text.push(b',');
        }
        let written = match params.as_params() {
            Some(inner) if inner.has_attachments() => write_envelope(text, method, inner.text_hint(), id, &mut |out| {
                if let Some(error) = &inner.error {
                    return Err(Error::invalid(format!("params: {error}")));
                }
                let base = out.len();
                out.extend_from_slice(&inner.text);
                out.extend_from_slice(inner.close);
                holes.extend(inner.holes.iter().map(|hole| Hole {
                    at: base + hole.at,
                    ..hole.clone()
                }));
                Ok(true)
            }),
            _ => write_request(text, method, params, id),
        };
        if written.is_err() {
            text.truncate(mark.0);
            holes.truncate(mark.1);
        }
        written
    }

    /// One whole request, its attachments kept apart as a batch's are, to be written in
    /// either form when it is sent ([`crate::Multiplexed::submit_call`]).
    pub(crate) fn request(method: &str, params: &dyn ToParams, id: Option<u64>) -> Result<Self> {
        let mut request = Params {
            text: Vec::new(),
            close: b"",
            error: None,
            holes: Vec::new(),
        };
        request.push_request(false, method, params, id)?;
        Ok(request)
    }

    /// The bytes of the text and of the attachments.
    pub(crate) fn wire_len(&self) -> usize {
        self.text.len() + self.holes.iter().map(|hole| hole.bytes.len()).sum::<usize>()
    }

    /// Write the text with each attachment as a placeholder kept in `section`, or (`None`)
    /// in its plain JSON form.
    ///
    /// # Errors
    /// An array whose data does not match its shape.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>, section: Option<&mut Section>) -> Result<()> {
        self.write_filled(out, 0, section)
    }

    /// The params' JSON text (attachments in their plain JSON form).
    #[must_use]
    pub fn as_json(&self) -> String {
        let mut text = Vec::new();
        if self.write_filled(&mut text, 0, None).is_err() {
            text = self.text.clone();
            text.extend_from_slice(self.close);
        }
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
        self.write_filled(out, 0, None)?;
        Ok(true)
    }

    fn len_hint(&self) -> usize {
        // Each attachment's base64 (and an array's `.npy` header) in plain JSON.
        let holes: usize = self
            .holes
            .iter()
            .map(|hole| crate::base64::encoded_len(hole.bytes.len() + 256) + 2)
            .sum();
        self.text.len() + 1 + holes
    }

    fn has_attachments(&self) -> bool {
        !self.holes.is_empty()
    }

    fn write_binary(&self, out: &mut Vec<u8>, base: usize, section: &mut Section) -> Result<bool> {
        self.write_filled(out, base, Some(section))?;
        Ok(true)
    }

    fn as_params(&self) -> Option<&Params> {
        Some(self)
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
    write_envelope(out, method, params.len_hint(), id, &mut |out| params.write_params(out))
}

/// Append one request as the body of a binary message (docs/wire.md §1): the JSON text with
/// its attachments as placeholders, then (when there are any) zeros to a multiple of 64 and
/// the attachment section, each attachment copied once into it. Returns the JSON text's
/// length. `out` must be empty. (The client itself writes attachments from where they lie:
/// [`write_attached_request`].)
///
/// # Errors
/// Params with no JSON form; `out` then holds a partial text.
pub fn write_binary_request(out: &mut Vec<u8>, method: &str, params: &dyn ToParams, id: Option<u64>) -> Result<usize> {
    let mut section = Section::new();
    write_attached_request(out, method, params, id, &mut section)?;
    let json_len = out.len();
    if !section.is_empty() {
        let start = ucall_core::wire::align(json_len);
        ucall_core::buffer::reserve(out, start + section.len() - json_len);
        for part in section.parts() {
            out.resize(start + part.offset, 0);
            out.extend_from_slice(&part.bytes);
        }
        out.resize(start + section.len(), 0);
    }
    Ok(json_len)
}

/// Append one request's JSON text with its attachments as placeholders, keeping their
/// bytes (not copied) in `section`, after any it holds: several requests written with one
/// section share it, as a batch's calls do (docs/wire.md §4). `out` holds only this
/// message's text (placeholders count from its start).
///
/// # Errors
/// Params with no JSON form; `out` then holds a partial text.
pub fn write_attached_request(
    out: &mut Vec<u8>,
    method: &str,
    params: &dyn ToParams,
    id: Option<u64>,
    section: &mut Section,
) -> Result<()> {
    // The hint counts attachments in base64; here only the text around them is written.
    let hint = params.as_params().map_or_else(|| params.len_hint(), Params::text_hint);
    write_envelope(out, method, hint, id, &mut |out| params.write_binary(out, 0, section))
}

fn write_envelope(
    out: &mut Vec<u8>,
    method: &str,
    hint: usize,
    id: Option<u64>,
    params: &mut dyn FnMut(&mut Vec<u8>) -> Result<bool>,
) -> Result<()> {
    // The envelope, `{"jsonrpc":"2.0","method":"","params":,"id":}` with a 20-digit id, is 65 bytes.
    ucall_core::buffer::reserve(out, 72 + method.len() + hint);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    serde_json::to_writer(&mut *out, method).map_err(|e| Error::invalid(e.to_string()))?;
    let mark = out.len();
    out.extend_from_slice(b",\"params\":");
    if !params(out)? {
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
    /// A binary reply: the JSON text's length in `body`, the section after its padding.
    binary: Option<usize>,
    /// The section of a batch's binary reply that this call's reply is part of, shared
    /// with its other calls' replies (`body` is then the call's JSON text alone).
    shared_section: Option<Bytes>,
    /// Where its members are, scanned once: the id check and `result_bytes` each read a
    /// 2 MB reply whole before (UTF-8 and JSON both times).
    scanned: std::cell::OnceCell<std::result::Result<Spans, RpcError>>,
}

impl PartialEq for Response {
    fn eq(&self, other: &Self) -> bool {
        self.status == other.status
            && self.body() == other.body()
            && self.is_binary() == other.is_binary()
            && self.section() == other.section()
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
        // more than the copy into them), kept up to a budget (`crate::reply_buffers`).
        crate::reply_buffers::give(std::mem::take(&mut self.body));
    }
}

impl Response {
    /// A reply with this HTTP status (if any) and JSON body.
    #[must_use]
    pub fn new(status: Option<u16>, body: Vec<u8>) -> Self {
        Response {
            status,
            body,
            binary: None,
            shared_section: None,
            scanned: std::cell::OnceCell::new(),
        }
    }

    /// One call's reply out of a batch's binary reply: its JSON text, and the batch's
    /// attachment section (shared, not copied).
    pub(crate) fn in_batch(status: Option<u16>, body: Vec<u8>, section: Bytes) -> Self {
        Response {
            status,
            binary: Some(body.len()),
            body,
            shared_section: Some(section),
            scanned: std::cell::OnceCell::new(),
        }
    }

    /// The reply as framed off the wire: a JSON text, or a binary message's body.
    #[must_use]
    pub fn from_reply(reply: Reply) -> Self {
        Response {
            status: reply.status,
            body: reply.body,
            binary: reply.binary,
            shared_section: None,
            scanned: std::cell::OnceCell::new(),
        }
    }

    /// A message whose value at `span` (byte offsets in its JSON text) reads as its
    /// result: a streamed item (`params.item` of a `ucall.stream` notification).
    pub(crate) fn with_result_at(reply: Reply, span: (usize, usize)) -> Self {
        let response = Response::from_reply(reply);
        let spans = Spans {
            result: Some(span),
            ..Spans::default()
        };
        let _ = response.scanned.set(Ok(spans));
        response
    }

    /// The reply's JSON text (of a binary reply, the text before its attachments).
    #[must_use]
    pub fn body(&self) -> &[u8] {
        &self.body[..self.binary.unwrap_or(self.body.len())]
    }

    /// The reply's JSON text, moved out.
    #[must_use]
    pub fn into_body(mut self) -> Vec<u8> {
        let mut body = std::mem::take(&mut self.body);
        body.truncate(self.binary.unwrap_or(body.len()));
        body
    }

    /// Whether the reply came as a binary message (docs/wire.md), attachments after its
    /// JSON text; placeholders in its result name them ([`Response::attachment`]).
    #[must_use]
    pub fn is_binary(&self) -> bool {
        self.binary.is_some()
    }

    /// The attachment section of a binary reply (empty for a JSON one).
    #[must_use]
    pub fn section(&self) -> &[u8] {
        if let Some(shared) = &self.shared_section {
            return shared;
        }
        match self.binary {
            Some(json_len) => ucall_core::wire::split_body(&self.body, json_len).map_or(&[], |(_, section)| section),
            None => &[],
        }
    }

    /// The attachment that `raw`, a value of this reply's result as JSON text (the whole
    /// result, or a part of it found with serde's `RawValue`), names when it is a
    /// placeholder: its bytes where they lie in the reply, and an array's dtype and shape.
    /// `Ok(None)` when `raw` is no placeholder, and for a JSON reply, where an object
    /// with a `$ucall` member is ordinary data (docs/wire.md §2).
    ///
    /// # Errors
    /// A placeholder that breaks a rule of docs/wire.md §2 (code -32603, the rule named).
    pub fn attachment<'a>(&'a self, raw: &'a str) -> std::result::Result<Option<Attachment<'a>>, RpcError> {
        if self.binary.is_none() {
            return Ok(None);
        }
        attachment::resolve(raw.trim(), self.section())
            .map_err(|why| internal(format!("a malformed placeholder in the reply: {why}: {}", shown(raw))))
    }

    /// The result as an attachment: the bytes a binary reply's result placeholder names,
    /// where they lie in the reply (no copy, no base64 pass).
    ///
    /// # Errors
    /// The reply is an error, or its result is not a placeholder (code -32603).
    pub fn result_attachment(&self) -> std::result::Result<Attachment<'_>, RpcError> {
        self.result_attachment_at("")
    }

    /// The attachment a placeholder at the JSON Pointer `pointer` (RFC 6901) in the result
    /// names: `""` the result itself, `/image` its member `image`, `/0` its first element.
    ///
    /// # Errors
    /// The reply is an error, nothing is at `pointer`, or the value there is not a
    /// placeholder of a binary reply (code -32603).
    pub fn result_attachment_at(&self, pointer: &str) -> std::result::Result<Attachment<'_>, RpcError> {
        let raw = self.result_json()?;
        let value = ucall_core::Param::in_message(raw, Some(self.section()))
            .pointer(pointer)
            .ok_or_else(|| internal(format!("nothing at {pointer:?} in the result {}", shown(raw))))?;
        self.attachment(value.raw())?.ok_or_else(|| {
            internal(format!(
                "the result at {pointer:?} is {}, not an attachment",
                shown(value.raw())
            ))
        })
    }

    /// The result as an array of `T` and its shape: an `ndarray` attachment of a binary
    /// reply, viewed where it lies when its address suits `T` (a body read into memory
    /// of ordinary alignment does; else copied), or the plain JSON form a UCall server
    /// writes for any other caller, the base64 of a `.npy` file (decoded and copied).
    ///
    /// # Errors
    /// The reply is an error, or its result is not an array of `T` (code -32603).
    pub fn result_array<T: Element>(&self) -> std::result::Result<crate::Array<'_, T>, RpcError> {
        let raw = self.result_json()?;
        if let Some(found) = self.attachment(raw)? {
            return found.to_array().map_err(|why| internal(format!("the result is {why}")));
        }
        let npy = self.result_bytes()?;
        crate::array::from_npy(&npy).map_err(|why| internal(format!("the result is not an array: {why}")))
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
            if self.body().is_empty() {
                return Err(internal(format!("an empty reply (HTTP {})", self.status.unwrap_or(0))));
            }
            match Envelope::parse(self.body()) {
                Ok(envelope) => Ok(Spans::of(&envelope, self.body())),
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
        let text = unsafe { std::str::from_utf8_unchecked(self.body()) };
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
        if let Some(found) = self.attachment(raw)? {
            return Ok(found.bytes.to_vec());
        }
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

    fn binary_reply(json: &[u8], section: &[u8]) -> Response {
        let mut body = json.to_vec();
        body.resize(ucall_core::wire::align(json.len()), 0);
        body.extend_from_slice(section);
        Response::from_reply(Reply {
            status: None,
            body,
            close: false,
            binary: Some(json.len()),
        })
    }

    #[test]
    fn binary_replies_hand_out_attachments_and_refuse_broken_placeholders() {
        let mut section = b"foo".to_vec();
        section.resize(64, 0);
        section.extend_from_slice(&[1.5f32, -2.0].map(f32::to_le_bytes).concat());
        let bytes = binary_reply(
            br#"{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":0,"length":3},"id":1}"#,
            &section,
        );
        assert_eq!(bytes.id(), Some("1"));
        assert_eq!(bytes.result_attachment().expect("bytes").bytes, b"foo");
        assert_eq!(bytes.result_bytes().expect("bytes"), b"foo");
        assert!(bytes.body().ends_with(b"\"id\":1}"), "the JSON text only");
        let array = binary_reply(
            br#"{"jsonrpc":"2.0","result":{"$ucall":"ndarray","offset":64,"length":8,"dtype":"float32","shape":[2]},"id":1}"#,
            &section,
        );
        let floats = array.result_array::<f32>().expect("an array");
        assert_eq!((floats.shape.as_slice(), &*floats.data), (&[2][..], &[1.5, -2.0][..]));
        assert!(array
            .result_array::<i32>()
            .expect_err("not int32")
            .message
            .contains("of float32, not of int32"));
        for (broken, rule) in [
            (&br#"{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":0,"length":99},"id":1}"#[..], "passes the end"),
            (br#"{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":1,"length":1},"id":1}"#, "multiple of 64"),
            (br#"{"jsonrpc":"2.0","result":{"$ucall":"ndarray","offset":64,"length":8,"dtype":"float32","shape":[3]},"id":1}"#, "shape"),
        ] {
            let error = binary_reply(broken, &section).result_bytes().expect_err("broken");
            assert!(error.message.contains("a malformed placeholder in the reply") && error.message.contains(rule), "{}", error.message);
        }
        let nested = binary_reply(
            br#"{"jsonrpc":"2.0","result":{"label":3,"images":[{"$ucall":"bytes","offset":0,"length":3}]},"id":1}"#,
            &section,
        );
        assert_eq!(nested.result_attachment_at("/images/0").expect("found").bytes, b"foo");
        assert!(nested
            .result_attachment_at("/label")
            .expect_err("a number")
            .message
            .contains("not an attachment"));
        assert!(nested
            .result_attachment_at("/images/1")
            .expect_err("none")
            .message
            .contains("nothing at"));
        // In a JSON reply a `$ucall` object is data.
        let plain = Response::new(
            None,
            br#"{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":0,"length":0},"id":1}"#.to_vec(),
        );
        assert!(plain.result_attachment().is_err());
        assert_eq!(
            plain.attachment(r#"{"$ucall":"bytes","offset":0,"length":0}"#),
            Ok(None)
        );
    }

    #[test]
    fn params_with_attachments_have_both_forms() {
        let params = Params::object()
            .named("a", &1)
            .named_attachment("b", b"hi".to_vec())
            .named_ndarray_of("c", &[1], vec![7u8]);
        let plain = params.as_json();
        assert!(plain.starts_with(r#"{"a":1,"b":"aGk=","c":"k05VTVBZ"#), "{plain}");
        let mut body = Vec::new();
        let json_len = write_binary_request(&mut body, "f", &params, None).expect("a body");
        let json = std::str::from_utf8(&body[..json_len]).expect("text");
        assert_eq!(
            json,
            r#"{"jsonrpc":"2.0","method":"f","params":{"a":1,"b":{"$ucall":"bytes","offset":0,"length":2},"c":{"$ucall":"ndarray","offset":64,"length":1,"dtype":"uint8","shape":[1]}}}"#
        );
        let section = ucall_core::wire::align(json_len);
        assert!(body[json_len..section].iter().all(|&b| b == 0));
        assert_eq!(&body[section..section + 2], b"hi");
        assert_eq!(body[section + 64..], [7]);
        let wrong = Params::array().ndarray(Dtype::Float32, &[3], vec![0u8; 8]);
        let mut out = Vec::new();
        let error = write_request(&mut out, "f", &wrong, None).expect_err("12 bytes, not 8");
        assert!(
            error
                .message()
                .contains("an array of 8 bytes is not [3] float32 elements"),
            "{error}"
        );
        assert!(!Params::array().bytes(b"x").has_attachments());
        let extended = Params::from_json(" [1, 2] ")
            .expect("an array")
            .attachment(b"x".to_vec());
        assert_eq!(extended.as_json(), r#"[1, 2,"eA=="]"#);
        let empty = Params::from_json("{ }")
            .expect("an object")
            .named_attachment("b", b"x".to_vec());
        assert_eq!(empty.as_json(), r#"{"b":"eA=="}"#);
        for bad in ["3", "[1", "\"a\""] {
            assert!(Params::from_json(bad).is_err(), "{bad}");
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
