// SPDX-License-Identifier: Apache-2.0
//! An attachment's bytes handed to Python where they lie: in the connection's input (lent
//! by the core, `ucall_core::lend`) or in the copy a waiting call's params were kept in.
//!
//! `ucall._attachments.view` turns one into a read-only `memoryview` that holds it, and
//! numpy arrays made from that view hold the view: the bytes stay alive and unchanged for
//! as long as any of them is referenced, whether or not the handler has returned.

use pyo3::prelude::*;

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
}
