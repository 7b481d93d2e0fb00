// SPDX-License-Identifier: Apache-2.0
//! An attachment's bytes handed to Python where they lie: in the connection's input (lent
//! by the core, `ucall_core::lend`) or in the copy a waiting call's params were kept in.
//!
//! `ucall._attachments.view` turns one into a read-only `memoryview` that holds it; numpy
//! makes an array of one from its `__array_interface__` (`numpy.asarray`), which holds
//! it too: the bytes stay alive and unchanged for as long as any of them is referenced,
//! whether or not the handler has returned.

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyTuple};

use ucall_core::jsonrpc::attachment::Dtype;
use ucall_core::Bytes;

/// The bytes of one attachment, kept alive by this object.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct AttachmentMemory {
    bytes: Bytes,
    /// numpy's type string of the elements (`"<f4"`), and the array's shape; bytes
    /// (`"|u1"`, one dimension) for an attachment that is not an array.
    typestr: &'static str,
    shape: Option<Vec<usize>>,
}

impl AttachmentMemory {
    /// `bytes` kept beyond the call: in place when the core lends them, else copied.
    pub fn keep(bytes: &[u8]) -> Self {
        AttachmentMemory {
            bytes: ucall_core::lend::keep(bytes),
            typestr: Dtype::Uint8.npy_descr(),
            shape: None,
        }
    }

    /// [`AttachmentMemory::keep`] for an array of `shape`, whose elements numpy names
    /// `typestr`: what its `__array_interface__` describes.
    pub fn keep_array(bytes: &[u8], typestr: &'static str, shape: Vec<usize>) -> Self {
        AttachmentMemory {
            typestr,
            shape: Some(shape),
            ..AttachmentMemory::keep(bytes)
        }
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
        let shape = match &self.shape {
            Some(shape) => PyTuple::new(py, shape)?,
            None => PyTuple::new(py, [self.bytes.len()])?,
        };
        interface.set_item("shape", shape)?;
        interface.set_item("typestr", self.typestr)?;
        interface.set_item("data", (self.address(), true))?;
        interface.set_item("version", 3)?;
        Ok(interface)
    }
}

/// A `.npy` file decoded from a base64 param into a `bytearray` of its own, as the array
/// its header describes (read here: numpy parses the header with `ast`, which cost as
/// much as the decoding of a 16 KB array). numpy views the data after the header in
/// place, writable as `numpy.load`'s arrays are (`numpy.asarray`).
#[pyclass(module = "ucall._ucall", frozen)]
pub struct NpyMemory {
    file: Py<PyByteArray>,
    /// Where the data starts in `file`, its element type and shape.
    offset: usize,
    dtype: Dtype,
    shape: Vec<usize>,
}

impl NpyMemory {
    /// The array of `file`, which no one else references, when it is a `.npy` file of a
    /// dtype docs/wire.md lists in C order, whose data fills the rest of it; `None` for
    /// any other, which numpy reads.
    pub fn of(file: &Bound<'_, PyByteArray>) -> Option<Self> {
        // SAFETY: read with the GIL held, and no Python code runs while it is.
        let npy = unsafe { file.as_bytes() };
        let (dtype, shape, offset) = ucall_client::npy_layout(npy).ok()?;
        Some(NpyMemory {
            file: file.clone().unbind(),
            offset,
            dtype,
            shape,
        })
    }
}

#[pymethods]
impl NpyMemory {
    /// numpy's array interface (version 3): the data as a writable C-contiguous array.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let interface = PyDict::new(py);
        // The bytearray is referenced by this object alone (and this object by numpy's
        // array), so nothing resizes or frees it while the array lives.
        let address = self.file.bind(py).data() as usize + self.offset;
        interface.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        interface.set_item("typestr", self.dtype.npy_descr())?;
        interface.set_item("data", (address, false))?;
        interface.set_item("version", 3)?;
        Ok(interface)
    }
}
