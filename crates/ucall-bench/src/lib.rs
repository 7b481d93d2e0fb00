// SPDX-License-Identifier: Apache-2.0
//! Benchmark tooling for UCall.
//!
//! The `ucall-load` binary is a closed-loop load generator for JSON-RPC
//! servers over HTTP/1.1 and raw TCP (newline-delimited replies). The library
//! holds its parts: [`framing`] finds reply boundaries, [`load`] drives the
//! connections and measures.

pub mod chain;
pub mod framing;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod load;
