// SPDX-License-Identifier: Apache-2.0
//! Why a call failed on the way (not a JSON-RPC error reply: that is [`crate::Response`]).

use std::fmt;

/// A transport failure of a call or a connection.
///
/// The `Display` text is meant for people and may change; match on [`Error::kind`].
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    tls: Option<TlsRefusal>,
    /// Items came where one reply was awaited: the procedure streams its result.
    streamed: bool,
}

/// Which side's certificate a failed TLS connection was about, for callers that report
/// the two differently (which CA to trust, or which certificate to present).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsRefusal {
    /// The server's certificate (or its name) did not verify; the text says why.
    ServerCertificate,
    /// The server refused the client's certificate, or its absence (its TLS alert).
    ClientCertificate,
}

/// The kinds of [`Error`], as the Python client's exception classes name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No connection: refused, unreachable, a failed TLS or WebSocket handshake.
    Connect,
    /// No reply (or no connection) within the time-out.
    Timeout,
    /// The connection broke; whether the call ran is in the message.
    Transport,
    /// The server's bytes are not a valid reply.
    Protocol,
    /// Bad configuration or arguments (an unknown scheme, params that are not JSON).
    Invalid,
}

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            tls: None,
            streamed: false,
        }
    }

    /// The error of a call whose procedure streams its result (read with
    /// [`crate::Client::stream`]), for front ends that word it in their own API.
    #[cold]
    pub(crate) fn streamed(message: impl Into<String>) -> Self {
        Error {
            streamed: true,
            ..Self::new(ErrorKind::Protocol, message)
        }
    }

    /// Whether the call failed because its procedure streams its result.
    #[must_use]
    pub fn streams_its_result(&self) -> bool {
        self.streamed
    }

    #[cold]
    pub(crate) fn refused(refusal: TlsRefusal, message: impl Into<String>) -> Self {
        Error {
            tls: Some(refusal),
            ..Self::new(ErrorKind::Connect, message)
        }
    }

    /// Whose certificate made the TLS connection fail, when that is why it failed.
    #[must_use]
    pub fn tls_refusal(&self) -> Option<TlsRefusal> {
        self.tls
    }

    #[cold]
    pub(crate) fn connect(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Connect, message)
    }

    #[cold]
    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }

    #[cold]
    pub(crate) fn transport(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transport, message)
    }

    #[cold]
    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol, message)
    }

    #[cold]
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    /// What kind of failure this is.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The text without the kind.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The client's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
