// SPDX-License-Identifier: Apache-2.0
//! The C client: connect with a config, call with JSON params, read the JSON result or
//! the error, close. On `ucall-client` (HTTP/1.1, raw TCP, WebSocket; TLS through rustls,
//! the server verified by default).
//!
//! ```c
//! ucall_client_config_t config = {0};
//! config.url = "http://127.0.0.1:8545";
//! ucall_client_t client = NULL;
//! ucall_client_response_t response;
//! if (ucall_client_new(&config, &client) &&
//!     ucall_client_call(client, "sum", 0, "[1,2]", 0, &response) && response.ok)
//!     printf("%.*s\n", (int)response.result_length, response.result);   // 3
//! ucall_client_free(client);
//! ```

use std::ffi::c_void;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ucall_client::{Client, Endpoint, Response, RpcError};

use crate::error;
use crate::ffi::{self, ucall_str_t, Handle, Tag};

/// A client handle, made by `ucall_client_new()` and released by `ucall_client_free()`.
///
/// Methods: `ucall_client_call()`, `ucall_client_notify()`, `ucall_client_free()`.
/// One connection, opened by the first call and again after the server closed it. Calls
/// on one client are serialized (a mutex): use one client per thread for parallel calls.
#[allow(non_camel_case_types)]
pub type ucall_client_t = *mut c_void;

/// How `ucall_client_new()` connects. Zero (or NULL) in a field means its default.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct ucall_client_config_t {
    /// Where to call, NUL-terminated: `http://host:port/path`, `https://`, `ws://`,
    /// `wss://`, `tcp://host:port` (raw TCP) or `tls://host:port` (raw TCP over TLS).
    /// Default `"http://127.0.0.1:8545/"`.
    pub url: ucall_str_t,
    /// Longest wait for a connection or a reply, in microseconds. Default 30 s.
    pub timeout_micro_seconds: u64,
    /// TLS: a PEM bundle of the CAs to trust instead of the system's. Default NULL.
    pub ssl_ca_path: ucall_str_t,
    /// TLS: accept any certificate (tests only: it gives up authentication).
    pub ssl_insecure: bool,
    /// TLS: the client's certificate chain (PEM), for servers that require one.
    pub ssl_certificate_path: ucall_str_t,
    /// TLS: the client's private key (PEM); default: in `ssl_certificate_path`.
    pub ssl_private_key_path: ucall_str_t,
    /// The largest reply taken, in bytes (an HTTP reply's body, a raw TCP JSON text, a
    /// WebSocket message). A larger one fails its call (`ucall_last_error()` names both
    /// sizes) and closes the connection. Default (0) 64 MiB; `SIZE_MAX`: any size.
    pub max_reply_size: usize,
}

/// One reply, as `ucall_client_call()` writes it. Strings are not NUL-terminated and
/// stay valid until the next call on the same client or `ucall_client_free()`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct ucall_client_response_t {
    /// `true`: the call returned `result`; `false`: the server answered an error.
    pub ok: bool,
    /// The result's JSON text (when `ok`).
    pub result: ucall_str_t,
    /// Its length in bytes.
    pub result_length: usize,
    /// The error code (when not `ok`), from JSON-RPC 2.0 §5.1 or the server's own.
    pub error_code: i64,
    /// The error message, decoded from JSON (UTF-8).
    pub error_message: ucall_str_t,
    /// Its length in bytes.
    pub error_message_length: usize,
    /// The error's `data` member as JSON text; length 0 when absent.
    pub error_data: ucall_str_t,
    /// Its length in bytes.
    pub error_data_length: usize,
}

/// What a `ucall_client_t` points to.
#[repr(C)]
pub struct CClient {
    tag: Tag,
    state: Mutex<State>,
}

struct State {
    client: Client,
    /// The last reply, which the response's pointers point into.
    response: Option<Response>,
    message: String,
    data: String,
}

// SAFETY: `CClient` is `#[repr(C)]` with a `Tag` first.
unsafe impl Handle for CClient {
    const TAG: Tag = Tag::CLIENT;
}

const EMPTY: &std::ffi::CStr = c"";

/// A NUL-terminated UTF-8 config string, `None` for NULL (or, with the reason recorded,
/// for text that is not UTF-8).
///
/// # Safety
/// `ptr` must be NULL or point to a NUL-terminated string that stays unchanged for `'a`.
unsafe fn text<'a>(ptr: ucall_str_t, what: &str, function: &str) -> Option<&'a str> {
    // SAFETY: the exported function's contract (NULL or a NUL-terminated string).
    let text = unsafe { ffi::c_str_arg(ptr) }?;
    match text.to_str() {
        Ok(text) => Some(text),
        Err(_) => {
            error::set(format!("{function}: {what} is not UTF-8"));
            None
        }
    }
}

fn endpoint(config: &ucall_client_config_t) -> Result<Endpoint, String> {
    const F: &str = "ucall_client_new";
    // SAFETY: `ucall_client_new`'s contract: config strings are NULL or NUL-terminated.
    let url = unsafe { text(config.url, "config.url", F) }.unwrap_or("http://127.0.0.1:8545/");
    let mut endpoint = Endpoint::parse(url).map_err(|e| format!("{F}: config.url: {e}"))?;
    if config.timeout_micro_seconds > 0 {
        endpoint = endpoint.with_timeout(Some(Duration::from_micros(config.timeout_micro_seconds)));
    }
    if config.max_reply_size > 0 {
        endpoint = endpoint.with_max_reply_size(config.max_reply_size);
    }
    let tls_field = |ptr: ucall_str_t, what: &str| -> Result<Option<String>, String> {
        if ptr.is_null() {
            return Ok(None);
        }
        // SAFETY: as above.
        unsafe { text(ptr, what, F) }
            .map(|t| Some(t.to_owned()))
            .ok_or_else(|| format!("{F}: {what} is not UTF-8"))
    };
    let ca = tls_field(config.ssl_ca_path, "config.ssl_ca_path")?;
    let cert = tls_field(config.ssl_certificate_path, "config.ssl_certificate_path")?;
    let key = tls_field(config.ssl_private_key_path, "config.ssl_private_key_path")?;
    let wants_tls = ca.is_some() || cert.is_some() || key.is_some() || config.ssl_insecure;
    if wants_tls && !endpoint.is_tls() {
        return Err(format!(
            "{F}: config.ssl_* fields need TLS, and {url} is plaintext (use https://, wss:// or tls://)"
        ));
    }
    if let Some(ca) = ca {
        endpoint = endpoint.cacert(ca);
    }
    if config.ssl_insecure {
        endpoint = endpoint.insecure();
    }
    match (cert, key) {
        (Some(cert), key) => endpoint = endpoint.client_cert(cert, key.map(Into::into)),
        (None, Some(_)) => return Err(format!("{F}: config.ssl_private_key_path needs ssl_certificate_path")),
        (None, None) => {}
    }
    Ok(endpoint)
}

/// Make a client as `config` says (NULL: every default); nothing is connected until the
/// first call. On success writes the handle to `*client` and returns `true`; otherwise
/// `*client` is untouched and `ucall_last_error()` says why (a malformed URL, a TLS file
/// missing or without PEM in it).
///
/// # Safety
/// `config` must be NULL or point to a readable `ucall_client_config_t` whose strings are
/// NULL or NUL-terminated; `client` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_client_new(config: *const ucall_client_config_t, client: *mut ucall_client_t) -> bool {
    ffi_panic_boundary! {"ucall_client_new",
        error::clear();
        if client.is_null() {
            error::set("ucall_client_new: the client out-parameter is NULL");
            return false;
        }
        let defaults = ucall_client_config_t {
            url: std::ptr::null(),
            timeout_micro_seconds: 0,
            ssl_ca_path: std::ptr::null(),
            ssl_insecure: false,
            ssl_certificate_path: std::ptr::null(),
            ssl_private_key_path: std::ptr::null(),
            max_reply_size: 0,
        };
        // SAFETY: the caller's contract: NULL or a readable config.
        let config = unsafe { config.as_ref() }.unwrap_or(&defaults);
        let made = endpoint(config).and_then(|endpoint| Client::new(endpoint).map_err(|e| format!("ucall_client_new: {e}")));
        match made {
            Ok(made) => {
                let handle = Box::into_raw(Box::new(CClient {
                    tag: Tag::CLIENT,
                    state: Mutex::new(State { client: made, response: None, message: String::new(), data: String::new() }),
                }));
                // SAFETY: `client` is non-NULL (checked above) and writable by contract.
                unsafe { ffi::write_out(client, handle.cast::<c_void>()) }
            }
            Err(why) => {
                error::set(why);
                false
            }
        }
    }
}

/// Call `method` with `params`, JSON text (an array or an object; NULL: no params), and
/// wait for the reply. Strings are `(pointer, length)`, length 0 meaning NUL-terminated.
///
/// Returns `true` when a reply came: a result (`response->ok`) or a JSON-RPC error
/// (`error_code`, `error_message`, `error_data`). Returns `false`, `*response`
/// untouched, when there is no reply: params that are not JSON, no connection, a time-out,
/// a lost connection (`ucall_last_error()` says which, and whether the call may have run:
/// a call is sent again only when it cannot have run).
///
/// # Safety
/// `client` must be a handle from `ucall_client_new()` not yet freed; `method` and
/// `params` must be NULL or readable as their lengths say; `response` must be NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_client_call(
    client: ucall_client_t,
    method: ucall_str_t,
    method_length: usize,
    params: ucall_str_t,
    params_length: usize,
    response: *mut ucall_client_response_t,
) -> bool {
    ffi_panic_boundary! {"ucall_client_call",
        error::clear();
        const F: &str = "ucall_client_call";
        // SAFETY: the caller's contract.
        let Some(handle) = (unsafe { ffi::handle_ref::<CClient>(client) }) else {
            error::set(format!("{F}: the client handle is NULL or not a client"));
            return false;
        };
        if response.is_null() {
            error::set(format!("{F}: the response out-parameter is NULL"));
            return false;
        }
        // SAFETY: the caller's contract for both strings.
        let (Some(method), params) = (unsafe { ffi::text_arg(method, method_length) }, unsafe { ffi::text_arg(params, params_length) }) else {
            error::set(format!("{F}: the method name is NULL"));
            return false;
        };
        let Ok(method) = std::str::from_utf8(method) else {
            error::set(format!("{F}: the method name is not UTF-8"));
            return false;
        };
        let params = match params.map(ucall_core::jsonrpc::as_text) {
            None => None,
            Some(Some(params)) => Some(params),
            Some(None) => {
                error::set(format!("{F}: params are not UTF-8"));
                return false;
            }
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        state.response = None;
        let reply = match state.client.call_json(method, params) {
            Ok(reply) => reply,
            Err(why) => {
                error::set(format!("{F}: {why}"));
                return false;
            }
        };
        let reply = state.response.insert(reply);
        let out = match reply.result_json() {
            Ok(result) => ucall_client_response_t {
                ok: true,
                result: result.as_ptr().cast(),
                result_length: result.len(),
                error_code: 0,
                error_message: EMPTY.as_ptr(),
                error_message_length: 0,
                error_data: EMPTY.as_ptr(),
                error_data_length: 0,
            },
            Err(RpcError { code, message, data }) => {
                state.message = message;
                state.data = data.unwrap_or_default();
                ucall_client_response_t {
                    ok: false,
                    result: EMPTY.as_ptr(),
                    result_length: 0,
                    error_code: code,
                    error_message: if state.message.is_empty() { EMPTY.as_ptr() } else { state.message.as_ptr().cast() },
                    error_message_length: state.message.len(),
                    error_data: if state.data.is_empty() { EMPTY.as_ptr() } else { state.data.as_ptr().cast() },
                    error_data_length: state.data.len(),
                }
            }
        };
        // SAFETY: `response` is non-NULL (checked above) and writable by contract.
        unsafe { ffi::write_out(response, out) }
    }
}

/// Send a notification (no id, no reply; over HTTP the server's `204` is awaited).
/// `false` when it could not be sent (`ucall_last_error()` says why).
///
/// # Safety
/// As `ucall_client_call()`.
#[no_mangle]
pub unsafe extern "C" fn ucall_client_notify(
    client: ucall_client_t,
    method: ucall_str_t,
    method_length: usize,
    params: ucall_str_t,
    params_length: usize,
) -> bool {
    ffi_panic_boundary! {"ucall_client_notify",
        error::clear();
        const F: &str = "ucall_client_notify";
        // SAFETY: the caller's contract.
        let Some(handle) = (unsafe { ffi::handle_ref::<CClient>(client) }) else {
            error::set(format!("{F}: the client handle is NULL or not a client"));
            return false;
        };
        // SAFETY: the caller's contract for both strings.
        let (method, params) = unsafe { (ffi::text_arg(method, method_length), ffi::text_arg(params, params_length)) };
        let Some(Ok(method)) = method.map(std::str::from_utf8) else {
            error::set(format!("{F}: the method name is NULL or not UTF-8"));
            return false;
        };
        let params = match params.map(ucall_core::jsonrpc::as_text) {
            None => None,
            Some(Some(params)) => Some(params),
            Some(None) => {
                error::set(format!("{F}: params are not UTF-8"));
                return false;
            }
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.client.notify_json(method, params) {
            Ok(()) => true,
            Err(why) => {
                error::set(format!("{F}: {why}"));
                false
            }
        }
    }
}

/// Close the client's connection and release it. `ucall_client_free(NULL)` does nothing.
///
/// # Safety
/// `client` must be NULL or a handle from `ucall_client_new()` not yet freed, and no other
/// thread may be using it.
#[no_mangle]
pub unsafe extern "C" fn ucall_client_free(client: ucall_client_t) {
    ffi_panic_boundary! {"ucall_client_free",
        // SAFETY: the caller's contract; the tag says it is a live client.
        let Some(handle) = (unsafe { ffi::handle_ref::<CClient>(client) }) else { return };
        let raw = std::ptr::from_ref(handle).cast_mut();
        // SAFETY: `raw` came from `Box::into_raw` in `ucall_client_new` (the tag says it
        // is a live client) and no other thread uses it (the caller's contract); the tag
        // is cleared first so that a stale handle is refused rather than reused.
        unsafe {
            (*raw).tag = Tag::DEAD;
            drop(Box::from_raw(raw));
        }
    }
}
