// SPDX-License-Identifier: Apache-2.0
//! Reading a request object (JSON-RPC 2.0 §4) or a batch (§6) into borrowed views.
//!
//! Nothing is copied: `id` and `params` stay raw slices of the input, so that `id` is
//! echoed byte for byte as sent (numbers beyond int64, `1.50`, strings with escapes).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::scan::cold_decode_string;

/// A valid request: a call when `id` is present, a notification when it is absent.
#[derive(Debug)]
pub struct Request<'a> {
    /// The method name, decoded (borrowed unless it contains escapes).
    pub method: Cow<'a, str>,
    /// The raw `params` text: an array or an object, or `None` when absent.
    pub params: Option<&'a str>,
    /// The raw `id` text, or `None` for a notification.
    pub id: Option<&'a str>,
}

/// One element of a message: a request, or why it is not one.
#[derive(Debug)]
pub enum Envelope<'a> {
    /// A valid request object.
    Request(Request<'a>),
    /// Valid JSON that is not a valid request object (`-32600`). `id` is kept when it
    /// was itself valid, so the error can name the request it answers.
    Invalid {
        /// The request's id, when it could be read.
        id: Option<&'a str>,
        /// What is wrong, for the error message.
        reason: &'static str,
    },
}

/// The input is not JSON text (`-32700`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError;

/// Whether the first non-whitespace byte opens an array (a batch, §6).
#[must_use]
pub fn is_batch(text: &[u8]) -> bool {
    text.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'[')
}

/// Parse one request (or any other JSON value, which is then `Invalid`).
///
/// # Errors
/// [`ParseError`] when `text` is not one valid JSON text in UTF-8.
pub fn parse_request(text: &[u8]) -> Result<Envelope<'_>, ParseError> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let envelope = de.deserialize_any(EnvelopeVisitor).map_err(|_| ParseError)?;
    de.end().map_err(|_| ParseError)?;
    Ok(envelope)
}

/// Parse a batch into the byte ranges of its elements, appended to `spans`.
///
/// # Errors
/// [`ParseError`] when `text` is not one valid JSON array in UTF-8.
pub fn parse_batch(text: &[u8], spans: &mut Vec<Range<usize>>) -> Result<(), ParseError> {
    let mut de = serde_json::Deserializer::from_slice(text);
    de.deserialize_seq(SpanCollector {
        base: text.as_ptr() as usize,
        spans,
    })
    .map_err(|_| ParseError)?;
    de.end().map_err(|_| ParseError)
}

struct SpanCollector<'s> {
    base: usize,
    spans: &'s mut Vec<Range<usize>>,
}

impl<'de> Visitor<'de> for SpanCollector<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            let start = raw.get().as_ptr() as usize - self.base;
            self.spans.push(start..start + raw.get().len());
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Field {
    Jsonrpc,
    Method,
    Params,
    Id,
    Other,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Field, E> {
                Ok(match key {
                    "jsonrpc" => Field::Jsonrpc,
                    "method" => Field::Method,
                    "params" => Field::Params,
                    "id" => Field::Id,
                    _ => Field::Other,
                })
            }
        }
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

struct EnvelopeVisitor;

const NOT_AN_OBJECT: &str = "a request must be a JSON object";

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
        let (mut jsonrpc, mut method, mut params, mut id) = (None, None, None, None);
        while let Some(field) = map.next_key::<Field>()? {
            let value: &'de RawValue = map.next_value()?;
            match field {
                Field::Jsonrpc => jsonrpc = Some(value.get()),
                Field::Method => method = Some(value.get()),
                Field::Params => params = Some(value.get()),
                Field::Id => id = Some(value.get()),
                Field::Other => {}
            }
        }
        Ok(validate(jsonrpc, method, params, id))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Envelope<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(not_an_object())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Envelope<'de>, E> {
        Ok(not_an_object())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Envelope<'de>, E> {
        Ok(not_an_object())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Envelope<'de>, E> {
        Ok(not_an_object())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Envelope<'de>, E> {
        Ok(not_an_object())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Envelope<'de>, E> {
        Ok(not_an_object())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Envelope<'de>, E> {
        Ok(not_an_object())
    }
}

fn not_an_object<'a>() -> Envelope<'a> {
    Envelope::Invalid {
        id: None,
        reason: NOT_AN_OBJECT,
    }
}

/// §4: "jsonrpc" MUST be exactly "2.0"; "method" a String; "params" a Structured value
/// when present; "id" a String, Number or Null when present (absent: a notification).
fn validate<'a>(
    jsonrpc: Option<&'a str>,
    method: Option<&'a str>,
    params: Option<&'a str>,
    id: Option<&'a str>,
) -> Envelope<'a> {
    let id_is_valid = id.is_none_or(|raw| matches!(raw.as_bytes()[0], b'"' | b'-' | b'0'..=b'9' | b'n'));
    if !id_is_valid {
        return Envelope::Invalid {
            id: None,
            reason: "\"id\" must be a string, a number or null",
        };
    }
    let invalid = |reason| Envelope::Invalid { id, reason };
    match jsonrpc {
        Some("\"2.0\"") => {}
        Some(raw) if raw.starts_with('"') && cold_decode_string(raw).as_deref() == Some("2.0") => {}
        Some(_) => return invalid("\"jsonrpc\" must be exactly \"2.0\""),
        None => return invalid("missing \"jsonrpc\": \"2.0\""),
    }
    let method = match method {
        Some(raw) if raw.starts_with('"') => decode_string(raw),
        Some(_) => return invalid("\"method\" must be a string"),
        None => return invalid("missing \"method\""),
    };
    let Some(method) = method else {
        return invalid("\"method\" must be a string");
    };
    if params.is_some_and(|raw| !raw.starts_with(['[', '{'])) {
        return invalid("\"params\" must be an array or an object");
    }
    Envelope::Request(Request { method, params, id })
}

/// A raw JSON string's value: borrowed unless it holds escapes.
fn decode_string(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.get(1..raw.len() - 1)?;
    if inner.contains('\\') {
        cold_decode_string(raw).map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Request<'_> {
        match parse_request(text.as_bytes()) {
            Ok(Envelope::Request(r)) => r,
            other => panic!("expected a request from {text}, got {other:?}"),
        }
    }

    fn invalid(text: &str) -> Option<&str> {
        match parse_request(text.as_bytes()) {
            Ok(Envelope::Invalid { id, .. }) => id,
            other => panic!("expected an invalid request from {text}, got {other:?}"),
        }
    }

    #[test]
    fn keeps_ids_and_params_raw() {
        let r = request(r#"{"jsonrpc":"2.0","method":"sum","params":{"a":1, "b":2},"id":1.50}"#);
        assert_eq!(r.method, "sum");
        assert_eq!(r.params, Some(r#"{"a":1, "b":2}"#));
        assert_eq!(r.id, Some("1.50"));
        let r = request(r#"{"id":"\u00e9\n","method":"s\u0075m","jsonrpc":"2.0"}"#);
        assert_eq!(r.id, Some(r#""\u00e9\n""#));
        assert!(matches!(r.method, Cow::Owned(ref m) if m == "sum"));
        assert_eq!(r.params, None);
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","method":"x","id":123456789012345678901234567890}"#).id,
            Some("123456789012345678901234567890")
        );
        assert_eq!(request(r#"{"jsonrpc":"2.0","method":"x"}"#).id, None);
        assert_eq!(request(r#"{"jsonrpc":"2.0","method":"x","id":null}"#).id, Some("null"));
    }

    #[test]
    fn rejects_invalid_requests() {
        assert_eq!(invalid(r#"{"jsonrpc":"2.0","method":"x","id":{}}"#), None);
        assert_eq!(invalid(r#"{"jsonrpc":"2.0","method":"x","id":true}"#), None);
        assert_eq!(invalid(r#"{"jsonrpc":"1.0","method":"x","id":7}"#), Some("7"));
        assert_eq!(invalid(r#"{"method":"x","id":7}"#), Some("7"));
        assert_eq!(invalid(r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#), None);
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","method":"x","params":3,"id":"a"}"#),
            Some("\"a\"")
        );
        assert_eq!(invalid("1"), None);
        assert_eq!(invalid("\"text\""), None);
        assert_eq!(invalid("[1,2]"), None);
    }

    #[test]
    fn rejects_non_json() {
        for text in [
            &b"{"[..],
            b"",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"foobar,\"params\":\"bar\",\"baz]",
            b"{} x",
            b"\"\xff\"",
            b"nul",
        ] {
            assert_eq!(
                parse_request(text).err(),
                Some(ParseError),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn batches_keep_element_spans() {
        let text = br#" [ {"a":1} , 2,"x" ] "#;
        let mut spans = Vec::new();
        parse_batch(text, &mut spans).expect("valid batch");
        let parts: Vec<_> = spans.iter().map(|s| &text[s.clone()]).collect();
        assert_eq!(parts, vec![&br#"{"a":1}"#[..], b"2", b"\"x\""]);
        assert!(parse_batch(b"[1,", &mut spans).is_err());
        assert!(is_batch(b" \n[") && !is_batch(b"{"));
    }
}
