// SPDX-License-Identifier: Apache-2.0
//! Receiving: a multishot receive per connection from the provided-buffer ring, one-shot
//! receives straight into the input for a large message, a buffer of its own when the
//! ring runs dry; what arrives goes to the connection ([`crate::engine::conn::Conn`]).

use std::ptr;
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue};

use super::ring::{short_generation, token, Op};
use super::{UringConn, UringWorker, BUFFER_GROUP, BULK_MIN, BULK_ROOM, ONE_SHOT_SPELL, RECV_BUFFER_SIZE};
use crate::engine::conn::Phase;
use crate::session::Context;
use io_uring::types;

impl UringWorker {
    pub(super) fn arm_recv(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        let fd = types::Fixed(conn.file);
        let entry = if wants_bulk(conn) {
            let mut input = std::mem::take(&mut conn.core.input);
            crate::engine::reserve_input(&mut input, &conn.core.session, BULK_ROOM);
            let limit = crate::engine::read_limit(&input, &conn.core.session);
            let room = input.spare_capacity_mut();
            let (at, len) = (
                room.as_mut_ptr().cast::<u8>(),
                u32::try_from(room.len().min(limit)).unwrap_or(u32::MAX),
            );
            conn.bulk().receiving = Some(input);
            conn.one_shot = ONE_SHOT_SPELL;
            opcode::Recv::new(fd, at, len).build()
        } else if let Some(own) = conn.bulk.as_mut().and_then(|bulk| bulk.own_buffer.as_mut()) {
            let at = own.spare_capacity_mut().as_mut_ptr().cast::<u8>();
            opcode::Recv::new(fd, at, RECV_BUFFER_SIZE).build()
        } else if self.multishot_recv && conn.one_shot == 0 {
            opcode::RecvMulti::new(fd, BUFFER_GROUP).build()
        } else {
            opcode::Recv::new(fd, ptr::null_mut(), RECV_BUFFER_SIZE)
                .buf_group(BUFFER_GROUP)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        };
        conn.recv_armed = true;
        conn.recv_cancelled = false;
        let entry = entry.user_data(token(Op::Recv, key, short_generation(conn.core.generation)));
        // SAFETY: the receive writes only into buffers it takes from the worker's buffer
        // ring, which outlives every operation; each is the kernel's until a completion
        // names it. A receive into the input writes only into the spare capacity of
        // `conn.receiving`, which stays untouched until its completion, and one into a
        // buffer of its own likewise into `conn.own_buffer` (see the module's notes on
        // ownership).
        unsafe { self.push(entry) };
    }

    pub(super) fn on_recv(&mut self, key: usize, generation: u32, result: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let shared = &*self.shared;
        let now = self.now;
        let mut matched = false;
        let mut switch_to_bulk = false;
        if let Some(conn) = self
            .conns
            .get_mut(key)
            .filter(|conn| short_generation(conn.core.generation) == generation)
        {
            matched = true;
            if !cqueue::more(flags) {
                conn.recv_armed = false;
            }
            // A buffer of its own is what this receive read into, unless it went into the
            // input (`arm_recv` takes that first).
            let own = conn
                .bulk
                .as_mut()
                .filter(|bulk| bulk.receiving.is_none())
                .and_then(|bulk| bulk.own_buffer.take())
                .map(|mut own| {
                    // SAFETY: the receive initialised the first `result` bytes of the spare
                    // capacity (it cannot exceed the capacity it was given).
                    unsafe { own.set_len(usize::try_from(result).unwrap_or(0)) };
                    own
                });
            let in_flight = conn.in_flight();
            let mut ctx = self.serving.context(shared, key, conn.core.generation);
            if let Some(input) = conn.bulk.as_mut().and_then(|bulk| bulk.receiving.take()) {
                received_into_input(conn, input, result, &mut ctx, now);
            } else if !conn.dead {
                match result {
                    n if n > 0 => {
                        let bytes = match &own {
                            Some(own) => own.as_slice(),
                            None => self.bufs.bytes(
                                bid.expect("invariant: a receive with bytes names its buffer"),
                                n.unsigned_abs() as usize,
                            ),
                        };
                        if conn.core.tls.is_none() {
                            conn.core.deliver(bytes, &mut ctx, now, in_flight);
                        } else if conn.core.receive_tls(bytes, &mut ctx, now, in_flight).is_err() {
                            // The alert rustls queued goes out, then the close.
                            conn.tls_done = true;
                        }
                        // A large message under way: the rest goes straight into the input
                        // once this multishot receive has ended.
                        let bulk = wants_bulk(conn);
                        switch_to_bulk = conn.recv_armed && !conn.recv_cancelled && bulk;
                        if !bulk && !conn.recv_armed {
                            conn.one_shot = conn.one_shot.saturating_sub(1);
                        }
                    }
                    0 => conn.core.input_ended = true,
                    e if e == -libc::ENOBUFS => {
                        conn.bulk().own_buffer = Some(Vec::with_capacity(RECV_BUFFER_SIZE as usize));
                    }
                    e if e == -libc::ECANCELED => {}
                    e if e == -libc::EINVAL && self.multishot_recv => {
                        // A kernel without multishot receive: one receive per completion.
                        self.multishot_recv = false;
                    }
                    _ => conn.core.phase = Phase::Failed,
                }
            }
            if switch_to_bulk {
                conn.recv_cancelled = true;
            }
        }
        if let Some(bid) = bid {
            self.bufs.recycle(bid);
        }
        if switch_to_bulk {
            self.cancel(token(Op::Recv, key, generation));
        }
        if matched {
            self.touch(key);
        }
    }
}

/// Whether the next receive of `conn` should go straight into its input: an unfinished
/// message of at least [`BULK_MIN`] bytes is buffered or announced, and nothing else holds
/// the input.
fn wants_bulk(conn: &UringConn) -> bool {
    let core = &conn.core;
    (core.input.len() >= BULK_MIN || core.session.input_wanted() >= BULK_MIN)
        && core.tls.is_none()
        && core.phase == Phase::Open
        && !conn.dead
}

/// A receive straight into the input has completed (`result` as the kernel gave it): the
/// input is back in place with the bytes received, which go to the session.
fn received_into_input(conn: &mut UringConn, mut input: Vec<u8>, result: i32, ctx: &mut Context<'_>, now: Instant) {
    let read = usize::try_from(result).unwrap_or(0);
    debug_assert!(read <= input.capacity() - input.len() && conn.core.input.is_empty());
    // SAFETY: the receive initialised the first `read` bytes of the spare capacity.
    unsafe { input.set_len(input.len() + read) };
    conn.core.input = input;
    if conn.dead {
        return;
    }
    match result {
        n if n > 0 => {
            let in_flight = conn.in_flight();
            conn.core.received_in_place(read, ctx, now, in_flight);
        }
        0 => conn.core.input_ended = true,
        e if e == -libc::ECANCELED => {}
        _ => conn.core.phase = Phase::Failed,
    }
}
