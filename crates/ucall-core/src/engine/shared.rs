// SPDX-License-Identifier: Apache-2.0
//! What every worker of one server shares: the configuration, the stop flag, the count of
//! open connections, TLS, and the wakers that interrupt the workers' waits.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::Config;
use crate::limit::PeerCaps;

/// State shared by every worker of one server.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) stopping: AtomicBool,
    pub(crate) connections: AtomicUsize,
    /// The connections of each peer address, under `max_connections_per_peer`.
    pub(crate) peer_caps: Option<Arc<PeerCaps>>,
    /// TLS, when configured: the rustls configuration and where TLS listens.
    pub(crate) tls: Option<TlsShared>,
    /// One per worker, set once the workers exist, to interrupt their waits.
    pub(crate) wakers: OnceLock<Vec<Arc<mio::Waker>>>,
    /// The same for the workers of the `uring` engine.
    #[cfg(target_os = "linux")]
    pub(crate) uring_wakers: OnceLock<Vec<Arc<super::EventFd>>>,
    /// When an accept failure was last reported, and how many went unreported since.
    accept_failures: Mutex<(Option<Instant>, u64)>,
    /// What the graceful stop did, for its last log line.
    pub(crate) drain: DrainCounts,
}

/// Calls answered later (deferred: Python handlers, `Reply::defer`) whose replies came
/// while the server stopped, and those still unanswered when their worker gave up
/// (`shutdown_timeout`) and closed their connections.
#[derive(Debug, Default)]
pub(crate) struct DrainCounts {
    pub(crate) answered: AtomicUsize,
    pub(crate) cut_off: AtomicUsize,
}

impl Shared {
    /// The state of a server about to bind its workers, with `config` in force.
    pub(crate) fn new(config: Config, tls: Option<TlsShared>) -> Self {
        Shared {
            peer_caps: config.max_connections_per_peer.map(PeerCaps::new),
            config,
            stopping: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            tls,
            wakers: OnceLock::new(),
            #[cfg(target_os = "linux")]
            uring_wakers: OnceLock::new(),
            accept_failures: Mutex::new((None, 0)),
            drain: DrainCounts::default(),
        }
    }

    /// `count` deferred replies came in one turn: answered during the drain once stopping.
    pub(crate) fn replies_arrived(&self, count: usize) {
        if count > 0 && self.stopping.load(Ordering::Relaxed) {
            self.drain.answered.fetch_add(count, Ordering::Relaxed);
        }
    }

    /// A worker closed its connections with `unanswered` deferred calls still awaited.
    pub(crate) fn gave_up(&self, unanswered: usize) {
        if unanswered > 0 && self.stopping.load(Ordering::Relaxed) {
            self.drain.cut_off.fetch_add(unanswered, Ordering::Relaxed);
        }
    }

    /// Report an event of [`super::EventLog`].
    pub(crate) fn report(&self, event: &str, error: &str) {
        self.config.events.report(event, error);
    }

    /// Report a failed accept, at most once a second: out of descriptors, every accept
    /// fails, and a line each would flood the log.
    pub(crate) fn report_accept_failure(&self, error: &std::io::Error) {
        let now = Instant::now();
        let mut last = self
            .accept_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (reported, unreported) = &mut *last;
        if reported.is_some_and(|at| now.duration_since(at) < Duration::from_secs(1)) {
            *unreported += 1;
            return;
        }
        let text = match std::mem::take(unreported) {
            0 => error.to_string(),
            more => format!("{error} ({more} more since the last report)"),
        };
        *reported = Some(now);
        drop(last);
        self.report("accept failed", &text);
    }
}

/// TLS state shared by the workers.
pub(crate) struct TlsShared {
    pub(crate) config: Arc<rustls::ServerConfig>,
    /// `Some`: TLS has a port of its own (the workers open its listeners, and the first
    /// records the address it bound).
    pub(crate) separate: Option<Mutex<SocketAddr>>,
}
