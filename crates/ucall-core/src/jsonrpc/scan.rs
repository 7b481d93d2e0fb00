// SPDX-License-Identifier: Apache-2.0
//! Walking the members of JSON text that a parser has already validated.
//!
//! `params` are kept as borrowed raw text after the request is validated; looking a
//! parameter up then needs only a structural walk (strings, nesting), not a second full
//! parse. The input must be valid JSON: on anything else the walk stops early but never
//! reads out of bounds or panics.

/// Index just past the JSON value that starts at `i` (which must not be whitespace).
fn skip_value(s: &[u8], i: usize) -> usize {
    match s.get(i) {
        Some(b'"') => skip_string(s, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < s.len() {
                match s[j] {
                    b'"' => {
                        j = skip_string(s, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            s.len()
        }
        _ => {
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b']' | b'}') && !is_space(s[j]) {
                j += 1;
            }
            j
        }
    }
}

/// Index just past the string whose opening quote is at `i`.
///
/// memchr finds the next quote or backslash with SIMD: large strings (base64 payloads)
/// are the common case where this walk shows up in profiles. Its set-up costs more than
/// a short string (a key, a small value): the first [`SHORT_STRING`] bytes are looked at
/// one by one.
fn skip_string(s: &[u8], mut i: usize) -> usize {
    i += 1;
    let short_end = s.len().min(i + SHORT_STRING);
    while i < short_end {
        match s[i] {
            b'"' => return i + 1,
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    while let Some(found) = s.get(i..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) {
        i += found;
        if s[i] == b'"' {
            return i + 1;
        }
        i += 2;
    }
    s.len()
}

/// How far [`skip_string`] looks byte by byte before handing a string to memchr.
const SHORT_STRING: usize = 16;

const fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_space(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_space(s[i]) {
        i += 1;
    }
    i
}

/// Iterator over the elements of a validated JSON array, as raw text.
pub struct Elements<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Elements<'a> {
    /// Walk `text`, which must be a valid JSON array.
    #[must_use]
    pub fn new(text: &'a str) -> Self {
        let s = text.as_bytes();
        let start = skip_space(s, 0);
        let pos = if s.get(start) == Some(&b'[') {
            start + 1
        } else {
            s.len()
        };
        Elements { text, pos }
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let s = self.text.as_bytes();
        let start = skip_space(s, self.pos);
        if start >= s.len() || s[start] == b']' {
            self.pos = s.len();
            return None;
        }
        let end = skip_value(s, start);
        let after = skip_space(s, end);
        self.pos = if s.get(after) == Some(&b',') { after + 1 } else { after };
        self.text.get(start..end)
    }
}

/// Iterator over the members of a validated JSON object: (raw key with quotes, raw value).
pub struct Members<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Members<'a> {
    /// Walk `text`, which must be a valid JSON object.
    #[must_use]
    pub fn new(text: &'a str) -> Self {
        let s = text.as_bytes();
        let start = skip_space(s, 0);
        let pos = if s.get(start) == Some(&b'{') {
            start + 1
        } else {
            s.len()
        };
        Members { text, pos }
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        let s = self.text.as_bytes();
        let key_start = skip_space(s, self.pos);
        if key_start >= s.len() || s[key_start] != b'"' {
            self.pos = s.len();
            return None;
        }
        let key_end = skip_string(s, key_start);
        let colon = skip_space(s, key_end);
        if s.get(colon) != Some(&b':') {
            self.pos = s.len();
            return None;
        }
        let value_start = skip_space(s, colon + 1);
        let value_end = skip_value(s, value_start);
        let after = skip_space(s, value_end);
        self.pos = if s.get(after) == Some(&b',') { after + 1 } else { after };
        Some((
            self.text.get(key_start..key_end)?,
            self.text.get(value_start..value_end)?,
        ))
    }
}

/// Whether the raw JSON string `raw_key` (with its quotes) decodes to `name`.
#[must_use]
pub fn key_equals(raw_key: &str, name: &str) -> bool {
    let inner = raw_key.get(1..raw_key.len().saturating_sub(1)).unwrap_or("");
    // Keys are short: a plain loop, not the memchr set-up `contains` pays.
    if !inner.bytes().any(|b| b == b'\\') {
        return inner == name;
    }
    cold_decode_string(raw_key).is_some_and(|decoded| decoded == name)
}

/// Decode a raw JSON string that contains escapes (rare: it allocates).
#[cold]
#[inline(never)]
pub fn cold_decode_string(raw: &str) -> Option<String> {
    serde_json::from_str::<String>(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_arrays() {
        let items: Vec<_> = Elements::new(r#" [1, "a,]b" , {"x":[1,2]}, [], null,-2.5e3 ] "#).collect();
        assert_eq!(items, vec!["1", r#""a,]b""#, r#"{"x":[1,2]}"#, "[]", "null", "-2.5e3"]);
        assert_eq!(Elements::new("[]").count(), 0);
        assert_eq!(Elements::new("[ ]").count(), 0);
        assert_eq!(
            Elements::new(r#"["\"",true]"#).collect::<Vec<_>>(),
            vec![r#""\"""#, "true"]
        );
    }

    #[test]
    fn walks_objects() {
        let items: Vec<_> = Members::new(r#"{ "a" : 1, "b\"c":"}", "d": {"e": [1, {"f": 2}]} }"#).collect();
        assert_eq!(
            items,
            vec![
                ("\"a\"", "1"),
                (r#""b\"c""#, r#""}""#),
                ("\"d\"", r#"{"e": [1, {"f": 2}]}"#)
            ]
        );
        assert_eq!(Members::new("{}").count(), 0);
        assert!(key_equals(r#""b\"c""#, "b\"c"));
        assert!(key_equals(r#""\u0061""#, "a"));
        assert!(!key_equals("\"a\"", "b"));
    }

    #[test]
    fn short_and_long_strings_end_at_their_closing_quote() {
        // Every length across the byte loop's reach, with and without an escape at each
        // place, against the string's own end.
        for len in 0..(3 * SHORT_STRING) {
            for escape_at in std::iter::once(None).chain((0..len).map(Some)) {
                let mut body = "x".repeat(len);
                if let Some(at) = escape_at {
                    body.insert_str(at, r#"\""#);
                }
                let text = format!(r#""{body}",1"#);
                assert_eq!(skip_string(text.as_bytes(), 0), body.len() + 2, "{text}");
            }
        }
        // An unterminated string, or one ending in a lone backslash, runs to the end.
        assert_eq!(skip_string(br#""abc"#, 0), 4);
        assert_eq!(skip_string(br#""abc\"#, 0), 5);
    }

    #[test]
    fn skips_long_strings_with_escapes_anywhere() {
        // The SIMD search must honour an escape that falls at any offset in a long string.
        // Offsets around SHORT_STRING too: an escape the byte loop skips past its end.
        for at in [0, 1, 14, 15, 16, 17, 31, 32, 33, 63, 64, 4095] {
            let mut body = "A".repeat(5000);
            body.insert_str(at, r#"\\\""#); // an escaped backslash, then an escaped quote
            let text = format!(r#"{{"data":"{body}","n":[1,"]"]}}"#);
            let members: Vec<_> = Members::new(&text).collect();
            assert_eq!(members.len(), 2, "escape at {at}");
            assert_eq!(members[0].1, format!(r#""{body}""#));
            assert_eq!(members[1], ("\"n\"", r#"[1,"]"]"#));
        }
    }

    #[test]
    fn never_panics_on_garbage() {
        for text in [
            "",
            "[",
            "{",
            "{\"a",
            "{\"a\":",
            "[\"",
            "[1,",
            "{\"a\" 1}",
            "\"\\",
            "]]]",
            "}}}",
        ] {
            let _ = Elements::new(text).count();
            let _ = Members::new(text).count();
        }
    }
}
