// SPDX-License-Identifier: Apache-2.0
//! The `Date` header value, formatted once a second per worker rather than per reply.

use std::time::{SystemTime, UNIX_EPOCH};

/// An IMF-fixdate (RFC 9110 §5.6.7) such as `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) struct DateCache {
    text: [u8; 29],
    second: u64,
}

impl DateCache {
    pub(crate) fn new() -> Self {
        let mut cache = DateCache {
            text: [b' '; 29],
            second: u64::MAX,
        };
        cache.refresh(SystemTime::now());
        cache
    }

    /// Re-format when the second has changed.
    pub(crate) fn refresh(&mut self, now: SystemTime) {
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            self.second = second;
            let formatted = httpdate::fmt_http_date(now);
            let bytes = formatted.as_bytes();
            if bytes.len() == self.text.len() {
                self.text.copy_from_slice(bytes);
            }
        }
    }

    pub(crate) fn get(&self) -> &[u8] {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_imf_fixdate() {
        let mut cache = DateCache::new();
        cache.refresh(UNIX_EPOCH + std::time::Duration::from_secs(784_111_777));
        assert_eq!(cache.get(), b"Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
