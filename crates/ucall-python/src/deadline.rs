// SPDX-License-Identifier: Apache-2.0
//! Deadlines of calls to plain (`def`) handlers: at its deadline a call's caller gets
//! "deadline exceeded" at once, whether the call still waits for the GIL or runs; a result
//! that comes later is dropped. (`async def` handlers are cancelled on the asyncio loop
//! instead, `ucall._server._bounded`.)
//!
//! One thread for the process sleeps until the earliest deadline; it exists once a call
//! with a deadline has come, and calls without one never touch it. A call answered in time
//! leaves its entry behind until the entries double (the Python clients give every call
//! their 30 s `timeout`: at 100,000 calls a second, 30 s of entries would be 3 million);
//! they are swept then, which costs each call a constant share.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Instant;

use ucall_core::{Deferred, RpcError};

/// The reply of a call with a deadline: whoever takes it first answers.
pub struct Bounded {
    reply: Mutex<Option<Deferred>>,
    deadline: Instant,
}

impl Bounded {
    /// The reply `reply`, due by `deadline`; the watcher answers it then if nobody has.
    pub fn new(reply: Deferred, deadline: Instant) -> Arc<Self> {
        let bounded = Arc::new(Bounded {
            reply: Mutex::new(Some(reply)),
            deadline,
        });
        watcher().watch(&bounded);
        bounded
    }

    /// The reply, unless the deadline answered it already.
    pub fn take(&self) -> Option<Deferred> {
        self.reply.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// When the call's caller stops waiting.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has passed.
    pub fn is_past(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// The error a caller gets at a call's deadline.
pub fn exceeded() -> RpcError {
    RpcError::deadline_exceeded()
}

struct Entry {
    at: Instant,
    reply: Weak<Bounded>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

/// The deadlines awaited, earliest first, and the thread that answers them.
struct Watcher {
    entries: Mutex<BinaryHeap<Reverse<Entry>>>,
    changed: Condvar,
    /// Sweep the entries of calls answered in time once there are this many; read and
    /// written under `entries`' lock.
    sweep_at: AtomicUsize,
}

/// The fewest entries worth a sweep.
const SWEEP_FROM: usize = 1024;

fn watcher() -> &'static Watcher {
    static WATCHER: OnceLock<&'static Watcher> = OnceLock::new();
    WATCHER.get_or_init(|| {
        let watcher: &'static Watcher = Box::leak(Box::new(Watcher {
            entries: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
            sweep_at: AtomicUsize::new(SWEEP_FROM),
        }));
        // A thread that cannot start leaves deadlines to the calls themselves: a late
        // result is still dropped, only the early answer is lost.
        let _ = std::thread::Builder::new()
            .name("ucall-deadlines".into())
            .spawn(move || watcher.run());
        watcher
    })
}

impl Watcher {
    fn lock(&self) -> MutexGuard<'_, BinaryHeap<Reverse<Entry>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watch(&self, bounded: &Arc<Bounded>) {
        let mut entries = self.lock();
        if entries.len() >= self.sweep_at.load(Ordering::Relaxed) {
            // Calls answered in time dropped their `Bounded`: nothing is left to answer.
            entries.retain(|Reverse(entry)| entry.reply.strong_count() > 0);
            self.sweep_at
                .store((2 * entries.len()).max(SWEEP_FROM), Ordering::Relaxed);
        }
        let earliest = entries.peek().is_none_or(|Reverse(first)| bounded.deadline < first.at);
        entries.push(Reverse(Entry {
            at: bounded.deadline,
            reply: Arc::downgrade(bounded),
        }));
        drop(entries);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut entries = self.lock();
        loop {
            let now = Instant::now();
            match entries.peek().map(|Reverse(first)| first.at) {
                None => entries = self.changed.wait(entries).unwrap_or_else(PoisonError::into_inner),
                Some(at) if at > now => {
                    entries = self
                        .changed
                        .wait_timeout(entries, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                Some(_) => {
                    let Some(Reverse(entry)) = entries.pop() else { continue };
                    // Answered and gone already, or answered now: the caller stops waiting.
                    if let Some(reply) = entry.reply.upgrade().and_then(|bounded| bounded.take()) {
                        drop(entries);
                        reply.error_now(exceeded());
                        entries = self.lock();
                    }
                }
            }
        }
    }
}
