// SPDX-License-Identifier: Apache-2.0
//! A strict JSON reader (RFC 8259: no `NaN`, no duplicate member names, no trailing
//! commas) that keeps what the vectors' comparison rule needs: integers with arbitrary
//! precision and apart from floats, member order irrelevant.

use std::fmt;

/// A parsed JSON value.
#[derive(Debug, Clone)]
pub enum Json {
    Null,
    Bool(bool),
    /// An integer (no fraction, no exponent), as its digits with an optional `-`; `-0` is `0`.
    Int(String),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    /// Members in the order sent (names are unique).
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Int(digits) => digits.parse().ok(),
            _ => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Int(_) => "integer",
            Json::Float(_) => "float",
            Json::Str(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Int(digits) => f.write_str(digits),
            Json::Float(x) => write!(f, "{x:?}"),
            Json::Str(s) => write!(f, "{s:?}"),
            Json::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Json::Object(members) => {
                f.write_str("{")?;
                for (i, (name, value)) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name:?}:{value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Parse exactly one JSON text (surrounding whitespace allowed).
pub fn parse(bytes: &[u8]) -> Result<Json, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut parser = Parser {
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
    };
    parser.skip_ws();
    let value = parser.value()?;
    parser.skip_ws();
    if parser.pos != parser.bytes.len() {
        return Err(parser.error("text after the JSON value"));
    }
    Ok(value)
}

/// Parse `text`, panicking with it when it is not JSON (for expected values in tests).
pub fn json(text: &str) -> Json {
    parse(text.as_bytes()).unwrap_or_else(|e| panic!("bad JSON in a test: {e}: {text}"))
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        format!("{what} at byte {}", self.pos)
    }

    fn skip_ws(&mut self) {
        while matches!(self.bytes.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            Ok(value)
        } else {
            Err(self.error("invalid literal"))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.bytes.get(self.pos) {
            None => Err(self.error("unexpected end")),
            Some(b'n') => self.expect_literal("null", Json::Null),
            Some(b't') => self.expect_literal("true", Json::Bool(true)),
            Some(b'f') => self.expect_literal("false", Json::Bool(false)),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.nested(Self::array),
            Some(b'{') => self.nested(Self::object),
            Some(_) => Err(self.error("unexpected character")),
        }
    }

    fn nested(&mut self, parse: fn(&mut Self) -> Result<Json, String>) -> Result<Json, String> {
        self.depth += 1;
        if self.depth > 512 {
            return Err(self.error("nesting too deep"));
        }
        let value = parse(self);
        self.depth -= 1;
        value
    }

    fn array(&mut self) -> Result<Json, String> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value()?);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected , or ]")),
            }
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.pos += 1;
        let mut members: Vec<(String, Json)> = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.error("expected a member name"));
            }
            let name = self.string()?;
            if members.iter().any(|(k, _)| *k == name) {
                return Err(self.error(&format!("duplicate member {name:?}")));
            }
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b':') {
                return Err(self.error("expected :"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value()?;
            members.push((name, value));
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("expected , or }")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.bytes.get(self.pos), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.pos;
        if self.bytes[self.pos] == b'-' {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.digits() {
            0 => return Err(self.error("expected a digit")),
            n if n > 1 && self.bytes[int_start] == b'0' => return Err(self.error("leading zero")),
            _ => {}
        }
        let mut float = false;
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("expected a digit after ."));
            }
            float = true;
        }
        if matches!(self.bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("expected an exponent digit"));
            }
            float = true;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.pos]).expect("ASCII");
        if float {
            let value: f64 = text.parse().map_err(|_| self.error("bad float"))?;
            Ok(Json::Float(value))
        } else if text == "-0" {
            Ok(Json::Int("0".into()))
        } else {
            Ok(Json::Int(text.into()))
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let Some(hex) = self.bytes.get(self.pos..self.pos + 4) else {
            return Err(self.error("short \\u escape"));
        };
        let hex = std::str::from_utf8(hex).map_err(|_| self.error("bad \\u escape"))?;
        let value = u32::from_str_radix(hex, 16).map_err(|_| self.error("bad \\u escape"))?;
        if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(self.error("bad \\u escape"));
        }
        self.pos += 4;
        Ok(value)
    }

    fn string(&mut self) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(&c) = self.bytes.get(self.pos) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // The input is a &str and we stop only at ASCII bytes: a valid boundary.
            out.push_str(std::str::from_utf8(&self.bytes[start..self.pos]).expect("UTF-8"));
            match self.bytes.get(self.pos) {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let Some(&escape) = self.bytes.get(self.pos) else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.pos += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let first = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&first) {
                                if !self.bytes[self.pos..].starts_with(b"\\u") {
                                    return Err(self.error("lone high surrogate"));
                                }
                                self.pos += 2;
                                let second = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&second) {
                                    return Err(self.error("bad low surrogate"));
                                }
                                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                            } else {
                                first
                            };
                            out.push(char::from_u32(code).ok_or_else(|| self.error("lone surrogate"))?);
                        }
                        _ => return Err(self.error("unknown escape")),
                    }
                }
                Some(_) => return Err(self.error("raw control character in a string")),
            }
        }
    }
}

/// Append to `out` where `actual` differs from `expected`: objects compare as sets of
/// members, arrays in order, an integer never equals a float, strings after unescaping.
pub fn differences(expected: &Json, actual: &Json, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Json::Null, Json::Null) => {}
        (Json::Bool(a), Json::Bool(b)) if a == b => {}
        (Json::Int(a), Json::Int(b)) if a == b => {}
        (Json::Float(a), Json::Float(b)) if a == b => {}
        (Json::Str(a), Json::Str(b)) if a == b => {}
        (Json::Array(a), Json::Array(b)) => {
            if a.len() == b.len() {
                for (i, (e, x)) in a.iter().zip(b).enumerate() {
                    differences(e, x, &format!("{path}[{i}]"), out);
                }
            } else {
                out.push(format!(
                    "{path}: expected {} elements, got {}: {actual}",
                    a.len(),
                    b.len()
                ));
            }
        }
        (Json::Object(a), Json::Object(b)) => {
            let missing: Vec<&str> = a
                .iter()
                .filter(|(k, _)| actual.get(k).is_none())
                .map(|(k, _)| k.as_str())
                .collect();
            let extra: Vec<&str> = b
                .iter()
                .filter(|(k, _)| expected.get(k).is_none())
                .map(|(k, _)| k.as_str())
                .collect();
            if !missing.is_empty() {
                out.push(format!("{path}: missing members {missing:?} in {actual}"));
            }
            if !extra.is_empty() {
                out.push(format!("{path}: unexpected members {extra:?} in {actual}"));
            }
            for (name, value) in a {
                if let Some(other) = actual.get(name) {
                    differences(value, other, &format!("{path}.{name}"), out);
                }
            }
        }
        _ if expected.kind() != actual.kind() => out.push(format!(
            "{path}: expected {} {expected}, got {} {actual}",
            expected.kind(),
            actual.kind()
        )),
        _ => out.push(format!("{path}: expected {expected}, got {actual}")),
    }
}
