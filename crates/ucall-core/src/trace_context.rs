// SPDX-License-Identifier: Apache-2.0
//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): reading the `traceparent`
//! and `tracestate` values a caller sends, sans-I/O.
//!
//! A value that breaks the rules is ignored, as the specification asks (§3.2.2, §3.3.1.1):
//! an invalid `traceparent` means the call starts a new trace (and its `tracestate` is
//! dropped with it); an invalid `tracestate` is dropped alone. Neither is ever an error
//! for the caller.

use std::borrow::Cow;
use std::fmt;

/// The length of a version-00 `traceparent`: `vv-` + 32 + `-` + 16 + `-ff`.
const TRACEPARENT_LEN: usize = 55;

/// The most list members a `tracestate` may hold (§3.3.1.1).
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A valid `traceparent`: the caller's trace, its span (the parent of the call's), and
/// its flags.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace's 16-byte id, never all zeros.
    pub trace_id: [u8; 16],
    /// The caller's span id (8 bytes), never all zeros.
    pub parent_id: [u8; 8],
    /// The trace flags; bit 0 is `sampled`.
    pub flags: u8,
}

impl TraceParent {
    /// Read a `traceparent` value (surrounding whitespace already trimmed), or `None` when
    /// it breaks the rules of §3.2.2: lowercase hex fields of 2, 32, 16 and 2 digits
    /// joined by `-`, a version other than `ff`, ids not all zeros; version `00` exactly
    /// 55 bytes; a later version at least 55, its extra fields after a `-` (§3.2.4).
    #[must_use]
    pub fn parse(value: &[u8]) -> Option<Self> {
        let version = hex_byte(value.get(0..2)?)?;
        if version == 0xff || value.len() < TRACEPARENT_LEN {
            return None;
        }
        if value.len() > TRACEPARENT_LEN && (version == 0 || value[TRACEPARENT_LEN] != b'-') {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let mut trace_id = [0; 16];
        hex_into(&value[3..35], &mut trace_id)?;
        let mut parent_id = [0; 8];
        hex_into(&value[36..52], &mut parent_id)?;
        let flags = hex_byte(&value[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the caller recorded its span (flag bit 0).
    #[must_use]
    pub fn is_sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lowercase hex digits.
    #[must_use]
    pub fn trace_id_hex(&self) -> [u8; 32] {
        hex_trace_id(&self.trace_id)
    }

    /// The value as version 00 writes it (a later version's extra fields are not kept).
    #[must_use]
    pub fn to_header(&self) -> [u8; TRACEPARENT_LEN] {
        let mut out = [b'-'; TRACEPARENT_LEN];
        out[0..2].copy_from_slice(b"00");
        write_hex(&self.trace_id, &mut out[3..35]);
        write_hex(&self.parent_id, &mut out[36..52]);
        write_hex(&[self.flags], &mut out[53..55]);
        out
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header = self.to_header();
        f.write_str(std::str::from_utf8(&header).unwrap_or("?"))
    }
}

/// A trace id as 32 lowercase hex digits.
#[must_use]
pub fn hex_trace_id(trace_id: &[u8; 16]) -> [u8; 32] {
    let mut out = [0; 32];
    write_hex(trace_id, &mut out);
    out
}

/// A call's trace context: its valid `traceparent`, and the `tracestate` that came with
/// it when that was valid too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext<'a> {
    /// The caller's trace and span.
    pub parent: TraceParent,
    /// The vendors' entries, as sent (several header fields joined with `,`).
    pub tracestate: Option<Cow<'a, str>>,
}

impl<'a> TraceContext<'a> {
    /// The context of a `traceparent` value and the `tracestate` values sent with it
    /// (several header fields are one list, §3.3.1.1), or `None` when `traceparent` is
    /// invalid.
    #[must_use]
    pub fn parse(traceparent: &[u8], tracestate: &[&'a [u8]]) -> Option<Self> {
        let parent = TraceParent::parse(traceparent)?;
        let tracestate = match tracestate {
            [] => None,
            [one] => std::str::from_utf8(one).ok().map(Cow::Borrowed),
            many => String::from_utf8(many.join(&b","[..])).ok().map(Cow::Owned),
        };
        Some(TraceContext::new(parent, tracestate))
    }

    /// The context of `parent` with `tracestate`, which is dropped when invalid or empty.
    #[must_use]
    pub fn new(parent: TraceParent, tracestate: Option<Cow<'a, str>>) -> Self {
        let tracestate = tracestate.filter(|state| is_valid_tracestate(state) && state.contains('='));
        TraceContext { parent, tracestate }
    }
}

/// Whether `value` is a valid `tracestate` (§3.3.1): up to 32 comma-separated list
/// members `key=value` (empty members, and whitespace around members, allowed), no key
/// twice.
#[must_use]
pub fn is_valid_tracestate(value: &str) -> bool {
    let mut keys: [&str; MAX_TRACESTATE_MEMBERS] = [""; MAX_TRACESTATE_MEMBERS];
    let mut count = 0;
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((key, val)) = member.split_once('=') else {
            return false;
        };
        if !is_valid_key(key) || !is_valid_value(val) || count == MAX_TRACESTATE_MEMBERS {
            return false;
        }
        if keys[..count].contains(&key) {
            return false;
        }
        keys[count] = key;
        count += 1;
    }
    true
}

/// `key = simple-key / multi-tenant-key` (§3.3.1.3.1).
fn is_valid_key(key: &str) -> bool {
    let tail = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'*' | b'/');
    match key.split_once('@') {
        None => {
            let k = key.as_bytes();
            (1..=256).contains(&k.len()) && k[0].is_ascii_lowercase() && k[1..].iter().all(|&c| tail(c))
        }
        Some((tenant, system)) => {
            let (t, s) = (tenant.as_bytes(), system.as_bytes());
            (1..=241).contains(&t.len())
                && (t[0].is_ascii_lowercase() || t[0].is_ascii_digit())
                && t[1..].iter().all(|&c| tail(c))
                && (1..=14).contains(&s.len())
                && s[0].is_ascii_lowercase()
                && s[1..].iter().all(|&c| tail(c))
        }
    }
}

/// `value = 0*255(chr) nblk-chr`: printable ASCII but `,` and `=`, not ending in a space
/// (§3.3.1.3.2).
fn is_valid_value(value: &str) -> bool {
    let v = value.as_bytes();
    (1..=256).contains(&v.len())
        && v.iter().all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
        && v[v.len() - 1] != b' '
}

/// Two lowercase hex digits as a byte.
fn hex_byte(digits: &[u8]) -> Option<u8> {
    let mut byte = [0];
    hex_into(digits, &mut byte)?;
    Some(byte[0])
}

/// Lowercase hex `digits` (twice `out`'s length) into `out`; `None` on any other byte.
fn hex_into(digits: &[u8], out: &mut [u8]) -> Option<()> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (pair, byte) in digits.chunks_exact(2).zip(out.iter_mut()) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(())
}

fn write_hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_the_specification_example() {
        let value = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(value).expect("valid");
        assert!(parent.is_sampled());
        assert_eq!(&parent.trace_id_hex(), b"4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(&parent.to_header(), value);
        assert_eq!(parent.parent_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
    }

    #[test]
    fn several_tracestate_fields_are_one_list() {
        let parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::parse(parent, &[b"a=1", b"b=2"]).expect("valid");
        assert_eq!(context.tracestate.as_deref(), Some("a=1,b=2"));
        let duplicated = TraceContext::parse(parent, &[b"a=1", b"a=2"]).expect("valid");
        assert_eq!(duplicated.tracestate, None, "a key twice: the list is dropped");
        assert_eq!(TraceContext::parse(b"00-bad", &[b"a=1"]), None);
    }
}
