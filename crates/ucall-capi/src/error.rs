// SPDX-License-Identifier: Apache-2.0
//! Why a call failed, as text: a per-thread "last error", like `errno` with a message.
//!
//! `ucall_init`, `ucall_add_procedure`, `ucall_take_call(s)` and `ucall_free` clear it on
//! entry and set it when they fail, so that after one of them an empty text means it
//! succeeded (most return `void`). A caught internal panic sets it too. `ucall_stop` leaves
//! it alone: it must be async-signal-safe, and the thread-local may allocate on first use.
//! The parameter getters and replies report through their result only: they are on the
//! hot path and absence is an ordinary outcome.

use std::cell::RefCell;
use std::ffi::c_char;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Record `message` as this thread's last error.
#[cold]
#[inline(never)]
pub(crate) fn set(message: impl Into<String>) {
    let message = message.into();
    LAST_ERROR.with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

/// Whether this thread has a last error (the function just called failed).
pub(crate) fn is_set() -> bool {
    LAST_ERROR.with(|slot| slot.try_borrow().is_ok_and(|message| !message.is_empty()))
}

/// Forget this thread's last error.
pub(crate) fn clear() {
    LAST_ERROR.with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            slot.clear();
        }
    });
}

/// Copy the text of this thread's last error into `buffer`, `snprintf`-style.
///
/// `ucall_init()`, `ucall_add_procedure()`, `ucall_take_call(s)()` and `ucall_free()`
/// clear it when they succeed and set it when they fail; the getters, the replies and
/// `ucall_stop()` leave it as it was (an internal error caught in any function sets it).
///
/// Returns the full length of the message in bytes (without the terminating NUL), or 0
/// when there is none. At most `buffer_capacity - 1` bytes are copied, always followed by a
/// NUL when `buffer_capacity > 0`; a return value `>= buffer_capacity` means the text was cut.
/// `buffer` may be NULL when `buffer_capacity` is 0, to learn the length.
///
/// The text is for people (logs, error dialogs) and may change between versions.
///
/// # Safety
/// `buffer` must be NULL or point to `buffer_capacity` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ucall_last_error(buffer: *mut c_char, buffer_capacity: usize) -> usize {
    ffi_panic_boundary! {"ucall_last_error",
        LAST_ERROR.with(|slot| {
            let Ok(message) = slot.try_borrow() else { return 0 };
            if !buffer.is_null() && buffer_capacity > 0 {
                let copied = message.len().min(buffer_capacity - 1);
                // SAFETY: the caller provides `buffer_capacity` writable bytes at `buffer`
                // (checked non-NULL above); `copied + 1 <= buffer_capacity`, and the source
                // is our own string, which cannot overlap the caller's buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(message.as_ptr(), buffer.cast::<u8>(), copied);
                    *buffer.add(copied) = 0;
                }
            }
            message.len()
        })
    }
}
