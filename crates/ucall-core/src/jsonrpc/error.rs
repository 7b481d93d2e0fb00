// SPDX-License-Identifier: Apache-2.0
//! The error a procedure returns, sent to the caller as a JSON-RPC error object.

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU16;

use serde::Serialize;
use serde_json::value::RawValue;

use super::codes::{self, ErrorCode};

/// A JSON-RPC error object: `{"code": ..., "message": ..., "data": ...}` (specification §5.1).
///
/// Handlers return it to fail a call; the server writes it as the call's `error` member.
/// Over HTTP it may name the status to answer with ([`RpcError::http`]).
#[derive(Clone, Debug)]
pub struct RpcError {
    code: i32,
    /// Fits in the padding after `code`: the error is no larger for it.
    status: Option<NonZeroU16>,
    /// Seconds after which a retry may pass (HTTP `Retry-After`); in the padding too.
    retry_after: Option<NonZeroU16>,
    message: Cow<'static, str>,
    data: Option<Box<RawValue>>,
}

impl RpcError {
    /// An error with any code and message. Server-defined codes belong in `-32099..=-32000`.
    #[must_use]
    pub fn new(code: i32, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError {
            code,
            status: None,
            retry_after: None,
            message: message.into(),
            data: None,
        }
    }

    /// An error that answers HTTP with `status` (4xx or 5xx), its JSON-RPC code taken
    /// from the one table ([`crate::jsonrpc::code_for_http_status`]: -32602 for 400,
    /// -32603 for 500, -32000 for the others). A REST-style call and a single JSON-RPC
    /// call over HTTP answer with the status (a batch keeps 200); raw TCP and WebSocket
    /// send only the JSON-RPC error. A status out of 400..=599 is ignored.
    #[must_use]
    pub fn http(status: u16, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(codes::code_for_http_status(status), message).with_http_status(status)
    }

    /// Answer HTTP with `status` (4xx or 5xx) rather than the one the code calls for;
    /// a status out of 400..=599 is ignored.
    #[must_use]
    pub fn with_http_status(mut self, status: u16) -> Self {
        if codes::is_error_status(status) {
            self.status = NonZeroU16::new(status);
        }
        self
    }

    /// The HTTP status this error was given, if any (see [`RpcError::with_http_status`]).
    #[must_use]
    pub fn http_status(&self) -> Option<u16> {
        self.status.map(NonZeroU16::get)
    }

    /// Tell an HTTP caller to retry after `seconds` (at least 1): the reply carries
    /// `Retry-After` (RFC 9110 §10.2.3). Raw TCP and WebSocket callers see only the error.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u16) -> Self {
        self.retry_after = NonZeroU16::new(seconds.max(1));
        self
    }

    /// The seconds after which a retry may pass, if said ([`RpcError::with_retry_after`]).
    #[must_use]
    pub fn retry_after(&self) -> Option<u16> {
        self.retry_after.map(NonZeroU16::get)
    }

    /// The status a REST-style call answers with: the one given, else the code's.
    #[must_use]
    pub fn rest_status(&self) -> u16 {
        self.http_status().unwrap_or_else(|| codes::http_status(self.code))
    }

    /// "Deadline exceeded": the call's deadline (its procedure's or its caller's) passed
    /// before it finished. HTTP 504, its code from the one table (-32000).
    #[cold]
    #[must_use]
    pub fn deadline_exceeded() -> Self {
        Self::http(codes::DEADLINE_EXCEEDED_STATUS, "Deadline exceeded")
    }

    /// `-32602`: the message should name the parameter at fault.
    #[must_use]
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::InvalidParams.code(), message)
    }

    /// `-32602` for a parameter the call did not pass, by name or by position (the text
    /// every front end sends).
    #[cold]
    #[inline(never)]
    #[must_use]
    pub fn missing_param(name: &str) -> Self {
        Self::invalid_params(format!("Invalid params: missing parameter '{name}'"))
    }

    /// `-32603`: the handler failed for a reason of its own.
    #[must_use]
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorCode::InternalError.code(), message)
    }

    /// `-32601` for a method that is not registered. The name is the client's: a long one
    /// is cut (a megabyte of name was sent back whole).
    #[must_use]
    pub fn method_not_found(method: &str) -> Self {
        const SHOWN: usize = 128;
        let message = if method.len() <= SHOWN {
            format!("Method not found: '{method}'")
        } else {
            let cut = (0..=SHOWN).rev().find(|&at| method.is_char_boundary(at)).unwrap_or(0);
            format!("Method not found: '{}...' ({} bytes)", &method[..cut], method.len())
        };
        Self::new(ErrorCode::MethodNotFound.code(), message)
    }

    /// Attach `data`, serialized to JSON. A value that cannot be serialized is dropped.
    #[must_use]
    pub fn with_data<T: Serialize + ?Sized>(mut self, data: &T) -> Self {
        self.data = serde_json::value::to_raw_value(data).ok();
        self
    }

    /// Attach `data` that is already JSON text. Returns `None` when `json` is not valid JSON.
    #[must_use]
    pub fn with_raw_data(mut self, json: &str) -> Option<Self> {
        self.data = Some(RawValue::from_string(json.to_owned()).ok()?);
        Some(self)
    }

    /// The numeric code.
    #[must_use]
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The human-readable message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `data` member as JSON text, if any.
    #[must_use]
    pub fn data(&self) -> Option<&str> {
        self.data.as_deref().map(RawValue::get)
    }
}

impl From<ErrorCode> for RpcError {
    fn from(code: ErrorCode) -> Self {
        RpcError::new(code.code(), code.message())
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_status_travels_with_the_error_and_picks_its_code() {
        let missing = RpcError::http(404, "no such user");
        assert_eq!(
            (missing.code(), missing.http_status(), missing.rest_status()),
            (-32000, Some(404), 404)
        );
        assert_eq!(RpcError::http(400, "bad").code(), ErrorCode::InvalidParams.code());
        let plain = RpcError::method_not_found("x");
        assert_eq!((plain.http_status(), plain.rest_status()), (None, 404));
        assert_eq!(RpcError::internal("x").with_http_status(200).http_status(), None);
        assert_eq!(RpcError::internal("x").with_http_status(600).http_status(), None);
        assert_eq!(RpcError::internal("x").with_http_status(503).rest_status(), 503);
        let late = RpcError::deadline_exceeded();
        assert_eq!((late.code(), late.http_status()), (-32000, Some(504)));
        assert_eq!(std::mem::size_of::<RpcError>(), 48);
    }

    #[test]
    fn a_long_unknown_method_name_is_cut_in_the_message() {
        assert_eq!(RpcError::method_not_found("nope").message(), "Method not found: 'nope'");
        let long = "é".repeat(100_000);
        let message = RpcError::method_not_found(&long).message().to_owned();
        assert!(message.len() < 200, "{} bytes", message.len());
        assert!(message.ends_with("...' (200000 bytes)"), "{message}");
    }
}
