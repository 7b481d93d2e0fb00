// SPDX-License-Identifier: Apache-2.0
//! Turning C pointers into Rust references: the only place that does.
//!
//! Invariants the rest of the crate relies on:
//! - a server handle (`ucall_server_t`) is a pointer to a `#[repr(C)]` struct whose first
//!   field is a [`Tag`]; [`handle_ref`] checks NULL and the tag before handing out a
//!   reference, so a NULL, a freed-and-cleared or a mixed-up handle is refused (a call
//!   handle is a number, checked against the running callback's: `call::context`);
//! - a string argument is `(pointer, length)` where length 0 means NUL-terminated, as the
//!   published API defines; [`text_arg`] reads exactly that and nothing beyond;
//! - out-parameters are written only when non-NULL and only on success ([`write_out`]).
//!
//! The caller's side of each contract is in the `# Safety` section of the exported
//! function that takes the pointer.

use std::ffi::{c_char, c_void, CStr};

use ucall_core::Dtype;

/// The caller's payload given to `ucall_add_procedure()` and passed back to the callback.
#[allow(non_camel_case_types)]
pub type ucall_callback_tag_t = *mut c_void;

/// A string argument: `char const *`, with a length parameter beside it where the API
/// has one (length 0 meaning NUL-terminated).
#[allow(non_camel_case_types)]
pub type ucall_str_t = *const c_char;

/// The first field of every handle struct: says which kind of handle a pointer is.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tag(u64);

impl Tag {
    /// Tag of a live server (`ucall_server_t`).
    pub const SERVER: Tag = Tag(0x5543_414c_4c53_5256); // "UCALLSRV"
    /// Tag of a live client (`ucall_client_t`).
    pub const CLIENT: Tag = Tag(0x5543_414c_4c43_4c49); // "UCALLCLI"
    /// Written over a tag when its handle dies, so stale handles are refused.
    pub const DEAD: Tag = Tag(0);
}

/// A struct usable as a handle: `#[repr(C)]` with a [`Tag`] first.
///
/// # Safety
/// Implementors must be `#[repr(C)]` with a `Tag` as their first field, so that reading a
/// `Tag` at the start of any handle is valid whatever kind of handle it really is.
pub unsafe trait Handle {
    /// The tag live handles of this type carry.
    const TAG: Tag;
}

/// The handle behind `ptr`, when `ptr` is non-NULL and carries `T`'s tag.
///
/// # Safety
/// `ptr` must be NULL or point to readable memory holding a live handle of one of this
/// crate's handle types (the C API's contract: a value it returned, not yet freed).
unsafe fn tagged<T: Handle>(ptr: *mut std::ffi::c_void) -> Option<*mut T> {
    // A call handle (an odd number, `call::context`) passed for a server is refused here,
    // unread: no handle struct starts at an address a `Tag` cannot be aligned to.
    if ptr.is_null() || !ptr.cast::<Tag>().is_aligned() {
        return None;
    }
    // SAFETY: non-NULL, and by the caller's contract points to a handle struct, every one
    // of which starts with a `Tag` (`Handle` contract); reading it is valid whatever the
    // handle's real type is.
    let tag = unsafe { ptr.cast::<Tag>().read() };
    (tag == T::TAG).then_some(ptr.cast::<T>())
}

/// A shared reference to the handle behind `ptr` (servers: used from many threads).
///
/// # Safety
/// As for [`tagged`]; and no exclusive reference to it may exist for `'a`.
pub(crate) unsafe fn handle_ref<'a, T: Handle>(ptr: *mut std::ffi::c_void) -> Option<&'a T> {
    // SAFETY: the caller's contract; the tag says it is a live `T`.
    unsafe { tagged::<T>(ptr).map(|p| &*p) }
}

/// A string argument: `length` bytes at `ptr`, or up to the NUL when `length` is 0.
///
/// # Safety
/// `ptr` must be NULL, or point to `length` readable bytes, or (when `length` is 0) to a
/// NUL-terminated string; the bytes must stay unchanged for `'a`.
pub(crate) unsafe fn text_arg<'a>(ptr: *const c_char, length: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        return None;
    }
    if length == 0 {
        // SAFETY: non-NULL and, by the caller's contract, NUL-terminated.
        return Some(unsafe { CStr::from_ptr(ptr) }.to_bytes());
    }
    // SAFETY: non-NULL and, by the caller's contract, `length` readable bytes.
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), length) })
}

/// A NUL-terminated string argument, or `None` for NULL.
///
/// # Safety
/// `ptr` must be NULL or point to a NUL-terminated string that stays unchanged for `'a`.
pub(crate) unsafe fn c_str_arg<'a>(ptr: *const c_char) -> Option<&'a CStr> {
    // SAFETY: the caller's contract.
    (!ptr.is_null()).then(|| unsafe { CStr::from_ptr(ptr) })
}

/// An array argument of `count` elements, or `None` for NULL (an empty slice when
/// `count` is 0).
///
/// # Safety
/// `ptr` must be NULL or point to `count` readable, initialised elements that stay
/// unchanged for `'a`.
pub(crate) unsafe fn array_arg<'a, T>(ptr: *const T, count: usize) -> Option<&'a [T]> {
    if ptr.is_null() {
        return None;
    }
    if count == 0 {
        return Some(&[]);
    }
    // SAFETY: non-NULL and, by the caller's contract, `count` readable elements.
    Some(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// Write `value` to the out-parameter `out`; `false` (nothing written) when it is NULL.
///
/// # Safety
/// `out` must be NULL or valid for writing one `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: non-NULL and, by the caller's contract, writable; `write` does not read or
    // drop the old (possibly uninitialised) value.
    unsafe { out.write(value) };
    true
}

/// A mutable byte buffer argument of `capacity` bytes; an empty slice when `capacity` is 0.
///
/// # Safety
/// `ptr` must be NULL or point to `capacity` writable bytes not otherwise in use for `'a`.
pub(crate) unsafe fn buffer_arg<'a>(ptr: *mut u8, capacity: usize) -> Option<&'a mut [u8]> {
    if capacity == 0 {
        return Some(&mut []);
    }
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-NULL and, by the caller's contract, `capacity` writable bytes.
    Some(unsafe { std::slice::from_raw_parts_mut(ptr, capacity) })
}

/// The NUL-terminated name of `dtype` (as `Dtype::name`), for the C API to hand out.
pub(crate) fn dtype_name(dtype: Dtype) -> &'static CStr {
    match dtype {
        Dtype::Bool => c"bool",
        Dtype::Int8 => c"int8",
        Dtype::Uint8 => c"uint8",
        Dtype::Int16 => c"int16",
        Dtype::Uint16 => c"uint16",
        Dtype::Int32 => c"int32",
        Dtype::Uint32 => c"uint32",
        Dtype::Int64 => c"int64",
        Dtype::Uint64 => c"uint64",
        Dtype::Float16 => c"float16",
        Dtype::Float32 => c"float32",
        Dtype::Float64 => c"float64",
        Dtype::Complex64 => c"complex64",
        Dtype::Complex128 => c"complex128",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_name_is_the_core_name() {
        for dtype in Dtype::ALL {
            assert_eq!(dtype_name(dtype).to_str(), Ok(dtype.name()));
        }
    }
}
