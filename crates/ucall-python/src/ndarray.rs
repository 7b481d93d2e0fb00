// SPDX-License-Identifier: Apache-2.0
//! numpy arrays through numpy's C API: made over memory held here (an attachment where it
//! lies, a decoded `.npy` param) and read for writing (a result's dtype, shape and
//! memory), without the array interface's dictionaries and attribute lookups, which cost
//! more per call than the base64 of a 16 KB array.
//!
//! numpy's API is loaded on first use, which imports numpy: it is used only for a value
//! of a numpy type (a param annotated so, or an object whose type is numpy's `ndarray`),
//! so that a server without arrays never imports numpy.

use std::sync::atomic::{AtomicBool, Ordering};

use numpy::npyffi::{
    get_type_object, npy_intp, NpyTypes, PyArray_CheckExact, NPY_ARRAY_WRITEABLE, NPY_TYPES, PY_ARRAY_API,
};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use smallvec::SmallVec;

use ucall_core::Dtype;

/// Whether numpy's API has been loaded: numpy is imported, and its type checks are cheap.
static LOADED: AtomicBool = AtomicBool::new(false);

/// numpy's type number of `dtype`'s elements (native byte order: little-endian here).
fn type_number(dtype: Dtype) -> NPY_TYPES {
    match dtype {
        Dtype::Bool => NPY_TYPES::NPY_BOOL,
        Dtype::Int8 => NPY_TYPES::NPY_BYTE,
        Dtype::Uint8 => NPY_TYPES::NPY_UBYTE,
        Dtype::Int16 => NPY_TYPES::NPY_SHORT,
        Dtype::Uint16 => NPY_TYPES::NPY_USHORT,
        Dtype::Int32 => NPY_TYPES::NPY_INT,
        Dtype::Uint32 => NPY_TYPES::NPY_UINT,
        // numpy's `int64` is a C `long` where that has 64 bits, else a `long long`.
        Dtype::Int64 if std::mem::size_of::<std::ffi::c_long>() == 8 => NPY_TYPES::NPY_LONG,
        Dtype::Int64 => NPY_TYPES::NPY_LONGLONG,
        Dtype::Uint64 if std::mem::size_of::<std::ffi::c_long>() == 8 => NPY_TYPES::NPY_ULONG,
        Dtype::Uint64 => NPY_TYPES::NPY_ULONGLONG,
        Dtype::Float16 => NPY_TYPES::NPY_HALF,
        Dtype::Float32 => NPY_TYPES::NPY_FLOAT,
        Dtype::Float64 => NPY_TYPES::NPY_DOUBLE,
        Dtype::Complex64 => NPY_TYPES::NPY_CFLOAT,
        Dtype::Complex128 => NPY_TYPES::NPY_CDOUBLE,
    }
}

/// numpy's dimensions of `shape`: on the stack for arrays of up to eight dimensions (a
/// `Vec` here was a `malloc` and a `free` per array param).
fn dims(shape: &[usize]) -> PyResult<(SmallVec<[npy_intp; 8]>, std::ffi::c_int)> {
    let dims = shape
        .iter()
        .map(|&d| npy_intp::try_from(d))
        .collect::<Result<SmallVec<_>, _>>()
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("an array dimension beyond numpy's"))?;
    let nd = std::ffi::c_int::try_from(dims.len())
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("an array of too many dimensions"))?;
    Ok((dims, nd))
}

/// A new C-contiguous `numpy.ndarray` of `dtype` and `shape` by numpy's
/// `PyArray_NewFromDescr`, over `data` when given (else over memory numpy allocates and
/// the array owns, left uninitialised), with `flags`.
///
/// # Safety
/// The GIL is held and numpy's API is loaded; `data`, when not null, holds the array's
/// bytes for as long as the array lives (the caller makes sure of that).
unsafe fn new_array<'py>(
    py: Python<'py>,
    dtype: Dtype,
    shape: &[usize],
    data: *mut u8,
    flags: std::ffi::c_int,
) -> PyResult<Bound<'py, PyAny>> {
    let (mut dims, nd) = dims(shape)?;
    // SAFETY: as the caller promised.
    unsafe {
        // The descriptor (a new reference) is stolen by `PyArray_NewFromDescr`, which reads
        // `nd` dimensions and computes C strides itself.
        let descr = PY_ARRAY_API.PyArray_DescrFromType(py, type_number(dtype) as std::ffi::c_int);
        if descr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let subtype = get_type_object(py, NpyTypes::PyArray_Type);
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr,
            nd,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data.cast(),
            flags,
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, array)
    }
}

/// A C-contiguous `numpy.ndarray` of `dtype` and `shape` over the memory at `data`, which
/// `owner` keeps alive and unchanged (the array's base, held for as long as the array or
/// any view of it lives); read-only unless `writable`. Made by numpy's C API: the array
/// interface path (`numpy.asarray` of an object with `__array_interface__`) cost some
/// 9,500 instructions a call, more than decoding a 16 KB param.
///
/// Call only for a param of a numpy type (numpy is imported): numpy's API is loaded on
/// first use.
pub fn view<'py>(
    owner: Bound<'py, PyAny>,
    data: *const u8,
    dtype: Dtype,
    shape: &[usize],
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    LOADED.store(true, Ordering::Relaxed);
    let flags = if writable { NPY_ARRAY_WRITEABLE } else { 0 };
    // SAFETY: numpy's API with the GIL held; `data` holds the array's bytes for as long as
    // `owner` lives, and the owner reference is stolen by `PyArray_SetBaseObject` (on its
    // failure the array, not yet shared, is dropped and the owner with it).
    unsafe {
        let array = new_array(py, dtype, shape, data.cast_mut(), flags)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr().cast(), owner.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

/// A new writable C-contiguous `numpy.ndarray` of `dtype` and `shape` that owns its
/// memory (allocated by numpy, not initialised), and that memory's start, for the caller
/// to fill before anyone else sees the array: a decoded `.npy` param is written straight
/// into it.
///
/// Call only for a param of a numpy type (numpy is imported).
pub fn uninit<'py>(py: Python<'py>, dtype: Dtype, shape: &[usize]) -> PyResult<(Bound<'py, PyAny>, *mut u8)> {
    LOADED.store(true, Ordering::Relaxed);
    // SAFETY: numpy's API with the GIL held; a null `data` has numpy allocate the memory,
    // which the array owns (`flags` 0: C order).
    unsafe {
        let array = new_array(py, dtype, shape, std::ptr::null_mut(), 0)?;
        let data = (*array.as_ptr().cast::<numpy::npyffi::PyArrayObject>()).fields.data;
        Ok((array, data.cast()))
    }
}

/// `obj` as a `numpy.ndarray` itself (not a subclass, such as a masked array); `None` for
/// any other object. Until numpy's API is in use, the type's name and module say first
/// whether it could be one.
pub fn exact<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, PyUntypedArray>> {
    if !LOADED.load(Ordering::Relaxed) {
        let kind = obj.get_type();
        let named = kind.name().is_ok_and(|name| name == "ndarray");
        if !named || !kind.module().is_ok_and(|module| module == "numpy") {
            return None;
        }
        LOADED.store(true, Ordering::Relaxed);
    }
    // SAFETY: numpy's exact type check with the GIL held; numpy is imported (LOADED).
    let exact = unsafe { PyArray_CheckExact(obj.py(), obj.as_ptr()) } != 0;
    // SAFETY: checked to be an `ndarray` just above.
    exact.then(|| unsafe { obj.cast_unchecked::<PyUntypedArray>() })
}

/// What the wire needs of a C-contiguous `array` whose elements are a dtype docs/wire.md
/// lists in the machine's byte order, besides its shape (`array.shape()`): that dtype and
/// its memory (valid while the array is borrowed: numpy refuses to resize a referenced
/// array). `None` for any other array.
pub fn wire_layout<'a>(array: &'a Bound<'_, PyUntypedArray>) -> Option<(Dtype, &'a [u8])> {
    if cfg!(target_endian = "big") || !array.is_c_contiguous() {
        return None; // the wire is little-endian: a native array on a big-endian host is not
    }
    let descr = array.dtype();
    if descr.is_native_byteorder() == Some(false) {
        return None;
    }
    let dtype = Dtype::from_kind_and_size(descr.kind(), descr.itemsize())?;
    let len = array.shape().iter().product::<usize>() * dtype.size();
    // SAFETY: the array's own object, read with the GIL held: a C-contiguous array's `len`
    // bytes from its data pointer, unchanged while `array` (a reference to it) is borrowed.
    let data = unsafe { std::slice::from_raw_parts((*array.as_array_ptr()).fields.data.cast_const().cast(), len) };
    Some((dtype, data))
}
