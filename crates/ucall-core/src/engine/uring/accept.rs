// SPDX-License-Identifier: Apache-2.0
//! Taking in connections: a multishot accept per listener, metered to one one-shot
//! accept per turn while a flood lasts ([`Accepting`]).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types};

use super::ring::{short_generation, token, Op};
use super::{UringConn, UringWorker, SCAN_GRANULARITY};
use crate::buffer::OutBuf;
use crate::engine::conn::Conn;
use crate::engine::UNIX_SOCKET;
use crate::tls::TlsSession;

/// An accept's token holds the listener (`PLAIN_PORT`, `TLS_PORT`, `UNIX_SOCKET`) as its
/// slot, and its kind as its generation.
pub(super) const MULTISHOT: u32 = 0;
pub(super) const ONE_SHOT: u32 = 1;

/// How long a metered listener's accepts must find no connection waiting before the
/// flood is taken to be over (see [`Accepting`]).
const CALM: Duration = Duration::from_millis(250);

/// One-shot accepts armed per turn while metered (one where every accept must say from
/// where: a listener has one address buffer). A share of poll's
/// [`crate::engine::ACCEPTS_PER_TURN`]: one a turn starved the backlog left when a flood
/// ends (each turn a wake-up, on a loaded host milliseconds apart).
const METERED_SHARE: usize = 8;

/// How one listener takes in connections.
///
/// A multishot accept takes every connection waiting, the whole listen backlog at once.
/// Under a flood (connections that each queue much work, faster than the worker can serve
/// them) that left thousands open, and every turn went to the newest of them while the
/// clients already served waited: a Python server answered its other client 170 times in
/// 5 s. So a turn that takes in [`crate::engine::ACCEPTS_PER_TURN`] connections or more ends the
/// multishot accept, and the listener is then *metered*: [`METERED_SHARE`] one-shot
/// accepts per turn, the rest waiting in the backlog, until its accepts have found no
/// connection waiting for [`CALM`].
///
/// Ending the metering at the first turn whose accept found nobody waiting let the
/// multishot accept back in between two of the flood's connects: it took the whole
/// backlog that refilled during the next (long) turn, thousands at once (3,383 in one
/// turn, 4,000 to 6,000 accepted and waiting to be started), and the flood's clients,
/// their connections taken, made more: about twice the connections poll took in the same
/// time (7,800 to 11,200 against 4,300 to 4,500 in 2 s, `tests/accept_flood.rs`), whose
/// work then kept the steady client waiting longer than on poll.
#[derive(Debug, Default)]
pub(super) struct Accepting {
    /// A multishot accept is armed.
    multishot: bool,
    /// One-shot accepts armed.
    one_shots: usize,
    /// A flood is on: one connection per turn.
    metered: bool,
    /// While metered: when an accept last found a connection waiting.
    busy_at: Option<Instant>,
    /// Connections accepted since the last turn's end.
    this_turn: usize,
    /// The peer's address is wanted: one-shot accepts only, each with its address (a
    /// multishot accept returns none: it has one address buffer for every connection).
    addressed: bool,
}

/// Where a one-shot accept writes the peer's address.
pub(super) struct PeerAddr {
    addr: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl Default for PeerAddr {
    fn default() -> Self {
        PeerAddr {
            // SAFETY: `sockaddr_storage` is plain bytes; all zeroes is a valid (unspecified) address.
            addr: unsafe { std::mem::zeroed() },
            len: 0,
        }
    }
}

impl PeerAddr {
    /// Ready for an accept to write into: room for any address.
    fn arm(&mut self) -> (*mut libc::sockaddr, *mut libc::socklen_t) {
        self.len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_storage>()).unwrap_or(0);
        (ptr::from_mut(&mut self.addr).cast(), ptr::from_mut(&mut self.len))
    }

    /// The address the completed accept wrote, if it is an IP one.
    fn read(&self) -> Option<SocketAddr> {
        let len = usize::try_from(self.len).ok()?;
        match i32::from(self.addr.ss_family) {
            libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
                // SAFETY: the family says a `sockaddr_in` was written, and it fits (checked above).
                let v4 = unsafe { &*ptr::from_ref(&self.addr).cast::<libc::sockaddr_in>() };
                let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(v4.sin_port))))
            }
            libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
                // SAFETY: the family says a `sockaddr_in6` was written, and it fits (checked above).
                let v6 = unsafe { &*ptr::from_ref(&self.addr).cast::<libc::sockaddr_in6>() };
                let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(v6.sin6_port),
                    v6.sin6_flowinfo,
                    v6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

impl Accepting {
    /// An accept completed: `accepted` a connection or not, and `ended` it (a one-shot
    /// accept always does), so that it is no longer armed.
    pub(super) fn completed(&mut self, one_shot: bool, ended: bool, accepted: bool) {
        if one_shot {
            self.one_shots = self.one_shots.saturating_sub(1);
        } else if ended {
            self.multishot = false;
        }
        self.this_turn += usize::from(accepted);
    }

    /// At a turn's end (`now`): whether to cancel the multishot accept (a flood began), and
    /// which accepts to arm, if any are missing: ([`MULTISHOT`], 1) or ([`ONE_SHOT`], how many).
    pub(super) fn next_turn(&mut self, now: Instant) -> (bool, Option<(u32, usize)>) {
        if self.addressed {
            self.this_turn = 0;
            let arm = (self.one_shots == 0).then_some((ONE_SHOT, 1));
            self.one_shots = self.one_shots.max(1);
            return (std::mem::take(&mut self.multishot), arm);
        }
        let accepted = std::mem::take(&mut self.this_turn);
        let mut cancel_multishot = false;
        if accepted >= crate::engine::ACCEPTS_PER_TURN && !self.metered {
            self.metered = true;
            self.busy_at = Some(now);
            cancel_multishot = self.multishot;
        } else if self.metered && accepted > 0 {
            self.busy_at = Some(now);
        } else if self.metered
            && self.one_shots > 0
            && self
                .busy_at
                .is_none_or(|busy| now.saturating_duration_since(busy) >= CALM)
        {
            // The one-shot accepts have found no connection waiting for a while: the flood is over.
            self.metered = false;
            self.busy_at = None;
        }
        let arm = if self.metered && self.one_shots < METERED_SHARE {
            let missing = METERED_SHARE - self.one_shots;
            self.one_shots = METERED_SHARE;
            Some((ONE_SHOT, missing))
        } else if !self.metered && !self.multishot {
            self.multishot = true;
            Some((MULTISHOT, 1))
        } else {
            None
        };
        (cancel_multishot, arm)
    }
}

impl UringWorker {
    /// Start the connections accepted beyond earlier turns' shares, up to a turn's share.
    pub(super) fn start_accepted(&mut self) {
        for _ in 0..crate::engine::ACCEPTS_PER_TURN {
            let Some((key, generation)) = self.unstarted.pop_front() else {
                return;
            };
            let turns = self.turns;
            if let Some(conn) = self.conn_of(key, generation).filter(|conn| !conn.dead) {
                conn.accepted_turn = turns;
                self.serve(key);
            }
        }
    }

    /// Arm each listener's accept for the next turn: the multishot one, or while a flood
    /// lasts a one-shot one (see [`Accepting`]).
    pub(super) fn arm_accept(&mut self) {
        for port in 0..self.listeners.len() {
            let Some(fd) = self.listeners[port].as_ref().map(AsRawFd::as_raw_fd) else {
                continue;
            };
            // A Unix peer has no address worth keeping (clients' sockets are unnamed).
            // Capped per peer: every accept must say from where.
            let wanted = self.serving.router.keeps_peer() || self.shared.peer_caps.is_some();
            self.accepting[port].addressed = wanted && port != UNIX_SOCKET;
            let (cancel_multishot, arm) = self.accepting[port].next_turn(self.now);
            if cancel_multishot {
                self.cancel(token(Op::Accept, port, MULTISHOT));
            }
            let Some((kind, count)) = arm else { continue };
            for _ in 0..count {
                self.arm_one_accept(port, fd, kind);
            }
        }
        self.accept_retry = None;
    }

    /// Arm one accept of `kind` on listener `port` (descriptor `fd`).
    fn arm_one_accept(&mut self, port: usize, fd: RawFd, kind: u32) {
        let entry = if kind == ONE_SHOT {
            let (addr, len) = if self.accepting[port].addressed {
                self.accept_addrs[port].arm()
            } else {
                (ptr::null_mut(), ptr::null_mut())
            };
            opcode::Accept::new(types::Fd(fd), addr, len)
                .file_index(Some(types::DestinationSlot::auto_target()))
                .build()
        } else {
            opcode::AcceptMulti::new(types::Fd(fd))
                .allocate_file_index(true)
                .build()
        };
        let entry = entry.user_data(token(Op::Accept, port, kind));
        // SAFETY: an accept points to no memory, or to its listener's boxed `PeerAddr`,
        // which the worker keeps (after the ring) and rewrites only when arming the next
        // one-shot accept, after this one's completion (an addressed listener has one
        // armed at a time); the listener's descriptor is held by the kernel's own
        // reference while the accept is armed.
        unsafe { self.push(entry) };
    }

    /// Whether the listeners are still up (until `stop_accepting`).
    pub(super) fn listening(&self) -> bool {
        self.listeners.iter().any(Option::is_some)
    }

    /// Stop accepting: drop the listeners, cancelling their accepts. The last worker to
    /// let go of the Unix socket removes its file.
    pub(super) fn stop_accepting(&mut self) {
        self.unix_file = None;
        for port in 0..self.listeners.len() {
            if self.listeners[port].take().is_none() {
                continue;
            }
            let Accepting {
                multishot, one_shots, ..
            } = self.accepting[port];
            // A cancel stops one of the accepts its token names.
            for (armed, kind) in [(usize::from(multishot), MULTISHOT), (one_shots, ONE_SHOT)] {
                for _ in 0..armed {
                    self.cancel(token(Op::Accept, port, kind));
                }
            }
        }
        self.accept_retry = None;
    }

    /// A connection accepted on listener `port` (the slot of the accept's token).
    pub(super) fn on_accept(&mut self, port: usize, one_shot: bool, result: i32, flags: u32) {
        let Some(accepting) = self.accepting.get_mut(port) else {
            return;
        };
        let ended = one_shot || !cqueue::more(flags);
        accepting.completed(one_shot, ended, result >= 0);
        if result < 0 {
            if ended
                && !matches!(
                    -result,
                    libc::ECANCELED | libc::EINTR | libc::EAGAIN | libc::ECONNABORTED
                )
            {
                // Out of registered files or memory: retry after a close or a moment.
                self.accept_retry = Some(self.now + SCAN_GRANULARITY);
                if result != -libc::ENFILE {
                    self.shared
                        .report_accept_failure(&io::Error::from_raw_os_error(-result));
                }
            }
            return;
        }
        let file = result.unsigned_abs();
        let peer = if one_shot && self.accepting[port].addressed {
            self.accept_addrs[port].read()
        } else {
            None
        };
        let admitted = self
            .listening()
            .then(|| crate::engine::admit(&self.shared, self.serving.metrics(), peer))
            .flatten();
        let Some(peer_slot) = admitted else {
            self.close_file(file, 0, 0);
            return;
        };
        let tls = match crate::engine::tls_of(&self.shared, port) {
            Some(tls) => match TlsSession::new(&tls.config) {
                Ok(session) => Some(Box::new(session)),
                Err(_) => {
                    self.shared.connections.fetch_sub(1, Ordering::AcqRel);
                    self.close_file(file, 0, 0);
                    return;
                }
            },
            None => None,
        };
        self.generation += 1;
        let now = self.now;
        let mut core = Conn::new(self.generation, tls, peer, now);
        core.peer_slot = peer_slot;
        let key = self.conns.insert(UringConn {
            file,
            core,
            one_shot: 0,
            sending: OutBuf::new(),
            sending_bytes: 0,
            bulk: None,
            msg: None,
            recv_armed: false,
            recv_cancelled: false,
            send_inflight: false,
            zc_notifs: 0,
            dead: false,
            cut_at: None,
            touched: false,
            accepted_turn: self.turns,
            tls_done: false,
            unix_socket: port == UNIX_SOCKET,
            shutdown_inflight: false,
            close_after_shutdown: false,
        });
        // A multishot accept goes on taking connections while the worker is busy: on a
        // loaded machine thousands came in one turn, and serving them all at once kept
        // the clients already served waiting for seconds. Beyond a turn's share they are
        // started on the next turns, a share each.
        let this_turn: usize = self.accepting.iter().map(|accepting| accepting.this_turn).sum();
        if this_turn > crate::engine::ACCEPTS_PER_TURN {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.accepted_turn = u64::MAX;
            }
            self.unstarted.push_back((key, short_generation(self.generation)));
        } else {
            // `serve` arms the receive, or, while the worker is full, holds the connection
            // back unread: a multishot receive would take in all the client has sent.
            self.serve(key);
        }
        let config = &self.shared.config;
        self.schedule_scan(now + config.idle_timeout.min(config.header_timeout));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ACCEPTS_PER_TURN;

    #[test]
    fn a_flood_meters_the_accepts_until_the_backlog_stays_empty() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let metered = Some((ONE_SHOT, METERED_SHARE));
        let mut accepting = Accepting::default();
        assert_eq!(
            accepting.next_turn(at(0)),
            (false, Some((MULTISHOT, 1))),
            "multishot at start"
        );
        for _ in 1..ACCEPTS_PER_TURN {
            accepting.completed(false, false, true);
        }
        assert_eq!(
            accepting.next_turn(at(1)),
            (false, None),
            "below a flood: multishot stays"
        );
        for _ in 0..ACCEPTS_PER_TURN {
            accepting.completed(false, false, true);
        }
        assert_eq!(
            accepting.next_turn(at(2)),
            (true, metered),
            "a flood: cancel, one-shots"
        );
        // The multishot's cancellation arrives; each turn's one-shot accepts take their share.
        accepting.completed(false, true, false);
        for ms in 3..6 {
            for _ in 0..METERED_SHARE {
                accepting.completed(true, true, true);
            }
            assert_eq!(accepting.next_turn(at(ms)), (false, metered), "still metered");
        }
        // Fewer waiting than the share: only those accepts are armed again.
        accepting.completed(true, true, true);
        assert_eq!(accepting.next_turn(at(6)), (false, Some((ONE_SHOT, 1))), "one taken");
        // Turns whose accepts are all still armed (nobody was waiting), but not for long:
        // a pause between two of the flood's connects keeps the metering.
        assert_eq!(accepting.next_turn(at(7)), (false, None), "a pause");
        assert_eq!(accepting.next_turn(at(6 + 200)), (false, None), "a longer pause");
        accepting.completed(true, true, true);
        assert_eq!(
            accepting.next_turn(at(210)),
            (false, Some((ONE_SHOT, 1))),
            "the flood goes on"
        );
        // Nobody waiting for CALM since the last connection: the flood is over.
        assert_eq!(accepting.next_turn(at(300)), (false, None), "calm for 90 ms");
        assert_eq!(
            accepting.next_turn(at(210) + CALM),
            (false, Some((MULTISHOT, 1))),
            "the flood is over"
        );
        assert!(accepting.one_shots == METERED_SHARE && accepting.multishot && !accepting.metered);
        accepting.completed(true, true, true);
        assert_eq!(
            accepting.next_turn(at(500)),
            (false, None),
            "left-over one-shots are not armed again"
        );
        assert_eq!(accepting.one_shots, METERED_SHARE - 1);
    }
}
