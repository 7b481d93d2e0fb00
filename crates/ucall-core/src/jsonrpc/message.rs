// SPDX-License-Identifier: Apache-2.0
//! Reading a request object (JSON-RPC 2.0 §4) or a batch (§6) into borrowed views.
//!
//! Nothing is copied: `id` and `params` stay raw slices of the input, so that `id` is
//! echoed byte for byte as sent (numbers beyond int64, `1.50`, strings with escapes).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::time::Duration;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use sonic_rs::LazyValue;

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
    /// The time the caller allows the call: the optional member `"timeout"` (seconds, a
    /// UCall extension of the request object, docs/context-and-middleware.md).
    pub timeout: Option<Duration>,
    /// The raw `"_meta"` member (a UCall extension, read only by who asks: the trace
    /// context lives there, docs/operations.md "Tracing"), or `None` when absent.
    pub meta: Option<&'a str>,
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

/// Messages at least this long are read by sonic-rs first: its SIMD string scan skips a
/// large string (a base64 payload) in half serde_json's time, while serde_json is faster
/// on small messages and on numbers. serde_json reads whatever sonic-rs does not take
/// (invalid JSON, and member values with escapes, which sonic-rs hands over copied), so
/// it alone decides what is rejected. See docs/design.md, "JSON parser".
pub const SIMD_PARSE_FROM: usize = 64 * 1024;

/// sonic-rs skips nested values recursively, so a message of a million `[` would overflow
/// a worker's stack and abort the process (serde_json skips them with a loop). A text with
/// at most this many `[` and `{` bytes anywhere cannot nest deeper.
const SONIC_MAX_OPENINGS: usize = 128;

/// Whether sonic-rs reads `text` first: large, too few brackets to nest deeply, and every
/// `\u` escape followed by four hex digits. sonic-rs skips a value it hands over lazily
/// (params, a batch element) without looking at its escapes: it took `"\udjso"` (fuzzing
/// found it), which is not JSON, and serde_json, which then reads the text, rejects it.
/// Its other checks hold (an unknown escape, a short `\u`, a control character).
///
/// One memchr pass finds both brackets and backslashes: a 2 MB base64 payload holds
/// neither, and two passes over it cost 0.2 ms where this one costs 0.1
/// (`benches/parsers --bin passes`). A backslash that is not in a string makes the text
/// invalid whatever follows it, so taking every backslash as an escape's start is sound.
fn suits_sonic(text: &str) -> bool {
    if text.len() < SIMD_PARSE_FROM {
        return false;
    }
    let bytes = text.as_bytes();
    let (mut at, mut openings) = (0, 0);
    while let Some(found) = memchr::memchr3(b'[', b'{', b'\\', &bytes[at..]) {
        let hit = at + found;
        if bytes[hit] != b'\\' {
            openings += 1;
            if openings > SONIC_MAX_OPENINGS {
                return false;
            }
            at = hit + 1;
            continue;
        }
        match bytes.get(hit + 1) {
            Some(b'u') => {
                let hex = bytes.get(hit + 2..hit + 6);
                if !hex.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                at = hit + 6;
            }
            Some(_) => at = hit + 2,
            None => return false,
        }
    }
    true
}

/// Parse one request (or any other JSON value, which is then `Invalid`).
///
/// # Errors
/// [`ParseError`] when `text` is not one valid JSON text.
pub fn parse_request(text: &str) -> Result<Envelope<'_>, ParseError> {
    let members = members_named(text, RequestNames)?;
    Ok(members.map_or_else(not_an_object, |members| Members::from(members).validate()))
}

/// Whether `text` is one valid JSON text, read as [`parse_request`] reads it.
#[must_use]
pub fn is_json(text: &str) -> bool {
    (suits_sonic(text) && read_with_sonic(text, PhantomData::<IgnoredAny>).is_ok())
        || read_with_serde_json(text, PhantomData::<IgnoredAny>).is_ok()
}

/// Read one JSON text as [`parse_request`] does and, when it is an object, the raw text of
/// the members named in `names` (of repeated names the last, as in a dict); `Ok(None)`
/// for any other JSON value. One pass checks the text and finds the members: a client reads a
/// reply's `id`, `result` and `error` so, where checking it and then walking its members
/// read a 2 MB payload twice.
///
/// # Errors
/// [`ParseError`] when `text` is not one valid JSON text, or (as for [`parse_request`])
/// when a member name or the text itself is a string with a lone surrogate (`"\ud800"`),
/// which no Rust string holds.
pub fn object_members<'a, const N: usize>(
    text: &'a str,
    names: &[&str; N],
) -> Result<Option<[Option<&'a str>; N]>, ParseError> {
    members_named(text, names)
}

/// [`object_members`] for any way of finding a member name's place.
fn members_named<L: Names<N>, const N: usize>(text: &str, names: L) -> Result<Option<[Option<&str>; N]>, ParseError> {
    if suits_sonic(text) {
        if let Ok(members) = read_with_sonic(text, NamedMembers::<L, LazyValue<'_>, N>(names, PhantomData)) {
            return Ok(members);
        }
    }
    read_with_serde_json(text, NamedMembers::<L, &RawValue, N>(names, PhantomData))
}

/// Where a member name goes among the `N` members read, if it is one of them.
trait Names<const N: usize>: Copy {
    fn index(self, key: &str) -> Option<usize>;
}

impl<const N: usize> Names<N> for &[&str; N] {
    fn index(self, key: &str) -> Option<usize> {
        self.iter().position(|name| *name == key)
    }
}

/// The members of a request that matter, in [`Members`]' order: `jsonrpc`, `method`,
/// `params`, `id`, `timeout`, `_meta`. A `match` compiles to a few compares of known
/// length, where a list searched at run time calls `memcmp` for each name tried (about 90
/// instructions a request, which `"_meta"` had added).
#[derive(Clone, Copy)]
struct RequestNames;

impl Names<6> for RequestNames {
    #[inline(always)]
    fn index(self, key: &str) -> Option<usize> {
        match key {
            "jsonrpc" => Some(0),
            "method" => Some(1),
            "params" => Some(2),
            "id" => Some(3),
            "timeout" => Some(4),
            "_meta" => Some(5),
            _ => None,
        }
    }
}

/// Reads an object's members named by `.0` as raw text `R`, any other value as nothing.
struct NamedMembers<L, R, const N: usize>(L, PhantomData<R>);

impl<'de, L: Names<N>, R: RawText<'de>, const N: usize> DeserializeSeed<'de> for NamedMembers<L, R, N> {
    type Value = Option<[Option<&'de str>; N]>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, L: Names<N>, R: RawText<'de>, const N: usize> Visitor<'de> for NamedMembers<L, R, N> {
    type Value = Option<[Option<&'de str>; N]>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = [None; N];
        while let Some(index) = map.next_key_seed(NameIndex(self.0))? {
            let Some(index) = index else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let value = map.next_value::<R>()?.text();
            if value.is_none() {
                return Err(de::Error::custom("a member was copied, not borrowed"));
            }
            found[index] = value;
        }
        Ok(Some(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A member name's place in the names asked for, decoded first when it has escapes.
struct NameIndex<L, const N: usize>(L);

impl<'de, L: Names<N>, const N: usize> DeserializeSeed<'de> for NameIndex<L, N> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<L: Names<N>, const N: usize> Visitor<'_> for NameIndex<L, N> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.index(key))
    }
}

fn read_with_serde_json<'de, S: DeserializeSeed<'de>>(text: &'de str, seed: S) -> Result<S::Value, ParseError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = seed.deserialize(&mut de).map_err(|_| ParseError)?;
    de.end().map_err(|_| ParseError)?;
    Ok(value)
}

/// Only for a text [`suits_sonic`] took, which has checked its `\u` escapes.
fn read_with_sonic<'de, S: DeserializeSeed<'de>>(text: &'de str, seed: S) -> Result<S::Value, ParseError> {
    let mut de = sonic_rs::Deserializer::from_str(text);
    let value = seed.deserialize(&mut de).map_err(|_| ParseError)?;
    de.end().map_err(|_| ParseError)?;
    Ok(value)
}

/// A member's value kept as raw text, by whichever parser read the message.
trait RawText<'de>: Deserialize<'de> {
    /// The value's text as a slice of the message; `None` if the parser copied it.
    fn text(&self) -> Option<&'de str>;
}

impl<'de> RawText<'de> for &'de RawValue {
    fn text(&self) -> Option<&'de str> {
        Some(self.get())
    }
}

impl<'de> RawText<'de> for LazyValue<'de> {
    fn text(&self) -> Option<&'de str> {
        match self.as_raw_cow() {
            Cow::Borrowed(text) => Some(text),
            Cow::Owned(_) => None,
        }
    }
}

/// Parse a whole batch in one pass, appending one [`Element`] per entry to `elements`.
///
/// Nothing is executed before the whole batch is known to be valid JSON (§6: invalid JSON
/// gets a single `-32700`), and elements are kept as offsets so that the buffer holding
/// them is reused from batch to batch.
///
/// # Errors
/// [`ParseError`] when `text` is not one valid JSON array.
pub fn parse_batch(text: &str, elements: &mut Vec<Element>) -> Result<(), ParseError> {
    let base = text.as_ptr() as usize;
    if suits_sonic(text) {
        let before = elements.len();
        let collector = ElementCollector::<LazyValue<'_>> {
            base,
            elements,
            raw: PhantomData,
        };
        if read_with_sonic(text, collector).is_ok() {
            return Ok(());
        }
        elements.truncate(before);
    }
    let collector = ElementCollector::<&RawValue> {
        base,
        elements,
        raw: PhantomData,
    };
    read_with_serde_json(text, collector)
}

/// One batch entry, as offsets into the batch text.
#[derive(Debug, Clone)]
pub struct Element {
    /// `jsonrpc`, `method`, `params`, `id`, `timeout`, `_meta`; `None` when the entry is not an object.
    members: Option<[Option<Range<usize>>; 6]>,
}

impl Element {
    /// The entry as a request (or why it is not one), borrowing from the batch `text`.
    #[must_use]
    pub fn envelope<'a>(&self, text: &'a str) -> Envelope<'a> {
        let Some(members) = &self.members else {
            return not_an_object();
        };
        Members::from(members.clone().map(|range| range.and_then(|r| text.get(r)))).validate()
    }
}

struct ElementCollector<'s, R> {
    base: usize,
    elements: &'s mut Vec<Element>,
    raw: PhantomData<R>,
}

impl<'de, R: RawText<'de>> DeserializeSeed<'de> for ElementCollector<'_, R> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, R: RawText<'de>> Visitor<'de> for ElementCollector<'_, R> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // Each entry is read as a request object directly (not kept as a raw value first),
        // which also keeps serde_json from allocating a nesting stack per batch.
        while let Some(members) = seq.next_element_seed(NamedMembers::<_, R, 6>(RequestNames, PhantomData))? {
            let span = |raw: Option<&str>| {
                raw.map(|raw| {
                    let start = raw.as_ptr() as usize - self.base;
                    start..start + raw.len()
                })
            };
            self.elements.push(Element {
                members: members.map(|members| members.map(span)),
            });
        }
        Ok(())
    }
}

/// The members of a request object that matter, as raw JSON text.
struct Members<'a> {
    jsonrpc: Option<&'a str>,
    method: Option<&'a str>,
    params: Option<&'a str>,
    id: Option<&'a str>,
    timeout: Option<&'a str>,
    meta: Option<&'a str>,
}

const NOT_AN_OBJECT: &str = "a request must be a JSON object";

impl<'a> From<[Option<&'a str>; 6]> for Members<'a> {
    fn from([jsonrpc, method, params, id, timeout, meta]: [Option<&'a str>; 6]) -> Self {
        Members {
            jsonrpc,
            method,
            params,
            id,
            timeout,
            meta,
        }
    }
}

fn not_an_object<'a>() -> Envelope<'a> {
    Envelope::Invalid {
        id: None,
        reason: NOT_AN_OBJECT,
    }
}

impl<'a> Members<'a> {
    /// §4: "jsonrpc" MUST be exactly "2.0"; "method" a String; "params" a Structured value
    /// when present; "id" a String, Number or Null when present (absent: a notification).
    fn validate(self) -> Envelope<'a> {
        let Members {
            jsonrpc,
            method,
            params,
            id,
            timeout,
            meta,
        } = self;
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
        let timeout = match timeout.map(|raw| seconds(raw.as_bytes())) {
            None => None,
            Some(Some(timeout)) => Some(timeout),
            Some(None) => return invalid("\"timeout\" must be a positive number of seconds"),
        };
        Envelope::Request(Request {
            method,
            params,
            id,
            timeout,
            meta,
        })
    }
}

/// A deadline's budget as the caller writes it (the `"timeout"` member, the HTTP header
/// `UCall-Timeout`): a positive, finite number of seconds in JSON's number syntax
/// (`2.5`, `1e-3`); `None` for anything else, including a number too large for a
/// [`Duration`].
#[must_use]
pub fn seconds(text: &[u8]) -> Option<Duration> {
    // JSON numbers start with `-` or a digit; Rust's float syntax alone would also take
    // `inf`, `+1` and `.5`.
    if !text.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    if value > 0.0 {
        Duration::try_from_secs_f64(value).ok()
    } else {
        None
    }
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
        match parse_request(text) {
            Ok(Envelope::Request(r)) => r,
            other => panic!("expected a request from {text}, got {other:?}"),
        }
    }

    fn invalid(text: &str) -> Option<&str> {
        match parse_request(text) {
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
    fn reads_the_timeout_member() {
        let r = request(r#"{"jsonrpc":"2.0","method":"x","id":1,"timeout":2.5}"#);
        assert_eq!(r.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(
            request(r#"{"jsonrpc":"2.0","method":"x","timeout":1e-3}"#).timeout,
            Some(Duration::from_millis(1))
        );
        assert_eq!(request(r#"{"jsonrpc":"2.0","method":"x","id":1}"#).timeout, None);
        for bad in ["0", "-1", "\"2\"", "null", "1e400", "[1]", "1e300"] {
            let text = format!(r#"{{"jsonrpc":"2.0","method":"x","id":3,"timeout":{bad}}}"#);
            match parse_request(&text) {
                Ok(Envelope::Invalid { id, reason }) => {
                    assert_eq!(id, Some("3"));
                    assert!(reason.contains("timeout"), "{reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let text = r#"[{"jsonrpc":"2.0","method":"a","id":1,"timeout":0.5},{"jsonrpc":"2.0","method":"b","id":2}]"#;
        let mut elements = Vec::new();
        parse_batch(text, &mut elements).expect("a valid batch");
        let timeouts: Vec<_> = elements
            .iter()
            .map(|e| match e.envelope(text) {
                Envelope::Request(r) => r.timeout,
                Envelope::Invalid { .. } => panic!("a request"),
            })
            .collect();
        assert_eq!(timeouts, [Some(Duration::from_millis(500)), None]);
        assert_eq!(seconds(b"inf"), None);
        assert_eq!(seconds(b"+1"), None);
        assert_eq!(seconds(b".5"), None);
        assert_eq!(seconds(b"0.25"), Some(Duration::from_millis(250)));
    }

    #[test]
    fn rejects_non_json() {
        for text in [
            "{",
            "",
            r#"{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]"#,
            "{} x",
            "nul",
            "[1,",
        ] {
            assert_eq!(parse_request(text).err(), Some(ParseError), "{text}");
        }
    }

    /// `text` padded with whitespace past [`SIMD_PARSE_FROM`], so that sonic-rs reads it.
    fn padded(text: &str) -> String {
        let half = " ".repeat(SIMD_PARSE_FROM / 2);
        format!("{half}{text}\n{half}")
    }

    fn outcome(text: &str) -> String {
        match parse_request(text) {
            Ok(Envelope::Request(r)) => format!("request {} {:?} {:?}", r.method, r.params, r.id),
            Ok(Envelope::Invalid { id, reason }) => format!("invalid {id:?} {reason}"),
            Err(ParseError) => "parse error".into(),
        }
    }

    #[test]
    fn large_messages_are_read_as_small_ones_are() {
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let values = [
            "[1,2]",
            "{\"a\":\"b\"}",
            "\"a\u{1}b\"",
            "\"a\tb\"",
            "\"a\\xb\"",
            "\"\\u12\"",
            "\"\\udjso\"",
            "\"\\u12zz\"",
            "\"\\\\udjso\"",
            "[[\"\\udjso\"]]",
            "{\"k\\udjso\":1}",
            "\"\\ud800\"",
            "\"\u{7f}\"",
            "01",
            "1.",
            "-",
            "1e",
            "1e400",
            "-0",
            "1E+2",
            "[1,]",
            "{\"a\":1,}",
            "\u{c}[1]",
            "NaN",
            "tru",
            "[1 2]",
            "{\"a\" 1}",
            "{1:2}",
            "[\"\\/\"]",
            &deep,
            "123456789012345678901234567890",
            "[1]x",
            "{\"a\":1,\"a\":2}",
            "[\"\\u00e9\"]",
        ];
        let mut texts: Vec<String> = values
            .iter()
            .flat_map(|v| {
                [
                    format!(r#"{{"jsonrpc":"2.0","method":"m","params":[{v}],"id":1}}"#),
                    format!(r#"{{"jsonrpc":"2.0","method":"m","params":{v},"id":{v}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","method":{v},"id":"\u0041"}}"#),
                    v.to_string(),
                ]
            })
            .collect();
        texts.push(r#"{"jsonrpc":"2\u002e0","method":"\u006d","params":{},"id":"\u00e9"}"#.into());
        texts.push(format!(
            r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":7}}"#,
            "QUJD".repeat(30_000)
        ));
        for text in &texts {
            let (small, large) = (outcome(text), outcome(&padded(text)));
            assert_eq!(small, large, "{}", &text[..text.len().min(200)]);
            assert_eq!(
                is_json(text),
                is_json(&padded(text)),
                "{}",
                &text[..text.len().min(200)]
            );
            let names = ["params", "id", "method"];
            let long = padded(text);
            let (small, large) = (object_members(text, &names), object_members(&long, &names));
            assert_eq!(small, large, "{}", &text[..text.len().min(200)]);
            assert_eq!(
                small.is_ok(),
                outcome(text) != "parse error",
                "{}",
                &text[..text.len().min(200)]
            );
        }
        let large = texts.last().expect("the echo text");
        assert!(large.len() >= SIMD_PARSE_FROM && outcome(large).starts_with("request echo"));
    }

    #[test]
    fn object_members_are_found_as_a_dict_would_hold_them() {
        let names = ["id", "result", "error"];
        let base64 = "QUJD".repeat(30_000);
        let cases: [(&str, Option<[Option<&str>; 3]>); 5] = [
            (
                r#"{"id":1,"result":"x","id":2}"#,
                Some([Some("2"), Some(r#""x""#), None]),
            ),
            (
                r#"{"re\u0073ult":[1, {"id":3}],"error":null}"#,
                Some([None, Some("[1, {\"id\":3}]"), Some("null")]),
            ),
            (r#"{"jsonrpc":"2.0","other":{"result":1}}"#, Some([None, None, None])),
            ("[1,2]", None),
            ("\"id\"", None),
        ];
        for (text, expected) in cases {
            assert_eq!(object_members(text, &names), Ok(expected), "{text}");
            assert_eq!(object_members(&padded(text), &names), Ok(expected), "{text}");
        }
        let large = format!(r#"{{"jsonrpc":"2.0","result":"{base64}","id":7}}"#);
        let quoted = format!("\"{base64}\"");
        assert_eq!(
            object_members(&large, &names),
            Ok(Some([Some("7"), Some(quoted.as_str()), None]))
        );
        for bad in ["{\"id\":1,}", "{\"id\":1} x", "{\"result\":\"\\udjso\"}", ""] {
            assert_eq!(object_members(bad, &names), Err(ParseError), "{bad}");
            assert_eq!(object_members(&padded(bad), &names), Err(ParseError), "{bad}");
        }
    }

    #[test]
    fn deep_nesting_in_a_large_message_is_read_without_recursion() {
        // On a 2 MiB stack, as workers have: sonic-rs would recurse once per bracket.
        let checked = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let depth = 1_000_000;
                let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                let text = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{deep},"id":1}}"#);
                assert!(outcome(&text).starts_with("request m"));
                assert!(is_json(&text));
                let mut elements = Vec::new();
                parse_batch(&format!("[{text}]"), &mut elements).expect("a valid batch");
                assert_eq!(elements.len(), 1);
            })
            .expect("a thread")
            .join();
        assert!(checked.is_ok());
    }

    #[test]
    fn batches_keep_elements_as_offsets() {
        let text = r#" [ {"jsonrpc":"2.0","method":"a\u0062","params":[{"x":[1]}],"id":7} , 2,{"id":true} ] "#;
        let mut elements = Vec::new();
        parse_batch(text, &mut elements).expect("valid batch");
        assert_eq!(elements.len(), 3);
        let Envelope::Request(first) = elements[0].envelope(text) else {
            panic!("first is a request")
        };
        assert_eq!(
            (first.method.as_ref(), first.params, first.id),
            ("ab", Some(r#"[{"x":[1]}]"#), Some("7"))
        );
        assert!(matches!(elements[1].envelope(text), Envelope::Invalid { id: None, .. }));
        assert!(matches!(elements[2].envelope(text), Envelope::Invalid { id: None, .. }));
        assert!(parse_batch("[1,", &mut elements).is_err());
        assert!(is_batch(b" \n[") && !is_batch(b"{"));
    }
}
