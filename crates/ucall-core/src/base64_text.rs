// SPDX-License-Identifier: Apache-2.0
//! Base64 text written into JSON (RFC 4648 §4: the standard alphabet, padded): a Rust
//! handler's `bytes` and array results in their plain JSON form, the client's `bytes`
//! params, the Python server's `bytes` results. A leaf: the text is read back by the one
//! decoding rule the params module keeps, which depends on nothing here.
//!
//! With the `simd` feature simdutf encodes (AVX-512 where the CPU has it): a 16 KB value in
//! about half base64-simd's time on this project's host. It is C++, so it is off by default:
//! `libucall.a` then needs no libstdc++, and base64-simd (pure Rust) does the work.

/// The length of the padded base64 text of `len` bytes.
#[must_use]
pub fn encoded_len(len: usize) -> usize {
    len.div_ceil(3) * 4
}

/// Append the base64 text of `bytes` to `out`, straight into its spare capacity.
#[cfg(feature = "simd")]
pub fn encode_append(bytes: &[u8], out: &mut Vec<u8>) {
    use simdutf::Base64Options;
    let len = encoded_len(bytes.len());
    out.reserve(len);
    let room = out.spare_capacity_mut();
    // SAFETY: `room` has at least `len` writable bytes (reserved above), all the encoder
    // writes; `bytes` is not part of `out`, which is borrowed mutably.
    let written = unsafe {
        simdutf::binary_to_base64(
            bytes.as_ptr(),
            bytes.len(),
            room.as_mut_ptr().cast::<u8>(),
            Base64Options::Default,
        )
    };
    // SAFETY: the encoder initialised `written` bytes after the old length, within capacity.
    unsafe { out.set_len(out.len() + written.min(len)) };
}

/// Append the base64 text of `bytes` to `out`.
#[cfg(not(feature = "simd"))]
pub fn encode_append(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + encoded_len(bytes.len()), 0);
    let _encoded = base64_simd::STANDARD.encode(bytes, base64_simd::Out::from_slice(&mut out[start..]));
}

/// Append `bytes` as a quoted standard base64 string (a JSON string).
pub fn write_base64(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(bytes.len()) + 2);
    out.push(b'"');
    encode_append(bytes, out);
    out.push(b'"');
}

/// Append `first` and `second`, joined, as a quoted standard base64 string, without
/// joining them in memory first (a `.npy` file's header and its array's memory).
pub fn write_base64_joined(first: &[u8], second: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(first.len() + second.len()) + 2);
    out.push(b'"');
    let whole = first.len() / 3 * 3;
    encode_append(&first[..whole], out);
    encode_joined_append(&first[whole..], second, out);
    out.push(b'"');
}

/// Append the base64 text of `left` (at most two bytes: what remains of a piece whose
/// whole groups of three are written already) and `second`, joined: a group that bridges
/// the two, then the rest of `second`, padded at the end.
pub fn encode_joined_append(left: &[u8], second: &[u8], out: &mut Vec<u8>) {
    debug_assert!(left.len() < 3, "the whole groups of the first piece are written first");
    let mut bridge = [0u8; 3];
    let mut filled = left.len();
    bridge[..filled].copy_from_slice(left);
    let mut rest = second;
    if filled > 0 {
        let take = (3 - filled).min(rest.len());
        bridge[filled..filled + take].copy_from_slice(&rest[..take]);
        filled += take;
        rest = &rest[take..];
        encode_append(&bridge[..filled], out);
    }
    encode_append(rest, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_the_standard_padded_base64() {
        for (plain, text) in [
            (&b""[..], &b"\"\""[..]),
            (b"f", b"\"Zg==\""),
            (b"fo", b"\"Zm8=\""),
            (b"foo", b"\"Zm9v\""),
            (b"foob", b"\"Zm9vYg==\""),
            (&[0xfb, 0xff, 0xbf], b"\"+/+/\""),
        ] {
            let mut out = b"[".to_vec();
            write_base64(plain, &mut out);
            assert_eq!(&out[1..], text, "{plain:?}");
            assert_eq!(encoded_len(plain.len()), text.len() - 2);
        }
    }

    #[test]
    fn two_pieces_are_written_as_the_base64_of_both_joined() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for first in [0, 1, 2, 3, 4, 128, 998, 1000] {
            for second in [0, 1, 2, 3, 100, 1000 - first] {
                let (a, b) = (&bytes[..first], &bytes[first..(first + second).min(1000)]);
                let (mut joined, mut apart) = (Vec::new(), Vec::new());
                write_base64(&[a, b].concat(), &mut joined);
                write_base64_joined(a, b, &mut apart);
                assert_eq!(
                    String::from_utf8(apart).unwrap(),
                    String::from_utf8(joined).unwrap(),
                    "{first} + {second}"
                );
            }
        }
    }
}
