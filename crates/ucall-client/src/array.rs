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
    npy_layout_of(npy, npy.len())
}

/// Where a `.npy` file's data starts (the length of its magic, version, header length and
/// header), read from its first bytes (10 of them for version 1.0, 12 for 2.0 and 3.0);
/// `None` when they are not those of a `.npy` file of a version known here.
#[must_use]
pub fn npy_data_start(npy: &[u8]) -> Option<usize> {
    if !npy.starts_with(b"\x93NUMPY") || npy.len() < 10 {
        return None;
    }
    match npy[6] {
        1 => Some(10 + usize::from(u16::from_le_bytes([npy[8], npy[9]]))),
        2 | 3 if npy.len() >= 12 => usize::try_from(u32::from_le_bytes([npy[8], npy[9], npy[10], npy[11]]))
            .ok()?
            .checked_add(12),
        _ => None,
    }
}

/// [`npy_layout`] of a `.npy` file of `file_len` bytes from `head`, its first bytes
/// (at least its whole header): a file decoded a piece at a time is read before its
/// data is.
///
/// # Errors
/// As [`npy_layout`]'s, and a `head` that ends inside the header.
pub fn npy_layout_of(head: &[u8], file_len: usize) -> Result<(Dtype, Vec<usize>, usize), String> {
    if !head.starts_with(b"\x93NUMPY") || head.len() < 10 {
        return Err("not a .npy file".to_owned());
    }
    let start = npy_data_start(head).ok_or("an unknown .npy version")?;
    let at = if head[6] == 1 { 10 } else { 12 };
    let header = head
        .get(at..start)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("a .npy header cut short")?;
    let fields = header_fields(header).ok_or("a .npy header that is not a dictionary")?;
    let type_string = fields.descr.ok_or("a .npy header without descr")?;
    let dtype = Dtype::from_npy_descr(type_string)
        .ok_or_else(|| format!("a .npy array of {type_string}, which is not a dtype of docs/wire.md"))?;
    if fields.fortran_order != Some("False") {
        return Err("a .npy array in Fortran order".to_owned());
    }
    let dims = fields.shape.ok_or("a .npy header without shape")?;
    let shape = dims
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| format!("a .npy shape of {dims:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count.and_then(|n| n.checked_mul(dtype.size())) != file_len.checked_sub(start) {
        return Err("a .npy file whose data does not match its shape".to_owned());
    }
    Ok((dtype, shape, start))
}

/// The entries of a `.npy` header that say what the array is, as written: `descr` without
/// its quotes, `fortran_order` (`True` or `False`), `shape` without its parentheses.
#[derive(Default)]
struct HeaderFields<'h> {
    descr: Option<&'h str>,
    fortran_order: Option<&'h str>,
    shape: Option<&'h str>,
}

/// The fields of `header`, the Python dictionary literal numpy writes
/// (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, padded with spaces),
/// read in one pass over its bytes (a search per key, and Unicode-aware trimming, cost
/// more than decoding a small array's base64); `None` when it is not such a dictionary.
fn header_fields(header: &str) -> Option<HeaderFields<'_>> {
    let mut fields = HeaderFields::default();
    let mut rest = header.trim_ascii_start().strip_prefix('{')?;
    loop {
        rest = rest.trim_ascii_start();
        if let Some(after) = rest.strip_prefix('}') {
            return after.trim_ascii().is_empty().then_some(fields);
        }
        let (key, after) = quoted(rest)?;
        let after = after.trim_ascii_start().strip_prefix(':')?.trim_ascii_start();
        let (value, after) = match after.as_bytes().first()? {
            b'\'' | b'"' => quoted(after)?,
            b'(' => after[1..].split_at_checked(memchr::memchr(b')', &after.as_bytes()[1..])?)?,
            _ => {
                let end = memchr::memchr2(b',', b'}', after.as_bytes())?;
                (after[..end].trim_ascii_end(), &after[end..])
            }
        };
        match key {
            "descr" => fields.descr = Some(value),
            "fortran_order" => fields.fortran_order = Some(value),
            "shape" => fields.shape = Some(value),
            _ => {}
        }
        // Past a tuple's `)`; a string's closing quote is gone already.
        rest = after.strip_prefix(')').unwrap_or(after).trim_ascii_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The string literal `text` starts with (single or double quotes), without its quotes,
/// and what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let quote = *text.as_bytes().first()?;
    if quote != b'\'' && quote != b'"' {
        return None;
    }
    let end = memchr::memchr(quote, &text.as_bytes()[1..])?;
    Some((&text[1..=end], &text[end + 2..]))
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
    fn npy_layout_reads_headers_other_writers_spell() {
        // Keys in another order, double quotes, an entry numpy does not write, no padding.
        let header = br#"{"shape": ( 2 , 1 ), 'extra': 'a, b', "fortran_order": False, 'descr': '|u1'}"#;
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend_from_slice(&u16::try_from(header.len() + 1).unwrap().to_le_bytes());
        file.extend_from_slice(header);
        file.push(b'\n');
        let at = file.len();
        file.extend_from_slice(&[1, 2]);
        assert_eq!(npy_layout(&file).unwrap(), (Dtype::Uint8, vec![2, 1], at));
        let broken = |header: &[u8]| {
            let mut file = b"\x93NUMPY\x01\x00".to_vec();
            file.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
            file.extend_from_slice(header);
            npy_layout(&file).unwrap_err()
        };
        assert!(broken(b"{'descr': '<f4', 'shape': (0,)").contains("not a dictionary"));
        assert!(broken(b"['descr', '<f4']").contains("not a dictionary"));
        assert!(broken(b"{'descr': '<f4', 'shape': (0,), } x").contains("not a dictionary"));
        assert!(broken(b"{'fortran_order': False, 'shape': (0,), }").contains("without descr"));
        assert!(broken(b"{'descr': '<f4', 'fortran_order': False, }").contains("without shape"));
        assert!(broken(b"{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }").contains("shape"));
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

    #[test]
    fn a_header_is_read_before_the_data_it_describes() {
        let file = npy(Dtype::Int16, &[3, 5], &[1; 30]);
        assert_eq!(npy_data_start(&file[..10]), Some(128));
        // Version 2.0 and 3.0 spell the header's length in four bytes.
        assert_eq!(npy_data_start(b"\x93NUMPY\x02\x00\x74\x00\x00\x00"), Some(128));
        assert_eq!(npy_data_start(b"\x93NUMPY\x02\x00\x74\x00"), None);
        assert_eq!(npy_data_start(b"\x93NUMPY\x04\x00\x74\x00\x00\x00"), None);
        assert_eq!(npy_data_start(b"PK\x03\x04 a zip file"), None);
        // The header alone and the file's length say what the whole file says.
        assert_eq!(npy_layout_of(&file[..128], file.len()), npy_layout(&file));
        assert!(npy_layout_of(&file[..128], file.len() + 1)
            .unwrap_err()
            .contains("does not match"));
        assert!(npy_layout_of(&file[..100], file.len())
            .unwrap_err()
            .contains("cut short"));
    }
}
