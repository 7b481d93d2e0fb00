// SPDX-License-Identifier: Apache-2.0
//! The server handle: `ucall_init`, `ucall_add_procedure`, `ucall_take_call(s)`,
//! `ucall_stop`, `ucall_free`.
//!
//! Binding happens in `ucall_init` (so a port in use fails there, with the reason in
//! `ucall_last_error()`); procedures are added to the bound server's open table until the
//! first `ucall_take_call(s)`, which freezes it and splits the server into one worker per
//! thread index ([`ucall_core::Server::into_workers`]). Thread `i` then drives worker `i`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::thread::ThreadId;
use std::time::Duration;

use ucall_core::{EngineKind, MethodDoc, Server, Stopper, Worker};

use crate::call::{CHook, CProcedure, InCallback};
use crate::config::ucall_config_t;
use crate::error;
use crate::ffi::{self, ucall_callback_tag_t, ucall_str_t, Handle, Tag};
use crate::log::{CoreRecords, Logger};

/// A server, made by `ucall_init()` and released by `ucall_free()`.
///
/// Methods: `ucall_add_procedure`, `ucall_take_call`, `ucall_take_calls`, `ucall_stop`,
/// `ucall_free`.
#[allow(non_camel_case_types)]
pub type ucall_server_t = *mut c_void;

/// A procedure: called with the call (valid only until the callback returns) and the tag
/// it was registered with. It answers with one `ucall_call_reply_*()` call.
///
/// It runs on the thread that serves the connection, possibly on several threads at once
/// for different calls; it must not unwind (throw a C++ exception) into the library.
#[allow(non_camel_case_types)]
pub type ucall_callback_t = Option<unsafe extern "C" fn(call: crate::call::ucall_call_t, tag: ucall_callback_tag_t)>;

/// How long one `ucall_take_call()` waits for something to happen.
const TAKE_CALL_WAIT: Duration = Duration::from_millis(10);

/// Before serving starts: the bound server, still open to procedures.
struct Setup {
    server: Option<Server>,
    procedures: usize,
}

/// One thread index: its worker, and who may drive it.
struct Slot {
    worker: Mutex<Worker>,
    /// The first thread to drive the worker: the only one whose turns an io_uring ring
    /// accepts (another thread's would stop the worker, and leave its listener open).
    driver: OnceLock<ThreadId>,
    /// Whether a turn from another thread was logged: once per index, since a program's
    /// loop would repeat it every round.
    other_thread_logged: AtomicBool,
}

impl Slot {
    /// Whether `thread` is the slot's driver, which the first to ask becomes.
    fn is_driven_by(&self, thread: ThreadId) -> bool {
        *self.driver.get_or_init(|| thread) == thread
    }
}

/// What a `ucall_server_t` points to.
#[repr(C)]
pub struct CServer {
    tag: Tag,
    stopper: Stopper,
    setup: Mutex<Setup>,
    /// Set when serving starts; worker `i` is driven by `ucall_take_call(s)(server, i)`.
    workers: OnceLock<Box<[Slot]>>,
    /// io_uring: each index is served from the thread that first drove it, and only it.
    one_thread_per_index: bool,
    max_callbacks: usize,
    log: Logger,
    /// Keeps `log` among those that get the core's records while the server lives.
    _core_records: Option<CoreRecords>,
}

// SAFETY: `CServer` is `#[repr(C)]` and starts with its `Tag`.
unsafe impl Handle for CServer {
    const TAG: Tag = Tag::SERVER;
}

impl CServer {
    fn setup(&self) -> MutexGuard<'_, Setup> {
        // A panic while holding this lock is caught at the boundary; the data stays usable.
        self.setup.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The workers, freezing the procedures on the first call.
    fn workers(&self) -> &[Slot] {
        self.workers.get_or_init(|| {
            let Some(server) = self.setup().server.take() else {
                return Box::default();
            };
            let (_, workers) = server.into_workers();
            self.log.event("serving", &[("threads", &workers.len().to_string())]);
            workers
                .into_iter()
                .map(|worker| Slot {
                    worker: Mutex::new(worker),
                    driver: OnceLock::new(),
                    other_thread_logged: AtomicBool::new(false),
                })
                .collect()
        })
    }
}

/// The server behind `handle`, or why not (recorded as the last error).
///
/// # Safety
/// `handle` must be NULL or a value `ucall_init()` returned that `ucall_free()` has not
/// released (the C API's contract, restated on each exported function).
unsafe fn server<'a>(handle: ucall_server_t, function: &str) -> Option<&'a CServer> {
    // SAFETY: the caller's contract; only shared references are made from a server.
    match unsafe { ffi::handle_ref::<CServer>(handle) } {
        Some(server) => Some(server),
        None => {
            error::set(format!("{function}: the server handle is NULL or not a server"));
            None
        }
    }
}

/// Start a server: read `config` (applying defaults and writing the values in force
/// back), bind the address and write the new server to `*server`.
///
/// On failure `*server` is NULL and `ucall_last_error()` says why (address in use,
/// invalid field, a TLS file missing or unusable, ...); the text is also logged
/// (`init failed`) when `logs_file_descriptor` is set. `ucall_init()` clears the last
/// error on success.
///
/// Procedures are added next with `ucall_add_procedure()`, then each thread index is
/// served with `ucall_take_calls()`. Release the server with `ucall_free()`.
///
/// # Safety
/// `config` must be NULL or point to a valid `ucall_config_t` whose string fields are NULL
/// or NUL-terminated (`ssl_certificates_paths` holding `ssl_certificates_count` of them);
/// `server` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucall_init(config: *mut ucall_config_t, server: *mut ucall_server_t) {
    ffi_panic_boundary! {"ucall_init",
        if server.is_null() {
            error::set("ucall_init: the server out-parameter is NULL");
            return;
        }
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { server.write(std::ptr::null_mut()) };
        // SAFETY: NULL or a valid config, by the caller's contract.
        let Some(config) = (unsafe { config.as_mut() }) else {
            error::set("ucall_init: the config is NULL; pass a zeroed ucall_config_t for the defaults");
            return;
        };
        match init(config) {
            Ok(made) => {
                error::clear();
                // SAFETY: checked non-NULL and writable above.
                unsafe { server.write(Box::into_raw(made).cast::<c_void>()) };
            }
            Err(message) => {
                // One place for every failure, whichever field or step it came from.
                config.failure_log().event("init failed", &[("error", &message)]);
                error::set(format!("ucall_init: {message}"));
            }
        }
    }
}

fn init(config: &mut ucall_config_t) -> Result<Box<CServer>, String> {
    let settings = config.settings()?;
    let log = Logger::new(settings.logs);
    let separate_tls = settings.core.tls.as_ref().is_some_and(|tls| tls.port.is_some());
    let chain = settings.tls_chain;
    let mut builder = Server::builder().config(settings.core).discovery(settings.discovery);
    if let Some(mcp) = settings.mcp {
        builder = builder.mcp(mcp);
    }
    let bound = builder.bind().map_err(|e| match &chain {
        Some(chain) => chain.explain(e.to_string()),
        None => e.to_string(),
    })?;
    // The certificates are read: a chain joined from several files is removed here.
    drop(chain);
    let addr = bound.local_addr();
    let tls_addr = bound.tls_addr();
    config.write_back_bound(
        bound.engine(),
        addr.port(),
        tls_addr.filter(|_| separate_tls).map(|a| a.port()),
    );
    let mut fields = vec![
        ("address", addr.to_string()),
        ("engine", bound.engine().name().to_owned()),
        ("threads", bound.config().threads.to_string()),
    ];
    if let Some(tls_addr) = tls_addr {
        fields.push(("tls", tls_addr.to_string()));
    }
    if let Some(path) = bound.unix_socket() {
        fields.push(("unix_socket", path.display().to_string()));
    }
    if let Some(why) = bound.engine_fallback() {
        // Why `auto` took poll (a seccomp filter, the sysctl, an old kernel).
        fields.push(("fallback", format!("io_uring unavailable: {why}")));
    }
    let fields: Vec<(&str, &str)> = fields.iter().map(|(name, value)| (*name, value.as_str())).collect();
    log.event("listening", &fields);
    let one_thread_per_index = bound.engine() == EngineKind::Uring;
    Ok(Box::new(CServer {
        tag: Tag::SERVER,
        stopper: bound.stopper(),
        setup: Mutex::new(Setup {
            server: Some(bound),
            procedures: 0,
        }),
        workers: OnceLock::new(),
        one_thread_per_index,
        max_callbacks: settings.max_callbacks,
        log,
        _core_records: CoreRecords::to(log),
    }))
}

/// Register `callback` under `name` (NUL-terminated, UTF-8), matched against the
/// "method" of each request and the path of REST calls (`GET /name?...`). `tag` is handed
/// back to every call of `callback`.
///
/// Procedures are added after `ucall_init()` and before the first `ucall_take_call(s)()`.
/// A call after that or after `ucall_stop()`, a NULL or non-UTF-8 name, a NULL callback,
/// or more than `max_callbacks` procedures are refused: nothing is registered, and
/// `ucall_last_error()` says why.
/// Registering a name again replaces the earlier procedure.
///
/// # Safety
/// `server` must be a live server; `name` NULL or NUL-terminated. `tag` is not read by
/// the library; whatever it points to must stay valid while the server serves and be safe
/// to use from every serving thread at once.
#[no_mangle]
pub unsafe extern "C" fn ucall_add_procedure(
    server: ucall_server_t,
    name: ucall_str_t,
    callback: ucall_callback_t,
    tag: ucall_callback_tag_t,
) {
    ffi_panic_boundary! {"ucall_add_procedure",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_add_procedure") }) else { return };
        let refuse = |why: String| {
            srv.log.event("procedure refused", &[("reason", &why)]);
            error::set(format!("ucall_add_procedure: {why}"));
        };
        // SAFETY: NULL or NUL-terminated, by the caller's contract.
        let Some(name) = (unsafe { ffi::c_str_arg(name) }) else {
            return refuse("the name is NULL".into());
        };
        let Ok(name) = name.to_str() else {
            return refuse(format!("the name {name:?} is not valid UTF-8"));
        };
        let Some(callback) = callback else {
            return refuse(format!("the callback for {name:?} is NULL"));
        };
        let mut setup = srv.setup();
        let setup = &mut *setup;
        if srv.stopper.is_stopping() {
            return refuse(format!("{name:?} added after the server was stopped (ucall_stop)"));
        }
        let Some(bound) = setup.server.as_mut() else {
            return refuse(format!(
                "{name:?} added after serving started; add procedures before the first ucall_take_call(s)"
            ));
        };
        let replacing = bound.router_mut().get(name).is_some();
        if !replacing && setup.procedures >= srv.max_callbacks {
            return refuse(format!(
                "{name:?} would exceed max_callbacks ({}); raise config.max_callbacks",
                srv.max_callbacks
            ));
        }
        bound.router_mut().insert(name, Arc::new(CProcedure::new(callback, tag)));
        setup.procedures += usize::from(!replacing);
    }
}

/// A hook run around every call: returns `true` to go on to the procedure (without
/// replying), or `false` to refuse the call, answered with the error the hook gave with
/// `ucall_call_reply_error*()` (`ucall_call_reply_error_status(call, 401, ...)` answers
/// HTTP with 401), or with a reply of its own; `false` with no answer refuses with 403.
/// It reads the call as a procedure does (params, `ucall_call_header`, ...). Like a
/// procedure, it runs on every serving thread at once and must not unwind.
#[allow(non_camel_case_types)]
pub type ucall_hook_t =
    Option<unsafe extern "C" fn(call: crate::call::ucall_call_t, tag: ucall_callback_tag_t) -> bool>;

/// Run `hook` (with `tag` handed back) around every call, inside the hooks set before
/// it; the calls' context is kept (`ucall_keep_context`). Set hooks after `ucall_init()`
/// and before the first `ucall_take_call(s)()`; a NULL hook, or one set later, is refused
/// (`ucall_last_error()` says why).
///
/// # Safety
/// `server` must be NULL or a live server. `tag` as for `ucall_add_procedure`.
#[no_mangle]
pub unsafe extern "C" fn ucall_set_hook(server: ucall_server_t, hook: ucall_hook_t, tag: ucall_callback_tag_t) {
    ffi_panic_boundary! {"ucall_set_hook",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_set_hook") }) else { return };
        let Some(hook) = hook else {
            return error::set("ucall_set_hook: the hook is NULL".to_owned());
        };
        let mut setup = srv.setup();
        match setup.server.as_mut() {
            Some(bound) if !srv.stopper.is_stopping() => {
                bound.router_mut().add_hook(Arc::new(CHook::new(hook, tag)));
            }
            _ => error::set("ucall_set_hook: called after serving started or after ucall_stop".to_owned()),
        }
    }
}

/// Keep each call's peer address and request header fields for its callback
/// (`ucall_call_peer`, `ucall_call_header`). Without it a callback still reads the
/// transport, TLS, id and method, and the server copies no request head (and, on
/// io_uring, asks the kernel for no address: connections are then accepted one per turn).
/// Call it after `ucall_init()` and before the first `ucall_take_call(s)()`; later calls
/// are refused (`ucall_last_error()` says why).
///
/// # Safety
/// `server` must be NULL or a live server.
#[no_mangle]
pub unsafe extern "C" fn ucall_keep_context(server: ucall_server_t) {
    ffi_panic_boundary! {"ucall_keep_context",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_keep_context") }) else { return };
        let mut setup = srv.setup();
        match setup.server.as_mut() {
            Some(bound) if !srv.stopper.is_stopping() => bound.router_mut().keep_context(),
            _ => error::set("ucall_keep_context: called after serving started or after ucall_stop".to_owned()),
        }
    }
}

/// Bound the calls of the procedure `name` (added before or after) to `micro_seconds`,
/// counted from each call's arrival; a caller may ask for less (the HTTP header
/// `UCall-Timeout`, or the request's `"timeout"` member), never more. When a call's
/// callback returns after its deadline, its reply is dropped and the caller gets `-32000`
/// "Deadline exceeded" (HTTP 504) in its place; the callback runs on the thread that
/// serves its connection, so that is when the caller hears. Call it after `ucall_init()`
/// and before the first `ucall_take_call(s)()`; a NULL or non-UTF-8 name, 0 micro-seconds,
/// or a later call are refused (`ucall_last_error()` says why).
///
/// # Safety
/// `server` must be NULL or a live server; `name` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ucall_set_procedure_timeout(server: ucall_server_t, name: ucall_str_t, micro_seconds: u32) {
    ffi_panic_boundary! {"ucall_set_procedure_timeout",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_set_procedure_timeout") }) else { return };
        // SAFETY: NULL or NUL-terminated, by the caller's contract.
        let Some(name) = (unsafe { ffi::c_str_arg(name) }).and_then(|name| name.to_str().ok()) else {
            return error::set("ucall_set_procedure_timeout: the name is NULL or not valid UTF-8".to_owned());
        };
        if micro_seconds == 0 {
            return error::set(format!("ucall_set_procedure_timeout: {name:?}: the time limit is 0"));
        }
        let mut setup = srv.setup();
        match setup.server.as_mut() {
            Some(bound) if !srv.stopper.is_stopping() => {
                bound.router_mut().set_timeout(name, Duration::from_micros(u64::from(micro_seconds)));
            }
            _ => error::set(
                "ucall_set_procedure_timeout: called after serving started or after ucall_stop".to_owned(),
            ),
        }
    }
}

/// Limit each client's calls of the procedure `name` (added before or after) to `rate`:
/// `"10/s"`, `"600/min"` (also `h`, `d`), in bursts of up to the count, besides the
/// server's `config.rate_limit`. A call past it is refused before its callback runs:
/// HTTP 429 with `Retry-After`, or the JSON-RPC error -32029 whose `data` has
/// `retry_after_ms` and `"executed": false` (docs/c-api.md, "Rate limits"). Call it after
/// `ucall_init()` and before the first `ucall_take_call(s)()`; a NULL or non-UTF-8 name, a
/// rate that does not parse, or a later call are refused (`ucall_last_error()` says why).
///
/// # Safety
/// `server` must be NULL or a live server; `name` and `rate` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ucall_set_procedure_rate_limit(server: ucall_server_t, name: ucall_str_t, rate: ucall_str_t) {
    ffi_panic_boundary! {"ucall_set_procedure_rate_limit",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_set_procedure_rate_limit") }) else { return };
        // SAFETY: NULL or NUL-terminated, by the caller's contract.
        let Some(name) = (unsafe { ffi::c_str_arg(name) }).and_then(|name| name.to_str().ok()) else {
            return error::set("ucall_set_procedure_rate_limit: the name is NULL or not valid UTF-8".to_owned());
        };
        // SAFETY: NULL or NUL-terminated, by the caller's contract.
        let rate = (unsafe { ffi::c_str_arg(rate) }).and_then(|rate| rate.to_str().ok()).unwrap_or_default();
        let rate = match rate.parse::<ucall_core::Rate>() {
            Ok(rate) => rate,
            Err(why) => return error::set(format!("ucall_set_procedure_rate_limit: {name:?}: {why}")),
        };
        let mut setup = srv.setup();
        match setup.server.as_mut() {
            Some(bound) if !srv.stopper.is_stopping() => bound.router_mut().set_rate_limit(name, rate),
            _ => error::set(
                "ucall_set_procedure_rate_limit: called after serving started or after ucall_stop".to_owned(),
            ),
        }
    }
}

/// `ucall_add_procedure()` with a description of the procedure, as JSON, for the method
/// `rpc.discover` and the pages `GET /openrpc.json`, `/openapi.json` and `/docs`:
///
/// ```json
/// {"summary": "Add two integers",
///  "params": [{"name": "a", "schema": {"type": "integer"}, "required": true},
///             {"name": "b", "schema": {"type": "integer"}, "required": true}],
///  "result": {"schema": {"type": "integer"}},
///  "errors": [{"code": 1, "message": "overflow"}],
///  "examples": [{"params": {"a": 1, "b": 2}, "result": 3}],
///  "paramStructure": "either"}
/// ```
///
/// Schemas are JSON Schema (draft-07); `"name"` may be left out (it is `name`). A
/// procedure added with `ucall_add_procedure()` is listed by name only. A NULL, non-UTF-8
/// or malformed description (an unknown member, a wrong type) is refused like a bad name:
/// nothing is registered and `ucall_last_error()` says why.
///
/// # Safety
/// As `ucall_add_procedure()`; `description` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ucall_add_procedure_described(
    server: ucall_server_t,
    name: ucall_str_t,
    callback: ucall_callback_t,
    tag: ucall_callback_tag_t,
    description: ucall_str_t,
) {
    ffi_panic_boundary! {"ucall_add_procedure_described",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_add_procedure_described") }) else { return };
        let refuse = |why: String| {
            srv.log.event("procedure refused", &[("reason", &why)]);
            error::set(format!("ucall_add_procedure_described: {why}"));
        };
        // SAFETY: NULL or NUL-terminated, by the caller's contract.
        let text = unsafe { ffi::c_str_arg(description) };
        let Some(Ok(text)) = text.map(std::ffi::CStr::to_str) else {
            return refuse("the description is NULL or not valid UTF-8".into());
        };
        let mut doc = match MethodDoc::from_json(text) {
            Ok(doc) => doc,
            Err(why) => return refuse(why),
        };
        // SAFETY: the caller's contract, checked again by `ucall_add_procedure`.
        let Some(Ok(name_text)) = (unsafe { ffi::c_str_arg(name) }).map(std::ffi::CStr::to_str) else {
            // SAFETY: as above; it records why the name is refused.
            return unsafe { ucall_add_procedure(server, name, callback, tag) };
        };
        if !doc.name.is_empty() && doc.name != name_text {
            return refuse(format!("the description names {:?}, the procedure is {name_text:?}", doc.name));
        }
        doc.name = name_text.to_owned();
        // SAFETY: the caller's contract.
        unsafe { ucall_add_procedure(server, name, callback, tag) };
        if error::is_set() {
            return;
        }
        if let Some(bound) = srv.setup().server.as_mut() {
            bound.router_mut().describe(doc);
        }
    }
}

/// The worker for `thread_idx`, or why not (recorded as the last error).
fn worker_for<'a>(srv: &'a CServer, thread_idx: u16, function: &str) -> Option<&'a Slot> {
    let workers = srv.workers();
    let found = workers.get(usize::from(thread_idx));
    if found.is_none() {
        error::set(format!(
            "{function}: thread_idx {thread_idx} is out of range: the server has {} threads (config.max_threads)",
            workers.len()
        ));
    }
    found
}

/// Lock the worker of `slot` without waiting: another thread already driving the same
/// index (or a callback re-entering) is refused instead of blocked, and so is, with
/// io_uring, a thread other than the index's first.
fn try_drive<'a>(srv: &CServer, slot: &'a Slot, function: &str, thread_idx: u16) -> Option<MutexGuard<'a, Worker>> {
    let guard = match slot.worker.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => {
            error::set(format!(
                "{function}: thread_idx {thread_idx} is already being served by another call"
            ));
            return None;
        }
    };
    // Refused before the worker is touched: it stays whole for its own thread. Its
    // listener stays open too (see `ucall_take_call`).
    if srv.one_thread_per_index && !slot.is_driven_by(std::thread::current().id()) {
        let why = format!(
            "thread_idx {thread_idx} is served from another thread: with the io_uring engine only the \
             thread that first served an index may serve it; serve each index from one and the same thread"
        );
        if !slot.other_thread_logged.swap(true, Ordering::Relaxed) {
            srv.log.event(
                "serving refused",
                &[("thread_idx", &thread_idx.to_string()), ("reason", &why)],
            );
        }
        error::set(format!("{function}: {why}"));
        return None;
    }
    Some(guard)
}

/// Serve the connections of `thread_idx` for one round: wait up to 10 ms for something to
/// happen, answer what is ready, return. Meant for programs with a loop of their own.
///
/// The first `ucall_take_call(s)()` freezes the procedures. A `thread_idx` outside
/// `0 .. max_threads - 1`, or already being served by another call, returns at once
/// (see `ucall_last_error()`). Serve each index from one and the same thread: the io_uring
/// engine's rings accept a single submitter, so with it a call from any thread but the
/// first to serve the index returns at once too, with the reason in `ucall_last_error()`
/// and the log (once per index). The index keeps its listener, since its first thread
/// may still serve it: until it does, the connections the kernel gives that listener
/// wait. The poll engine does not mind, but do not rely on it.
///
/// # Safety
/// `server` must be a live server, not freed while this call runs.
#[no_mangle]
pub unsafe extern "C" fn ucall_take_call(server: ucall_server_t, thread_idx: u16) {
    ffi_panic_boundary! {"ucall_take_call",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_take_call") }) else { return };
        let Some(slot) = worker_for(srv, thread_idx, "ucall_take_call") else { return };
        if let Some(mut worker) = try_drive(srv, slot, "ucall_take_call", thread_idx) {
            worker.turn(Some(TAKE_CALL_WAIT));
        }
    }
}

/// Serve the connections of `thread_idx` until the server is stopped (`ucall_stop()`,
/// from any thread or a signal handler) and this thread's connections have drained.
///
/// Run one thread per index `0 .. max_threads - 1`, each calling
/// `ucall_take_calls(server, i)`: the kernel spreads new connections over all of them.
/// Each index must be served from one and the same thread (see `ucall_take_call()`).
/// The first `ucall_take_call(s)()` freezes the procedures. An index out of range, or
/// already being served, returns at once (see `ucall_last_error()`).
///
/// # Safety
/// `server` must be a live server; `ucall_free()` waits for this call to return.
#[no_mangle]
pub unsafe extern "C" fn ucall_take_calls(server: ucall_server_t, thread_idx: u16) {
    ffi_panic_boundary! {"ucall_take_calls",
        error::clear();
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_take_calls") }) else { return };
        let Some(slot) = worker_for(srv, thread_idx, "ucall_take_calls") else { return };
        if let Some(mut worker) = try_drive(srv, slot, "ucall_take_calls", thread_idx) {
            while worker.turn(None) {}
        }
        // Nothing of `srv` is touched after the guard is released: `ucall_free()` may be
        // waiting for exactly that.
    }
}

/// Ask the server to stop: it stops accepting, finishes the calls in flight (up to
/// `shutdown_timeout_micro_seconds`), closes its connections, and every
/// `ucall_take_calls()` returns. Returns at once.
///
/// Safe to call from any thread and from a signal handler (it only stores a flag and
/// writes to an eventfd or pipe); calling it again does nothing more.
///
/// # Safety
/// `server` must be NULL or a live server.
#[no_mangle]
pub unsafe extern "C" fn ucall_stop(server: ucall_server_t) {
    ffi_panic_boundary! {"ucall_stop",
        // No error text here: recording one may allocate, which a signal handler must not.
        // SAFETY: the caller's contract.
        if let Some(srv) = unsafe { ffi::handle_ref::<CServer>(server) } {
            srv.stopper.stop();
        }
    }
}

/// Mark the server as draining (`true`) or serving again (`false`): while draining it
/// serves as before, but `GET /readyz` answers 503 (or 404, `readyz_not_found`)
/// `{"status":"draining"}`, and so does `rpc.health`, so that load balancers stop sending
/// it new calls before `ucall_stop()` (docs/deploy.md, "Drain").
///
/// Safe to call from any thread and from a signal handler (it only stores a flag). NULL
/// does nothing.
///
/// # Safety
/// `server` must be NULL or a live server.
#[no_mangle]
pub unsafe extern "C" fn ucall_set_draining(server: ucall_server_t, draining: bool) {
    ffi_panic_boundary! {"ucall_set_draining",
        // No error text, as in `ucall_stop()`: a signal handler may call this.
        // SAFETY: the caller's contract.
        if let Some(srv) = unsafe { ffi::handle_ref::<CServer>(server) } {
            srv.stopper.readiness().set_draining(draining);
        }
    }
}

/// Stop the server if it runs, wait until every `ucall_take_call(s)()` on it has
/// returned, close its sockets and release it. NULL does nothing.
///
/// Called from inside a callback it cannot wait for its own thread: it stops the server
/// and returns without releasing it (see `ucall_last_error()`); call it again once
/// `ucall_take_calls()` has returned.
///
/// # Safety
/// `server` must be NULL or a live server; no call on it may start once this one has, and
/// the handle is invalid after it returns.
#[no_mangle]
pub unsafe extern "C" fn ucall_free(server: ucall_server_t) {
    ffi_panic_boundary! {"ucall_free",
        error::clear();
        if server.is_null() {
            return;
        }
        // SAFETY: the caller's contract.
        let Some(srv) = (unsafe { self::server(server, "ucall_free") }) else { return };
        srv.stopper.stop();
        if InCallback::active() {
            error::set("ucall_free: called from inside a callback; the server is stopping, free it after \
                        ucall_take_calls() returns");
            return;
        }
        if let Some(workers) = srv.workers.get() {
            for slot in workers.iter() {
                // Waits for the thread serving this index, if any, to leave.
                drop(slot.worker.lock().unwrap_or_else(PoisonError::into_inner));
            }
        }
        srv.log.event("freed", &[]);
        let raw = server.cast::<CServer>();
        // SAFETY: `raw` came from `Box::into_raw` in `ucall_init` (the tag says it is a
        // live server) and, by the caller's contract, nothing else uses it any more; the
        // tag is cleared first so that a stale handle is refused rather than reused.
        unsafe {
            (*raw).tag = Tag::DEAD;
            drop(Box::from_raw(raw));
        }
    }
}
