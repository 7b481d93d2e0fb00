// SPDX-License-Identifier: Apache-2.0
//! Errors of setting up and running a server (not of calls: those are [`crate::RpcError`]).

use std::fmt;

/// Why a server could not start or stopped with a failure.
///
/// The `Display` text is meant for people and may change between versions; match on the
/// `is_*` predicates instead.
pub struct Error {
    kind: Kind,
    context: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Config,
    Bind,
    Engine,
    Io,
}

impl Error {
    pub(crate) fn config(context: impl Into<String>) -> Self {
        Error {
            kind: Kind::Config,
            context: context.into(),
            source: None,
        }
    }

    pub(crate) fn bind(context: impl Into<String>, source: std::io::Error) -> Self {
        Error {
            kind: Kind::Bind,
            context: context.into(),
            source: Some(Box::new(source)),
        }
    }

    pub(crate) fn engine(context: impl Into<String>) -> Self {
        Error {
            kind: Kind::Engine,
            context: context.into(),
            source: None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error {
            kind: Kind::Io,
            context: context.into(),
            source: Some(Box::new(source)),
        }
    }

    /// The configuration is invalid.
    #[must_use]
    pub fn is_config(&self) -> bool {
        self.kind == Kind::Config
    }

    /// The address could not be resolved, bound or listened on.
    #[must_use]
    pub fn is_bind(&self) -> bool {
        self.kind == Kind::Bind
    }

    /// The requested engine cannot run here.
    #[must_use]
    pub fn is_engine(&self) -> bool {
        self.kind == Kind::Engine
    }

    /// An operating-system call failed.
    #[must_use]
    pub fn is_io(&self) -> bool {
        self.kind == Kind::Io
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.context)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("context", &self.context)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}
