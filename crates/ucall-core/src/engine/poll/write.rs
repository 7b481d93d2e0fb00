// SPDX-License-Identifier: Apache-2.0
//! The poll engine's writes: a connection's output flushed with one vectored write
//! (sealed by TLS when on), without `SIGPIPE`.

use std::io::{self, IoSlice, Write};
use std::time::Instant;

use super::{PollConn, Stream};
use crate::engine::conn::MAX_IOV;
use crate::metrics::Metrics;

/// Writes to a socket with `MSG_NOSIGNAL`: a peer that has gone yields `EPIPE` instead of
/// a `SIGPIPE` that would kill a host program that does not ignore it (C programs do
/// not; Rust and Python programs do). `writev`, which std and rustls use for vectored
/// writes, has no such flag.
pub(super) struct NoSigPipe<'a>(pub(super) &'a Stream);

/// A writer that counts the bytes it wrote (TLS records, for the metrics).
struct Counted<'a>(NoSigPipe<'a>, usize);

impl Write for Counted<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.0.write(bytes)?;
        self.1 += n;
        Ok(n)
    }

    fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let n = self.0.write_vectored(slices)?;
        self.1 += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where `MSG_NOSIGNAL` is missing (macOS), no flag; such systems have `SO_NOSIGPIPE`.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const SEND_FLAGS: libc::c_int = 0;

impl Write for NoSigPipe<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        socket2::SockRef::from(self.0).send_with_flags(bytes, SEND_FLAGS)
    }

    fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        socket2::SockRef::from(self.0).send_vectored_with_flags(slices, SEND_FLAGS)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Write what is queued; `Ok` also when the socket is full (the rest goes on the next
/// writable event).
pub(super) fn flush(pc: &mut PollConn, now: Instant, metrics: Option<&Metrics>) -> io::Result<()> {
    let conn = &mut pc.conn;
    if let Some(tls) = conn.tls.as_mut() {
        // Encrypt only as the socket takes it: rustls bounds what it buffers, so the
        // output high-water mark keeps holding back a client that does not read.
        let transport = conn.session.transport();
        loop {
            let mut counted = Counted(NoSigPipe(&pc.stream), 0);
            let written = tls.write_to(&mut counted);
            if let (Some(metrics), Some(transport)) = (metrics, transport) {
                metrics.sent(transport, counted.1);
            }
            written?;
            if tls.wants_write() || !conn.out.has_sendable() {
                conn.clocks.last_progress = now;
                return Ok(());
            }
            tls.seal(&mut conn.out);
        }
    }
    while conn.out.has_sendable() {
        let mut slices = [IoSlice::new(&[]); MAX_IOV];
        let count = conn.out.io_slices(&mut slices);
        match NoSigPipe(&pc.stream).write_vectored(&slices[..count]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                conn.out.advance(n);
                conn.count_sent(n, metrics);
                conn.clocks.last_progress = now;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
