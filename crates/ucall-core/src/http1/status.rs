// SPDX-License-Identifier: Apache-2.0
//! Response statuses and the refusals the HTTP layer answers with.

/// Response status codes the server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Status {
    Ok,
    NoContent,
    NotModified,
    BadRequest,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    PayloadTooLarge,
    HeadersTooLarge,
    UriTooLong,
    InternalServerError,
    NotImplemented,
    ServiceUnavailable,
    UpgradeRequired,
    VersionNotSupported,
    /// Any other 4xx or 5xx an application's error named ([`crate::RpcError::http`]).
    Other(u16),
    /// A 4xx or 5xx that tells when to retry: `Retry-After: seconds` (a rate limit's 429).
    RetryAfter {
        /// The status code.
        code: u16,
        /// Whole seconds to wait.
        seconds: u16,
    },
}

impl Status {
    /// The numeric code.
    #[must_use]
    pub const fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::NoContent => 204,
            Status::NotModified => 304,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::PayloadTooLarge => 413,
            Status::HeadersTooLarge => 431,
            Status::UriTooLong => 414,
            Status::InternalServerError => 500,
            Status::NotImplemented => 501,
            Status::ServiceUnavailable => 503,
            Status::UpgradeRequired => 426,
            Status::VersionNotSupported => 505,
            Status::Other(code) | Status::RetryAfter { code, .. } => code,
        }
    }

    /// The status of an error reply: `code`, with `Retry-After` when the error said when
    /// to retry ([`crate::RpcError::retry_after`]).
    #[must_use]
    pub const fn of_error(code: u16, retry_after: Option<u16>) -> Status {
        match retry_after {
            Some(seconds) => Status::RetryAfter { code, seconds },
            None => Status::from_code(code),
        }
    }

    /// The status for `code`, a 4xx or 5xx (an application error's): a named one when the
    /// server sends it anyway, else [`Status::Other`].
    #[must_use]
    pub const fn from_code(code: u16) -> Status {
        match code {
            400 => Status::BadRequest,
            403 => Status::Forbidden,
            404 => Status::NotFound,
            408 => Status::RequestTimeout,
            413 => Status::PayloadTooLarge,
            414 => Status::UriTooLong,
            431 => Status::HeadersTooLarge,
            500 => Status::InternalServerError,
            501 => Status::NotImplemented,
            503 => Status::ServiceUnavailable,
            505 => Status::VersionNotSupported,
            // 405 and 426 carry headers about the server's own routes and protocols.
            code => Status::Other(code),
        }
    }

    /// The status line; [`Status::Other`] has none fixed (`respond_typed` writes it).
    pub(super) const fn status_line(self) -> &'static [u8] {
        match self {
            Status::Other(_) | Status::RetryAfter { .. } => b"",
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::NoContent => b"HTTP/1.1 204 No Content\r\n",
            Status::NotModified => b"HTTP/1.1 304 Not Modified\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::Forbidden => b"HTTP/1.1 403 Forbidden\r\n",
            Status::NotFound => b"HTTP/1.1 404 Not Found\r\n",
            // RFC 9110 §15.5.6: `Allow` follows, from the refusal (it depends on the target).
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\n",
            Status::RequestTimeout => b"HTTP/1.1 408 Request Timeout\r\n",
            Status::PayloadTooLarge => b"HTTP/1.1 413 Content Too Large\r\n",
            Status::HeadersTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Status::UriTooLong => b"HTTP/1.1 414 URI Too Long\r\n",
            Status::InternalServerError => b"HTTP/1.1 500 Internal Server Error\r\n",
            Status::NotImplemented => b"HTTP/1.1 501 Not Implemented\r\n",
            // RFC 9110 §10.2.3: when to retry; every 503 here is overload, a stop or a drain.
            Status::ServiceUnavailable => b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n",
            // RFC 6455 §4.4: name the versions the server speaks.
            Status::UpgradeRequired => b"HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n",
            Status::VersionNotSupported => b"HTTP/1.1 505 HTTP Version Not Supported\r\n",
        }
    }
}

/// The reason phrase of a 4xx or 5xx status that applications use (RFC 9110 §15, RFC 6585);
/// empty for others, which RFC 9112 §4 allows ("a client SHOULD ignore the reason-phrase").
pub(super) const fn reason_phrase(code: u16) -> &'static str {
    match code {
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        507 => "Insufficient Storage",
        511 => "Network Authentication Required",
        _ => "",
    }
}

/// A request the server refuses at the HTTP layer: status plus a short reason for the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    /// The status to answer with; the connection closes after it.
    pub status: Status,
    /// Why, in a few words (sent in the error object's message).
    pub reason: &'static str,
    /// The request was `HEAD`: the answer has no content (RFC 9110 §9.3.2).
    pub to_head: bool,
    /// The methods the target allows, for a 405's `Allow` (RFC 9110 §15.5.6).
    pub allow: Option<&'static str>,
    /// The limit the request went over, as its setting's name and value, so that the
    /// message says which setting to raise.
    pub limit: Option<(&'static str, usize)>,
}

impl Reject {
    /// The error object's message: the status, the reason, and the limit when one was passed
    /// (`413: request body too large: more than max_body_bytes = 1024 bytes`).
    #[must_use]
    pub fn message(&self) -> String {
        match self.limit {
            Some((name, value)) => format!(
                "{}: {}: more than {name} = {value} bytes",
                self.status.code(),
                self.reason
            ),
            None => format!("{}: {}", self.status.code(), self.reason),
        }
    }
}

/// A refusal with `status` for `reason`.
pub(crate) const fn reject(status: Status, reason: &'static str) -> Reject {
    Reject {
        status,
        reason,
        to_head: false,
        allow: None,
        limit: None,
    }
}

/// A 413: the body (announced, or decoded so far) is over `max_body_bytes`.
pub(crate) const fn body_too_large(max_body_bytes: usize) -> Reject {
    Reject {
        limit: Some(("max_body_bytes", max_body_bytes)),
        ..reject(Status::PayloadTooLarge, "request body too large")
    }
}
