// SPDX-License-Identifier: Apache-2.0
//! Engines move bytes between sockets and sessions; they hold no protocol logic.
//!
//! Each worker thread owns one listener (`SO_REUSEPORT`, so the kernel spreads new
//! connections), its connections and its buffers; workers share only the router, the
//! configuration and a few counters.

mod poll;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::error::Error;
use crate::server::{EngineKind, Shared};

/// One worker: a listener, its connections and its buffers, served by one thread.
///
/// [`crate::Server::spawn`] and [`crate::Server::run`] drive workers on threads of their
/// own; [`crate::Server::into_workers`] hands them to callers that bring their own threads
/// (the C API's `ucall_take_calls(server, thread_index)`).
pub struct Worker {
    inner: poll::PollWorker,
}

impl Worker {
    /// Serve until the server is stopped and this worker has drained.
    pub fn run(self) {
        self.inner.run();
    }

    /// Wait for events (at most `wait`, when given), serve what is ready and return.
    /// Returns `false` once the server has stopped and this worker has closed every
    /// connection; later calls return `false` at once.
    pub fn turn(&mut self, wait: Option<std::time::Duration>) -> bool {
        self.inner.turn(wait)
    }

    /// Hand over the procedures this worker serves.
    pub(crate) fn set_router(&mut self, router: Arc<crate::router::Router>) {
        self.inner.router = router;
    }
}

/// The engine that will run for `requested`, or why it cannot.
pub(crate) fn select(requested: EngineKind) -> Result<EngineKind, Error> {
    match requested {
        EngineKind::Auto | EngineKind::Poll => Ok(EngineKind::Poll),
        EngineKind::Uring => Err(Error::engine(
            "the uring engine is not available in this build; use engine = auto or poll (UCALL_ENGINE=poll)",
        )),
    }
}

/// Open one listener per worker on `addr` and prepare the workers.
pub(crate) fn bind_workers(
    engine: EngineKind,
    shared: &Arc<Shared>,
    addr: SocketAddr,
) -> Result<(Vec<Worker>, SocketAddr), Error> {
    debug_assert_eq!(engine, EngineKind::Poll);
    let mut workers = Vec::with_capacity(shared.config.threads);
    let mut bound = addr;
    for index in 0..shared.config.threads {
        let listener = listen(bound)?;
        if index == 0 {
            bound = listener
                .local_addr()
                .map_err(|e| Error::io("cannot read the bound address", e))?;
        }
        workers.push(Worker {
            inner: poll::PollWorker::new(Arc::clone(shared), listener)?,
        });
    }
    poll::register_wakers(shared, &workers.iter().map(|w| &w.inner).collect::<Vec<_>>());
    Ok((workers, bound))
}

/// Wake every worker so it notices a stop request.
pub(crate) fn wake_all(shared: &Shared) {
    poll::wake_all(shared);
}

/// A non-blocking listening socket with `SO_REUSEPORT`, so that each worker has its own.
fn listen(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    use socket2::{Domain, Protocol, Socket, Type};
    let fail = |what: &str, e| Error::bind(format!("cannot {what} {addr}"), e);
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| fail("open a socket for", e))?;
    socket
        .set_reuse_address(true)
        .map_err(|e| fail("set SO_REUSEADDR on", e))?;
    #[cfg(unix)]
    socket
        .set_reuse_port(true)
        .map_err(|e| fail("set SO_REUSEPORT on", e))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true).map_err(|e| fail("set IPV6_V6ONLY on", e))?;
    }
    socket.set_nonblocking(true).map_err(|e| fail("make non-blocking", e))?;
    socket.bind(&addr.into()).map_err(|e| fail("bind", e))?;
    socket.listen(4096).map_err(|e| fail("listen on", e))?;
    Ok(socket.into())
}

/// Raise the soft open-file limit towards the hard one so that `max_connections` fit.
pub(crate) fn raise_fd_limit(max_connections: usize) {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own; RLIMIT_NOFILE is a valid resource.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        let wanted = (max_connections as libc::rlim_t)
            .saturating_add(256)
            .min(limit.rlim_max);
        if wanted > limit.rlim_cur {
            limit.rlim_cur = wanted;
            // SAFETY: setrlimit reads the struct we own; failure only leaves the old limit.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        }
    }
}
