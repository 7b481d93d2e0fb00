// SPDX-License-Identifier: Apache-2.0
//! Placeholders (docs/wire.md §2): in a binary message's params or result, an object with
//! a `$ucall` member stands for bytes of the attachment section. [`resolve`] reads one
//! into a view of the section, borrowed where the message lies.

use std::borrow::Cow;

use super::scan::{key_equals, Elements, Members};
use super::section::Element;
use crate::wire::ALIGN;

/// The member that marks a placeholder.
pub const MARKER: &str = "$ucall";

/// An array's element type: little-endian, as docs/wire.md lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// One byte, 0 or 1.
    Bool,
    /// Signed 8 bits.
    Int8,
    /// Unsigned 8 bits.
    Uint8,
    /// Signed 16 bits.
    Int16,
    /// Unsigned 16 bits.
    Uint16,
    /// Signed 32 bits.
    Int32,
    /// Unsigned 32 bits.
    Uint32,
    /// Signed 64 bits.
    Int64,
    /// Unsigned 64 bits.
    Uint64,
    /// IEEE 754 binary16.
    Float16,
    /// IEEE 754 binary32.
    Float32,
    /// IEEE 754 binary64.
    Float64,
    /// Two binary32: real, imaginary.
    Complex64,
    /// Two binary64: real, imaginary.
    Complex128,
}

impl Dtype {
    /// Every dtype, in the order of the table.
    pub const ALL: [Dtype; 14] = [
        Dtype::Bool,
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int16,
        Dtype::Uint16,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Float16,
        Dtype::Float32,
        Dtype::Float64,
        Dtype::Complex64,
        Dtype::Complex128,
    ];

    /// The name on the wire (`"float32"`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "bool",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int16 => "int16",
            Dtype::Uint16 => "uint16",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Int64 => "int64",
            Dtype::Uint64 => "uint64",
            Dtype::Float16 => "float16",
            Dtype::Float32 => "float32",
            Dtype::Float64 => "float64",
            Dtype::Complex64 => "complex64",
            Dtype::Complex128 => "complex128",
        }
    }

    /// Bytes per element.
    #[must_use]
    pub fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::Int8 | Dtype::Uint8 => 1,
            Dtype::Int16 | Dtype::Uint16 | Dtype::Float16 => 2,
            Dtype::Int32 | Dtype::Uint32 | Dtype::Float32 => 4,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Float64 | Dtype::Complex64 => 8,
            Dtype::Complex128 => 16,
        }
    }

    /// The type string of NumPy's `.npy` header (`"<f4"`): little-endian, `|` where
    /// byte order means nothing.
    #[must_use]
    pub fn npy_descr(self) -> &'static str {
        match self {
            Dtype::Bool => "|b1",
            Dtype::Int8 => "|i1",
            Dtype::Uint8 => "|u1",
            Dtype::Int16 => "<i2",
            Dtype::Uint16 => "<u2",
            Dtype::Int32 => "<i4",
            Dtype::Uint32 => "<u4",
            Dtype::Int64 => "<i8",
            Dtype::Uint64 => "<u8",
            Dtype::Float16 => "<f2",
            Dtype::Float32 => "<f4",
            Dtype::Float64 => "<f8",
            Dtype::Complex64 => "<c8",
            Dtype::Complex128 => "<c16",
        }
    }

    /// The dtype of numpy's type kind (`b'f'`, as in a type string) and element size in
    /// bytes, if docs/wire.md lists one (a match, not a search of [`Dtype::ALL`]: numpy
    /// arrays are read by it on every call).
    #[must_use]
    pub fn from_kind_and_size(kind: u8, size: usize) -> Option<Dtype> {
        Some(match (kind, size) {
            (b'b', 1) => Dtype::Bool,
            (b'i', 1) => Dtype::Int8,
            (b'u', 1) => Dtype::Uint8,
            (b'i', 2) => Dtype::Int16,
            (b'u', 2) => Dtype::Uint16,
            (b'i', 4) => Dtype::Int32,
            (b'u', 4) => Dtype::Uint32,
            (b'i', 8) => Dtype::Int64,
            (b'u', 8) => Dtype::Uint64,
            (b'f', 2) => Dtype::Float16,
            (b'f', 4) => Dtype::Float32,
            (b'f', 8) => Dtype::Float64,
            (b'c', 8) => Dtype::Complex64,
            (b'c', 16) => Dtype::Complex128,
            _ => return None,
        })
    }

    /// The dtype of a `.npy` type string: [`Dtype::npy_descr`]'s, and a one-byte type's
    /// with `<` (as some writers give it); `None` for any other (big-endian, strings...).
    #[must_use]
    pub fn from_npy_descr(descr: &str) -> Option<Dtype> {
        let (&order, rest) = descr.as_bytes().split_first()?;
        let (&kind, digits) = rest.split_first()?;
        let size: usize = std::str::from_utf8(digits).ok()?.parse().ok()?;
        let dtype = Dtype::from_kind_and_size(kind, size)?;
        (order == b'<' || (order == b'|' && size == 1)).then_some(dtype)
    }

    /// The dtype named `name`, if any.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|dtype| dtype.name() == name)
    }
}

/// An attachment a placeholder names: its bytes where they lie, and for an `ndarray`
/// placeholder its element type and shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attachment<'a> {
    /// The attachment's bytes (an array's data in C order).
    pub bytes: &'a [u8],
    /// `None` for a `bytes` placeholder.
    pub array: Option<ArrayInfo<'a>>,
}

/// What an `ndarray` placeholder says of its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayInfo<'a> {
    /// The element type.
    pub dtype: Dtype,
    /// The `shape` member's JSON text (an array of non-negative integers, checked).
    shape: &'a str,
}

impl ArrayInfo<'_> {
    /// The size of each dimension (none for a scalar).
    pub fn shape(&self) -> impl Iterator<Item = usize> + '_ {
        Elements::new(self.shape).map(|dim| natural(dim).unwrap_or(0))
    }
}

/// An n-dimensional array of `T` read from an `ndarray` attachment
/// ([`Attachment::to_array`], a parameter's `Params::array`, a reply's in `ucall-client`).
#[derive(Debug, Clone, PartialEq)]
pub struct Array<'a, T: Element> {
    /// The size of each dimension (none for a scalar).
    pub shape: Vec<usize>,
    /// The elements in C order: borrowed where the message lies when its memory suits
    /// `T`'s alignment, else copied once.
    pub data: Cow<'a, [T]>,
}

impl<T: Element> Array<'static, T> {
    /// An array of `shape` copied out of `bytes` (a whole number of little-endian `T`).
    #[must_use]
    pub fn copied(shape: Vec<usize>, bytes: &[u8]) -> Self {
        let mut data = vec![<T as bytemuck::Zeroable>::zeroed(); bytes.len() / std::mem::size_of::<T>()];
        let whole = std::mem::size_of_val(&data[..]);
        bytemuck::cast_slice_mut::<T, u8>(&mut data).copy_from_slice(&bytes[..whole]);
        Array {
            shape,
            data: Cow::Owned(data),
        }
    }
}

impl<'a> Attachment<'a> {
    /// This attachment as an array of `T`, viewed in place where aligned for `T`.
    ///
    /// # Errors
    /// A sentence when it is a `bytes` attachment or an array of another dtype.
    pub fn to_array<T: Element>(&self) -> Result<Array<'a, T>, String> {
        let Some(info) = self.array else {
            return Err("a bytes attachment, not an array".to_owned());
        };
        if info.dtype != T::DTYPE {
            return Err(format!("an array of {}, not of {}", info.dtype.name(), T::DTYPE.name()));
        }
        let shape = info.shape().collect();
        Ok(match bytemuck::try_cast_slice(self.bytes) {
            Ok(view) => Array {
                shape,
                data: Cow::Borrowed(view),
            },
            Err(_) => Array::copied(shape, self.bytes),
        })
    }
}

/// Whether `raw` (one JSON value) is a placeholder: an object with a `$ucall` member.
#[must_use]
pub fn is_placeholder(raw: &str) -> bool {
    raw.starts_with('{') && Members::new(raw).any(|(key, _)| key_equals(key, MARKER))
}

/// The attachment the placeholder `raw` names in `section`; `Ok(None)` when `raw` is no
/// placeholder.
///
/// # Errors
/// A sentence saying which rule of docs/wire.md §2 the placeholder breaks.
pub fn resolve<'a>(raw: &'a str, section: &'a [u8]) -> Result<Option<Attachment<'a>>, &'static str> {
    if !raw.starts_with('{') {
        return Ok(None);
    }
    let (mut kind, mut offset, mut length, mut dtype, mut shape) = (None, None, None, None, None);
    let mut members = 0;
    for (key, value) in Members::new(raw) {
        members += 1;
        let slot = if key_equals(key, MARKER) {
            &mut kind
        } else if key_equals(key, "offset") {
            &mut offset
        } else if key_equals(key, "length") {
            &mut length
        } else if key_equals(key, "dtype") {
            &mut dtype
        } else if key_equals(key, "shape") {
            &mut shape
        } else {
            continue;
        };
        if slot.replace(value).is_some() {
            return Err("a placeholder member is repeated");
        }
    }
    let Some(kind) = kind else {
        return Ok(None);
    };
    let array = match kind {
        "\"bytes\"" => false,
        "\"ndarray\"" => true,
        _ => return Err("the placeholder kind is neither \"bytes\" nor \"ndarray\""),
    };
    let expected = if array { 5 } else { 3 };
    if members != expected || (!array && (dtype.is_some() || shape.is_some())) {
        return Err("a placeholder has exactly the members its kind lists");
    }
    let (Some(offset), Some(length)) = (offset.and_then(natural), length.and_then(natural)) else {
        return Err("offset and length are integers of at least 0");
    };
    if offset % ALIGN != 0 {
        return Err("the offset is not a multiple of 64");
    }
    let bytes = offset
        .checked_add(length)
        .and_then(|end| section.get(offset..end))
        .ok_or("the attachment passes the end of the section")?;
    if !array {
        return Ok(Some(Attachment { bytes, array: None }));
    }
    let dtype = dtype
        .and_then(|raw| raw.strip_prefix('"')?.strip_suffix('"'))
        .and_then(Dtype::from_name)
        .ok_or("the dtype is not one docs/wire.md lists")?;
    let shape = shape
        .filter(|raw| raw.starts_with('['))
        .ok_or("the shape is not an array")?;
    let mut count: usize = 1;
    for dim in Elements::new(shape) {
        let dim = natural(dim).ok_or("the shape holds something other than integers of at least 0")?;
        count = count.checked_mul(dim).ok_or("the shape's element count overflows")?;
    }
    if count.checked_mul(dtype.size()) != Some(length) {
        return Err("the length is not the shape's element count times the dtype's size");
    }
    Ok(Some(Attachment {
        bytes,
        array: Some(ArrayInfo { dtype, shape }),
    }))
}

/// A JSON integer of at least 0 written with digits only (no sign, fraction or exponent).
fn natural(raw: &str) -> Option<usize> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) || (raw.len() > 1 && raw.starts_with('0')) {
        return None;
    }
    raw.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> Vec<u8> {
        let mut section = b"foo".to_vec();
        section.resize(64, 0);
        section.extend_from_slice(&1.5f32.to_le_bytes());
        section.extend_from_slice(&(-2.0f32).to_le_bytes());
        section
    }

    #[test]
    fn dtypes_are_found_by_kind_and_size_and_by_npy_type_string() {
        for dtype in Dtype::ALL {
            let descr = dtype.npy_descr();
            let kind = descr.as_bytes()[1];
            assert_eq!(Dtype::from_kind_and_size(kind, dtype.size()), Some(dtype));
            assert_eq!(Dtype::from_npy_descr(descr), Some(dtype));
            let little = format!("<{}", &descr[1..]);
            assert_eq!(Dtype::from_npy_descr(&little), Some(dtype), "{little}");
            let big = format!(">{}", &descr[1..]);
            assert_eq!(Dtype::from_npy_descr(&big), None, "{big}");
        }
        for other in ["|f4", "<U4", "<M8", "|O", "<f", "", "<i16", "|b2"] {
            assert_eq!(Dtype::from_npy_descr(other), None, "{other}");
        }
    }

    #[test]
    fn npy_descr_states_each_dtype_size_and_order() {
        for dtype in Dtype::ALL {
            let descr = dtype.npy_descr();
            let order = if dtype.size() == 1 { '|' } else { '<' };
            assert!(descr.starts_with(order), "{descr}");
            assert_eq!(descr[2..].parse::<usize>(), Ok(dtype.size()), "{descr}");
        }
    }

    #[test]
    fn resolves_bytes_and_arrays_in_place() {
        let section = section();
        let found = resolve(r#"{"$ucall":"bytes","offset":0,"length":3}"#, &section);
        assert_eq!(found.unwrap().unwrap().bytes, b"foo");
        let raw = r#"{"shape":[2],"$ucall":"ndarray","dtype":"float32","length":8,"offset":64}"#;
        let found = resolve(raw, &section).unwrap().unwrap();
        assert_eq!(found.bytes.as_ptr(), section[64..].as_ptr());
        let array = found.array.unwrap();
        assert_eq!(
            (array.dtype, array.shape().collect::<Vec<_>>()),
            (Dtype::Float32, vec![2])
        );
        assert_eq!(resolve(r#"{"a":1}"#, &section), Ok(None));
        assert_eq!(resolve("\"Zm9v\"", &section), Ok(None));
        assert!(is_placeholder(r#"{"$ucall":1}"#) && !is_placeholder(r#"{"ucall":1}"#));
    }

    #[test]
    fn arrays_are_viewed_in_place_when_aligned_and_copied_when_not() {
        let section = section();
        let raw = r#"{"$ucall":"ndarray","offset":64,"length":8,"dtype":"float32","shape":[2]}"#;
        let found = resolve(raw, &section).unwrap().unwrap();
        let array = found.to_array::<f32>().unwrap();
        assert_eq!(
            (array.shape.as_slice(), &array.data[..]),
            (&[2][..], &[1.5f32, -2.0][..])
        );
        assert_eq!(
            matches!(array.data, Cow::Borrowed(_)),
            found.bytes.as_ptr().align_offset(4) == 0
        );
        // One byte off any alignment: the same values, copied.
        let mut shifted = vec![0u8; 1];
        shifted.extend_from_slice(&section);
        let found = resolve(raw, &shifted[1..]).unwrap().unwrap();
        let unaligned = found.to_array::<f32>().unwrap();
        assert_eq!(unaligned, array);
        assert!(found.to_array::<i32>().unwrap_err().contains("float32, not of int32"));
        let bytes = resolve(r#"{"$ucall":"bytes","offset":0,"length":3}"#, &section)
            .unwrap()
            .unwrap();
        assert!(bytes.to_array::<u8>().unwrap_err().contains("not an array"));
    }

    #[test]
    fn refuses_what_breaks_a_rule() {
        let section = section();
        for raw in [
            r#"{"$ucall":"bytes","offset":1,"length":2}"#,
            r#"{"$ucall":"bytes","offset":0,"length":73}"#,
            r#"{"$ucall":"bytes","offset":0,"length":3.0}"#,
            r#"{"$ucall":"bytes","offset":-64,"length":3}"#,
            r#"{"$ucall":"bytes","offset":0}"#,
            r#"{"$ucall":"bytes","offset":0,"length":3,"x":1}"#,
            r#"{"$ucall":"bytes","offset":0,"offset":0,"length":3}"#,
            r#"{"$ucall":"blob","offset":0,"length":3}"#,
            r#"{"$ucall":"ndarray","offset":64,"length":8,"dtype":"<f4","shape":[2]}"#,
            r#"{"$ucall":"ndarray","offset":64,"length":8,"dtype":"float32","shape":[3]}"#,
            r#"{"$ucall":"ndarray","offset":64,"length":8,"dtype":"float32","shape":2}"#,
            r#"{"$ucall":"ndarray","offset":0,"length":0,"dtype":"uint8","shape":[18446744073709551615,2]}"#,
        ] {
            assert!(resolve(raw, &section).is_err(), "{raw} was accepted");
        }
    }
}
