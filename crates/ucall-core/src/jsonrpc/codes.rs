// SPDX-License-Identifier: Apache-2.0
//! The one table of JSON-RPC 2.0 error codes (specification §5.1).
//!
//! Every other layer (HTTP status mapping, the C `ucall_result` codes, Python's
//! `RPCError.code`) maps from this table and never restates the numbers.

/// A pre-defined JSON-RPC 2.0 error code.
///
/// > The error codes from and including -32768 to -32000 are reserved for pre-defined errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorCode {
    /// "Invalid JSON was received by the server." (also invalid UTF-8)
    ParseError = -32700,
    /// "The JSON sent is not a valid Request object."
    InvalidRequest = -32600,
    /// "The method does not exist / is not available."
    MethodNotFound = -32601,
    /// "Invalid method parameter(s)." (missing, extra or of the wrong type)
    InvalidParams = -32602,
    /// "Internal JSON-RPC error." (a handler failed or panicked)
    InternalError = -32603,
}

/// Lowest code of the range left to server-defined errors (`-32099..=-32000`).
pub const SERVER_ERROR_MIN: i32 = -32099;
/// Highest code of the range left to server-defined errors (`-32099..=-32000`).
pub const SERVER_ERROR_MAX: i32 = -32000;

impl ErrorCode {
    /// All pre-defined codes, for tables in other languages.
    pub const ALL: [ErrorCode; 5] = [
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::InternalError,
    ];

    /// The numeric code sent on the wire.
    #[must_use]
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The message the specification gives for this code.
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "Parse error",
            ErrorCode::InvalidRequest => "Invalid Request",
            ErrorCode::MethodNotFound => "Method not found",
            ErrorCode::InvalidParams => "Invalid params",
            ErrorCode::InternalError => "Internal error",
        }
    }

    /// The pre-defined code with this number, if any.
    #[must_use]
    pub fn from_code(code: i32) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }
}

/// The one table of JSON-RPC error codes and HTTP statuses: `(code, status, by_status)`.
///
/// A REST-style call answers an error with the status of its code (a code not listed gets
/// 500). An error given only a status (an application's "404: no such user") carries the
/// code of the row marked `by_status` for that status, else [`SERVER_ERROR_MAX`]: a -32601
/// would tell a JSON-RPC caller the method is missing, which a missing user is not.
const HTTP_STATUSES: [(i32, u16, bool); 6] = [
    (ErrorCode::InvalidParams.code(), 400, true),
    (ErrorCode::InvalidRequest.code(), 400, false),
    (ErrorCode::ParseError.code(), 400, false),
    (ErrorCode::MethodNotFound.code(), 404, false),
    (ErrorCode::InternalError.code(), 500, true),
    (RATE_LIMITED, RATE_LIMITED_STATUS, true),
];

/// The code of a call refused, before it ran, for going over a rate limit
/// (by the rate limiter above dispatch); its HTTP status is [`RATE_LIMITED_STATUS`].
pub const RATE_LIMITED: i32 = -32029;

/// 429 Too Many Requests (RFC 6585 §4), sent with `Retry-After`.
pub const RATE_LIMITED_STATUS: u16 = 429;

/// The HTTP status of the error a caller gets when its call's deadline passes (504
/// Gateway Timeout, RFC 9110 §15.6.5: the server gave up waiting on the handler); its
/// JSON-RPC code is the table's for that status ([`SERVER_ERROR_MAX`]).
pub const DEADLINE_EXCEEDED_STATUS: u16 = 504;

/// The HTTP status of an application's own error (a code outside the reserved
/// -32768..=-32000, "division by zero"): 422 Unprocessable Content (RFC 9110 §15.5.21).
/// The request was understood and the procedure refused it, as it says it may: a 5xx would
/// tell retries and alerts that the server failed.
pub const APPLICATION_ERROR_STATUS: u16 = 422;

/// Whether `code` is an application's own, outside the range JSON-RPC reserves (§5.1).
#[must_use]
pub const fn is_application_error(code: i32) -> bool {
    !(code >= -32768 && code <= SERVER_ERROR_MAX)
}

/// The HTTP status for an error with `code` that names no status of its own (see
/// [`HTTP_STATUSES`](self)): 400, 404, 422 for an application's code, 500 for every other.
#[must_use]
pub fn http_status(code: i32) -> u16 {
    let default = if is_application_error(code) {
        APPLICATION_ERROR_STATUS
    } else {
        500
    };
    HTTP_STATUSES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(default, |(_, status, _)| *status)
}

/// The JSON-RPC code for an error given only an HTTP `status`: -32602 for 400, -32603
/// for 500, [`SERVER_ERROR_MAX`] (-32000) for any other.
#[must_use]
pub fn code_for_http_status(status: u16) -> i32 {
    HTTP_STATUSES
        .iter()
        .find(|(_, s, by_status)| *s == status && *by_status)
        .map_or(SERVER_ERROR_MAX, |(code, _, _)| *code)
}

/// Whether `status` may travel with an error: a client (4xx) or server (5xx) error.
#[must_use]
pub const fn is_error_status(status: u16) -> bool {
    status >= 400 && status <= 599
}

/// Whether `code` lies in the range reserved for server-defined errors.
#[must_use]
pub const fn is_server_error(code: i32) -> bool {
    code >= SERVER_ERROR_MIN && code <= SERVER_ERROR_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_specification() {
        assert_eq!(ErrorCode::ParseError.code(), -32700);
        assert_eq!(ErrorCode::InvalidRequest.code(), -32600);
        assert_eq!(ErrorCode::MethodNotFound.code(), -32601);
        assert_eq!(ErrorCode::InvalidParams.code(), -32602);
        assert_eq!(ErrorCode::InternalError.code(), -32603);
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(code.code()), Some(code));
        }
        assert!(is_server_error(-32000) && is_server_error(-32099));
        assert!(!is_server_error(-31999) && !is_server_error(-32100));
    }

    #[test]
    fn statuses_and_codes_come_from_one_table() {
        assert_eq!(http_status(ErrorCode::MethodNotFound.code()), 404);
        assert_eq!(http_status(ErrorCode::InvalidParams.code()), 400);
        assert_eq!(http_status(ErrorCode::ParseError.code()), 400);
        assert_eq!(http_status(ErrorCode::InternalError.code()), 500);
        assert_eq!(http_status(-32000), 500);
        // An application's own code is its caller's problem, not the server's.
        assert_eq!(http_status(42), 422);
        assert_eq!(http_status(1), 422);
        assert_eq!(http_status(-31999), 422);
        assert_eq!(http_status(-32099), 500);
        assert_eq!(http_status(-32768), 500);
        assert_eq!(code_for_http_status(400), ErrorCode::InvalidParams.code());
        assert_eq!(code_for_http_status(500), ErrorCode::InternalError.code());
        assert_eq!(code_for_http_status(429), RATE_LIMITED);
        assert_eq!(http_status(RATE_LIMITED), 429);
        assert!(is_server_error(RATE_LIMITED));
        // A missing resource is not a missing method.
        assert_eq!(code_for_http_status(404), SERVER_ERROR_MAX);
        assert_eq!(code_for_http_status(409), SERVER_ERROR_MAX);
        assert_eq!(code_for_http_status(DEADLINE_EXCEEDED_STATUS), SERVER_ERROR_MAX);
        assert!(is_error_status(400) && is_error_status(599));
        assert!(!is_error_status(399) && !is_error_status(600) && !is_error_status(200));
    }
}
