// SPDX-License-Identifier: Apache-2.0
//! Cross-origin requests from browsers: the server side of the CORS protocol (Fetch
//! standard §3.2), sans-I/O. Off unless [`Cors`] is configured.
//!
//! A page served from another origin may call the server when the origin is allowed: a
//! preflight `OPTIONS` request (§3.2.2, sent before a `POST` with `Content-Type:
//! application/json`) is answered `204` with what is allowed, and each reply to an allowed
//! origin carries `Access-Control-Allow-Origin` (§3.2.3), a refusal (4xx, 5xx) too, so that
//! the page sees its status. Browsers apply no CORS to WebSocket: where CORS is configured,
//! a handshake from an origin not allowed is refused with 403 (RFC 6455 §10.2).
//! Credentials (cookies) are not supported, so `*` may stand for any origin, method or
//! header (§3.2.3, "wildcards").
//!
//! Binary messages (docs/wire.md §3.1) need one header beyond the configured ones:
//! `UCall-JSON-Length` is always allowed in a preflight and exposed on every reply, so a
//! page can send a binary body and read a binary reply's JSON part.
#![forbid(unsafe_code)]

use super::tokens;
use crate::wire::JSON_LENGTH_NAME;

/// Which cross-origin requests are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    origins: Vec<String>,
    methods: Vec<String>,
    headers: Vec<String>,
    max_age: Option<u32>,
}

/// Where the CORS request headers of a request head are: `(offset, length)` in the head's
/// bytes, so that the parsed head stays `Copy` and allocation-free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fields {
    /// `Origin`.
    pub origin: Option<(u32, u32)>,
    /// `Access-Control-Request-Method` (a preflight's).
    pub request_method: Option<(u32, u32)>,
    /// `Access-Control-Request-Headers` (a preflight's).
    pub request_headers: Option<(u32, u32)>,
}

impl Fields {
    /// The bytes of a field found in `head` (the bytes the head was parsed from).
    #[must_use]
    pub fn get(head: &[u8], span: Option<(u32, u32)>) -> Option<&[u8]> {
        let (start, len) = span?;
        head.get(start as usize..start as usize + len as usize)
    }
}

/// The outcome of a preflight request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preflight {
    /// Allowed: the headers were written.
    Allowed,
    /// Refused, for this reason; no CORS header was written, so the browser fails the request.
    Refused(&'static str),
}

/// Fetch §2.2.1: a CORS-safelisted method needs no listing in `Access-Control-Allow-Methods`.
fn is_safelisted_method(method: &[u8]) -> bool {
    matches!(method, b"GET" | b"HEAD" | b"POST")
}

impl Cors {
    /// Allow requests from these origins (`https://app.example.com`, scheme, host and
    /// port as a browser serializes them; `*` for any), with methods `GET, POST` and
    /// header `Content-Type`, unless changed with the setters below.
    #[must_use]
    pub fn new<S: Into<String>>(origins: impl IntoIterator<Item = S>) -> Self {
        Cors {
            origins: origins.into_iter().map(Into::into).collect(),
            methods: vec!["GET".into(), "POST".into()],
            headers: vec!["Content-Type".into()],
            max_age: None,
        }
    }

    /// Allow one more origin.
    #[must_use]
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
        self
    }

    /// The methods a preflight allows (`*` for any).
    #[must_use]
    pub fn allow_methods<S: Into<String>>(mut self, methods: impl IntoIterator<Item = S>) -> Self {
        self.methods = methods.into_iter().map(Into::into).collect();
        self
    }

    /// The request headers a preflight allows (`*` for any but `Authorization`, which
    /// must be named, Fetch §3.2.3).
    #[must_use]
    pub fn allow_headers<S: Into<String>>(mut self, headers: impl IntoIterator<Item = S>) -> Self {
        self.headers = headers.into_iter().map(Into::into).collect();
        self
    }

    /// How long a browser may cache a preflight's answer (`Access-Control-Max-Age`).
    #[must_use]
    pub fn max_age(mut self, seconds: u32) -> Self {
        self.max_age = Some(seconds);
        self
    }

    /// Whether a request with this `Origin` is allowed (Fetch §3.2.5: origins compare as
    /// serialized, byte for byte; `null` only when listed).
    #[must_use]
    pub fn allows_origin(&self, origin: &[u8]) -> bool {
        self.origins
            .iter()
            .any(|allowed| allowed == "*" || allowed.as_bytes() == origin)
    }

    fn any_origin(&self) -> bool {
        self.origins.iter().any(|o| o == "*")
    }

    /// Append the headers of a reply to a request from `origin` (§3.2.3); `false`, with
    /// nothing written, when the origin is not allowed.
    pub fn write_response_headers(&self, origin: &[u8], out: &mut Vec<u8>) -> bool {
        if !self.write_allow_origin(origin, out) {
            return false;
        }
        // §3.2.3: a script reads only safelisted reply headers and those exposed.
        out.extend_from_slice(b"Access-Control-Expose-Headers: ");
        out.extend_from_slice(JSON_LENGTH_NAME.as_bytes());
        out.extend_from_slice(b"\r\n");
        true
    }

    fn write_allow_origin(&self, origin: &[u8], out: &mut Vec<u8>) -> bool {
        if !self.allows_origin(origin) {
            return false;
        }
        if self.any_origin() {
            out.extend_from_slice(b"Access-Control-Allow-Origin: *\r\n");
        } else {
            out.extend_from_slice(b"Access-Control-Allow-Origin: ");
            out.extend_from_slice(origin);
            // A reply that names the origin varies with it (§3.2.5, caches).
            out.extend_from_slice(b"\r\nVary: Origin\r\n");
        }
        true
    }

    /// Answer a preflight (§3.2.2) from `origin` for `method` with the header names in
    /// `headers` (the `Access-Control-Request-Headers` list), appending the headers of the
    /// reply to `out` when it is allowed.
    pub fn preflight(&self, origin: &[u8], method: &[u8], headers: Option<&[u8]>, out: &mut Vec<u8>) -> Preflight {
        if !self.allows_origin(origin) {
            return Preflight::Refused("origin not allowed");
        }
        let any_method = self.methods.iter().any(|m| m == "*");
        // §3.2.3: methods compare byte for byte (they are case-sensitive).
        if !(any_method || is_safelisted_method(method) || self.methods.iter().any(|m| m.as_bytes() == method)) {
            return Preflight::Refused("method not allowed");
        }
        let any_header = self.headers.iter().any(|h| h == "*");
        for name in headers.into_iter().flat_map(tokens) {
            let listed = name.eq_ignore_ascii_case(JSON_LENGTH_NAME.as_bytes())
                || self.headers.iter().any(|h| h.as_bytes().eq_ignore_ascii_case(name));
            // §3.2.3: `*` does not cover Authorization.
            if !(listed || (any_header && !name.eq_ignore_ascii_case(b"authorization"))) {
                return Preflight::Refused("header not allowed");
            }
        }
        self.write_allow_origin(origin, out);
        out.extend_from_slice(b"Access-Control-Allow-Methods: ");
        join(&self.methods, out);
        out.extend_from_slice(b"\r\nAccess-Control-Allow-Headers: ");
        join(&self.headers, out);
        let covered = self
            .headers
            .iter()
            .any(|h| h == "*" || h.eq_ignore_ascii_case(JSON_LENGTH_NAME));
        if !covered {
            out.extend_from_slice(if self.headers.is_empty() { b"" } else { b", " });
            out.extend_from_slice(JSON_LENGTH_NAME.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if let Some(seconds) = self.max_age {
            out.extend_from_slice(b"Access-Control-Max-Age: ");
            out.extend_from_slice(itoa::Buffer::new().format(seconds).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Preflight::Allowed
    }
}

/// The `Origin` of a request head the server refused before reading its fields (a
/// refusal to an allowed origin still carries `Access-Control-Allow-Origin`, so that the
/// page sees the status rather than a network error). `None` when the head cannot be read.
#[must_use]
pub fn origin_of(head: &[u8]) -> Option<&[u8]> {
    let mut headers = [httparse::EMPTY_HEADER; super::MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("origin"))
            .map(|h| super::trim(h.value)),
        _ => None,
    }
}

fn join(items: &[String], out: &mut Vec<u8>) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(item.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preflight(cors: &Cors, origin: &str, method: &str, headers: Option<&str>) -> Result<String, &'static str> {
        let mut out = Vec::new();
        match cors.preflight(
            origin.as_bytes(),
            method.as_bytes(),
            headers.map(str::as_bytes),
            &mut out,
        ) {
            Preflight::Allowed => Ok(String::from_utf8(out).unwrap()),
            Preflight::Refused(why) => {
                assert!(out.is_empty(), "a refusal writes no header");
                Err(why)
            }
        }
    }

    fn response(cors: &Cors, origin: &str) -> Option<String> {
        let mut out = Vec::new();
        cors.write_response_headers(origin.as_bytes(), &mut out)
            .then(|| String::from_utf8(out).unwrap())
    }

    #[test]
    fn names_an_allowed_origin_and_varies_with_it() {
        // Fetch §3.2.5: the value of Access-Control-Allow-Origin is the request's origin
        // (or `*`), compared as serialized: scheme, host and port all count.
        let cors = Cors::new(["https://app.example", "http://127.0.0.1:8080"]);
        assert_eq!(
            response(&cors, "https://app.example").as_deref(),
            Some(
                "Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n\
                 Access-Control-Expose-Headers: UCall-JSON-Length\r\n"
            )
        );
        assert!(response(&cors, "http://127.0.0.1:8080").is_some());
        for other in [
            "http://app.example",
            "https://app.example:444",
            "https://APP.example",
            "https://app.example.evil",
            "http://127.0.0.1:8081",
            "null",
            "",
        ] {
            assert_eq!(response(&cors, other), None, "{other}");
        }
    }

    #[test]
    fn a_wildcard_allows_every_origin_without_naming_it() {
        let cors = Cors::new(["*"]);
        let any = "Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: UCall-JSON-Length\r\n";
        assert_eq!(response(&cors, "https://anywhere.example").as_deref(), Some(any));
        assert_eq!(response(&cors, "null").as_deref(), Some(any));
        // The opaque origin `null` (sandboxed pages, file: URLs) only when listed.
        assert!(response(&Cors::new(["null"]), "null").is_some());
        assert!(response(&Cors::new(Vec::<String>::new()), "https://a.example").is_none());
    }

    #[test]
    fn preflight_allows_a_json_post() {
        // What a browser sends before fetch(url, {method: "POST", headers: {"content-type":
        // "application/json"}}): Content-Type with that value is not CORS-safelisted.
        let cors = Cors::new(["https://app.example"]).max_age(600);
        assert_eq!(
            preflight(&cors, "https://app.example", "POST", Some("content-type")).unwrap(),
            "Access-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n\
             Access-Control-Allow-Methods: GET, POST\r\nAccess-Control-Allow-Headers: Content-Type, UCall-JSON-Length\r\n\
             Access-Control-Max-Age: 600\r\n"
        );
        assert_eq!(
            preflight(&cors, "https://other.example", "POST", Some("content-type")),
            Err("origin not allowed")
        );
    }

    #[test]
    fn preflight_checks_methods_as_fetch_does() {
        let cors = Cors::new(["*"]);
        // §2.2.1: GET, HEAD and POST are safelisted and always pass.
        for method in ["GET", "HEAD", "POST"] {
            assert!(preflight(&cors, "https://a.example", method, None).is_ok(), "{method}");
        }
        assert_eq!(
            preflight(&cors, "https://a.example", "PUT", None),
            Err("method not allowed")
        );
        // Methods are case-sensitive: `post` is not the safelisted `POST`.
        assert_eq!(
            preflight(&cors, "https://a.example", "post", None),
            Err("method not allowed")
        );
        let any = Cors::new(["*"]).allow_methods(["*"]);
        assert!(preflight(&any, "https://a.example", "DELETE", None)
            .unwrap()
            .contains("Access-Control-Allow-Methods: *\r\n"));
        let listed = Cors::new(["*"]).allow_methods(["POST", "PATCH"]);
        assert!(preflight(&listed, "https://a.example", "PATCH", None).is_ok());
    }

    #[test]
    fn preflight_checks_header_names_case_insensitively() {
        let cors = Cors::new(["*"]).allow_headers(["Content-Type", "X-Request-Id"]);
        assert!(preflight(&cors, "https://a.example", "POST", Some("x-request-id, CONTENT-TYPE")).is_ok());
        assert!(preflight(&cors, "https://a.example", "POST", Some(" , content-type ,")).is_ok());
        assert_eq!(
            preflight(&cors, "https://a.example", "POST", Some("content-type, x-secret")),
            Err("header not allowed")
        );
        // §3.2.3: `*` allows any header name except Authorization, which must be listed.
        let any = Cors::new(["*"]).allow_headers(["*"]);
        assert!(preflight(&any, "https://a.example", "POST", Some("x-anything, content-type")).is_ok());
        assert_eq!(
            preflight(&any, "https://a.example", "POST", Some("authorization")),
            Err("header not allowed")
        );
        let named = Cors::new(["*"]).allow_headers(["*", "Authorization"]);
        assert!(preflight(&named, "https://a.example", "POST", Some("Authorization")).is_ok());
        let none = Cors::new(["*"]).allow_headers(Vec::<String>::new());
        assert_eq!(
            preflight(&none, "https://a.example", "POST", None).unwrap(),
            "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, POST\r\n\
             Access-Control-Allow-Headers: UCall-JSON-Length\r\n"
        );
    }

    #[test]
    fn binary_messages_need_no_configuration() {
        // docs/wire.md §3.1: a page sends UCall-JSON-Length with a binary body and reads it
        // from a binary reply, whatever headers the server lists.
        let listed = Cors::new(["*"]).allow_headers(["X-Request-Id"]);
        let allowed = preflight(
            &listed,
            "https://a.example",
            "POST",
            Some("content-type, ucall-json-length"),
        );
        assert_eq!(allowed, Err("header not allowed"), "Content-Type is not listed here");
        let allowed = preflight(
            &listed,
            "https://a.example",
            "POST",
            Some("x-request-id, UCall-JSON-Length"),
        )
        .unwrap();
        assert!(allowed.contains("Access-Control-Allow-Headers: X-Request-Id, UCall-JSON-Length\r\n"));
        let default = preflight(
            &Cors::new(["*"]),
            "https://a.example",
            "POST",
            Some("content-type, ucall-json-length"),
        );
        assert!(default.is_ok());
        // Named once only, and `*` covers it.
        let named = Cors::new(["*"]).allow_headers(["ucall-json-length"]);
        assert!(preflight(&named, "https://a.example", "POST", None)
            .unwrap()
            .ends_with("Access-Control-Allow-Headers: ucall-json-length\r\n"));
        let any = Cors::new(["*"]).allow_headers(["*"]);
        assert!(preflight(&any, "https://a.example", "POST", None)
            .unwrap()
            .ends_with("Access-Control-Allow-Headers: *\r\n"));
        // Exposed on replies, not on preflights (which a script never reads).
        assert!(response(&listed, "https://a.example")
            .unwrap()
            .contains("Access-Control-Expose-Headers: UCall-JSON-Length\r\n"));
        assert!(!preflight(&listed, "https://a.example", "POST", None)
            .unwrap()
            .contains("Expose"));
    }

    #[test]
    fn finds_the_origin_of_a_refused_head() {
        let head = b"PUT / HTTP/1.1\r\nHost: x\r\norigin:  https://a.example \r\n\r\n";
        assert_eq!(origin_of(head), Some(&b"https://a.example"[..]));
        assert_eq!(origin_of(b"PUT / HTTP/1.1\r\nHost: x\r\n\r\n"), None, "no Origin");
        assert_eq!(
            origin_of(b"PUT / HTTP/1.1\r\nOrigin: https://a.example\r\n"),
            None,
            "cut short"
        );
        assert_eq!(origin_of(b"PUT / HTTP/1.1\r\nBad Header\r\n\r\n"), None, "malformed");
    }

    #[test]
    fn finds_fields_by_their_spans() {
        let head = b"OPTIONS / HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n";
        assert_eq!(Fields::get(head, Some((28, 17))), Some(&b"https://a.example"[..]));
        assert_eq!(Fields::get(head, Some((40, 100))), None, "out of bounds");
        assert_eq!(Fields::get(head, None), None);
    }
}
