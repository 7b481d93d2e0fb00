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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ucall_client::{Client, Dtype, Endpoint, Params, Response, RpcError};

use crate::error;
use crate::ffi::{self, ucall_str_t, Handle, Tag};

/// A client handle, made by `ucall_client_new()` and released by `ucall_client_free()`.
///
/// Methods: `ucall_client_call()`, `ucall_client_call_attached()`,
/// `ucall_client_result_attachment()`, `ucall_client_notify()`, `ucall_client_free()`.
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

/// An attachment: raw bytes beside the JSON text of a binary message (docs/wire.md), given
/// to `ucall_client_call_attached()` or read by `ucall_client_result_attachment()`.
///
/// In a call: `name` (with `name_length`, 0 meaning NUL-terminated) names the parameter
/// it is, NULL appends it by position; `data` and `length` its bytes (`data` may be NULL
/// when `length` is 0); `dtype` NULL for bytes, or an array's element type as docs/wire.md
/// lists them (`"float32"`, `"uint8"`, ...), its `shape` (`dimensions` sizes, C order,
/// little-endian data).
///
/// In a reply: `name` is NULL; `data` and `length` the attachment's bytes where they lie
/// in the reply; `dtype` NULL for bytes, else a NUL-terminated static string, and `shape`
/// (NULL when `dimensions` is 0) its sizes. The pointers stay valid until the next call on
/// the same client or `ucall_client_free()`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct ucall_client_attachment_t {
    /// The parameter's name (a call's attachment), or NULL: by position.
    pub name: ucall_str_t,
    /// Its length in bytes; 0: NUL-terminated.
    pub name_length: usize,
    /// The bytes.
    pub data: *const c_void,
    /// Their length.
    pub length: usize,
    /// NULL for bytes; an array's element type (`"float32"`...).
    pub dtype: ucall_str_t,
    /// An array's size in each dimension.
    pub shape: *const usize,
    /// How many dimensions (0: a scalar, or bytes).
    pub dimensions: usize,
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
    /// The shape of the attachment last read from the reply.
    shape: Vec<usize>,
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
                    state: Mutex::new(State {
                        client: made,
                        response: None,
                        message: String::new(),
                        data: String::new(),
                        shape: Vec::new(),
                    }),
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
        let Some((handle, method, params)) = (unsafe { call_args(F, client, (method, method_length), (params, params_length)) }) else {
            return false;
        };
        if response.is_null() {
            error::set(format!("{F}: the response out-parameter is NULL"));
            return false;
        }
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        state.response = None;
        let reply = state.client.call_json(method, params);
        // SAFETY: `response` is non-NULL (checked above) and writable by contract.
        unsafe { answer(state, reply, F, response) }
    }
}

/// The client, method name and params of a call or notification, each checked: `None`,
/// the reason recorded under `function`'s name, when one is wrong.
///
/// # Safety
/// `client` must be NULL or a handle from `ucall_client_new()` not yet freed; each
/// `(pointer, length)` string NULL or readable as its length says (0: NUL-terminated).
unsafe fn call_args<'a>(
    function: &str,
    client: ucall_client_t,
    (method, method_length): (ucall_str_t, usize),
    (params, params_length): (ucall_str_t, usize),
) -> Option<(&'a CClient, &'a str, Option<&'a str>)> {
    // SAFETY: the caller's contract.
    let Some(handle) = (unsafe { ffi::handle_ref::<CClient>(client) }) else {
        error::set(format!("{function}: the client handle is NULL or not a client"));
        return None;
    };
    // SAFETY: the caller's contract for both strings.
    let (method, params) = unsafe {
        (
            ffi::text_arg(method, method_length),
            ffi::text_arg(params, params_length),
        )
    };
    let Some(method) = method else {
        error::set(format!("{function}: the method name is NULL"));
        return None;
    };
    let Ok(method) = std::str::from_utf8(method) else {
        error::set(format!("{function}: the method name is not UTF-8"));
        return None;
    };
    let params = match params.map(ucall_core::jsonrpc::as_text) {
        None => None,
        Some(Some(params)) => Some(params),
        Some(None) => {
            error::set(format!("{function}: params are not UTF-8"));
            return None;
        }
    };
    Some((handle, method, params))
}

/// Keep `reply` as the client's last and describe it in `*response`; `false` (and the
/// reason recorded) when there is none.
///
/// # Safety
/// `response` must be non-NULL and writable.
unsafe fn answer(
    state: &mut State,
    reply: ucall_client::Result<Response>,
    function: &str,
    response: *mut ucall_client_response_t,
) -> bool {
    let reply = match reply {
        Ok(reply) => reply,
        Err(why) => {
            error::set(format!("{function}: {why}"));
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
                error_message: if state.message.is_empty() {
                    EMPTY.as_ptr()
                } else {
                    state.message.as_ptr().cast()
                },
                error_message_length: state.message.len(),
                error_data: if state.data.is_empty() {
                    EMPTY.as_ptr()
                } else {
                    state.data.as_ptr().cast()
                },
                error_data_length: state.data.len(),
            }
        }
    };
    // SAFETY: the caller's contract.
    unsafe { ffi::write_out(response, out) }
}

/// A caller's attachment lent for one call: read where it lies, never copied, while the
/// call runs. Each holds a count of `lender`, which tells the call when none is left.
struct Lent {
    data: *const u8,
    length: usize,
    _lender: Arc<()>,
}

// SAFETY: the memory is only read, and only while `ucall_client_call_attached` runs (its
// contract keeps it readable until it returns; it ends every use of it before returning).
unsafe impl Send for Lent {}
// SAFETY: as above: shared reads of memory that does not change during the call.
unsafe impl Sync for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: non-NULL and readable for `length` bytes while the call runs (see `Send`),
        // which outlives every `Lent` (the call drops the last one before returning).
        unsafe { std::slice::from_raw_parts(self.data, self.length) }
    }
}

/// `params` (JSON text or NULL) with `attachments` appended: by name to an object, by
/// position to an array (NULL params: whichever the first attachment asks for). The
/// attachments' bytes are lent, each holding a count of `lender`.
///
/// # Safety
/// Each attachment's pointers must be readable as its lengths say (`ucall_client_call_attached`),
/// and its data until every count of `lender` it took is dropped.
unsafe fn attached_params(
    params: Option<&str>,
    attachments: &[ucall_client_attachment_t],
    lender: &Arc<()>,
) -> Result<Params, String> {
    let by_name = |a: &ucall_client_attachment_t| !a.name.is_null();
    let mut built = match params {
        Some(text) => Params::from_json(text).map_err(|e| e.to_string())?,
        None if attachments.first().is_some_and(by_name) => Params::object(),
        None => Params::array(),
    };
    let object = built.as_json().starts_with('{');
    for (i, attachment) in attachments.iter().enumerate() {
        if by_name(attachment) != object {
            return Err(format!(
                "attachment {i}: {} (params are an {})",
                if object { "has no name" } else { "has a name" },
                if object { "object" } else { "array" }
            ));
        }
        // SAFETY: the caller's contract for each attachment.
        let data = unsafe { ffi::array_arg(attachment.data.cast::<u8>(), attachment.length) };
        let data = match (data, attachment.length) {
            (Some(data), _) => ucall_client::Bytes::from_owner(Lent {
                data: data.as_ptr(),
                length: data.len(),
                _lender: Arc::clone(lender),
            }),
            (None, 0) => ucall_client::Bytes::new(),
            (None, _) => return Err(format!("attachment {i}: its data is NULL")),
        };
        // SAFETY: as above.
        let dtype = match unsafe { ffi::c_str_arg(attachment.dtype) } {
            None => None,
            Some(name) => Some(
                name.to_str()
                    .ok()
                    .and_then(Dtype::from_name)
                    .ok_or_else(|| format!("attachment {i}: {name:?} is not a dtype docs/wire.md lists"))?,
            ),
        };
        // SAFETY: as above.
        let shape = unsafe { ffi::array_arg(attachment.shape, attachment.dimensions) };
        let shape = match (shape, attachment.dimensions) {
            (Some(shape), _) => shape,
            (None, 0) => &[][..],
            (None, _) => return Err(format!("attachment {i}: its shape is NULL")),
        };
        let name = if object {
            // SAFETY: as above.
            let name = unsafe { ffi::text_arg(attachment.name, attachment.name_length) }.unwrap_or_default();
            Some(std::str::from_utf8(name).map_err(|_| format!("attachment {i}: its name is not UTF-8"))?)
        } else {
            None
        };
        built = match (name, dtype) {
            (Some(name), None) => built.named_attachment(name, data),
            (Some(name), Some(dtype)) => built.named_ndarray(name, dtype, shape, data),
            (None, None) => built.attachment(data),
            (None, Some(dtype)) => built.ndarray(dtype, shape, data),
        };
    }
    Ok(built)
}

/// As `ucall_client_call()`, with `attachments_count` attachments added to the params (by
/// name to an object, by position to an array; with `params` NULL, an object when the
/// first attachment has a name, else an array). Their bytes are lent, not copied: read
/// where they lie (written to the socket from there over HTTP and raw TCP) until this
/// returns, so they must stay unchanged until then.
///
/// Where the server takes binary messages (docs/wire.md: HTTP by its content type, raw
/// TCP by its first byte, WebSocket where the server selected `ucall.binary.v1`), the call
/// travels as one, its attachments raw after the JSON text, and its reply may be one: a
/// result or part of it that is bytes or an array is then a placeholder in `result`, read
/// with `ucall_client_result_attachment()`. A server that reads JSON only gets base64 (an
/// array as the base64 of its `.npy` form) and answers as ever: a first refusal (HTTP
/// 415, or a -32700 parse error with no id) sends the call again as JSON, which the
/// refusal shows did not run, and the client sends JSON from then on.
///
/// # Safety
/// As `ucall_client_call()`; `attachments` must be NULL (with a count of 0) or point to
/// `attachments_count` readable attachments whose pointers are readable as their lengths
/// say.
#[no_mangle]
pub unsafe extern "C" fn ucall_client_call_attached(
    client: ucall_client_t,
    method: ucall_str_t,
    method_length: usize,
    params: ucall_str_t,
    params_length: usize,
    attachments: *const ucall_client_attachment_t,
    attachments_count: usize,
    response: *mut ucall_client_response_t,
) -> bool {
    ffi_panic_boundary! {"ucall_client_call_attached",
        error::clear();
        const F: &str = "ucall_client_call_attached";
        // SAFETY: the caller's contract.
        let Some((handle, method, params)) = (unsafe { call_args(F, client, (method, method_length), (params, params_length)) }) else {
            return false;
        };
        if response.is_null() {
            error::set(format!("{F}: the response out-parameter is NULL"));
            return false;
        }
        // SAFETY: the caller's contract for the attachments.
        let attachments = match unsafe { ffi::array_arg(attachments, attachments_count) } {
            Some(attachments) => attachments,
            None if attachments_count == 0 => &[][..],
            None => {
                error::set(format!("{F}: the attachments are NULL"));
                return false;
            }
        };
        let lender = Arc::new(());
        // SAFETY: the caller's contract for the attachments' pointers, which holds until
        // this returns; every count of `lender` is dropped before then (below).
        let built = match unsafe { attached_params(params, attachments, &lender) } {
            Ok(built) => built,
            Err(why) => {
                error::set(format!("{F}: {why}"));
                return false;
            }
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        state.response = None;
        let reply = state.client.call(method, built);
        if Arc::strong_count(&lender) > 1 {
            // Some lent bytes are still queued (the server answered before reading the
            // whole request): the connection goes, with them, before the caller's memory.
            state.client.close();
        }
        if Arc::strong_count(&lender) > 1 {
            // Unreachable: the queue was the last holder. Reading freed memory later would
            // be worse than stopping here.
            std::process::abort();
        }
        // SAFETY: `response` is non-NULL (checked above) and writable by contract.
        unsafe { answer(state, reply, F, response) }
    }
}

/// Read the attachment that a placeholder in the last reply's result names: at the JSON
/// Pointer `pointer` (RFC 6901; NULL or `""`: the result itself, `"/image"` its member
/// `image`, `"/0"` its first element). On success writes `*attachment` (see
/// `ucall_client_attachment_t`: its bytes where they lie in the reply, no copy and no
/// base64 pass, valid until the next call on the client or `ucall_client_free()`) and
/// returns `true`. `false`, `*attachment` untouched, when there is no last reply, it is an
/// error, nothing is at `pointer`, the value there is no placeholder of a binary reply (a
/// server that reads JSON only answers base64 in `result`), or the placeholder breaks a
/// rule of docs/wire.md (`ucall_last_error()` says which).
///
/// # Safety
/// `client` must be a handle from `ucall_client_new()` not yet freed; `pointer` NULL or
/// readable as `pointer_length` says (0: NUL-terminated); `attachment` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_client_result_attachment(
    client: ucall_client_t,
    pointer: ucall_str_t,
    pointer_length: usize,
    attachment: *mut ucall_client_attachment_t,
) -> bool {
    ffi_panic_boundary! {"ucall_client_result_attachment",
        error::clear();
        const F: &str = "ucall_client_result_attachment";
        // SAFETY: the caller's contract.
        let Some(handle) = (unsafe { ffi::handle_ref::<CClient>(client) }) else {
            error::set(format!("{F}: the client handle is NULL or not a client"));
            return false;
        };
        if attachment.is_null() {
            error::set(format!("{F}: the attachment out-parameter is NULL"));
            return false;
        }
        // SAFETY: the caller's contract.
        let pointer = unsafe { ffi::text_arg(pointer, pointer_length) }.unwrap_or_default();
        let Ok(pointer) = std::str::from_utf8(pointer) else {
            error::set(format!("{F}: the JSON Pointer is not UTF-8"));
            return false;
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        let Some(reply) = &state.response else {
            error::set(format!("{F}: no reply to read (the last call failed, or none was made)"));
            return false;
        };
        let found = match reply.result_attachment_at(pointer) {
            Ok(found) => found,
            Err(why) => {
                error::set(format!("{F}: {}", why.message));
                return false;
            }
        };
        state.shape.clear();
        let dtype = found.array.map_or(std::ptr::null(), |info| {
            state.shape.extend(info.shape());
            ffi::dtype_name(info.dtype).as_ptr()
        });
        let out = ucall_client_attachment_t {
            name: std::ptr::null(),
            name_length: 0,
            data: if found.bytes.is_empty() { EMPTY.as_ptr().cast() } else { found.bytes.as_ptr().cast() },
            length: found.bytes.len(),
            dtype,
            shape: if state.shape.is_empty() { std::ptr::null() } else { state.shape.as_ptr() },
            dimensions: state.shape.len(),
        };
        // SAFETY: `attachment` is non-NULL (checked above) and writable by contract.
        unsafe { ffi::write_out(attachment, out) }
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
        let Some((handle, method, params)) = (unsafe { call_args(F, client, (method, method_length), (params, params_length)) }) else {
            return false;
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
