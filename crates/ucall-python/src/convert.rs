// SPDX-License-Identifier: Apache-2.0
//! JSON text ↔ Python objects, without an intermediate tree.
//!
//! Request params arrive as JSON text the core has already validated; [`to_python`] walks
//! it with the core's params layer ([`Param`]) and builds Python objects directly. Integers of any size
//! stay exact. [`write_json`] serializes a handler's result straight into the reply
//! buffer; objects it does not know (dataclasses, numpy arrays, images...) go through a
//! Python `encode` hook that turns them into plain JSON values first.

use std::cell::RefCell;

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use smallvec::SmallVec;

use ucall_client::base64;
use ucall_core::jsonrpc::section::Section;
use ucall_core::{Bytes, Dtype, Param};

use crate::ndarray;

/// Deepest nesting accepted in either direction (a guard against stack exhaustion and
/// self-referencing results).
pub const MAX_DEPTH: usize = 256;

/// The Python value of a JSON text that has not been checked yet (UTF-8, then the core's
/// JSON validation, then [`to_python`]): the one reading rule of `loads` and the clients.
///
/// # Errors
/// `ValueError` saying what the text is not.
pub fn from_json<'py>(py: Python<'py>, text: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let text = ucall_core::jsonrpc::as_text(text).ok_or_else(|| PyValueError::new_err("not UTF-8"))?;
    if !ucall_core::jsonrpc::message::is_json(text) {
        return Err(invalid());
    }
    to_python(py, text)
}

/// Build the Python value of one validated JSON text.
///
/// # Errors
/// `ValueError` on text that is not JSON or nests deeper than [`MAX_DEPTH`].
pub fn to_python<'py>(py: Python<'py>, raw: &str) -> PyResult<Bound<'py, PyAny>> {
    value(py, raw.trim(), 0)
}

fn value<'py>(py: Python<'py>, raw: &str, depth: usize) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err("nested too deeply"));
    }
    match raw.as_bytes().first() {
        Some(b'"') => Ok(string(py, raw)?.into_any()),
        Some(b'{') => {
            let dict = PyDict::new(py);
            for (key, item) in Param::new(raw).members() {
                dict.set_item(string(py, key.raw())?, value(py, item.raw(), depth + 1)?)?;
            }
            Ok(dict.into_any())
        }
        Some(b'[') => {
            let list = PyList::empty(py);
            for item in Param::new(raw).elements() {
                list.append(value(py, item.raw(), depth + 1)?)?;
            }
            Ok(list.into_any())
        }
        Some(b't') if raw == "true" => Ok(PyBool::new(py, true).to_owned().into_any()),
        Some(b'f') if raw == "false" => Ok(PyBool::new(py, false).to_owned().into_any()),
        Some(b'n') if raw == "null" => Ok(py.None().into_bound(py)),
        Some(b'-' | b'0'..=b'9') => number(py, raw),
        _ => Err(invalid()),
    }
}

#[cold]
#[inline(never)]
fn invalid() -> PyErr {
    PyValueError::new_err("invalid JSON")
}

fn number<'py>(py: Python<'py>, raw: &str) -> PyResult<Bound<'py, PyAny>> {
    if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        let float: f64 = raw.parse().map_err(|_| invalid())?;
        return Ok(PyFloat::new(py, float).into_any());
    }
    match Param::new(raw).as_i64() {
        Some(int) => Ok(int.into_pyobject(py)?.into_any()),
        // Beyond 64 bits: Python's own parser keeps every digit.
        None => big_int(py, raw),
    }
}

#[cold]
#[inline(never)]
fn big_int<'py>(py: Python<'py>, raw: &str) -> PyResult<Bound<'py, PyAny>> {
    if !raw.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    py.get_type::<PyInt>().call1((raw,))
}

/// The Python string of a raw JSON string (with its quotes).
pub fn string<'py>(py: Python<'py>, raw: &str) -> PyResult<Bound<'py, PyString>> {
    let text = Param::new(raw).as_str().ok_or_else(invalid)?;
    Ok(PyString::new(py, &text))
}

/// Why a value cannot be written as JSON.
pub struct Unserializable(pub String);

/// Serialize `obj` as one compact JSON text appended to `out`.
///
/// `encode` is called with an object of any other type and returns a plain JSON value
/// (or raises `TypeError`). On error `out` may hold a partial text: the caller truncates.
///
/// # Errors
/// When `obj` holds a value that has no JSON form (NaN, a set, a cycle...).
pub fn write_json(
    obj: &Bound<'_, PyAny>,
    encode: Option<&Bound<'_, PyAny>>,
    out: &mut Vec<u8>,
) -> Result<(), Unserializable> {
    write_value(obj, encode, None, out, 0)
}

/// [`write_json`] for a caller that accepts binary replies (docs/wire.md) when `section`
/// is given: bytes, bytearray, memoryview, numpy arrays and PIL images become placeholders
/// naming attachments in it (a `bytes` object's and an array's sent from their own
/// memory), rather than base64.
///
/// # Errors
/// As [`write_json`].
pub fn write_json_attached(
    obj: &Bound<'_, PyAny>,
    encode: Option<&Bound<'_, PyAny>>,
    section: Option<&mut Section>,
    out: &mut Vec<u8>,
) -> Result<(), Unserializable> {
    write_value(obj, encode, section, out, 0)
}

fn write_value(
    obj: &Bound<'_, PyAny>,
    encode: Option<&Bound<'_, PyAny>>,
    mut section: Option<&mut Section>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Unserializable> {
    if depth > MAX_DEPTH {
        return Err(Unserializable("nested too deeply (or a cycle)".into()));
    }
    if obj.is_none() {
        out.extend_from_slice(b"null");
    } else if let Ok(b) = obj.cast_exact::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
    } else if let Ok(int) = obj.cast_exact::<PyInt>() {
        write_int(int, out)?;
    } else if let Ok(s) = obj.cast_exact::<PyString>() {
        write_str(s, out)?;
    } else if let Ok(f) = obj.cast_exact::<PyFloat>() {
        write_float(f.value(), out)?;
    } else if let Ok(list) = obj.cast_exact::<PyList>() {
        out.push(b'[');
        for (i, item) in list.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_value(&item, encode, section.as_deref_mut(), out, depth + 1)?;
        }
        out.push(b']');
    } else if let Ok(dict) = obj.cast_exact::<PyDict>() {
        write_dict(dict, encode, section, out, depth)?;
    } else if let Ok(tuple) = obj.cast_exact::<PyTuple>() {
        out.push(b'[');
        for (i, item) in tuple.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_value(&item, encode, section.as_deref_mut(), out, depth + 1)?;
        }
        out.push(b']');
    } else if let Ok(bytes) = obj.cast::<PyBytes>() {
        match section {
            Some(section) => attach(out, section, shared_bytes(bytes), None),
            None => write_base64(bytes.as_bytes(), out),
        }
    } else if let Ok(array) = obj.cast::<PyByteArray>() {
        match section {
            // Mutable: copied, so that a later change cannot reach the reply.
            Some(section) => attach(out, section, array.to_vec().into(), None),
            None => write_base64(&array.to_vec(), out),
        }
    } else {
        write_other(obj, encode, section, out, depth)?;
    }
    Ok(())
}

fn write_int(int: &Bound<'_, PyInt>, out: &mut Vec<u8>) -> Result<(), Unserializable> {
    if let Ok(small) = int.extract::<i64>() {
        out.extend_from_slice(itoa::Buffer::new().format(small).as_bytes());
        return Ok(());
    }
    big_int_text(int.as_any(), out)
}

#[cold]
#[inline(never)]
fn big_int_text(int: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<(), Unserializable> {
    // Python's own decimal text: exact at any size. `int.__repr__` ignores subclasses' `__str__`.
    let text = int
        .py()
        .get_type::<PyInt>()
        .getattr("__repr__")
        .and_then(|repr| repr.call1((int,)))
        .map_err(|e| Unserializable(e.to_string()))?;
    let text: String = text.extract().map_err(|e: PyErr| Unserializable(e.to_string()))?;
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

fn write_float(value: f64, out: &mut Vec<u8>) -> Result<(), Unserializable> {
    if !value.is_finite() {
        return Err(Unserializable(format!("{value} has no JSON form")));
    }
    out.extend_from_slice(ryu::Buffer::new().format_finite(value).as_bytes());
    Ok(())
}

fn write_str(s: &Bound<'_, PyString>, out: &mut Vec<u8>) -> Result<(), Unserializable> {
    let text = s.to_cow().map_err(|e| Unserializable(e.to_string()))?;
    // A large string (an echoed base64 payload) goes into a buffer kept from an earlier
    // reply. Grown by doubling instead, each such reply allocated some 8 MB afresh, which
    // the allocator kept around for the thread that ran the call.
    ucall_core::buffer::reserve(out, text.len() + 2);
    serde_json::to_writer(&mut *out, text.as_ref()).map_err(|e| Unserializable(e.to_string()))
}

fn write_base64(bytes: &[u8], out: &mut Vec<u8>) {
    // A large result goes into a buffer kept from an earlier reply, not fresh pages.
    ucall_core::buffer::reserve(out, base64::encoded_len(bytes.len()) + 2);
    base64::write_base64(bytes, out);
}

fn write_dict(
    dict: &Bound<'_, PyDict>,
    encode: Option<&Bound<'_, PyAny>>,
    mut section: Option<&mut Section>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Unserializable> {
    out.push(b'{');
    for (i, (key, item)) in dict.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if let Ok(s) = key.cast::<PyString>() {
            write_str(s, out)?;
        } else if key.cast::<PyInt>().is_ok() && key.cast::<PyBool>().is_err() {
            // As Python's json module does: integer keys become their decimal text.
            out.push(b'"');
            write_int(key.cast::<PyInt>().map_err(|e| Unserializable(e.to_string()))?, out)?;
            out.push(b'"');
        } else {
            let kind = key.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string());
            return Err(Unserializable(format!(
                "a dict key of type {kind} (keys must be str or int)"
            )));
        }
        out.push(b':');
        write_value(&item, encode, section.as_deref_mut(), out, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

#[cold]
#[inline(never)]
fn write_other(
    obj: &Bound<'_, PyAny>,
    encode: Option<&Bound<'_, PyAny>>,
    mut section: Option<&mut Section>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Unserializable> {
    if let Some(section) = section.as_deref_mut() {
        if attach_binary(obj, section, out)? {
            return Ok(());
        }
    } else if encode.is_some() {
        // The plain form of a C-contiguous array of a wire dtype (`ucall._codec.encode`
        // writes any other array).
        if ndarray::exact(obj).is_some_and(|array| write_npy_base64(array, out)) {
            return Ok(());
        }
    }
    // Subclasses of the basic types (IntEnum, str subclasses, OrderedDict...) first.
    if let Ok(b) = obj.cast::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
        return Ok(());
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        return write_int(int, out);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return write_str(s, out);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return write_float(f.value(), out);
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        return write_dict(dict, encode, section, out, depth);
    }
    if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
        out.push(b'[');
        let iter = obj.try_iter().map_err(|e| Unserializable(e.to_string()))?;
        for (i, item) in iter.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let item = item.map_err(|e| Unserializable(e.to_string()))?;
            write_value(&item, encode, section.as_deref_mut(), out, depth + 1)?;
        }
        out.push(b']');
        return Ok(());
    }
    if let Ok(npy) = obj.cast::<NpyBytes>() {
        return npy.get().write_base64(obj.py(), out);
    }
    let kind = obj.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string());
    let Some(encode) = encode else {
        return Err(Unserializable(format!("an object of type {kind}")));
    };
    let plain = encode
        .call1((obj,))
        .map_err(|e| Unserializable(e.value(obj.py()).to_string()))?;
    if plain.is(obj) {
        return Err(Unserializable(format!("an object of type {kind}")));
    }
    write_value(&plain, Some(encode), section, out, depth + 1)
}

/// Write `bytes` (of an array, `array`'s dtype and shape) as a placeholder naming them.
fn attach(out: &mut Vec<u8>, section: &mut Section, bytes: Bytes, array: Option<(Dtype, &[usize])>) {
    match array {
        None => ucall_core::jsonrpc::section::write_bytes(out, 0, Some(section), bytes),
        Some((dtype, shape)) => {
            // The length was checked against the shape where the array was read.
            let _ = ucall_core::jsonrpc::section::write_array(out, 0, Some(section), dtype, shape, bytes);
        }
    }
}

/// A Python object's memory, kept alive by a reference to it, as [`Bytes`] that other
/// threads read (the engine's vectored write) without the GIL.
struct Referenced {
    _owner: Py<PyAny>,
    data: *const u8,
    len: usize,
}

// SAFETY: the memory is a `bytes` object's (immutable) or a numpy array's (which numpy
// neither frees nor moves while the array is referenced, as `_owner` does); it is only
// read. The reference itself is released through pyo3's pool when dropped without the GIL.
unsafe impl Send for Referenced {}
// SAFETY: as for `Send`: shared reads of memory that does not change or move.
unsafe impl Sync for Referenced {}

impl AsRef<[u8]> for Referenced {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `data` points at `len` bytes kept alive by `_owner` (see above).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

/// An attachment's memory without a copy, kept alive by a reference to its owner: a
/// `bytes` object, or a C-contiguous numpy array (its `__array_interface__`: the
/// module is built on the limited API, which has no buffer protocol). Anything else is
/// copied once into a `bytes` (`tobytes()`).
///
/// # Errors
/// An object that is neither and has no `tobytes()`.
pub fn attachment_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(shared_bytes(bytes));
    }
    if let Ok(interface) = obj.getattr("__array_interface__") {
        if interface.get_item("strides")?.is_none() {
            let (address, _read_only): (usize, bool) = interface.get_item("data")?.extract()?;
            let len: usize = obj.getattr("nbytes")?.extract()?;
            return Ok(Bytes::from_owner(Referenced {
                _owner: obj.clone().unbind(),
                data: address as *const u8,
                len,
            }));
        }
    }
    let copied = obj.call_method0("tobytes")?;
    Ok(shared_bytes(copied.cast::<PyBytes>()?))
}

/// A `bytes` object's memory, without a copy.
fn shared_bytes(bytes: &Bound<'_, PyBytes>) -> Bytes {
    let data = bytes.as_bytes();
    Bytes::from_owner(Referenced {
        data: data.as_ptr(),
        len: data.len(),
        _owner: bytes.clone().into_any().unbind(),
    })
}

/// Write `obj` as an attachment when it is a binary value the writer knows besides
/// `bytes` and `bytearray`: a numpy array (from its own memory, when C-contiguous and
/// of a dtype docs/wire.md lists), a memoryview (copied), a PIL image (its PNG bytes).
/// Returns `false` for any other object.
#[cold]
#[inline(never)]
fn attach_binary(obj: &Bound<'_, PyAny>, section: &mut Section, out: &mut Vec<u8>) -> Result<bool, Unserializable> {
    let failed = |e: PyErr| Unserializable(e.value(obj.py()).to_string());
    let kind = obj.get_type();
    let name = kind.name().map_err(failed)?;
    if let Some(array) = ndarray::exact(obj) {
        return attach_ndarray(array, section, out);
    }
    if name == "memoryview" {
        let bytes = obj.call_method0("tobytes").map_err(failed)?;
        let bytes = bytes.cast::<PyBytes>().map_err(|e| Unserializable(e.to_string()))?;
        attach(out, section, shared_bytes(bytes), None);
        return Ok(true);
    }
    let module = kind.module().map_err(failed)?;
    let module = module.to_cow().map_err(failed)?;
    if module.starts_with("PIL.") && obj.hasattr("save").unwrap_or(false) {
        let py = obj.py();
        let buffer = py
            .import("io")
            .and_then(|io| io.getattr("BytesIO")?.call0())
            .map_err(failed)?;
        let options = PyDict::new(py);
        options.set_item("format", "PNG").map_err(failed)?;
        obj.call_method("save", (&buffer,), Some(&options)).map_err(failed)?;
        let png = buffer.call_method0("getvalue").map_err(failed)?;
        let png = png.cast::<PyBytes>().map_err(|e| Unserializable(e.to_string()))?;
        attach(out, section, shared_bytes(png), None);
        return Ok(true);
    }
    Ok(false)
}

/// A numpy array as an `ndarray` placeholder: C-contiguous arrays are sent from their own
/// memory, others copied into C order once (`copy()`); an array of a dtype docs/wire.md does not
/// list (big-endian, strings, objects, dates) is left to the plain form (`false`).
fn attach_ndarray(
    array: &Bound<'_, PyUntypedArray>,
    section: &mut Section,
    out: &mut Vec<u8>,
) -> Result<bool, Unserializable> {
    if let Some((bytes, dtype, shape)) = contiguous_array(array) {
        attach(out, section, bytes, Some((dtype, shape)));
        return Ok(true);
    }
    if array.is_c_contiguous() {
        return Ok(false); // of a dtype the wire does not list
    }
    let copy = array
        .call_method0("copy")
        .map_err(|e| Unserializable(e.value(array.py()).to_string()))?;
    match ndarray::exact(&copy).and_then(contiguous_array) {
        Some((bytes, dtype, shape)) => {
            attach(out, section, bytes, Some((dtype, shape)));
            Ok(true)
        }
        None => Ok(false),
    }
}

/// A C-contiguous array of a dtype docs/wire.md lists ([`ndarray::wire_layout`]): its
/// memory held by a reference to the array, its dtype and shape. `None` for any other
/// array, which [`attach_ndarray`] then reads the slow way.
fn contiguous_array<'a>(array: &'a Bound<'_, PyUntypedArray>) -> Option<(Bytes, Dtype, &'a [usize])> {
    let (dtype, data) = ndarray::wire_layout(array)?;
    let bytes = Bytes::from_owner(Referenced {
        _owner: array.clone().into_any().unbind(),
        data: data.as_ptr(),
        len: data.len(),
    });
    Some((bytes, dtype, array.shape()))
}

/// The `.npy` header of arrays of one dtype and shape, and the base64 of its whole groups
/// of three bytes.
struct NpyHeader {
    dtype: Dtype,
    shape: SmallVec<[usize; 8]>,
    header: Vec<u8>,
    text: Vec<u8>,
}

thread_local! {
    /// The `.npy` header of the last array result written as base64 on this thread: a
    /// procedure mostly returns arrays of one kind, and writing a header and its base64
    /// cost allocations and more instructions than the base64 of a small array.
    static LAST_HEADER: RefCell<Option<NpyHeader>> = const { RefCell::new(None) };
}

/// The plain form of `array`, when C-contiguous of a dtype docs/wire.md lists: the base64
/// of its `.npy` file, written from the array's memory (header and data not joined
/// first); `false` for any other array.
fn write_npy_base64(array: &Bound<'_, PyUntypedArray>, out: &mut Vec<u8>) -> bool {
    let Some((dtype, data)) = ndarray::wire_layout(array) else {
        return false;
    };
    let shape = array.shape();
    LAST_HEADER.with_borrow_mut(|last| {
        let known = last.as_ref().is_some_and(|l| l.dtype == dtype && l.shape[..] == *shape);
        let npy = if known {
            last.as_ref().unwrap()
        } else {
            let header = ucall_core::jsonrpc::section::npy_header(dtype, shape);
            let mut text = Vec::new();
            base64::encode_append(&header[..header.len() / 3 * 3], &mut text);
            last.insert(NpyHeader {
                dtype,
                shape: shape.into(),
                header,
                text,
            })
        };
        ucall_core::buffer::reserve(out, base64::encoded_len(npy.header.len() + data.len()) + 2);
        out.push(b'"');
        out.extend_from_slice(&npy.text);
        base64::encode_joined_append(&npy.header[npy.header.len() / 3 * 3..], data, out);
        out.push(b'"');
    });
    true
}

/// A C-contiguous numpy array's `.npy` bytes as its header and its memory, which the
/// writer turns into base64 without joining them first: a 1.6 MB array was copied into a
/// `bytes` of its `.npy` file for each call. Made by `ucall._codec.npy_parts`.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NpyBytes {
    header: Py<PyBytes>,
    array: Py<PyAny>,
}

#[pymethods]
impl NpyBytes {
    #[new]
    fn new(header: Py<PyBytes>, array: Py<PyAny>) -> Self {
        NpyBytes { header, array }
    }
}

impl NpyBytes {
    fn write_base64(&self, py: Python<'_>, out: &mut Vec<u8>) -> Result<(), Unserializable> {
        let failed = |e: PyErr| Unserializable(e.value(py).to_string());
        let array = self.array.bind(py);
        // numpy's own description of the memory (`__array_interface__`, version 3): a
        // C-contiguous array has no strides there.
        let interface = array.getattr("__array_interface__").map_err(failed)?;
        let contiguous = interface.get_item("strides").map_err(failed)?.is_none();
        let (address, _read_only): (usize, bool) =
            interface.get_item("data").map_err(failed)?.extract().map_err(failed)?;
        let len: usize = array.getattr("nbytes").map_err(failed)?.extract().map_err(failed)?;
        if !contiguous || (address == 0 && len > 0) {
            return Err(Unserializable("an array that is not C-contiguous".into()));
        }
        let data = if len == 0 {
            &[][..]
        } else {
            // SAFETY: numpy says the array's `len` bytes start at `address`, contiguous;
            // the array is referenced here and the GIL is held while they are read, so
            // its memory stays where it is (numpy refuses to resize a referenced array).
            unsafe { std::slice::from_raw_parts(address as *const u8, len) }
        };
        let header = self.header.bind(py).as_bytes();
        ucall_core::buffer::reserve(out, base64::encoded_len(header.len() + data.len()) + 2);
        base64::write_base64_joined(header, data, out);
        Ok(())
    }
}
