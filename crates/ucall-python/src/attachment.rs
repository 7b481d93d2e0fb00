// SPDX-License-Identifier: Apache-2.0
//! An attachment's bytes handed to Python where they lie: in the connection's input (lent
//! by the core, `ucall_core::lend`) or in the copy a waiting call's params were kept in.
//!
//! `ucall._attachments.view` turns one into a read-only `memoryview` that holds it; numpy
//! makes an array of one from its `__array_interface__` (`numpy.asarray`), which holds
//! it too: the bytes stay alive and unchanged for as long as any of them is referenced,
//! whether or not the handler has returned.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyTuple};

use ucall_core::jsonrpc::attachment::Dtype;
use ucall_core::Bytes;

/// The bytes of one attachment, kept alive by this object.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct AttachmentMemory {
    bytes: Bytes,
}

impl AttachmentMemory {
    /// `bytes` kept beyond the call: in place when the core lends them, else copied.
    pub fn keep(bytes: &[u8]) -> Self {
        AttachmentMemory {
            bytes: ucall_core::lend::keep(bytes),
        }
    }

    /// Where the kept bytes start.
    pub fn as_ptr(&self) -> *const u8 {
        self.bytes.as_ptr()
    }
}

#[pymethods]
impl AttachmentMemory {
    /// The address of the first byte.
    #[getter]
    fn address(&self) -> usize {
        self.bytes.as_ptr() as usize
    }

    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// numpy's array interface (version 3): the bytes as a read-only C-contiguous array,
    /// which `numpy.asarray` views in place (one dictionary, read once: cheaper than a
    /// `memoryview` made through ctypes, then `frombuffer` and `reshape`).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let interface = PyDict::new(py);
        interface.set_item("shape", PyTuple::new(py, [self.bytes.len()])?)?;
        interface.set_item("typestr", Dtype::Uint8.npy_descr())?;
        interface.set_item("data", (self.address(), true))?;
        interface.set_item("version", 3)?;
        Ok(interface)
    }
}

/// A `.npy` file decoded from a base64 param into a `bytearray` of its own, which the
/// array of its data ([`NpyMemory::array`]) holds as its base: no one else can reach the
/// `bytearray`, so nothing resizes or frees it while the array lives.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NpyMemory {
    _file: Py<PyByteArray>,
}

impl NpyMemory {
    /// The array of `file`, which no one else references, writable as `numpy.load`'s arrays
    /// are, when it is a `.npy` file of a dtype docs/wire.md lists in C order whose data
    /// fills the rest of it (its header read here: numpy parses it with `ast`, which cost as
    /// much as the decoding of a 16 KB array); `None` for any other, which numpy reads.
    pub fn array<'py>(file: &Bound<'py, PyByteArray>) -> Option<Bound<'py, PyAny>> {
        let py = file.py();
        // SAFETY: read with the GIL held, and no Python code runs while it is.
        let npy = unsafe { file.as_bytes() };
        let (dtype, shape, offset) = layout(npy)?;
        let data = npy[offset..].as_ptr();
        let owner = Bound::new(
            py,
            NpyMemory {
                _file: file.clone().unbind(),
            },
        )
        .ok()?;
        crate::ndarray::view(owner.into_any(), data, dtype, &shape, true).ok()
    }
}

/// A `.npy` header read, the length of its file, and what [`ucall_client::npy_layout`]
/// found in them: the array's dtype and shape.
type Layout = (Vec<u8>, usize, Dtype, Vec<usize>);

thread_local! {
    /// The last `.npy` layout read on this thread: a procedure's callers mostly send
    /// arrays of one kind, and reading a header cost more instructions than decoding a
    /// 16 KB array's base64.
    static LAST_LAYOUT: RefCell<Option<Layout>> = const { RefCell::new(None) };
}

/// [`ucall_client::npy_layout`] of `npy`, whose result depends only on the header's bytes
/// and the file's length: remembered for the last header seen.
fn layout(npy: &[u8]) -> Option<(Dtype, Vec<usize>, usize)> {
    LAST_LAYOUT.with_borrow_mut(|last| {
        if let Some((header, len, dtype, shape)) = last.as_ref() {
            if *len == npy.len() && npy.starts_with(header) {
                return Some((*dtype, shape.clone(), header.len()));
            }
        }
        let (dtype, shape, offset) = ucall_client::npy_layout(npy).ok()?;
        *last = Some((npy[..offset].to_vec(), npy.len(), dtype, shape.clone()));
        Some((dtype, shape, offset))
    })
}
