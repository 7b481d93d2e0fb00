// SPDX-License-Identifier: Apache-2.0
//! One call as a C callback sees it: `ucall_param_*` read it, `ucall_call_reply_*`
//! answer it.
//!
//! A `ucall_call_t` names one callback's [`CallContext`], which lives on the serving
//! thread's stack and holds the core's borrowed [`Call`] and [`Reply`]. The handle is not
//! the context's address but a number used once: the next call's context sits at the
//! same address, and a handle kept past its callback (or passed to another thread) must
//! find nothing there rather than answer someone else's call. It is valid only on the
//! callback's thread until the callback returns.
//!
//! Defined outcomes (docs/c-api.md, "Replies"):
//! - the first `ucall_call_reply_*()` decides the reply; later ones are ignored;
//! - content that is not one valid JSON text (or not UTF-8, or NULL) answers `-32603`
//!   ("replied with invalid JSON"), never corrupt output;
//! - a callback that returns without replying answers `-32603` ("sent no reply");
//!   for a notification nothing is sent either way.

use std::borrow::Cow;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use ucall_core::{Call, ErrorCode, Handler, Hook, Param, Reply, RpcError};

use crate::ffi::{self, ucall_callback_tag_t, ucall_str_t};

/// The call a callback is answering: valid only until the callback returns, and only on
/// the thread that called the callback.
///
/// Methods: `ucall_param_named_*`, `ucall_param_positional_*`, `ucall_param_count`,
/// `ucall_param_name`, `ucall_call_reply_*`.
#[allow(non_camel_case_types)]
pub type ucall_call_t = *mut c_void;

/// How the callback has answered so far.
enum Answer {
    Pending,
    Replied,
    Failed(RpcError),
}

/// What a `ucall_call_t` names, during one callback.
pub struct CallContext<'c, 'a, 'o> {
    call: &'c Call<'a>,
    reply: &'c mut Reply<'o>,
    answer: Answer,
    /// Decoded copies of strings with escapes, alive until the callback returns.
    strings: Vec<Box<str>>,
    /// Shapes of array parameters handed out (`ucall_param_*_array`), alive until the
    /// callback returns.
    shapes: Vec<Box<[usize]>>,
    /// The last raw JSON parameter handed out (`ucall_param_*_json`), as (address,
    /// length): a part of the request, already validated. Replied with as it is (an
    /// echo), it needs no second check.
    last_json: Option<(usize, usize)>,
}

/// The empty string every zero-length output points to, so that a (pointer, 0) pair read
/// as "NUL-terminated" (the API's meaning of length 0) still reads an empty string.
const EMPTY: &std::ffi::CStr = c"";

/// The call behind `call` when it is the handle of the callback running on this thread;
/// `None` for NULL, a stale handle, another thread's or any other value.
///
/// # Safety
/// No other reference to the running call's context may be in use: the C side calls one
/// `ucall_` function at a time on the callback's thread.
unsafe fn context<'x>(call: ucall_call_t) -> Option<&'x mut CallContext<'x, 'x, 'x>> {
    let (handle, context) = RUNNING.with(Cell::get);
    if call.is_null() || call as usize != handle {
        return None;
    }
    // SAFETY: `context` is the running callback's, set by `CProcedure::handle` around the
    // callback: it lives on this thread's stack below the callback, which is running.
    Some(unsafe { &mut *context.cast::<CallContext<'x, 'x, 'x>>() })
}

impl<'c, 'a, 'o> CallContext<'c, 'a, 'o> {
    /// Run `callback` with the handle naming a fresh context for `call` (valid until it
    /// returns, naming nothing after): its result, and how it answered.
    fn run<R>(call: &'c Call<'a>, reply: &'c mut Reply<'o>, callback: impl FnOnce(ucall_call_t) -> R) -> (R, Answer) {
        let mut context = CallContext {
            call,
            reply,
            answer: Answer::Pending,
            strings: Vec::new(),
            shapes: Vec::new(),
            last_json: None,
        };
        let result = {
            let (_inside, handle) = InCallback::enter(std::ptr::from_mut(&mut context).cast());
            callback(handle)
        };
        (result, context.answer)
    }
}

impl<'a> CallContext<'_, 'a, '_> {
    /// The named parameter; a name starting with `/` is a JSON Pointer (RFC 6901) into
    /// the params, so `/point/x` and `/0` reach nested values.
    fn named(&self, name: &[u8]) -> Option<Param<'a>> {
        // Names are short and almost always ASCII: a byte check costs a fifth of what full
        // UTF-8 validation of a few bytes does (callgrind), on every parameter read.
        let name = if name.is_ascii() {
            // SAFETY: ASCII is UTF-8.
            unsafe { std::str::from_utf8_unchecked(name) }
        } else {
            std::str::from_utf8(name).ok()?
        };
        if name.starts_with('/') {
            self.call.params().pointer(name)
        } else {
            self.call.params().named(name)
        }
    }

    fn positional(&self, position: usize) -> Option<Param<'a>> {
        self.call.params().positional(position)
    }

    /// The content of the string `param`: borrowed when it has no escapes, else decoded
    /// into storage that lives until the callback returns.
    fn string(&mut self, param: Param<'a>) -> Option<(*const c_char, usize)> {
        let decoded = match param.as_str()? {
            Cow::Borrowed("") => return Some((EMPTY.as_ptr(), 0)),
            Cow::Borrowed(inner) => return Some((inner.as_ptr().cast(), inner.len())),
            Cow::Owned(decoded) => decoded.into_boxed_str(),
        };
        let out = if decoded.is_empty() {
            (EMPTY.as_ptr(), 0)
        } else {
            (decoded.as_ptr().cast(), decoded.len())
        };
        // The heap block does not move when the box moves into the vector.
        self.strings.push(decoded);
        Some(out)
    }

    /// Record the answer unless one was given already (the first one wins).
    fn answer(&mut self, answer: impl FnOnce(&mut Reply<'_>) -> Answer) {
        if matches!(self.answer, Answer::Pending) {
            self.answer = answer(self.reply);
        }
    }
}

// ------------------------------------------------------------------ the procedure

/// A C callback registered as a core [`Handler`].
pub(crate) struct CProcedure {
    callback: unsafe extern "C" fn(ucall_call_t, ucall_callback_tag_t),
    tag: ucall_callback_tag_t,
}

impl CProcedure {
    pub(crate) fn new(
        callback: unsafe extern "C" fn(ucall_call_t, ucall_callback_tag_t),
        tag: ucall_callback_tag_t,
    ) -> Self {
        CProcedure { callback, tag }
    }
}

// SAFETY: the tag is the caller's opaque pointer, never dereferenced here; the API
// documents (ucall_add_procedure) that callbacks run on every serving thread at once, so
// making what it points to thread-safe is the caller's part.
unsafe impl Send for CProcedure {}
// SAFETY: as for `Send`: `&CProcedure` only gives out the same two pointers.
unsafe impl Sync for CProcedure {}

thread_local! {
    /// The handle of the callback running on this thread and its context; 0 outside one.
    static RUNNING: Cell<(usize, *mut c_void)> = const { Cell::new((0, std::ptr::null_mut())) };
}

/// The source of call handles: odd numbers, each used once (2^63 calls before a repeat),
/// and never mistaken for a server handle, which is aligned (`ffi::tagged`).
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

/// Marks this thread as running a C callback while alive (the previous one is restored).
pub(crate) struct InCallback((usize, *mut c_void));

impl InCallback {
    /// Run a callback for `context`: returns the guard and the handle that names it.
    fn enter(context: *mut c_void) -> (Self, ucall_call_t) {
        let handle = NEXT_HANDLE.fetch_add(2, Ordering::Relaxed);
        let previous = RUNNING.with(|running| running.replace((handle, context)));
        (InCallback(previous), handle as ucall_call_t)
    }

    /// Whether this thread is inside a callback now.
    pub(crate) fn active() -> bool {
        RUNNING.with(|running| running.get().0 != 0)
    }
}

impl Drop for InCallback {
    fn drop(&mut self) {
        RUNNING.with(|running| running.set(self.0));
    }
}

impl Handler for CProcedure {
    fn handle(&self, call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
        // SAFETY: a non-NULL function pointer registered through ucall_add_procedure,
        // called with its own tag and the handle `CallContext::run` gives.
        let ((), answer) = CallContext::run(call, reply, |handle| unsafe { (self.callback)(handle, self.tag) });
        match answer {
            Answer::Replied => Ok(()),
            Answer::Failed(error) => Err(error),
            Answer::Pending if call.is_notification() => Ok(()),
            Answer::Pending => Err(no_reply(call.method())),
        }
    }
}

/// A C hook run around every call (`ucall_set_hook`).
pub(crate) struct CHook {
    callback: unsafe extern "C" fn(ucall_call_t, ucall_callback_tag_t) -> bool,
    tag: ucall_callback_tag_t,
}

impl CHook {
    pub(crate) fn new(
        callback: unsafe extern "C" fn(ucall_call_t, ucall_callback_tag_t) -> bool,
        tag: ucall_callback_tag_t,
    ) -> Self {
        CHook { callback, tag }
    }
}

// SAFETY: as for `CProcedure`: the tag is never dereferenced here, and `ucall_set_hook`
// documents that the hook runs on every serving thread at once.
unsafe impl Send for CHook {}
// SAFETY: as for `Send`.
unsafe impl Sync for CHook {}

impl Hook for CHook {
    fn around(&self, call: &Call<'_>, reply: &mut Reply<'_>, next: &dyn Handler) -> Result<(), RpcError> {
        // SAFETY: a non-NULL function pointer registered through ucall_set_hook, called
        // with its own tag and the handle `CallContext::run` gives.
        let (go_on, answer) = CallContext::run(call, reply, |handle| unsafe { (self.callback)(handle, self.tag) });
        match (go_on, answer) {
            // The procedure answers (a hook that goes on does not reply).
            (true, _) => next.handle(call, reply),
            (false, Answer::Replied) => Ok(()),
            (false, Answer::Failed(error)) => Err(error),
            (false, Answer::Pending) => Err(RpcError::http(403, "the call was refused")),
        }
    }
}

#[cold]
#[inline(never)]
fn no_reply(method: &str) -> RpcError {
    RpcError::internal(format!("Internal error: procedure '{method}' returned without a reply"))
}

#[cold]
#[inline(never)]
fn invalid_json(method: &str) -> RpcError {
    RpcError::internal(format!(
        "Internal error: procedure '{method}' replied with invalid JSON"
    ))
}

// ------------------------------------------------------------------ parameters

/// Look a parameter up and convert it; shared by every getter.
///
/// # Safety
/// `call` as for [`context`].
unsafe fn with_param<'x, T>(
    call: ucall_call_t,
    find: impl FnOnce(&CallContext<'x, 'x, 'x>) -> Option<Param<'x>>,
    convert: impl FnOnce(&mut CallContext<'x, 'x, 'x>, Param<'x>) -> Option<T>,
) -> Option<T> {
    // SAFETY: the caller's contract.
    let context = unsafe { context(call) }?;
    let raw = find(context)?;
    convert(context, raw)
}

/// The name argument of the named getters.
///
/// # Safety
/// As for [`ffi::text_arg`].
unsafe fn name_arg<'x>(name: ucall_str_t, name_length: usize) -> Option<&'x [u8]> {
    // SAFETY: the caller's contract.
    unsafe { ffi::text_arg(name, name_length) }
}

/// A named scalar getter: look up, convert, write the out-parameter.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable bytes
/// (NUL-terminated when 0); `output` NULL or writable.
unsafe fn named_scalar<T>(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut T,
    convert: fn(Param<'_>) -> Option<T>,
) -> bool {
    // SAFETY: the caller's contract.
    let Some(name) = (unsafe { name_arg(name, name_length) }) else {
        return false;
    };
    // SAFETY: the caller's contract.
    match unsafe { with_param(call, |c| c.named(name), |_, param| convert(param)) } {
        // SAFETY: the caller's contract.
        Some(value) => unsafe { ffi::write_out(output, value) },
        None => false,
    }
}

/// A positional scalar getter: look up, convert, write the out-parameter.
///
/// # Safety
/// `call` must be the running callback's call; `output` NULL or writable.
unsafe fn positional_scalar<T>(
    call: ucall_call_t,
    position: usize,
    output: *mut T,
    convert: fn(Param<'_>) -> Option<T>,
) -> bool {
    // SAFETY: the caller's contract.
    match unsafe { with_param(call, |c| c.positional(position), |_, param| convert(param)) } {
        // SAFETY: the caller's contract.
        Some(value) => unsafe { ffi::write_out(output, value) },
        None => false,
    }
}

/// Read a boolean parameter (`true` or `false`; numbers are not booleans).
///
/// `name` is a member name of the params object (`name_length` 0: NUL-terminated); a
/// name starting with `/` is a JSON Pointer (RFC 6901) into the params, reaching nested
/// members and array elements. Returns `false` and leaves `output` untouched when the
/// parameter is absent, of another type, or params are an array.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable bytes
/// (NUL-terminated when 0); `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_bool(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut bool,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_bool",
        // SAFETY: the caller's contract.
        unsafe { named_scalar(call, name, name_length, output, |p| p.as_bool()) }
    }
}

/// Read a boolean parameter (`true` or `false`; numbers are not booleans).
///
/// `position` counts from 0 in the params array. Returns `false` and leaves `output`
/// untouched when there is no such parameter, it has another type, or params are an
/// object.
///
/// # Safety
/// `call` must be the running callback's call; `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_bool(call: ucall_call_t, position: usize, output: *mut bool) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_bool",
        // SAFETY: the caller's contract.
        unsafe { positional_scalar(call, position, output, |p| p.as_bool()) }
    }
}

/// Read an integer parameter: a JSON number without fraction or exponent that fits
/// 64 bits (`1.0` and `1e3` are not integers here; read them with the `f64` getter).
///
/// `name` is a member name of the params object (`name_length` 0: NUL-terminated); a
/// name starting with `/` is a JSON Pointer (RFC 6901) into the params, reaching nested
/// members and array elements. Returns `false` and leaves `output` untouched when the
/// parameter is absent, of another type, or params are an array.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable bytes
/// (NUL-terminated when 0); `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_i64(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut i64,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_i64",
        // SAFETY: the caller's contract.
        unsafe { named_scalar(call, name, name_length, output, |p| p.as_i64()) }
    }
}

/// Read an integer parameter: a JSON number without fraction or exponent that fits
/// 64 bits (`1.0` and `1e3` are not integers here; read them with the `f64` getter).
///
/// `position` counts from 0 in the params array. Returns `false` and leaves `output`
/// untouched when there is no such parameter, it has another type, or params are an
/// object.
///
/// # Safety
/// `call` must be the running callback's call; `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_i64(call: ucall_call_t, position: usize, output: *mut i64) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_i64",
        // SAFETY: the caller's contract.
        unsafe { positional_scalar(call, position, output, |p| p.as_i64()) }
    }
}

/// Read a number parameter as a double (integers included; booleans are not numbers).
///
/// `name` is a member name of the params object (`name_length` 0: NUL-terminated); a
/// name starting with `/` is a JSON Pointer (RFC 6901) into the params, reaching nested
/// members and array elements. Returns `false` and leaves `output` untouched when the
/// parameter is absent, of another type, or params are an array.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable bytes
/// (NUL-terminated when 0); `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_f64(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut f64,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_f64",
        // SAFETY: the caller's contract.
        unsafe { named_scalar(call, name, name_length, output, |p| p.as_f64()) }
    }
}

/// Read a number parameter as a double (integers included; booleans are not numbers).
///
/// `position` counts from 0 in the params array. Returns `false` and leaves `output`
/// untouched when there is no such parameter, it has another type, or params are an
/// object.
///
/// # Safety
/// `call` must be the running callback's call; `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_f64(call: ucall_call_t, position: usize, output: *mut f64) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_f64",
        // SAFETY: the caller's contract.
        unsafe { positional_scalar(call, position, output, |p| p.as_f64()) }
    }
}

/// Write a string-like result to the two out-parameters (both required).
///
/// # Safety
/// `output` and `output_length` NULL or writable.
unsafe fn write_text(output: *mut ucall_str_t, output_length: *mut usize, text: (*const c_char, usize)) -> bool {
    if output.is_null() || output_length.is_null() {
        return false;
    }
    // SAFETY: both checked non-NULL; writable by the caller's contract.
    unsafe { ffi::write_out(output, text.0) && ffi::write_out(output_length, text.1) }
}

/// Read a string parameter: `*output` points to its UTF-8 content, unescaped, and
/// `*output_length` is its length in bytes. The text is NOT NUL-terminated (except when
/// empty); it stays valid until the callback returns.
///
/// `name` as for `ucall_param_named_i64`. Returns `false` (outputs untouched) when the
/// parameter is absent or not a string, or an output pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable
/// bytes (NUL-terminated when 0); `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_str(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_str",
        // SAFETY: the caller's contract.
        let Some(name) = (unsafe { name_arg(name, name_length) }) else { return false };
        // SAFETY: the caller's contract.
        match unsafe { with_param(call, |c| c.named(name), |c, raw| c.string(raw)) } {
            // SAFETY: the caller's contract.
            Some(text) => unsafe { write_text(output, output_length, text) },
            None => false,
        }
    }
}

/// Read the string parameter at `position`; as `ucall_param_named_str`.
///
/// # Safety
/// `call` must be the running callback's call; `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_str(
    call: ucall_call_t,
    position: usize,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_str",
        // SAFETY: the caller's contract.
        match unsafe { with_param(call, |c| c.positional(position), |c, raw| c.string(raw)) } {
            // SAFETY: the caller's contract.
            Some(text) => unsafe { write_text(output, output_length, text) },
            None => false,
        }
    }
}

/// Read any parameter as its raw JSON text, exactly as the client sent it (an object,
/// array, string with its quotes, number, `true`, `false` or `null`). The text is not
/// NUL-terminated and stays valid until the callback returns. Pass it to
/// `ucall_call_reply_content` to answer with it unchanged.
///
/// `name` as for `ucall_param_named_i64`. Returns `false` (outputs untouched) when the
/// parameter is absent or an output pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable
/// bytes (NUL-terminated when 0); `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_json(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_json",
        // SAFETY: the caller's contract.
        let Some(name) = (unsafe { name_arg(name, name_length) }) else { return false };
        // SAFETY: the caller's contract.
        match unsafe { with_param(call, |c| c.named(name), handed_json) } {
            // SAFETY: the caller's contract.
            Some(text) => unsafe { write_text(output, output_length, text) },
            None => false,
        }
    }
}

/// Read the parameter at `position` as raw JSON text; as `ucall_param_named_json`.
///
/// # Safety
/// `call` must be the running callback's call; `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_json(
    call: ucall_call_t,
    position: usize,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_json",
        // SAFETY: the caller's contract.
        match unsafe { with_param(call, |c| c.positional(position), handed_json) } {
            // SAFETY: the caller's contract.
            Some(text) => unsafe { write_text(output, output_length, text) },
            None => false,
        }
    }
}

/// Hand out a parameter's raw JSON text, remembering it (see `CallContext::last_json`).
fn handed_json(context: &mut CallContext<'_, '_, '_>, param: Param<'_>) -> Option<(ucall_str_t, usize)> {
    let raw = param.raw();
    context.last_json = Some((raw.as_ptr() as usize, raw.len()));
    Some((raw.as_ptr().cast(), raw.len()))
}

/// Decode the base64 string `param` into the caller's buffer (`ucall_core::params::base64`
/// holds the rule).
///
/// # Safety
/// `buffer` NULL or `capacity` writable bytes; `output_length` NULL or writable.
unsafe fn write_bytes(param: Param<'_>, buffer: *mut u8, capacity: usize, output_length: *mut usize) -> Option<bool> {
    if output_length.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let out = unsafe { ffi::buffer_arg(buffer, capacity) }?;
    let written = param.bytes_into(out)?;
    // SAFETY: checked non-NULL above; writable by the caller's contract.
    Some(unsafe { ffi::write_out(output_length, written) })
}

/// Read a bytes parameter: a JSON string of base64 (RFC 4648 §4, padding optional, the
/// rule every front end shares: docs/design.md, "Bytes params: one base64 rule"),
/// decoded into `buffer`; `*output_length` receives the number of bytes written.
///
/// `buffer_capacity` bytes are available at `buffer`;
/// `UCALL_BASE64_DECODED_CAPACITY(n)` bounds what `n` characters of base64 (the length
/// `ucall_param_named_str` reports) decode to. Returns `false` (`*output_length`
/// untouched) when the parameter is absent, not a base64 string, longer than the buffer,
/// or an output pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable
/// bytes (NUL-terminated when 0); `buffer` NULL or `buffer_capacity` writable bytes;
/// `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_bytes(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    buffer: *mut u8,
    buffer_capacity: usize,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_bytes",
        // SAFETY: the caller's contract.
        let Some(name) = (unsafe { name_arg(name, name_length) }) else { return false };
        // SAFETY: the caller's contract (for `call`, `buffer`, `output_length`).
        unsafe {
            with_param(call, |c| c.named(name), |_, param| write_bytes(param, buffer, buffer_capacity, output_length))
        }
        .unwrap_or(false)
    }
}

/// Read the bytes parameter at `position`; as `ucall_param_named_bytes`.
///
/// # Safety
/// `call` must be the running callback's call; `buffer` NULL or `buffer_capacity`
/// writable bytes; `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_bytes(
    call: ucall_call_t,
    position: usize,
    buffer: *mut u8,
    buffer_capacity: usize,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_bytes",
        // SAFETY: the caller's contract (for `call`, `buffer`, `output_length`).
        unsafe {
            with_param(call, |c| c.positional(position), |_, param| {
                write_bytes(param, buffer, buffer_capacity, output_length)
            })
        }
        .unwrap_or(false)
    }
}

/// Hand out where an attachment's bytes lie.
///
/// # Safety
/// `data` and `length` NULL or writable.
unsafe fn write_attachment(param: Param<'_>, data: *mut *const u8, length: *mut usize) -> Option<bool> {
    if data.is_null() || length.is_null() {
        return None;
    }
    let found = param.attachment().ok()??;
    // SAFETY: both checked non-NULL above; writable by the caller's contract.
    Some(unsafe { ffi::write_out(data, found.bytes.as_ptr()) && ffi::write_out(length, found.bytes.len()) })
}

/// Read a parameter that is an attachment of a binary message (docs/wire.md: a `bytes` or
/// `ndarray` placeholder) without copying it: `*data` receives where its bytes lie in the
/// request and `*length` their number. They stay valid, read-only, until the callback
/// returns. Returns `false` (outputs untouched) when the parameter is absent, no
/// attachment (a base64 string: read it with `ucall_param_named_bytes`), an invalid
/// placeholder, or an output pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable
/// bytes (NUL-terminated when 0); `data` and `length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_attachment(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    data: *mut *const u8,
    length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_attachment",
        // SAFETY: the caller's contract.
        let Some(name) = (unsafe { name_arg(name, name_length) }) else { return false };
        // SAFETY: the caller's contract (for `call`, `data`, `length`).
        unsafe { with_param(call, |c| c.named(name), |_, param| write_attachment(param, data, length)) }
            .unwrap_or(false)
    }
}

/// Read the attachment parameter at `position`; as `ucall_param_named_attachment`.
///
/// # Safety
/// `call` must be the running callback's call; `data` and `length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_attachment(
    call: ucall_call_t,
    position: usize,
    data: *mut *const u8,
    length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_attachment",
        // SAFETY: the caller's contract (for `call`, `data`, `length`).
        unsafe { with_param(call, |c| c.positional(position), |_, param| write_attachment(param, data, length)) }
            .unwrap_or(false)
    }
}

/// Hand out an array attachment's dtype and shape, the shape kept in `context` until the
/// callback returns.
///
/// # Safety
/// `dtype`, `shape` and `dimensions` NULL or writable.
unsafe fn write_array(
    context: &mut CallContext<'_, '_, '_>,
    param: Param<'_>,
    dtype: *mut ucall_str_t,
    shape: *mut *const usize,
    dimensions: *mut usize,
) -> Option<bool> {
    if dtype.is_null() || shape.is_null() || dimensions.is_null() {
        return None;
    }
    let info = param.attachment().ok()??.array?;
    let sizes: Box<[usize]> = info.shape().collect();
    let (count, first) = (
        sizes.len(),
        if sizes.is_empty() {
            std::ptr::null()
        } else {
            sizes.as_ptr()
        },
    );
    context.shapes.push(sizes);
    // SAFETY: all three checked non-NULL above; writable by the caller's contract.
    Some(unsafe {
        ffi::write_out(dtype, ffi::dtype_name(info.dtype).as_ptr())
            && ffi::write_out(shape, first)
            && ffi::write_out(dimensions, count)
    })
}

/// Read what an array parameter (docs/wire.md: an `ndarray` placeholder of a binary
/// message) says of its data: `*dtype` receives its element type, a NUL-terminated static
/// string (`"float32"`, `"uint8"`, ... as docs/wire.md lists them), `*shape` its size in
/// each dimension (C order; NULL for a scalar) and `*dimensions` how many there are. The
/// shape stays valid until the callback returns; read the data with
/// `ucall_param_named_attachment`. Returns `false` (outputs untouched) when the parameter
/// is absent, no array attachment (a `bytes` attachment, a base64 string), an invalid
/// placeholder, or an output pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable
/// bytes (NUL-terminated when 0); `dtype`, `shape` and `dimensions` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_named_array(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    dtype: *mut ucall_str_t,
    shape: *mut *const usize,
    dimensions: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_named_array",
        // SAFETY: the caller's contract.
        let Some(name) = (unsafe { name_arg(name, name_length) }) else { return false };
        // SAFETY: the caller's contract (for `call`, `dtype`, `shape`, `dimensions`).
        unsafe {
            with_param(call, |c| c.named(name), |context, param| write_array(context, param, dtype, shape, dimensions))
        }
        .unwrap_or(false)
    }
}

/// Read what the array parameter at `position` says of its data; as
/// `ucall_param_named_array`.
///
/// # Safety
/// `call` must be the running callback's call; `dtype`, `shape` and `dimensions` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_positional_array(
    call: ucall_call_t,
    position: usize,
    dtype: *mut ucall_str_t,
    shape: *mut *const usize,
    dimensions: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_positional_array",
        // SAFETY: the caller's contract (for `call`, `dtype`, `shape`, `dimensions`).
        unsafe {
            with_param(call, |c| c.positional(position), |context, param| {
                write_array(context, param, dtype, shape, dimensions)
            })
        }
        .unwrap_or(false)
    }
}

/// Number of parameters sent: elements of a params array or members of a params object;
/// 0 when params are absent (or `call` is NULL).
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_count(call: ucall_call_t) -> usize {
    ffi_panic_boundary! {"ucall_param_count",
        // SAFETY: the caller's contract.
        unsafe { context(call) }.map_or(0, |c| c.call.params().len())
    }
}

/// Name of the member at `position` (in the order sent) when params are an object:
/// `*output` points to it, unescaped and not NUL-terminated (except when empty), valid
/// until the callback returns. With `ucall_param_count` it lets a callback walk every
/// named parameter. Returns `false` (outputs untouched) for array params, a position
/// past the end, or a NULL output pointer.
///
/// # Safety
/// `call` must be the running callback's call; `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_param_name(
    call: ucall_call_t,
    position: usize,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_param_name",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        let Some(key) = context.call.params().name_at(position) else { return false };
        match context.string(key) {
            // SAFETY: the caller's contract.
            Some(text) => unsafe { write_text(output, output_length, text) },
            None => false,
        }
    }
}

// ------------------------------------------------------------------ context

/// How the call arrived: `"http"`, `"tcp"` or `"websocket"` (a static NUL-terminated
/// string); NULL when `call` is not the running callback's call.
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_transport(call: ucall_call_t) -> ucall_str_t {
    ffi_panic_boundary! {"ucall_call_transport",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return std::ptr::null() };
        match context.call.context().transport() {
            ucall_core::Transport::Http => c"http".as_ptr(),
            ucall_core::Transport::Tcp => c"tcp".as_ptr(),
            ucall_core::Transport::WebSocket => c"websocket".as_ptr(),
        }
    }
}

/// Whether TLS carried the call (`false` for a NULL or stale `call`).
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_is_tls(call: ucall_call_t) -> bool {
    ffi_panic_boundary! {"ucall_call_is_tls",
        // SAFETY: the caller's contract.
        unsafe { context(call) }.is_some_and(|c| c.call.context().is_tls())
    }
}

/// Whether the caller is known to have gone: its connection ended, an HTTP client stopped
/// sending, or a WebSocket client sent Close (`false` for a NULL or stale `call`). A
/// callback runs on the thread that serves its connection, which reads nothing while the
/// callback runs: this tells what that thread knew when the callback began, not what
/// happens during it.
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_caller_gone(call: ucall_call_t) -> bool {
    ffi_panic_boundary! {"ucall_call_caller_gone",
        // SAFETY: the caller's contract.
        unsafe { context(call) }.is_some_and(|c| c.call.context().is_caller_gone())
    }
}

/// The subject of the client's TLS certificate (mutual TLS, `ssl_client_ca_path`), as
/// RFC 4514 writes a distinguished name (`CN=alice, O=Example`): `*output` points to it
/// (not NUL-terminated, valid until the callback returns) and `*output_length` says its
/// length. Returns `false` (outputs untouched) without TLS or a client certificate, or
/// when a pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `output` and `output_length` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_tls_subject(
    call: ucall_call_t,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_call_tls_subject",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        let Some(subject) = context.call.context().tls_subject() else { return false };
        // SAFETY: the caller's contract; the subject lives in the connection's session,
        // which outlives the callback.
        unsafe { write_text(output, output_length, (subject.as_ptr().cast(), subject.len())) }
    }
}

/// Write the peer's address as text (`127.0.0.1:5000`, `[::1]:5000`), NUL-terminated, into
/// `buffer` of `buffer_capacity` bytes, and its length (without the NUL) to
/// `*output_length`. Returns `false` (outputs untouched) when the address is not known
/// (see `ucall_keep_context`), the buffer is too small, or a pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `buffer` NULL or `buffer_capacity` writable
/// bytes; `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_peer(
    call: ucall_call_t,
    buffer: *mut c_char,
    buffer_capacity: usize,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_call_peer",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        let Some(peer) = context.call.context().peer() else { return false };
        let text = peer.to_string();
        if buffer.is_null() || output_length.is_null() || text.len() >= buffer_capacity {
            return false;
        }
        // SAFETY: `buffer` holds `buffer_capacity` > `text.len()` writable bytes (the
        // caller's contract, checked above), and a fresh `String` overlaps no C memory.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buffer, text.len());
            *buffer.add(text.len()) = 0;
            ffi::write_out(output_length, text.len())
        }
    }
}

/// Read the request header field `name` (`name_length` bytes, or NUL-terminated when 0;
/// compared case-insensitively): `*output` points to its value, trimmed, not
/// NUL-terminated (except when empty), valid until the callback returns. An HTTP call's
/// own head; a WebSocket call's, the upgrade request's; none over raw TCP. Returns `false`
/// (outputs untouched) when the field is absent, the head was not kept (see
/// `ucall_keep_context`), or a pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `name` NULL or `name_length` readable
/// bytes (NUL-terminated when 0); `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_header(
    call: ucall_call_t,
    name: ucall_str_t,
    name_length: usize,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_call_header",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        // SAFETY: the caller's contract.
        let Some(name) = (unsafe { ffi::text_arg(name, name_length) }) else { return false };
        let Some(name) = std::str::from_utf8(name).ok() else { return false };
        let Some(value) = context.call.context().header(name) else { return false };
        let text = if value.is_empty() { (EMPTY.as_ptr(), 0) } else { (value.as_ptr().cast(), value.len()) };
        // SAFETY: the caller's contract.
        unsafe { write_text(output, output_length, text) }
    }
}

/// The caller's W3C trace context, when it sent a valid one (the request's `"_meta"`
/// member, else the `traceparent` and `tracestate` header fields; see docs/operations.md,
/// "Tracing"). Writes the `traceparent` as version 00 writes it, 55 characters and a NUL,
/// into `traceparent` (`traceparent_capacity` must be at least 56), and points
/// `*tracestate` to the `tracestate` list (not NUL-terminated, valid until the callback
/// returns) with its length in `*tracestate_length`, or NULL and 0 when none came (or an
/// invalid one). Returns `false` (outputs untouched) when the call carries no valid trace
/// context, the head was not kept (see `ucall_keep_context`; a `"_meta"` member needs
/// no head), the buffer is too small, or a pointer is NULL.
///
/// # Safety
/// `call` must be the running callback's call; `traceparent` NULL or
/// `traceparent_capacity` writable bytes; `tracestate`, `tracestate_length` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_trace_context(
    call: ucall_call_t,
    traceparent: *mut c_char,
    traceparent_capacity: usize,
    tracestate: *mut ucall_str_t,
    tracestate_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_call_trace_context",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        if traceparent.is_null() || tracestate.is_null() || tracestate_length.is_null() {
            return false;
        }
        let Some(trace) = context.call.context().trace() else { return false };
        let header = trace.parent.to_header();
        if traceparent_capacity <= header.len() {
            return false;
        }
        let state = match trace.tracestate {
            None => (std::ptr::null(), 0),
            Some(std::borrow::Cow::Borrowed(text)) => (text.as_ptr().cast::<c_char>(), text.len()),
            // Several header fields joined: kept until the callback returns.
            Some(std::borrow::Cow::Owned(text)) => {
                context.strings.push(text.into_boxed_str());
                let kept = context.strings.last().map_or("", |text| &**text);
                (kept.as_ptr().cast::<c_char>(), kept.len())
            }
        };
        // SAFETY: `traceparent` holds `traceparent_capacity` > 55 writable bytes (the
        // caller's contract, checked above); the header is a local array; the other two
        // outputs are non-NULL and writable by the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr().cast::<c_char>(), traceparent, header.len());
            *traceparent.add(header.len()) = 0;
            ffi::write_out(tracestate, state.0) && ffi::write_out(tracestate_length, state.1)
        }
    }
}

/// The call's method name (`*output`, not NUL-terminated, valid until the callback
/// returns). Returns `false` (outputs untouched) for a NULL pointer or stale `call`.
///
/// # Safety
/// `call` must be the running callback's call; `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_method(
    call: ucall_call_t,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_call_method",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        let method = context.call.method();
        // SAFETY: the caller's contract.
        unsafe { write_text(output, output_length, (method.as_ptr().cast(), method.len())) }
    }
}

/// The call's JSON-RPC id as sent, a JSON text (`1`, `"a"`; `null` for a REST-style call):
/// `*output` points to it, not NUL-terminated, valid until the callback returns. Returns
/// `false` (outputs untouched) for a notification, a NULL pointer or a stale `call`.
///
/// # Safety
/// `call` must be the running callback's call; `output`, `output_length` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_id(
    call: ucall_call_t,
    output: *mut ucall_str_t,
    output_length: *mut usize,
) -> bool {
    ffi_panic_boundary! {"ucall_call_id",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return false };
        let Some(id) = context.call.id() else { return false };
        // SAFETY: the caller's contract.
        unsafe { write_text(output, output_length, (id.as_ptr().cast(), id.len())) }
    }
}

// ------------------------------------------------------------------ replies

/// Answer with `json`, which must be one valid JSON text (`json_length` bytes, or
/// NUL-terminated when 0): it becomes the call's `result` as is.
///
/// Only the first `ucall_call_reply_*()` of a call counts; later ones are ignored.
/// Content that is NULL, not UTF-8 or not valid JSON answers `-32603` instead ("replied
/// with invalid JSON"): the output stays well-formed whatever the callback passes.
///
/// # Safety
/// `call` must be the running callback's call; `json` NULL or `json_length` readable bytes
/// (NUL-terminated when 0).
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_content(call: ucall_call_t, json: ucall_str_t, json_length: usize) {
    ffi_panic_boundary! {"ucall_call_reply_content",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return };
        let method = context.call.method();
        // SAFETY: the caller's contract.
        let bytes = unsafe { ffi::text_arg(json, json_length) };
        // A parameter handed out by ucall_param_*_json, replied with as it is: part of the
        // request, valid JSON already (an echo).
        let handed = bytes.is_some_and(|b| context.last_json == Some((b.as_ptr() as usize, b.len())));
        context.answer(|reply| match bytes {
            Some(bytes) if handed => {
                // SAFETY: these bytes are a `&str` the request's parse handed out.
                reply.raw_trusted(unsafe { std::str::from_utf8_unchecked(bytes) });
                Answer::Replied
            }
            // Most replies are a number, a literal or a plain ASCII string: checked in one
            // pass, which also proves them UTF-8.
            Some(bytes) if is_plain_scalar(bytes) => {
                // SAFETY: `is_plain_scalar` accepts ASCII only.
                reply.raw_trusted(unsafe { std::str::from_utf8_unchecked(bytes) });
                Answer::Replied
            }
            Some(bytes) if std::str::from_utf8(bytes).is_ok_and(|text| reply.raw(text).is_ok()) => Answer::Replied,
            _ => Answer::Failed(invalid_json(method)),
        });
    }
}

/// Called with its `userdata` once the bytes given to `ucall_call_reply_attachment` are
/// no longer read.
#[allow(non_camel_case_types)]
pub type ucall_release_t = Option<unsafe extern "C" fn(userdata: *mut c_void)>;

/// The caller's bytes, sent where they lie and released through its callback.
struct Lent {
    data: *const u8,
    length: usize,
    release: unsafe extern "C" fn(*mut c_void),
    userdata: *mut c_void,
}

// SAFETY: the caller of `ucall_call_reply_attachment` promises the bytes stay valid and
// unchanged until `release` is called, from any thread; they are only read.
unsafe impl Send for Lent {}
// SAFETY: as for `Send`: shared reads of memory that does not change.
unsafe impl Sync for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        if self.length == 0 {
            return &[];
        }
        // SAFETY: `length` readable bytes at `data` until `release` (see above).
        unsafe { std::slice::from_raw_parts(self.data, self.length) }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: the callback the caller gave, with its own `userdata`, called once.
        unsafe { (self.release)(self.userdata) }
    }
}

/// Answer with `data` (`length` bytes) as the result: an attachment of a binary message
/// for a caller that accepts binary replies (docs/wire.md), else a base64 string.
///
/// With `release` NULL the bytes are copied before this returns. Otherwise they are sent
/// from where they are, without a copy, and `release(userdata)` is called once they are no
/// longer read: possibly after the callback has returned and from another thread, and
/// exactly once, also when the reply is not used (an answer was given already, the caller
/// is gone). `data` may be NULL when `length` is 0. Only the first `ucall_call_reply_*()`
/// of a call counts.
///
/// # Safety
/// `call` must be the running callback's call; `data` NULL or `length` readable bytes,
/// unchanged until `release` is called when it is given.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_attachment(
    call: ucall_call_t,
    data: *const u8,
    length: usize,
    release: ucall_release_t,
    userdata: *mut c_void,
) {
    ffi_panic_boundary! {"ucall_call_reply_attachment",
        // SAFETY: the caller's contract, passed on.
        let bytes = unsafe { lent_bytes(data, length, release, userdata) };
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return };
        let method = context.call.method();
        context.answer(|reply| match bytes {
            Some(bytes) => {
                reply.bytes(bytes);
                Answer::Replied
            }
            None => Answer::Failed(null_bytes(method)),
        });
    }
}

/// `length` bytes at `data` as [`ucall_core::Bytes`]: copied with `release` NULL, else
/// lent until dropped (then `release(userdata)`, also at once when unreadable). `None`
/// for NULL data of non-zero length.
///
/// # Safety
/// `data` NULL or `length` readable bytes, unchanged until `release` is called when given.
unsafe fn lent_bytes(
    data: *const u8,
    length: usize,
    release: ucall_release_t,
    userdata: *mut c_void,
) -> Option<ucall_core::Bytes> {
    let readable = !data.is_null() || length == 0;
    match release {
        // Released when dropped, whatever happens next (unreadable: at once).
        Some(release) => {
            let lent = Lent {
                data,
                length: if readable { length } else { 0 },
                release,
                userdata,
            };
            readable.then(|| ucall_core::Bytes::from_owner(lent))
        }
        None if !readable => None,
        None if length == 0 => Some(ucall_core::Bytes::new()),
        // SAFETY: `length` readable bytes at `data` (the caller's contract).
        None => Some(ucall_core::Bytes::copy_from_slice(unsafe {
            std::slice::from_raw_parts(data, length)
        })),
    }
}

#[cold]
fn null_bytes(method: &str) -> RpcError {
    RpcError::internal(format!(
        "Internal error: '{method}' replied with NULL bytes of non-zero length"
    ))
}

/// Answer with an n-dimensional array as the result: `dimensions` sizes at `shape` (C
/// order), elements of `dtype` (NUL-terminated: `"float32"`, `"uint8"`, ... as
/// docs/wire.md lists them), `length` bytes of little-endian data at `data`. An `ndarray`
/// attachment of a binary message for a caller that accepts binary replies, else the
/// base64 of its `.npy` form (as `numpy.save` writes it). `release` and `userdata` as
/// for `ucall_call_reply_attachment()` (NULL: copied before this returns). An unknown
/// dtype, a NULL shape with dimensions, or `length` other than the shape's element count
/// times the dtype's size answers `-32603`. Only the first
/// `ucall_call_reply_*()` of a call counts.
///
/// # Safety
/// As `ucall_call_reply_attachment()`; `dtype` NULL or NUL-terminated; `shape` NULL or
/// `dimensions` readable sizes.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_array(
    call: ucall_call_t,
    dtype: ucall_str_t,
    shape: *const usize,
    dimensions: usize,
    data: *const u8,
    length: usize,
    release: ucall_release_t,
    userdata: *mut c_void,
) {
    ffi_panic_boundary! {"ucall_call_reply_array",
        // SAFETY: the caller's contract, passed on.
        let bytes = unsafe { lent_bytes(data, length, release, userdata) };
        // SAFETY: the caller's contract for `dtype` and `shape`.
        let (dtype, shape) = unsafe { (ffi::c_str_arg(dtype), ffi::array_arg(shape, dimensions)) };
        let dtype = dtype.and_then(|name| name.to_str().ok()).and_then(ucall_core::Dtype::from_name);
        let shape = shape.or_else(|| (dimensions == 0).then_some(&[][..]));
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return };
        let method = context.call.method();
        context.answer(|reply| match (bytes, dtype, shape) {
            (None, _, _) => Answer::Failed(null_bytes(method)),
            (_, None, _) => Answer::Failed(RpcError::internal(format!(
                "Internal error: '{method}' replied with an array of an unknown dtype"
            ))),
            (_, _, None) => Answer::Failed(RpcError::internal(format!(
                "Internal error: '{method}' replied with an array whose shape is NULL"
            ))),
            (Some(bytes), Some(dtype), Some(shape)) => match reply.array(dtype, shape, bytes) {
                Ok(()) => Answer::Replied,
                Err(error) => Answer::Failed(error),
            },
        });
    }
}

/// Whether `text` is, exactly and without surrounding whitespace, one JSON number (RFC 8259
/// §6), `true`, `false`, `null`, or an ASCII string without escapes or control characters:
/// the replies that need no full parse (nor UTF-8 check) to be known valid. Anything else
/// is checked and parsed in full.
fn is_plain_scalar(text: &[u8]) -> bool {
    match text {
        b"true" | b"false" | b"null" => true,
        [b'"', inner @ .., b'"'] => is_plain_string_body(inner),
        _ => is_number_text(text),
    }
}

/// Only ASCII in `inner`, and no quote, backslash or control character. Checked 64 bytes
/// at a time without an early exit inside a block, which the compiler turns into SIMD: a
/// 2 MB base64 reply took milliseconds byte by byte.
fn is_plain_string_body(inner: &[u8]) -> bool {
    let plain = |block: &[u8]| {
        let odd = block.iter().fold(0u8, |odd, &c| {
            odd | u8::from(c < 0x20) | u8::from(c >= 0x80) | u8::from(c == b'"') | u8::from(c == b'\\')
        });
        odd == 0
    };
    let blocks = inner.chunks_exact(64);
    let tail = blocks.remainder();
    blocks.into_iter().all(plain) && plain(tail)
}

/// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_number_text(text: &[u8]) -> bool {
    fn digits(text: &[u8], at: &mut usize) -> usize {
        let start = *at;
        while text.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at - start
    }
    let mut at = usize::from(text.first() == Some(&b'-'));
    match text.get(at) {
        Some(b'0') => at += 1,
        Some(b'1'..=b'9') => {
            digits(text, &mut at);
        }
        _ => return false,
    }
    if text.get(at) == Some(&b'.') {
        at += 1;
        if digits(text, &mut at) == 0 {
            return false;
        }
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(text.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        if digits(text, &mut at) == 0 {
            return false;
        }
    }
    at == text.len()
}

/// The message to send with `code`: the caller's, else the table's, else a generic one.
///
/// # Safety
/// As for [`ffi::text_arg`].
unsafe fn message_or_default(code: c_int, message: ucall_str_t, length: usize) -> String {
    // SAFETY: the caller's contract.
    match unsafe { ffi::text_arg(message, length) } {
        Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        None => ErrorCode::from_code(code)
            .map_or("Server error", ErrorCode::message)
            .to_owned(),
    }
}

/// Answer with the JSON-RPC error `code` and `message` (`message_length` bytes, or
/// NUL-terminated when 0; NULL: the specification's message for the code). The message
/// may be any text; bytes that are not UTF-8 are replaced. Only the first
/// `ucall_call_reply_*()` of a call counts.
///
/// Codes from -32768 to -32000 are reserved by JSON-RPC 2.0; use -32099..-32000 for
/// server-defined errors, or any code outside the reserved range.
///
/// # Safety
/// `call` must be the running callback's call; `message` NULL or `message_length`
/// readable bytes (NUL-terminated when 0).
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_error(
    call: ucall_call_t,
    error_code: c_int,
    error_message: ucall_str_t,
    error_message_length: usize,
) {
    ffi_panic_boundary! {"ucall_call_reply_error",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return };
        // SAFETY: the caller's contract.
        let message = unsafe { message_or_default(error_code, error_message, error_message_length) };
        context.answer(|_| Answer::Failed(RpcError::new(error_code, message)));
    }
}

/// Answer with an error that carries `data`: one valid JSON text (`data_length` bytes, or
/// NUL-terminated when 0) sent as the error object's `data` member. `code` and `message`
/// as for `ucall_call_reply_error`. Data that is NULL, not UTF-8 or not valid JSON
/// answers `-32603` instead. Only the first `ucall_call_reply_*()` of a call counts.
///
/// # Safety
/// `call` must be the running callback's call; `message` and `data` NULL or their length
/// in readable bytes (NUL-terminated when 0).
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_error_data(
    call: ucall_call_t,
    error_code: c_int,
    error_message: ucall_str_t,
    error_message_length: usize,
    data: ucall_str_t,
    data_length: usize,
) {
    ffi_panic_boundary! {"ucall_call_reply_error_data",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return };
        let method = context.call.method();
        // SAFETY: the caller's contract.
        let message = unsafe { message_or_default(error_code, error_message, error_message_length) };
        // SAFETY: the caller's contract.
        let data = unsafe { ffi::text_arg(data, data_length) }.and_then(|bytes| std::str::from_utf8(bytes).ok());
        let error = data.and_then(|data| RpcError::new(error_code, message).with_raw_data(data.trim()));
        context.answer(|_| Answer::Failed(error.unwrap_or_else(|| invalid_json(method))));
    }
}

/// Answer with an error that also names the HTTP status to answer with, a 4xx or 5xx:
/// a REST-style call (`GET /name?...`) and a single JSON-RPC call over HTTP answer with
/// it, the error object in the body; a batch keeps 200, and raw TCP and WebSocket send
/// only the error object. `error_code` 0 takes the code from the core's table of codes
/// and statuses (-32602 for 400, -32603 for 500, -32000 for the others); `message` as
/// for `ucall_call_reply_error`. A status out of 400..599 answers as
/// `ucall_call_reply_error` would. Only the first `ucall_call_reply_*()` of a call counts.
///
/// # Safety
/// `call` must be the running callback's call; `message` NULL or `message_length`
/// readable bytes (NUL-terminated when 0).
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_error_status(
    call: ucall_call_t,
    http_status: u16,
    error_code: c_int,
    error_message: ucall_str_t,
    error_message_length: usize,
) {
    ffi_panic_boundary! {"ucall_call_reply_error_status",
        // SAFETY: the caller's contract.
        let Some(context) = (unsafe { context(call) }) else { return };
        let code = match error_code {
            0 => ucall_core::jsonrpc::code_for_http_status(http_status),
            code => code,
        };
        // SAFETY: the caller's contract.
        let message = unsafe { message_or_default(code, error_message, error_message_length) };
        context.answer(|_| Answer::Failed(RpcError::new(code, message).with_http_status(http_status)));
    }
}

/// Answer `-32602` "Invalid params".
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_error_invalid_params(call: ucall_call_t) {
    ffi_panic_boundary! {"ucall_call_reply_error_invalid_params",
        // SAFETY: the caller's contract.
        if let Some(context) = unsafe { context(call) } {
            context.answer(|_| Answer::Failed(ErrorCode::InvalidParams.into()));
        }
    }
}

/// Answer `-32603` "Internal error: out of memory".
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_error_out_of_memory(call: ucall_call_t) {
    ffi_panic_boundary! {"ucall_call_reply_error_out_of_memory",
        // SAFETY: the caller's contract.
        if let Some(context) = unsafe { context(call) } {
            context.answer(|_| Answer::Failed(RpcError::internal("Internal error: out of memory")));
        }
    }
}

/// Answer `-32603` "Internal error": the procedure failed for an unspecified reason.
///
/// # Safety
/// `call` must be NULL or the running callback's call.
#[no_mangle]
pub unsafe extern "C" fn ucall_call_reply_error_unknown(call: ucall_call_t) {
    ffi_panic_boundary! {"ucall_call_reply_error_unknown",
        // SAFETY: the caller's contract.
        if let Some(context) = unsafe { context(call) } {
            context.answer(|_| Answer::Failed(ErrorCode::InternalError.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_are_recognised_exactly() {
        for ok in [
            "0", "-0", "3", "-42", "1.5", "1e3", "-2.5E-7", "true", "false", "null", "\"\"",
        ] {
            assert!(is_plain_scalar(ok.as_bytes()), "{ok}");
        }
        // Valid, but not ASCII: checked as UTF-8 and parsed in full instead.
        assert!(!is_plain_scalar("\"héllo\"".as_bytes()));
        for other in [
            "",
            "-",
            "01",
            "1.",
            ".5",
            "1e",
            "+1",
            " 1",
            "1 ",
            "nul",
            "\"a\\\"b\"",
            "\"\n\"",
            "\"",
            "[1]",
            "NaN",
        ] {
            assert!(!is_plain_scalar(other.as_bytes()), "{other:?}");
        }
        assert!(!is_plain_scalar(b"\"tab\there\""));
        // Long strings go block by block: a bad byte anywhere, in a block or the tail.
        for at in [0, 1, 63, 64, 65, 127, 128, 4095, 4999] {
            for bad in [b'"', b'\\', b'\n', 0x1f, 0x80, 0xff] {
                let mut text = vec![b'A'; 5002];
                text[0] = b'"';
                text[5001] = b'"';
                assert!(is_plain_scalar(&text));
                text[1 + at] = bad;
                assert!(!is_plain_scalar(&text), "{bad:#x} at {at}");
            }
        }
    }
}
