// SPDX-License-Identifier: Apache-2.0
//! The writing side of attachments (docs/wire.md §1, §2): a reply's binary values, each
//! written into the JSON text as a placeholder while its bytes are kept, not copied, for
//! the attachment section that follows the text. For a client that did not ask for binary
//! replies the same values are written in their plain JSON form instead: a base64 string
//! (of the bytes, or of an array's `.npy` form).

use std::ops::Range;

use bytes::Bytes;

use super::attachment::{Dtype, MARKER};
use crate::wire::align;

/// One attachment of a reply: its bytes, where they go in the section, and where its
/// placeholder's `offset` digits are in the JSON text (so that a deferred reply's
/// placeholders can be moved when its section joins a batch's).
#[derive(Debug, Clone)]
pub struct Part {
    /// Where the bytes start in the section: a multiple of 64.
    pub offset: usize,
    /// The bytes, sent from their own memory.
    pub bytes: Bytes,
    /// The `offset` digits in the JSON text that names this part, counted from where the
    /// text (or the deferred result) starts.
    pub digits: Range<usize>,
}

/// The attachments of one reply message (a call, or the calls of a batch).
#[derive(Debug, Default, Clone)]
pub struct Section {
    parts: Vec<Part>,
    /// Where the next attachment starts: the end of the last, rounded up to 64.
    next: usize,
    /// The end of the last attachment: the section's length.
    len: usize,
}

impl Section {
    /// No attachments.
    #[must_use]
    pub fn new() -> Self {
        Section::default()
    }

    /// Whether it holds no attachment.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The section's length (`S` in docs/wire.md): the end of its last attachment.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Its attachments, in the order of their offsets.
    #[must_use]
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Its attachments, taken out.
    #[must_use]
    pub fn into_parts(self) -> Vec<Part> {
        self.parts
    }

    /// How many attachments it holds (a mark for [`Section::truncate`]).
    #[must_use]
    pub fn count(&self) -> usize {
        self.parts.len()
    }

    /// Drop the attachments after the first `count` (a call's, when its reply is replaced
    /// or becomes an error: errors carry none).
    pub fn truncate(&mut self, count: usize) {
        if count >= self.parts.len() {
            return;
        }
        self.parts.truncate(count);
        self.len = self.parts.last().map_or(0, |p| p.offset + p.bytes.len());
        self.next = align(self.len);
    }

    /// Drop everything (the section was sent or handed over).
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Take the attachments out, leaving it empty.
    #[must_use]
    pub fn take(&mut self) -> Section {
        std::mem::take(self)
    }

    /// Keep `bytes`, named by a placeholder whose offset digits are at `digits`; returns
    /// their offset in the section.
    fn push(&mut self, bytes: Bytes, digits: Range<usize>) -> usize {
        let offset = self.next;
        self.len = offset + bytes.len();
        self.next = align(self.len);
        self.parts.push(Part { offset, bytes, digits });
        offset
    }

    /// Keep `bytes` for a writer that writes their placeholder itself (a client's request
    /// built elsewhere); returns their offset, the next multiple of 64. Placeholders so
    /// written are not rebased by [`Section::append_rebased`].
    pub fn attach(&mut self, bytes: Bytes) -> usize {
        self.push(bytes, 0..0)
    }

    /// Append `other`'s attachments after these; the placeholders in `json` (the text
    /// `other`'s digit ranges count from) are rewritten for their new offsets as `json`
    /// is appended to `out`.
    pub fn append_rebased(&mut self, other: Section, json: &[u8], out: &mut Vec<u8>) {
        let base = self.next;
        let shift = out.len();
        let mut copied = 0;
        for part in other.parts {
            out.extend_from_slice(&json[copied..part.digits.start]);
            copied = part.digits.end;
            let digits_start = out.len() - shift;
            out.extend_from_slice(itoa::Buffer::new().format(base + part.offset).as_bytes());
            let digits = digits_start..out.len() - shift;
            self.push(part.bytes, digits);
        }
        out.extend_from_slice(&json[copied..]);
    }
}

/// A number type whose vectors may be sent as arrays, from their own memory.
///
/// The wire is little-endian (docs/wire.md §2): on the little-endian targets UCall runs
/// on, a vector's memory is its wire form.
pub trait Element: bytemuck::Pod + Send + Sync {
    /// The dtype an array of it has on the wire.
    const DTYPE: Dtype;
}

macro_rules! elements {
    ($($ty:ty => $dtype:ident),* $(,)?) => {
        $(impl Element for $ty {
            const DTYPE: Dtype = Dtype::$dtype;
        })*
    };
}

elements! {
    i8 => Int8, u8 => Uint8, i16 => Int16, u16 => Uint16, i32 => Int32, u32 => Uint32,
    i64 => Int64, u64 => Uint64, f32 => Float32, f64 => Float64,
}

/// A vector's memory seen as bytes.
struct AsBytes<T>(Vec<T>);

impl<T: Element> AsRef<[u8]> for AsBytes<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// `data`'s memory as [`Bytes`], without a copy.
#[must_use]
pub fn typed_bytes<T: Element>(data: Vec<T>) -> Bytes {
    Bytes::from_owner(AsBytes(data))
}

/// Where a reply's binary values go: into a [`Section`] as placeholders (the client asked
/// for binary replies), or into the text in their plain JSON form (`None`).
pub type Writer<'s> = Option<&'s mut Section>;

/// Append a `bytes` value to `out` (a placeholder, or a base64 string without
/// `section`); `base` is where the text that [`Part::digits`] counts from starts in `out`.
pub fn write_bytes(out: &mut Vec<u8>, base: usize, section: Writer<'_>, bytes: Bytes) {
    match section {
        Some(section) => write_placeholder(out, base, section, bytes, None),
        None => crate::base64_text::write_base64(&bytes, out),
    }
}

/// Append an `ndarray` value to `out`: `bytes` in C order, little-endian, of `shape`
/// elements of `dtype` (a placeholder, or the base64 of its `.npy` form without
/// `section`); `base` as for [`write_bytes`].
///
/// # Errors
/// When `bytes` is not `shape`'s element count times the dtype's size.
pub fn write_array(
    out: &mut Vec<u8>,
    base: usize,
    section: Writer<'_>,
    dtype: Dtype,
    shape: &[usize],
    bytes: Bytes,
) -> Result<(), &'static str> {
    let count = shape
        .iter()
        .try_fold(1usize, |count, &dim| count.checked_mul(dim))
        .and_then(|count| count.checked_mul(dtype.size()));
    if count != Some(bytes.len()) {
        return Err("the array's length is not its shape's element count times its dtype's size");
    }
    match section {
        Some(section) => write_placeholder(out, base, section, bytes, Some((dtype, shape))),
        None => crate::base64_text::write_base64_joined(&npy_header(dtype, shape), &bytes, out),
    }
    Ok(())
}

fn write_placeholder(
    out: &mut Vec<u8>,
    base: usize,
    section: &mut Section,
    bytes: Bytes,
    array: Option<(Dtype, &[usize])>,
) {
    let length = bytes.len();
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(MARKER.as_bytes());
    out.extend_from_slice(if array.is_some() {
        b"\":\"ndarray\",\"offset\":"
    } else {
        b"\":\"bytes\",\"offset\":"
    });
    let digits_start = out.len() - base;
    let offset = section.next;
    out.extend_from_slice(itoa::Buffer::new().format(offset).as_bytes());
    let digits = digits_start..out.len() - base;
    section.push(bytes, digits);
    out.extend_from_slice(b",\"length\":");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    if let Some((dtype, shape)) = array {
        out.extend_from_slice(b",\"dtype\":\"");
        out.extend_from_slice(dtype.name().as_bytes());
        out.extend_from_slice(b"\",\"shape\":[");
        for (i, dim) in shape.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(itoa::Buffer::new().format(*dim).as_bytes());
        }
        out.push(b']');
    }
    out.push(b'}');
}

/// The header of an array's `.npy` form (NumPy format 1.0): magic, version, and the
/// header dictionary padded so that the data starts at a multiple of 64. Written byte by
/// byte: with `format!` it cost more than the base64 of a small array.
#[must_use]
pub fn npy_header(dtype: Dtype, shape: &[usize]) -> Vec<u8> {
    // Magic and version, then the dictionary's length, filled in at the end.
    let mut header = Vec::with_capacity(128);
    header.extend_from_slice(b"\x93NUMPY\x01\x00\0\0{'descr': '");
    header.extend_from_slice(dtype.npy_descr().as_bytes());
    header.extend_from_slice(b"', 'fortran_order': False, 'shape': (");
    let mut digits = itoa::Buffer::new();
    let mut first_digits = None;
    for (i, &dim) in shape.iter().enumerate() {
        if i > 0 {
            header.extend_from_slice(b", ");
        }
        let text = digits.format(dim);
        first_digits.get_or_insert(text.len());
        header.extend_from_slice(text.as_bytes());
    }
    // A tuple of one is written `(n,)`, as Python's repr does.
    header.extend_from_slice(if shape.len() == 1 { b",), }" } else { b"), }" });
    // As `numpy.save` writes it: room for the first dimension to grow to 21 digits, then
    // spaces so that magic (6), version (2), length (2), the dictionary and a newline end
    // at a multiple of 64 (a whole 64 more when they would end there already).
    if let Some(first) = first_digits {
        header.resize(header.len() + 21usize.saturating_sub(first), b' ');
    }
    let pad = 64 - (header.len() + 1) % 64;
    header.resize(header.len() + pad, b' ');
    header.push(b'\n');
    let dict_len = u16::try_from(header.len() - 10).unwrap_or(u16::MAX);
    header[8..10].copy_from_slice(&dict_len.to_le_bytes());
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_name_aligned_offsets_and_keep_the_bytes() {
        let mut section = Section::new();
        let mut out = b"[".to_vec();
        write_bytes(&mut out, 0, Some(&mut section), Bytes::from_static(b"foo"));
        out.push(b',');
        let data = Bytes::from(vec![0u8; 8]);
        let at = data.as_ptr();
        write_array(&mut out, 0, Some(&mut section), Dtype::Float32, &[2], data).unwrap();
        out.push(b']');
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"[{"$ucall":"bytes","offset":0,"length":3},{"$ucall":"ndarray","offset":64,"length":8,"dtype":"float32","shape":[2]}]"#
        );
        assert_eq!(section.len(), 72);
        assert_eq!(section.parts()[1].bytes.as_ptr(), at, "kept, not copied");
        assert_eq!(&out[section.parts()[1].digits.clone()], b"64");
        section.truncate(1);
        assert_eq!(section.len(), 3);
    }

    #[test]
    fn a_typed_vector_is_sent_from_its_own_memory() {
        let data = vec![1.5f32, -2.0];
        let at = data.as_ptr().cast::<u8>();
        let bytes = typed_bytes(data);
        assert_eq!(bytes.as_ptr(), at);
        assert_eq!(&bytes[..], &[0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0]);
    }

    #[test]
    fn without_a_section_values_are_base64() {
        let mut out = Vec::new();
        write_bytes(&mut out, 0, None, Bytes::from_static(b"foo"));
        assert_eq!(out, b"\"Zm9v\"");
        let mut out = Vec::new();
        let array = Bytes::from(1.5f32.to_le_bytes().to_vec());
        write_array(&mut out, 0, None, Dtype::Float32, &[1], array).unwrap();
        let npy = base64_simd::STANDARD.decode_to_vec(&out[1..out.len() - 1]).unwrap();
        assert!(npy.starts_with(b"\x93NUMPY\x01\x00"));
        // numpy.save's bytes for numpy.array([1.5], dtype="<f4").
        let mut expected = b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }".to_vec();
        expected.resize(127, b' ');
        expected.push(b'\n');
        expected.extend_from_slice(&1.5f32.to_le_bytes());
        assert_eq!(npy, expected);
        assert!(write_array(&mut out, 0, None, Dtype::Float64, &[2], Bytes::new()).is_err());
    }

    #[test]
    fn a_deferred_section_is_moved_after_what_came_before() {
        let mut first = Section::new();
        let mut out = Vec::new();
        write_bytes(&mut out, 0, Some(&mut first), Bytes::from_static(b"ab"));
        let mut later = Section::new();
        let mut result = Vec::new();
        write_bytes(&mut result, 0, Some(&mut later), Bytes::from_static(b"cd"));
        let mut joined = b"x".to_vec();
        first.append_rebased(later, &result, &mut joined);
        assert_eq!(
            std::str::from_utf8(&joined[1..]).unwrap(),
            r#"{"$ucall":"bytes","offset":64,"length":2}"#
        );
        assert_eq!(first.parts()[1].offset, 64);
        assert_eq!(&joined[1..][first.parts()[1].digits.clone()], b"64");
        assert_eq!(first.len(), 66);
    }
}
