// SPDX-License-Identifier: Apache-2.0
//! A call's params, read by one set of rules for every front end (the Rust API, the C API
//! and the Python binding): a parameter found by name, by position or by JSON Pointer
//! (RFC 6901), as an integer, a number, a boolean, text, raw JSON or bytes (base64, see
//! [`base64`], or in a binary message an attachment its placeholder names, see
//! docs/wire.md).
//!
//! Params stay raw text borrowed from the request, which the parser has validated; a
//! lookup walks that text (`jsonrpc::scan`) without parsing it again, and nothing is
//! allocated unless a string has escapes.

pub mod base64;

use std::borrow::Cow;

use serde::Deserialize;

use crate::jsonrpc::attachment::{self, Array, Attachment};
use crate::jsonrpc::scan::{cold_decode_string, key_equals, Elements, Members};
use crate::jsonrpc::section::Element;
use crate::jsonrpc::RpcError;

/// One JSON value of the params (a parameter, or a value nested in one), as raw text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param<'a> {
    raw: &'a str,
    /// The attachment section of the binary message the value came in; `None` in a plain
    /// JSON text, where placeholders are ordinary objects.
    section: Option<&'a [u8]>,
}

impl<'a> Param<'a> {
    /// A view of `raw`, which must be one valid JSON value without surrounding whitespace
    /// (what the request parser and the lookups hand out). On other text the accessors
    /// answer `None` rather than fail.
    #[must_use]
    pub fn new(raw: &'a str) -> Self {
        Param { raw, section: None }
    }

    /// A view of `raw` from a binary message whose attachment section is `section`.
    #[must_use]
    pub fn in_message(raw: &'a str, section: Option<&'a [u8]>) -> Self {
        Param { raw, section }
    }

    /// The attachment section of the binary message the value came in.
    #[must_use]
    pub fn section(self) -> Option<&'a [u8]> {
        self.section
    }

    /// A value nested in this one, from the same message.
    fn child(self, raw: &'a str) -> Self {
        Param { raw, ..self }
    }

    /// The attachment this value's placeholder names: `None` when the value is no
    /// placeholder or not in a binary message.
    ///
    /// # Errors
    /// The rule of docs/wire.md §2 an invalid placeholder breaks.
    pub fn attachment(self) -> Result<Option<Attachment<'a>>, &'static str> {
        match self.section {
            Some(section) => attachment::resolve(self.raw, section),
            None => Ok(None),
        }
    }

    /// Bytes: an attachment's, borrowed where the message lies, or a base64 string's,
    /// decoded. `None` for anything else, an invalid placeholder included.
    #[must_use]
    pub fn bytes_view(self) -> Option<Cow<'a, [u8]>> {
        match self.attachment() {
            Ok(Some(found)) => Some(Cow::Borrowed(found.bytes)),
            Ok(None) => self.with_base64(base64::decode).map(Cow::Owned),
            Err(_) => None,
        }
    }

    /// The value's JSON text, exactly as the client sent it.
    #[must_use]
    pub fn raw(self) -> &'a str {
        self.raw
    }

    /// Whether the value is a JSON number.
    #[must_use]
    pub fn is_number(self) -> bool {
        matches!(self.raw.as_bytes().first(), Some(b'-' | b'0'..=b'9'))
    }

    /// Whether the value is a JSON string.
    #[must_use]
    pub fn is_string(self) -> bool {
        self.raw.starts_with('"')
    }

    /// `true` or `false`; `None` for anything else (numbers are not booleans).
    #[must_use]
    pub fn as_bool(self) -> Option<bool> {
        match self.raw {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// An integer: a number without fraction or exponent that fits 64 bits (`-0` is 0;
    /// `1.0` and `1e3` are not integers).
    #[must_use]
    pub fn as_i64(self) -> Option<i64> {
        if self.is_number() {
            self.raw.parse().ok()
        } else {
            None
        }
    }

    /// Any number as a double, when it is finite as one (`1e400` is not).
    #[must_use]
    pub fn as_f64(self) -> Option<f64> {
        if self.is_number() {
            self.raw.parse::<f64>().ok().filter(|v| v.is_finite())
        } else {
            None
        }
    }

    /// A string's content, unescaped: borrowed from the request unless it has escapes.
    #[must_use]
    pub fn as_str(self) -> Option<Cow<'a, str>> {
        let inner = self.raw.strip_prefix('"')?.strip_suffix('"')?;
        if inner.contains('\\') {
            cold_decode_string(self.raw).map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(inner))
        }
    }

    /// Whether the value is a string equal to `text` once unescaped.
    #[must_use]
    pub fn str_equals(self, text: &str) -> bool {
        self.is_string() && key_equals(self.raw, text)
    }

    /// Run `decode` (built on [`base64`]) on the base64 text of a string value: first its
    /// raw content, and if that fails and it has escapes (`\/` is how some encoders write
    /// `/`), its content unescaped. A backslash is no base64 character, so the first try
    /// fails on escaped text, and clean text, the usual case, costs no extra pass.
    pub fn with_base64<T>(self, mut decode: impl FnMut(&[u8]) -> Option<T>) -> Option<T> {
        let inner = self.raw.strip_prefix('"')?.strip_suffix('"')?;
        decode(inner.as_bytes()).or_else(|| {
            if !inner.contains('\\') {
                return None;
            }
            decode(cold_decode_string(self.raw)?.as_bytes())
        })
    }

    /// The number of bytes a base64 string decodes to (its characters unchecked); `None`
    /// when the value is not a string or its length rules base64 out.
    #[must_use]
    pub fn bytes_len(self) -> Option<usize> {
        if let Ok(Some(found)) = self.attachment() {
            return Some(found.bytes.len());
        }
        self.with_base64(base64::decoded_len)
    }

    /// Decode a base64 string into the start of `out`; the number of bytes written, or
    /// `None` when the value is not a base64 string or `out` is too short (`out` may then
    /// hold partial output).
    #[must_use]
    pub fn bytes_into(self, out: &mut [u8]) -> Option<usize> {
        match self.attachment() {
            Ok(Some(found)) => {
                out.get_mut(..found.bytes.len())?.copy_from_slice(found.bytes);
                Some(found.bytes.len())
            }
            Ok(None) => self.with_base64(|text| base64::decode_to_slice(text, out)),
            Err(_) => None,
        }
    }

    /// The bytes (an attachment's, or a base64 string decoded) as a new vector.
    #[must_use]
    pub fn bytes(self) -> Option<Vec<u8>> {
        self.bytes_view().map(Cow::into_owned)
    }

    /// The elements of an array value (nothing for any other value).
    pub fn elements(self) -> impl Iterator<Item = Param<'a>> {
        let raw = if self.raw.starts_with('[') { self.raw } else { "" };
        Elements::new(raw).map(move |raw| self.child(raw))
    }

    /// The members of an object value as (name, value); the name is a string value
    /// (compare it with [`Param::str_equals`], read it with [`Param::as_str`]).
    pub fn members(self) -> impl Iterator<Item = (Param<'a>, Param<'a>)> {
        let raw = if self.raw.starts_with('{') { self.raw } else { "" };
        Members::new(raw).map(move |(key, value)| (self.child(key), self.child(value)))
    }

    /// The value that the JSON Pointer `pointer` (RFC 6901) names inside this one: `""`
    /// is this value, `/a/0` member `a`'s first element; `~1` stands for `/` and `~0` for
    /// `~` in a member name.
    #[must_use]
    pub fn pointer(self, pointer: &str) -> Option<Param<'a>> {
        if pointer.is_empty() {
            return Some(self);
        }
        let mut current = self;
        for token in pointer.strip_prefix('/')?.split('/') {
            let token = if token.contains('~') {
                Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
            } else {
                Cow::Borrowed(token)
            };
            current = match current.raw.as_bytes().first()? {
                b'{' => current.members().find(|(key, _)| key_equals(key.raw, &token))?.1,
                b'[' => {
                    // RFC 6901 §4: an array index is 0 or digits without a leading zero.
                    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
                    if !digits || (token.len() > 1 && token.starts_with('0')) {
                        return None;
                    }
                    current.elements().nth(token.parse().ok()?)?
                }
                _ => return None,
            };
        }
        Some(current)
    }
}

/// The `params` of a call: an array (positional), an object (named) or absent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Params<'a> {
    raw: Option<&'a str>,
    /// The binary message's attachment section (see [`Param::in_message`]).
    section: Option<&'a [u8]>,
}

impl<'a> Params<'a> {
    /// A view of `raw`, the params text of a validated request (an array or an object).
    #[must_use]
    pub fn new(raw: Option<&'a str>) -> Self {
        Params { raw, section: None }
    }

    /// The same params, from a binary message whose attachment section is `section`
    /// (`None`: a plain JSON text).
    #[must_use]
    pub fn with_section(self, section: Option<&'a [u8]>) -> Self {
        Params { section, ..self }
    }

    /// Whether the params came in a binary message (placeholders name attachments).
    #[must_use]
    pub fn in_binary_message(&self) -> bool {
        self.section.is_some()
    }

    /// The attachment section of the binary message the params came in.
    #[must_use]
    pub fn section(&self) -> Option<&'a [u8]> {
        self.section
    }

    /// What a bytes parameter may be, as an error says: in a plain JSON text what it always
    /// said, so that plain clients see no change.
    fn bytes_expected(&self) -> &'static str {
        if self.section.is_some() {
            "a base64 string or an attachment"
        } else {
            "a base64 string"
        }
    }

    fn param(&self, raw: &'a str) -> Param<'a> {
        Param::in_message(raw, self.section)
    }

    /// The raw JSON text, if params were sent.
    #[must_use]
    pub fn raw(&self) -> Option<&'a str> {
        self.raw
    }

    /// The params as one value, if they were sent.
    #[must_use]
    pub fn value(&self) -> Option<Param<'a>> {
        self.raw.map(|raw| self.param(raw))
    }

    /// Whether params are an object.
    #[must_use]
    pub fn is_named(&self) -> bool {
        self.raw.is_some_and(|r| r.starts_with('{'))
    }

    /// Whether params are an array.
    #[must_use]
    pub fn is_positional(&self) -> bool {
        self.raw.is_some_and(|r| r.starts_with('['))
    }

    /// Number of parameters sent.
    #[must_use]
    pub fn len(&self) -> usize {
        match self.raw {
            Some(raw) if raw.starts_with('{') => Members::new(raw).count(),
            Some(raw) => Elements::new(raw).count(),
            None => 0,
        }
    }

    /// Whether no parameter was sent.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every parameter's value, in the order sent (array elements or object members).
    pub fn values(&self) -> impl Iterator<Item = Param<'a>> {
        let value = self.value().unwrap_or(Param::new(""));
        value.elements().chain(value.members().map(|(_, v)| v))
    }

    /// The name of the member at `position` (in the order sent) when params are an
    /// object, as a string value.
    #[must_use]
    pub fn name_at(&self, position: usize) -> Option<Param<'a>> {
        self.value()?.members().nth(position).map(|(key, _)| key)
    }

    /// The named parameter, when params are an object holding it.
    #[must_use]
    pub fn named(&self, name: &str) -> Option<Param<'a>> {
        let raw = self.raw.filter(|r| r.starts_with('{'))?;
        Members::new(raw)
            .find(|(key, _)| key_equals(key, name))
            .map(|(_, value)| self.param(value))
    }

    /// The parameter at `position`, when params are an array that long.
    #[must_use]
    pub fn positional(&self, position: usize) -> Option<Param<'a>> {
        let raw = self.raw.filter(|r| r.starts_with('['))?;
        Elements::new(raw).nth(position).map(|raw| self.param(raw))
    }

    /// Parameter `name` (object params) or `position` (array params).
    #[must_use]
    pub fn at(&self, position: usize, name: &str) -> Option<Param<'a>> {
        if self.is_named() {
            self.named(name)
        } else {
            self.positional(position)
        }
    }

    /// The value the JSON Pointer `pointer` (RFC 6901) names in the params: `/point/x`,
    /// `/0/name` (see [`Param::pointer`]).
    #[must_use]
    pub fn pointer(&self, pointer: &str) -> Option<Param<'a>> {
        self.value()?.pointer(pointer)
    }

    /// Raw text of the named parameter, when params are an object holding it.
    #[must_use]
    pub fn named_raw(&self, name: &str) -> Option<&'a str> {
        self.named(name).map(Param::raw)
    }

    /// Raw text of the parameter at `position`, when params are an array that long.
    #[must_use]
    pub fn positional_raw(&self, position: usize) -> Option<&'a str> {
        self.positional(position).map(Param::raw)
    }

    /// Raw text of parameter `name` (object params) or `position` (array params).
    #[must_use]
    pub fn raw_at(&self, position: usize, name: &str) -> Option<&'a str> {
        self.at(position, name).map(Param::raw)
    }

    /// Decode parameter `name` (object params) or `position` (array params) with serde.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing or cannot be decoded as `T`.
    pub fn get<T: Deserialize<'a>>(&self, position: usize, name: &str) -> Result<T, RpcError> {
        let raw = self
            .raw_at(position, name)
            .ok_or_else(|| RpcError::missing_param(name))?;
        decode(raw, name)
    }

    /// Like [`Params::get`], but `Ok(None)` when the parameter is absent.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it cannot be decoded as `T`.
    pub fn get_optional<T: Deserialize<'a>>(&self, position: usize, name: &str) -> Result<Option<T>, RpcError> {
        self.raw_at(position, name).map(|raw| decode(raw, name)).transpose()
    }

    /// Parameter `name` or `position` converted by `convert`; `-32602` naming it when it
    /// is missing or `convert` refuses it.
    fn typed<T>(
        &self,
        position: usize,
        name: &str,
        expected: &str,
        convert: impl FnOnce(Param<'a>) -> Option<T>,
    ) -> Result<T, RpcError> {
        let param = self.at(position, name).ok_or_else(|| RpcError::missing_param(name))?;
        convert(param).ok_or_else(|| expected_but(name, expected))
    }

    /// Integer parameter `name` or `position` (see [`Param::as_i64`]).
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing or not such an integer.
    pub fn i64(&self, position: usize, name: &str) -> Result<i64, RpcError> {
        self.typed(position, name, "an integer of 64 bits", Param::as_i64)
    }

    /// Number parameter `name` or `position` (see [`Param::as_f64`]).
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing or not a finite number.
    pub fn f64(&self, position: usize, name: &str) -> Result<f64, RpcError> {
        self.typed(position, name, "a number", Param::as_f64)
    }

    /// Boolean parameter `name` or `position`.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing or not a boolean.
    pub fn bool(&self, position: usize, name: &str) -> Result<bool, RpcError> {
        self.typed(position, name, "a boolean", Param::as_bool)
    }

    /// String parameter `name` or `position`, unescaped.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing or not a string.
    pub fn str(&self, position: usize, name: &str) -> Result<Cow<'a, str>, RpcError> {
        self.typed(position, name, "a string", Param::as_str)
    }

    /// Bytes parameter `name` or `position` (a base64 string, see [`base64`], or an
    /// attachment), as a new vector.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing, not a base64 string, or an
    /// invalid placeholder.
    pub fn bytes(&self, position: usize, name: &str) -> Result<Vec<u8>, RpcError> {
        self.bytes_view(position, name).map(Cow::into_owned)
    }

    /// Bytes parameter `name` or `position`: an attachment's bytes borrowed where the
    /// message lies, or a base64 string decoded.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing, not a base64 string, or an
    /// invalid placeholder.
    pub fn bytes_view(&self, position: usize, name: &str) -> Result<Cow<'a, [u8]>, RpcError> {
        let param = self.at(position, name).ok_or_else(|| RpcError::missing_param(name))?;
        match param.attachment() {
            Ok(Some(found)) => Ok(Cow::Borrowed(found.bytes)),
            Ok(None) => param
                .with_base64(base64::decode)
                .map(Cow::Owned)
                .ok_or_else(|| expected_but(name, self.bytes_expected())),
            Err(rule) => Err(invalid_placeholder(name, rule)),
        }
    }

    /// The attachment that parameter `name` or `position` names (docs/wire.md §2).
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing, not a placeholder, or an
    /// invalid one.
    pub fn attachment(&self, position: usize, name: &str) -> Result<Attachment<'a>, RpcError> {
        let param = self.at(position, name).ok_or_else(|| RpcError::missing_param(name))?;
        match param.attachment() {
            Ok(Some(found)) => Ok(found),
            Ok(None) => Err(expected_but(name, "an attachment")),
            Err(rule) => Err(invalid_placeholder(name, rule)),
        }
    }

    /// Array parameter `name` or `position`, sent as an `ndarray` attachment of `T`
    /// (docs/wire.md §2): its shape, and its elements viewed where the message lies
    /// (copied once only where that memory is not aligned for `T`).
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing, not an attachment (a plain JSON
    /// caller's value: read it with [`Params::bytes_view`] or [`Params::raw_at`]), a
    /// `bytes` attachment, an array of another dtype, or an invalid placeholder.
    pub fn array<T: Element>(&self, position: usize, name: &str) -> Result<Array<'a, T>, RpcError> {
        let found = self.attachment(position, name)?;
        found.to_array().map_err(|why| {
            RpcError::invalid_params(format!(
                "Invalid params: parameter '{name}': expected an ndarray attachment of {}, got {why}",
                T::DTYPE.name()
            ))
        })
    }

    /// Bytes parameter `name` or `position` decoded into the start of `out`; the number
    /// of bytes written.
    ///
    /// # Errors
    /// `-32602` naming the parameter when it is missing, not a base64 string, or
    /// decodes to more than `out` holds.
    pub fn bytes_into(&self, position: usize, name: &str, out: &mut [u8]) -> Result<usize, RpcError> {
        let capacity = out.len();
        if let Err(rule) = self.at(position, name).map_or(Ok(None), Param::attachment) {
            return Err(invalid_placeholder(name, rule));
        }
        self.typed(position, name, self.bytes_expected(), |p| p.bytes_into(out))
            .map_err(|e| match self.at(position, name).and_then(Param::bytes_len) {
                Some(len) if len > capacity => RpcError::invalid_params(format!(
                    "Invalid params: parameter '{name}': {len} bytes, more than the {capacity} expected"
                )),
                _ => e,
            })
    }

    /// Check that no parameter beyond `names` was sent (by name, or by count for arrays).
    ///
    /// # Errors
    /// `-32602` naming the first unexpected parameter.
    pub fn expect_only(&self, names: &[&str]) -> Result<(), RpcError> {
        match self.raw {
            Some(raw) if raw.starts_with('{') => {
                for (key, _) in Members::new(raw) {
                    if !names.iter().any(|n| key_equals(key, n)) {
                        return Err(RpcError::invalid_params(format!(
                            "Invalid params: unexpected parameter {key}"
                        )));
                    }
                }
                Ok(())
            }
            Some(raw) => match Elements::new(raw).count() {
                n if n > names.len() => Err(RpcError::invalid_params(format!(
                    "Invalid params: expected at most {} positional parameters, got {n}",
                    names.len()
                ))),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }
}

#[cold]
#[inline(never)]
fn invalid_placeholder(name: &str, rule: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "Invalid params: parameter '{name}': invalid placeholder: {rule}"
    ))
}

#[cold]
#[inline(never)]
fn expected_but(name: &str, expected: &str) -> RpcError {
    RpcError::invalid_params(format!("Invalid params: parameter '{name}': expected {expected}"))
}

fn decode<'a, T: Deserialize<'a>>(raw: &'a str, name: &str) -> Result<T, RpcError> {
    serde_json::from_str(raw).or_else(|e| {
        // serde_json reads `-0` as the float -0.0 (to keep its sign), which an integer
        // refuses; it is an integer in JSON's grammar, so an integer parameter takes 0.
        if raw.trim_ascii() == "-0" {
            if let Ok(value) = serde_json::from_str("0") {
                return Ok(value);
            }
        }
        Err(wrong_type(&e, name))
    })
}

#[cold]
#[inline(never)]
fn wrong_type(error: &serde_json::Error, name: &str) -> RpcError {
    let text = error.to_string();
    let reason = if text.contains("expected a borrowed string") {
        // The client sent a valid string; the handler asked for a `&str`, which cannot
        // borrow one with escapes. Say so, for the one who wrote the handler.
        "a string with escapes, which a `&str` cannot borrow (the procedure should take a String or Cow<str>)"
    } else {
        text.split(" at line ").next().unwrap_or(&text)
    };
    RpcError::invalid_params(format!("Invalid params: parameter '{name}': {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_convert_strictly() {
        let p = Param::new;
        assert_eq!(p("-42").as_i64(), Some(-42));
        assert_eq!(p("-0").as_i64(), Some(0));
        assert_eq!(p("1.0").as_i64(), None);
        assert_eq!(p("1e3").as_i64(), None);
        assert_eq!(p("9223372036854775808").as_i64(), None);
        assert_eq!(p("\"1\"").as_i64(), None);
        assert_eq!(p("1e3").as_f64(), Some(1000.0));
        assert_eq!(p("1e400").as_f64(), None);
        assert_eq!(p("true").as_f64(), None);
        assert_eq!(p("true").as_bool(), Some(true));
        assert_eq!(p("1").as_bool(), None);
        assert_eq!(p(r#""a\"b""#).as_str().as_deref(), Some("a\"b"));
        assert!(matches!(p("\"ab\"").as_str(), Some(Cow::Borrowed("ab"))));
        assert_eq!(p("1").as_str(), None);
    }

    #[test]
    fn array_params_are_typed_slices_of_their_attachment() {
        let mut section = vec![0u8; 64];
        section.extend([1.5f32, -2.0, 0.25, 4.0].iter().flat_map(|v| v.to_le_bytes()));
        let raw = r#"{"x":{"$ucall":"ndarray","offset":64,"length":16,"dtype":"float32","shape":[2,2]},
            "b":{"$ucall":"bytes","offset":0,"length":3},"s":"AAA="}"#;
        let params = Params::new(Some(raw)).with_section(Some(&section));
        let x = params.array::<f32>(0, "x").expect("a float32 array");
        assert_eq!(
            (x.shape.as_slice(), &x.data[..]),
            (&[2, 2][..], &[1.5f32, -2.0, 0.25, 4.0][..])
        );
        let refusal = |name: &str| params.array::<f32>(0, name).unwrap_err();
        assert!(refusal("b")
            .message()
            .contains("parameter 'b': expected an ndarray attachment of float32, got a bytes"));
        assert!(refusal("s").message().contains("parameter 's': expected an attachment"));
        assert!(refusal("missing").message().contains("'missing'"));
        let wrong = params.array::<f64>(0, "x").unwrap_err();
        assert_eq!(wrong.code(), -32602);
        assert!(
            wrong.message().contains("an array of float32, not of float64"),
            "{}",
            wrong.message()
        );
        // Outside a binary message a placeholder is an ordinary object.
        assert!(Params::new(Some(raw)).array::<f32>(0, "x").is_err());
    }

    #[test]
    fn json_pointer_reaches_nested_values() {
        let raw = Param::new(r#"{"a": {"b/c": [10, {"~d": "x"}]}, "": 1}"#);
        let at = |pointer: &str| raw.pointer(pointer).map(Param::raw);
        assert_eq!(at("/a/b~1c/0"), Some("10"));
        assert_eq!(at("/a/b~1c/1/~0d"), Some("\"x\""));
        assert_eq!(at("/"), Some("1"));
        assert_eq!(at(""), Some(raw.raw()));
        assert_eq!(at("a"), None, "a pointer starts with /");
        assert_eq!(at("/a/b~1c/01"), None);
        assert_eq!(at("/a/b~1c/2"), None);
        assert_eq!(at("/a/b~1c/-1"), None);
        assert_eq!(at("/a/missing"), None);
        assert_eq!(Param::new("[1, [2, 3]]").pointer("/1/1").map(Param::raw), Some("3"));
    }

    #[test]
    fn bytes_decode_padded_unpadded_and_escaped() {
        assert_eq!(Param::new("\"Zm9vYg==\"").bytes().as_deref(), Some(&b"foob"[..]));
        assert_eq!(Param::new("\"Zm9vYg\"").bytes().as_deref(), Some(&b"foob"[..]));
        assert_eq!(Param::new(r#""Zm9\/""#).bytes().as_deref(), Some(&b"fo\x7f"[..]));
        assert_eq!(
            Param::new(r#""AP8A\/w==""#).bytes().as_deref(),
            Some(&[0, 255, 0, 255][..])
        );
        assert_eq!(Param::new("\"Zg=\"").bytes(), None);
        assert_eq!(Param::new("\"Zm9v Yg==\"").bytes(), None);
        assert_eq!(Param::new("12").bytes(), None);
        let mut out = [0u8; 4];
        assert_eq!(Param::new("\"Zm9vYg\"").bytes_into(&mut out), Some(4));
        assert_eq!(Param::new("\"Zm9vYmE\"").bytes_into(&mut out), None, "too long for out");
    }

    #[test]
    fn typed_accessors_name_the_parameter() {
        let params = Params::new(Some(r#"{"n": 1.5, "b": "Zm9vYmFy", "s": "x"}"#));
        assert_eq!(params.f64(0, "n").unwrap(), 1.5);
        let e = params.i64(0, "n").unwrap_err();
        assert_eq!(e.code(), -32602);
        assert!(e.message().contains("'n'"), "{}", e.message());
        assert!(params
            .bool(0, "x")
            .unwrap_err()
            .message()
            .contains("missing parameter 'x'"));
        assert_eq!(params.bytes(1, "b").unwrap(), b"foobar");
        let mut small = [0u8; 3];
        let e = params.bytes_into(1, "b", &mut small).unwrap_err();
        assert!(e.message().contains("6 bytes"), "{}", e.message());
        assert_eq!(params.str(2, "s").unwrap(), "x");
        let positional = Params::new(Some("[7, true]"));
        assert_eq!(positional.i64(0, "a").unwrap(), 7);
        assert!(positional.bool(1, "b").unwrap());
        assert_eq!(positional.values().map(Param::raw).collect::<Vec<_>>(), ["7", "true"]);
        assert_eq!(params.name_at(1).and_then(Param::as_str).as_deref(), Some("b"));
        assert_eq!(params.pointer("/s").map(Param::raw), Some("\"x\""));
    }
}
