// SPDX-License-Identifier: Apache-2.0
//! # ucall-core
//!
//! JSON-RPC 2.0 over HTTP/1.1, raw TCP and WebSocket, with TLS: plain Rust functions become
//! network services.
//!
//! ## Quick start
//!
//! ```no_run
//! use ucall_core::Server;
//!
//! fn main() -> Result<(), ucall_core::Error> {
//!     Server::builder()
//!         .port(8545)
//!         // by name {"a":1,"b":2} or by position [1,2]; a wrong type answers -32602 naming it
//!         .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
//!         .bind()?
//!         .run() // until Ctrl-C / SIGTERM, then drains in-flight calls
//! }
//! ```
//!
//! `curl -s localhost:8545 -d '{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}'`
//! then answers `{"jsonrpc":"2.0","id":1,"result":3}`. [`ServerBuilder`] holds every
//! option ([`Config`]: engine, threads, limits, time-outs, TLS, a Unix domain socket
//! beside the port); [`ServerBuilder::handler`]
//! registers a [`Handler`] that writes its reply itself or answers later from another
//! thread ([`Reply::defer`]).
//!
//! ## Inside
//!
//! ```text
//!  socket bytes ─► engine (poll: epoll/kqueue through mio; a thread per core)
//!                   ─► session: sniffs the first byte → http1 | stream (raw TCP)
//!                        ─► dispatch: each call of a request / batch, in order
//!                             ─► router: method name → handler → reply bytes
//!                                  ─► defer, params: deferred replies; typed params
//!                                       ─► jsonrpc: the codec (borrowed views, writers)
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

// The building blocks below are public for the C and Python front ends and the in-memory
// tests; the API is what the crate root re-exports.
/// Entry points for the fuzz targets (`fuzz/`) and the replay of their vectors.
#[doc(hidden)]
pub mod _fuzzable;
pub mod base64_text;
pub mod batch;
#[doc(hidden)]
pub mod buffer;
mod cancellation;
pub mod context;
mod date;
mod deadline;
#[doc(hidden)]
pub mod defer;
mod discover;
#[doc(hidden)]
pub mod dispatch;
#[doc(hidden)]
pub mod engine;
mod error;
pub mod gzip;
pub mod health;
#[doc(hidden)]
pub mod http1;
#[doc(hidden)]
pub mod jsonrpc;
pub mod lend;
pub mod limit;
mod logs;
#[doc(hidden)]
pub mod mcp;
mod mcp_sessions;
pub mod metrics;
pub mod params;
pub mod request_log;
#[doc(hidden)]
pub mod router;
mod server;
#[doc(hidden)]
pub mod session;
#[cfg(feature = "tracing")]
mod spans;
#[doc(hidden)]
pub mod stream;
pub mod streaming;
mod tls;
pub mod trace_context;
#[doc(hidden)]
pub mod wire;
pub mod ws;

pub use batch::{Batch, BatchHandler, BatchOptions, BatchStats, Batcher, RunHere};
pub use bytes::Bytes;
pub use cancellation::Cancellation;
pub use context::{Caller, Context, Transport};
pub use defer::{Deferred, WakeHold};
pub use discover::mcp::McpSettings;
pub use discover::{type_text, Discovery, ErrorDoc, ExampleDoc, MethodDoc, Page, ParamDoc, ParamStructure, ResultDoc};
pub use engine::Worker;
pub use error::Error;
pub use health::{HealthPaths, NotReady, Readiness, ReadyState};
pub use http1::cors::Cors;
pub use jsonrpc::attachment::Dtype;
pub use jsonrpc::{ErrorCode, RpcError};
pub use limit::{ClientKey, IpNet, Rate, RateLimit};
pub use metrics::{ExtraMetrics, MetricsConfig};
pub use params::Param;
pub use request_log::{LogFormat, RequestLog};
pub use router::{Call, Handler, Hook, KeyedLimits, Params, Reply, Router};
pub use server::{Config, DrainCounts, EngineKind, EventLog, Server, ServerBuilder, ServerHandle, Stopper};
pub use session::Limits;
pub use streaming::StreamError;
pub use tls::TlsConfig;
pub use trace_context::{TraceContext, TraceParent};
