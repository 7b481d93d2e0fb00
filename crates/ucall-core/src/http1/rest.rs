// SPDX-License-Identifier: Apache-2.0
//! REST-style calls: `GET /sum?a=1&b=2` and `POST /sum {"a":1,"b":2}` name the
//! procedure in the path and pass named params.

use serde::de::IgnoredAny;

/// Split a request-target into the procedure name (percent-decoded) and the raw query.
///
/// Returns `None` when the path is not valid percent-encoded UTF-8.
pub fn split_target<'t>(target: &'t str, name: &mut Vec<u8>) -> Option<&'t str> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    name.clear();
    percent_decode(path.trim_start_matches('/').as_bytes(), false, name);
    std::str::from_utf8(name).ok()?;
    Some(query)
}

/// Turn `a=1&b=hello%20there` into the JSON object `{"a":1,"b":"hello there"}`.
///
/// Keys and values are percent-decoded (`+` is a space). A value that parses as JSON is
/// taken as that JSON value; any other value becomes a JSON string.
///
/// Returns `false` when a key or value is not valid UTF-8 once decoded.
pub fn query_to_params(query: &str, scratch: &mut Vec<u8>, params: &mut Vec<u8>) -> bool {
    params.clear();
    params.push(b'{');
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if params.len() > 1 {
            params.push(b',');
        }
        scratch.clear();
        percent_decode(key.as_bytes(), true, scratch);
        let Ok(key) = std::str::from_utf8(scratch) else {
            return false;
        };
        serde_json::to_writer(&mut *params, key).expect("invariant: writing a str to a Vec cannot fail");
        params.push(b':');
        scratch.clear();
        percent_decode(value.as_bytes(), true, scratch);
        let Ok(value) = std::str::from_utf8(scratch) else {
            return false;
        };
        if serde_json::from_str::<IgnoredAny>(value).is_ok() {
            params.extend_from_slice(value.trim().as_bytes());
        } else {
            serde_json::to_writer(&mut *params, value).expect("invariant: writing a str to a Vec cannot fail");
        }
    }
    params.push(b'}');
    true
}

/// RFC 3986 §2.1 percent-decoding; malformed escapes are kept as they are.
fn percent_decode(input: &[u8], plus_is_space: bool, out: &mut Vec<u8>) {
    let mut i = 0;
    while i < input.len() {
        let c = input[i];
        match c {
            b'%' => match (hex(input.get(i + 1)), hex(input.get(i + 2))) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                    continue;
                }
                _ => out.push(c),
            },
            b'+' if plus_is_space => out.push(b' '),
            _ => out.push(c),
        }
        i += 1;
    }
}

fn hex(c: Option<&u8>) -> Option<u8> {
    match c? {
        c @ b'0'..=b'9' => Some(c - b'0'),
        c @ b'a'..=b'f' => Some(c - b'a' + 10),
        c @ b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> String {
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        assert!(query_to_params(query, &mut scratch, &mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn converts_queries() {
        assert_eq!(params("a=1&b=2"), r#"{"a":1,"b":2}"#);
        assert_eq!(params("data=%22hi%20there%22"), r#"{"data":"hi there"}"#);
        assert_eq!(
            params("data=hello+world&x=%5B1%2C2%5D&t=true&e="),
            r#"{"data":"hello world","x":[1,2],"t":true,"e":""}"#
        );
        assert_eq!(params("q=%E2%82%AC&bad=%zz&flag"), r#"{"q":"€","bad":"%zz","flag":""}"#);
        assert_eq!(params(""), "{}");
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        assert!(!query_to_params("a=%ff", &mut scratch, &mut out));
    }

    #[test]
    fn splits_targets() {
        let mut name = Vec::new();
        assert_eq!(split_target("/sum?a=1", &mut name), Some("a=1"));
        assert_eq!(name, b"sum");
        assert_eq!(split_target("/ns.do%20it", &mut name), Some(""));
        assert_eq!(name, b"ns.do it");
        assert_eq!(split_target("/%ff", &mut name), None);
    }
}
