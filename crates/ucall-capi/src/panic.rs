// SPDX-License-Identifier: Apache-2.0
//! The panic boundary every exported function body goes through.
//!
//! Since Rust 1.81 an unwind that reaches an `extern "C"` function aborts the process. A
//! library must not kill its host for a bug of its own, so each body runs under
//! [`std::panic::catch_unwind`]; a caught panic is recorded as the thread's last error
//! (see `ucall_last_error`) and the function returns its [`PanicDefault`]: `false`, `0`,
//! a NULL pointer or nothing, which every function documents as its failure value.

use std::any::Any;

/// The value an exported function returns when its body panicked.
pub trait PanicDefault {
    /// The failure value of this return type.
    fn panic_default() -> Self;
}

impl PanicDefault for () {
    fn panic_default() -> Self {}
}

impl PanicDefault for bool {
    fn panic_default() -> Self {
        false
    }
}

impl PanicDefault for usize {
    fn panic_default() -> Self {
        0
    }
}

impl<T> PanicDefault for *const T {
    fn panic_default() -> Self {
        std::ptr::null()
    }
}

/// Record a caught panic and produce the failure value.
#[cold]
#[inline(never)]
#[doc(hidden)]
pub fn caught<T: PanicDefault>(function: &str, payload: &(dyn Any + Send)) -> T {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic");
    crate::error::set(format!(
        "{function}: internal error in libucall ({what}); please report it"
    ));
    T::panic_default()
}

/// Run the body of the exported function `$name`; a panic becomes its [`PanicDefault`].
///
/// `return` inside the body returns from the body, as in the function itself.
#[macro_export]
macro_rules! ffi_panic_boundary {
    ($name:expr, $($body:tt)*) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(move || { $($body)* })) {
            Ok(value) => value,
            Err(payload) => $crate::panic::caught($name, &*payload),
        }
    };
}
