// SPDX-License-Identifier: Apache-2.0
//! Arrays in replies in the plain JSON form UCall servers write for callers that take no
//! attachments (a `.npy` file, base64); an `ndarray` attachment is read by
//! [`ucall_core::jsonrpc::attachment::Attachment::to_array`].

pub use ucall_core::jsonrpc::attachment::Array;
use ucall_core::jsonrpc::section::Element;

/// A `.npy` file (NumPy format 1.0 to 3.0, C order) of `T`, copied out.
pub(crate) fn from_npy<T: Element>(npy: &[u8]) -> Result<Array<'static, T>, String> {
    if !npy.starts_with(b"\x93NUMPY") || npy.len() < 10 {
        return Err("not a .npy file".to_owned());
    }
    let (len, at) = match npy[6] {
        1 => (usize::from(u16::from_le_bytes([npy[8], npy[9]])), 10),
        2 | 3 if npy.len() >= 12 => (u32::from_le_bytes([npy[8], npy[9], npy[10], npy[11]]) as usize, 12),
        _ => return Err("an unknown .npy version".to_owned()),
    };
    let header = npy
        .get(at..at + len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("a .npy header cut short")?;
    let value = |key: &str| -> Option<&str> {
        let rest = &header[header.find(&format!("'{key}':"))? + key.len() + 3..];
        Some(rest.trim_start())
    };
    let type_string = value("descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or("a .npy header without descr")?;
    let wanted = T::DTYPE.npy_descr();
    if type_string != wanted && !(wanted.starts_with('|') && type_string[1..] == wanted[1..]) {
        return Err(format!("a .npy array of {type_string}, not {wanted}"));
    }
    if !value("fortran_order").is_some_and(|v| v.starts_with("False")) {
        return Err("a .npy array in Fortran order".to_owned());
    }
    let dims = value("shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or("a .npy header without shape")?;
    let shape = dims
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| format!("a .npy shape of {dims:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    let data = &npy[at + len..];
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count.and_then(|n| n.checked_mul(T::DTYPE.size())) != Some(data.len()) {
        return Err("a .npy file whose data does not match its shape".to_owned());
    }
    Ok(Array::copied(shape, data))
}
