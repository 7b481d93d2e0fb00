// SPDX-License-Identifier: Apache-2.0
//! # libucall: UCall's C99 API
//!
//! `include/ucall/ucall.h` keeps the names, types and signatures of UCall's published C
//! API, so that C and C++ programs written against it compile and link unchanged, and
//! adds what it lacked: JSON and bytes parameters, error data, the text of why
//! `ucall_init` failed, engine choice, limits, `ucall_stop`, version macros. The
//! published TLS fields (`use_ssl`, `ssl_*`) map onto the core's TLS (`tls.rs` checks the
//! files first). `docs/c-api.md` states the conventions and every defined outcome.
//!
//! ```text
//!  C program ─► ucall_init ─► ucall_core::ServerBuilder::bind (sockets bound here)
//!            ─► ucall_add_procedure ─► Server::router_mut (until serving starts)
//!            ─► ucall_take_calls(i) ─► first call: Server::into_workers (table frozen);
//!                                      thread i drives worker i turn by turn
//!  request ─► core session ─► CProcedure::handle ─► C callback(ucall_call_t, tag)
//!            ─► ucall_param_* read the borrowed request, ucall_call_reply_* write the reply
//! ```
//!
//! Guarantees at the boundary:
//! - no panic crosses it: every exported function runs inside [`ffi_panic_boundary!`]
//!   and returns its documented default (`false`, `0`, nothing) if one is caught;
//! - every pointer is checked for NULL, and handles carry a tag that is checked too, so
//!   a call handle passed where a server is expected (both are `void *`) is refused;
//! - a callback that replies twice, never, or with invalid JSON gets a defined reply
//!   (see [`call`]), never corrupt output.
//!
//! The unsafe code is confined to [`ffi`] (turning C pointers into references, with the
//! caller's obligations written there) and the callback invocation in [`call`].

#![deny(missing_docs)]

#[macro_use]
pub mod panic;
pub mod call;
pub mod client;
pub mod config;
pub mod error;
pub mod ffi;
pub mod log;
pub mod server;
mod tls;

pub use call::ucall_call_t;
pub use client::{ucall_client_config_t, ucall_client_response_t, ucall_client_t};
pub use config::ucall_config_t;
pub use ffi::{ucall_callback_tag_t, ucall_str_t};
pub use server::{ucall_callback_t, ucall_server_t};

/// Major version of this library (the crate's); see also `ucall_version()`.
pub const UCALL_VERSION_MAJOR: u32 = 0;
/// Minor version of this library.
pub const UCALL_VERSION_MINOR: u32 = 6;
/// Patch version of this library.
pub const UCALL_VERSION_PATCH: u32 = 0;
/// NUL-terminated copy of the version, for `ucall_version()`.
const VERSION_C: &std::ffi::CStr = c"0.6.0";

/// The version of the library linked at run time, `"MAJOR.MINOR.PATCH"`, to compare with
/// the `UCALL_VERSION` the program was compiled against. Static storage: never free it.
#[no_mangle]
pub extern "C" fn ucall_version() -> ucall_str_t {
    VERSION_C.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_constants_match_the_crate_version() {
        let parts: Vec<u32> = env!("CARGO_PKG_VERSION")
            .split(['.', '-', '+'])
            .take(3)
            .map(|p| p.parse().expect("numeric version part"))
            .collect();
        assert_eq!(parts, [UCALL_VERSION_MAJOR, UCALL_VERSION_MINOR, UCALL_VERSION_PATCH]);
        assert_eq!(VERSION_C.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
