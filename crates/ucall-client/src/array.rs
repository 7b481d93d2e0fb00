// SPDX-License-Identifier: Apache-2.0
//! Arrays in replies in the plain JSON form UCall servers write for callers that take no
//! attachments (a `.npy` file, base64); an `ndarray` attachment is read by
//! [`ucall_core::jsonrpc::attachment::Attachment::to_array`].

pub use ucall_core::jsonrpc::attachment::Array;
use ucall_core::jsonrpc::attachment::Dtype;
use ucall_core::jsonrpc::section::Element;

/// A `.npy` file (NumPy format 1.0 to 3.0, C order) of `T`, copied out.
pub(crate) fn from_npy<T: Element>(npy: &[u8]) -> Result<Array<'static, T>, String> {
    let (dtype, shape, at) = npy_layout(npy)?;
    if dtype != T::DTYPE {
        return Err(format!(
            "a .npy array of {}, not {}",
            dtype.npy_descr(),
            T::DTYPE.npy_descr()
        ));
    }
    Ok(Array::copied(shape, &npy[at..]))
}

/// What a `.npy` file (NumPy format 1.0 to 3.0) holds: an array of a dtype docs/wire.md
/// lists, in C order, its shape, and where its data starts, checked to be exactly the
/// rest of the file.
///
/// # Errors
/// Anything else (not a `.npy` file, another type, Fortran order, data of another length),
/// saying what.
pub fn npy_layout(npy: &[u8]) -> Result<(Dtype, Vec<usize>, usize), String> {
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
    // One-byte types have no byte order: `|` as numpy writes them, or `<`.
    let dtype = Dtype::ALL
        .into_iter()
        .find(|d| {
            let wanted = d.npy_descr();
            type_string == wanted || (wanted.starts_with('|') && type_string.get(1..) == wanted.get(1..))
        })
        .ok_or_else(|| format!("a .npy array of {type_string}, which is not a dtype of docs/wire.md"))?;
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
    let start = at + len;
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count.and_then(|n| n.checked_mul(dtype.size())) != Some(npy.len() - start) {
        return Err("a .npy file whose data does not match its shape".to_owned());
    }
    Ok((dtype, shape, start))
}

#[cfg(test)]
mod tests {
    use ::base64::Engine as _;

    use super::*;

    /// A `.npy` file as the core writes an array's plain form (numpy.save's bytes).
    fn npy(dtype: Dtype, shape: &[usize], data: &[u8]) -> Vec<u8> {
        let mut text = Vec::new();
        let bytes = ucall_core::Bytes::from(data.to_vec());
        ucall_core::jsonrpc::section::write_array(&mut text, 0, None, dtype, shape, bytes).unwrap();
        ::base64::engine::general_purpose::STANDARD
            .decode(&text[1..text.len() - 1])
            .unwrap()
    }

    #[test]
    fn npy_layout_reads_dtype_shape_and_where_the_data_starts() {
        for dtype in Dtype::ALL {
            let file = npy(dtype, &[2, 3], &vec![7; 6 * dtype.size()]);
            let (found, shape, at) = npy_layout(&file).unwrap();
            assert_eq!((found, shape, at), (dtype, vec![2, 3], 128), "{}", dtype.name());
        }
        let (_, shape, _) = npy_layout(&npy(Dtype::Float32, &[], &[0; 4])).unwrap();
        assert!(shape.is_empty());
        let (_, shape, _) = npy_layout(&npy(Dtype::Int8, &[0], &[])).unwrap();
        assert_eq!(shape, [0]);
    }

    #[test]
    fn npy_layout_refuses_what_it_cannot_view() {
        let file = npy(Dtype::Float32, &[2], &[0; 8]);
        assert!(npy_layout(&file[..file.len() - 1])
            .unwrap_err()
            .contains("does not match its shape"));
        let replaced = |from: &[u8], to: &[u8]| {
            let at = file.windows(from.len()).position(|w| w == from).unwrap();
            let mut changed = file.clone();
            changed[at..at + to.len()].copy_from_slice(to);
            changed
        };
        assert!(npy_layout(&replaced(b"<f4", b">f4")).unwrap_err().contains(">f4"));
        assert!(npy_layout(&replaced(b"False", b"True "))
            .unwrap_err()
            .contains("Fortran"));
        assert!(npy_layout(b"\x93NUMPY\x09\x00\x00\x00")
            .unwrap_err()
            .contains("version"));
        assert!(npy_layout(b"not a .npy file").is_err());
    }
}
