// SPDX-License-Identifier: Apache-2.0
//! # ucall-core
//!
//! JSON-RPC 2.0 over HTTP/1.1 and raw TCP: plain Rust functions become network services.
//!
//! ```text
//!  socket bytes ─► engine (poll: epoll/kqueue through mio; a thread per core)
//!                   ─► session: sniffs the first byte → http1 | stream (raw TCP)
//!                        ─► jsonrpc: request / batch → borrowed views, validated
//!                             ─► router: method name → handler → reply bytes
//! ```
//!
//! Protocol code (`http1`, `stream`, `jsonrpc`, `session`) is sans-I/O: bytes in, events
//! and bytes out, tested in memory; the engine only moves bytes.
//!
//! Guarantees:
//! - replies on one connection leave in request order (pipelining, batches);
//! - a bad request costs its sender a clear error (JSON-RPC code or HTTP status), never
//!   the server: every limit is a [`Config`] field with a safe default;
//! - a panicking handler answers `-32603` and the server lives on;
//! - replies are written straight into the connection's output buffer; in steady state a
//!   request allocates nothing.

pub mod buffer;
mod date;
pub mod defer;
pub mod engine;
mod error;
pub mod http1;
pub mod jsonrpc;
pub mod router;
mod server;
pub mod session;
pub mod stream;
mod tls;
pub mod ws;

pub use defer::{Deferred, WakeHold};
pub use engine::Worker;
pub use error::Error;
pub use jsonrpc::{ErrorCode, RpcError};
pub use router::{Call, Handler, Params, Reply, Router};
pub use server::{Config, EngineKind, EventLog, Server, ServerBuilder, ServerHandle, Stopper};
pub use session::Limits;
pub use tls::TlsConfig;
