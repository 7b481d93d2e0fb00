// SPDX-License-Identifier: Apache-2.0
//! The process's deadline watcher: at a call's deadline, what watches it ([`Expire`]) is
//! told, so that the caller hears "deadline exceeded" at once whatever the call is doing
//! (a deferred reply with a deadline races its watcher: whichever comes first answers).
//! Below the call layers: it knows only the [`Expire`] it is handed, never who made it.
//!
//! One thread for the process sleeps until the earliest deadline; it starts with the first
//! call that has a deadline, and calls without one never touch it. A call answered in time
//! leaves its entry behind until the entries double (the Python clients give every call
//! their 30 s `timeout`: at 100,000 calls a second, 30 s of entries would be 3 million);
//! they are swept then, which costs each call a constant share.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Instant;

/// What a deadline ends: told once, at the deadline, if still alive then.
pub trait Expire: Send + Sync {
    /// The deadline has passed.
    fn expire(&self);
}

/// Tell `what` at `at`, unless it has been dropped by then.
pub fn watch(at: Instant, what: Weak<dyn Expire>) {
    watcher().watch(at, what);
}

struct Entry {
    at: Instant,
    what: Weak<dyn Expire>,
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

/// The deadlines awaited, earliest first, and the thread that tells them.
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

    fn watch(&self, at: Instant, what: Weak<dyn Expire>) {
        let mut entries = self.lock();
        if entries.len() >= self.sweep_at.load(Ordering::Relaxed) {
            // Calls answered in time dropped what their entries point to.
            entries.retain(|Reverse(entry)| entry.what.strong_count() > 0);
            self.sweep_at
                .store((2 * entries.len()).max(SWEEP_FROM), Ordering::Relaxed);
        }
        let earliest = entries.peek().is_none_or(|Reverse(first)| at < first.at);
        entries.push(Reverse(Entry { at, what }));
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
                    if let Some(what) = entry.what.upgrade() {
                        drop(entries);
                        what.expire();
                        drop(what);
                        entries = self.lock();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    struct Flag(AtomicBool);

    impl Expire for Flag {
        fn expire(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn tells_what_is_alive_at_its_deadline() {
        let soon = Arc::new(Flag(AtomicBool::new(false)));
        let later = Arc::new(Flag(AtomicBool::new(false)));
        let now = Instant::now();
        let soon_weak: Weak<dyn Expire> = Arc::downgrade(&soon) as Weak<dyn Expire>;
        let later_weak: Weak<dyn Expire> = Arc::downgrade(&later) as Weak<dyn Expire>;
        watch(now + Duration::from_secs(60), later_weak);
        watch(now + Duration::from_millis(20), soon_weak);
        let until = Instant::now() + Duration::from_secs(10);
        while !soon.0.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            soon.0.load(Ordering::SeqCst),
            "told at its deadline, before a later one"
        );
        assert!(!later.0.load(Ordering::SeqCst), "not before its own");
    }
}
