// SPDX-License-Identifier: Apache-2.0
//! A base64 `.npy` param (an array's plain JSON form, docs/wire.md) decoded straight into
//! the memory of the array the handler gets: the header is decoded and read first, numpy
//! allocates the array, and the data is decoded into it. The array owns its memory and
//! is writable, as `numpy.load`'s arrays are. Decoding the file into a `bytearray` that a
//! view of it then held cost a `bytearray`, a holder object and three allocations more
//! per call than a `bytes` param of the same size.

use std::cell::RefCell;
use std::mem::MaybeUninit;

use pyo3::prelude::*;
use smallvec::SmallVec;

use ucall_core::params::base64;
use ucall_core::Dtype;

use crate::ndarray;

/// A `.npy` header read, the length of its file, and what [`ucall_client::npy_layout_of`]
/// found in them: the array's dtype and shape.
struct Layout {
    header: Vec<u8>,
    file_len: usize,
    dtype: Dtype,
    shape: SmallVec<[usize; 8]>,
}

thread_local! {
    /// The last `.npy` layout read on this thread: a procedure's callers mostly send
    /// arrays of one kind, and reading a header cost more instructions than decoding a
    /// 16 KB array's base64.
    static LAST_LAYOUT: RefCell<Option<Layout>> = const { RefCell::new(None) };
}

/// The array of the `.npy` file whose base64 is `text`, when it is one of a dtype
/// docs/wire.md lists in C order whose data fills the rest of the file (numpy parses the
/// header with `ast`, which cost as much as decoding a 16 KB array); `None` for anything
/// else (any other file, or text that is not base64), which the caller reads the slow way
/// to say why.
///
/// Call only for a param of a numpy type (numpy is imported).
pub fn decode<'py>(py: Python<'py>, text: &[u8]) -> Option<Bound<'py, PyAny>> {
    let file_len = base64::decoded_len(text)?;
    // The file's first 192 bytes (numpy writes a header of 128 bytes for arrays of up to
    // five or so dimensions) are decoded first: they say where the data starts. The bytes
    // of data among them are copied to the array, the rest decoded straight into it.
    let mut head: SmallVec<[MaybeUninit<u8>; 256]> = SmallVec::new();
    let mut decoded = FIRST_CHARS.min(text.len());
    decode_more(&text[..decoded], &mut head)?;
    let start = ucall_client::npy_data_start(init(&head)).filter(|&start| start <= file_len)?;
    // A longer header: decoded up to the first group of four characters past its end.
    let head_chars = (start.div_ceil(3) * 4).min(text.len());
    if head_chars > decoded {
        decode_more(&text[decoded..head_chars], &mut head)?;
        decoded = head_chars;
    }
    let head = init(&head);
    let data_text = &text[decoded..];
    let (header, data_head) = head.split_at(start);
    // Copied out of the cache (no allocation up to eight dimensions), so that no borrow
    // of it is held while numpy runs.
    let (dtype, shape) = LAST_LAYOUT.with_borrow_mut(|last| {
        let known = last
            .as_ref()
            .is_some_and(|l| l.file_len == file_len && l.header == header);
        if !known {
            let (dtype, shape, _) = ucall_client::npy_layout_of(header, file_len).ok()?;
            *last = Some(Layout {
                header: header.to_vec(),
                file_len,
                dtype,
                shape: shape.into(),
            });
        }
        last.as_ref().map(|l| (l.dtype, l.shape.clone()))
    })?;
    let (array, data) = ndarray::uninit(py, dtype, &shape).ok()?;
    let len = file_len - start;
    // SAFETY: `data` is the new array's memory, `len` bytes (its dtype's size times its
    // shape's count: `npy_layout_of` checked the file holds exactly that many), which no
    // one else sees until the array is returned; a failed decode drops the array unseen.
    let out = unsafe { std::slice::from_raw_parts_mut(data.cast::<MaybeUninit<u8>>(), len) };
    let (out_head, out_rest) = out.split_at_mut(data_head.len());
    for (to, &from) in out_head.iter_mut().zip(data_head) {
        to.write(from);
    }
    (data_text.is_empty() || base64::decode_into_with(data_text, out_rest, ucall_client::base64::decode_groups))
        .then_some(array)
}

/// Characters of a `.npy` file's base64 decoded before its header is read (192 bytes).
const FIRST_CHARS: usize = 256;

/// `more` (whole groups of four characters, or the end of the text) decoded onto the end
/// of `head`; `None` when it is not base64.
fn decode_more(more: &[u8], head: &mut SmallVec<[MaybeUninit<u8>; 256]>) -> Option<()> {
    let at = head.len();
    let len = base64::decoded_len(more)?;
    head.reserve(len);
    // SAFETY: room for `len` more was reserved, and uninitialised bytes are valid values
    // of `MaybeUninit` (`resize` wrote them one at a time: more than the decoding cost).
    unsafe { head.set_len(at + len) };
    base64::decode_into_with(more, &mut head[at..], ucall_client::base64::decode_groups).then_some(())
}

/// The bytes the decoder wrote.
fn init(head: &[MaybeUninit<u8>]) -> &[u8] {
    // SAFETY: `decode_more` grows `head` only by bytes the decoder then wrote (it returns
    // `None`, and the caller gives up, when it did not).
    unsafe { &*(std::ptr::from_ref::<[MaybeUninit<u8>]>(head) as *const [u8]) }
}
