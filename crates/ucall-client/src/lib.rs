// SPDX-License-Identifier: Apache-2.0
//! # ucall-client
//!
//! A JSON-RPC 2.0 client for UCall servers (and any JSON-RPC server): HTTP/1.1 (kept
//! alive, pipelined, chunked replies), raw TCP and WebSocket, each plain or over TLS
//! (rustls, the server verified by default).
//!
//! ```no_run
//! use ucall_client::{Client, Endpoint, Params};
//!
//! let mut client = Client::new(Endpoint::parse("http://127.0.0.1:8545")?)?;
//! let sum: i64 = client.call("sum", [1, 2])?.result()?;
//! // bytes go out as base64 written straight into the request (SIMD), and come back
//! // decoded straight from the reply
//! let echoed = client.call("echo", Params::array().bytes(&[0u8; 1024]))?.result_bytes()?;
//! // a thousand calls in flight, replies read while requests are written
//! let replies = client.pipeline((0..1000).map(|i| ("sum", [i, 1])))?;
//! // arrays and bytes as attachments of a binary message (docs/wire.md): raw after the
//! // JSON text where the server takes them (base64 where it does not), and a binary
//! // reply's array viewed where it lies
//! let reply = client.call("scale", Params::array().ndarray_of(&[2, 3], vec![0.5f32; 6]))?;
//! let scaled = reply.result_array::<f32>()?; // shape [2, 3], data a &[f32] in the reply
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`Client`]: blocking, one connection; calls, notifications, [`Batch`]es and
//!   pipelines; a time-out per call; the retry rule (only what cannot have run is sent
//!   again).
//! - [`Client::stream`]: a streamed result's items ([`StreamItem`]) as they arrive,
//!   then its final reply ([`Stream::finish`]); [`Stream::cancel`].
//! - [`Pool`]: several clients shared by threads.
//! - [`Multiplexed`]: a connection with its own I/O thread: submit from anywhere, take
//!   completions in bursts (what event loops build on).
//! - Binary messages ([`Params::attachment`], [`Params::ndarray`],
//!   [`Response::result_attachment`], [`Response::result_array`]): negotiated per
//!   transport as [`Client::call`] says, never forced on a JSON-only server
//!   ([`Endpoint::with_binary`]).
//! - [`framing`]: the sans-I/O layer (requests framed, replies framed out of bytes),
//!   usable on its own.
//!
//! `examples/call.rs` starts a server and calls it every way.

mod array;
pub mod base64;
mod client;
mod conn;
mod endpoint;
mod error;
pub mod framing;
mod message;
mod mux;
pub mod reply_buffers;

pub use self::base64::{base64_decode_into, base64_decoded_len, write_base64};
pub use array::{npy_data_start, npy_layout, npy_layout_of, Array};
pub use client::{AttachedRequest, Batch, Client, Pool, Progress, Stream, StreamItem, UNSENT_AT_MOST};
pub use conn::{Connection, TlsInfo};
pub use endpoint::Endpoint;
pub use error::{Error, ErrorKind, Result, TlsRefusal};
pub use framing::{Protocol, Reply, RequestKind};
pub use message::{
    write_binary_request, write_request, Envelope, NoParams, Params, Response, RpcError, Spans, ToParams,
};
pub use mux::{Completion, Multiplexed, Ticket};
pub use ucall_core::jsonrpc::attachment::{ArrayInfo, Attachment, Dtype};
pub use ucall_core::jsonrpc::section::Element;
pub use ucall_core::Bytes;
