// SPDX-License-Identifier: Apache-2.0
//! An attachment's bytes handed to Python where they lie: in the connection's input (lent
//! by the core, `ucall_core::lend`) or in the copy a waiting call's params were kept in.
//!
//! `ucall._attachments.view` turns one into a read-only `memoryview` that holds it; numpy
//! makes an array of one from its `__array_interface__` (`numpy.asarray`), which holds
//! it too: the bytes stay alive and unchanged for as long as any of them is referenced,
//! whether or not the handler has returned.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

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
