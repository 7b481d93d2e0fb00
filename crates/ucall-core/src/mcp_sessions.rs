// SPDX-License-Identifier: Apache-2.0
//! MCP sessions, when the server mints them (Streamable HTTP of 2025-03-26 .. 2025-11-25,
//! "Session Management"): an id issued with the `initialize` result, required and checked
//! on every later request of the session, ended by `DELETE`; and each session's tool calls
//! under way, so that a `notifications/cancelled` posted on another connection reaches the
//! call it names, and only it, as its caller going away.
//!
//! The table is the process's: a session lives in the process that issued it (one
//! process, or a load balancer that keeps a session on one backend).

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::cancellation::Cancellation;

/// Most sessions held at once; opening one more ends the one idle longest.
pub const MAX_SESSIONS: usize = 10_000;

/// A session idle this long is ended when a new one is opened.
pub const IDLE: Duration = Duration::from_secs(3600);

/// The sessions of one server.
#[derive(Debug, Default)]
pub struct Sessions {
    live: Mutex<HashMap<Box<str>, Session>>,
}

#[derive(Debug)]
struct Session {
    last_used: Instant,
    /// Its tool calls under way (gone once their replies are written).
    calls: Vec<Weak<InFlight>>,
}

/// A session's tool call under way: its request id and its own cancellation. The reply
/// keeps it until written; the session's list only names it.
#[derive(Debug)]
pub struct InFlight {
    id: Box<str>,
    cancellation: Cancellation,
}

impl InFlight {
    /// Whether the client cancelled the call: its reply is not sent.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for InFlight {}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Session>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open a session: its id, 32 hexadecimal digits of the system's random source
    /// ("globally unique and cryptographically secure"), or `None` when that cannot be read.
    pub fn open(&self) -> Option<Box<str>> {
        let mut random = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut source| source.read_exact(&mut random))
            .ok()?;
        let id: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        let now = Instant::now();
        let mut live = self.lock();
        if live.len() >= MAX_SESSIONS {
            live.retain(|_, session| now.duration_since(session.last_used) < IDLE);
        }
        if live.len() >= MAX_SESSIONS {
            let oldest = live
                .iter()
                .min_by_key(|(_, session)| session.last_used)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                live.remove(&oldest);
            }
        }
        live.insert(
            id.clone().into_boxed_str(),
            Session {
                last_used: now,
                calls: Vec::new(),
            },
        );
        Some(id.into_boxed_str())
    }

    /// Whether `id` names a session open now (its use is noted).
    pub fn touch(&self, id: &str) -> bool {
        match self.lock().get_mut(id) {
            Some(session) => {
                session.last_used = Instant::now();
                true
            }
            None => false,
        }
    }

    /// End the session `id`; whether it was open. Its calls under way go on.
    pub fn close(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// Note the tool call `request_id` (raw JSON, as sent) of session `session` under
    /// way, which `cancellation` cancels; the returned handle is kept with its reply.
    pub fn track(&self, session: &str, request_id: &str, cancellation: Cancellation) -> Option<Arc<InFlight>> {
        let mut live = self.lock();
        let calls = &mut live.get_mut(session)?.calls;
        calls.retain(|call| call.strong_count() > 0);
        let call = Arc::new(InFlight {
            id: request_id.trim().into(),
            cancellation,
        });
        calls.push(Arc::downgrade(&call));
        Some(call)
    }

    /// The client cancelled its request `request_id` (raw JSON) of `session`: its call,
    /// if under way, learns that its caller has gone (its neighbours do not). Whether one
    /// was.
    pub fn cancel(&self, session: &str, request_id: &str) -> bool {
        let live = self.lock();
        let Some(session) = live.get(session) else {
            return false;
        };
        let mut found = false;
        for call in session.calls.iter().filter_map(Weak::upgrade) {
            if *call.id == *request_id.trim() {
                call.cancellation.cancel();
                found = true;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_check_and_close() {
        let sessions = Sessions::default();
        let id = sessions.open().expect("a random source");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(sessions.open().expect("a random source"), id);
        assert!(sessions.touch(&id));
        assert!(!sessions.touch("0123"));
        assert!(sessions.close(&id));
        assert!(!sessions.touch(&id));
        assert!(!sessions.close(&id));
    }

    #[test]
    fn a_cancel_reaches_only_the_named_call_under_way() {
        let sessions = Sessions::default();
        let (one, other) = (sessions.open().expect("random"), sessions.open().expect("random"));
        let cancellation = Cancellation::default();
        let call = sessions
            .track(&one, "7", cancellation.clone())
            .expect("an open session");
        let neighbour = sessions
            .track(&one, "8", Cancellation::default())
            .expect("an open session");
        let caller_gone = || cancellation.is_cancelled();
        assert!(!sessions.cancel(&other, "7"), "another session's call");
        assert!(!sessions.cancel(&one, "9"), "another id");
        assert!(!caller_gone());
        assert!(sessions.cancel(&one, " 7"));
        assert!(caller_gone() && call.is_cancelled());
        assert!(!neighbour.is_cancelled(), "the session's other call goes on");
        drop(call);
        assert!(
            !sessions.cancel(&one, "7"),
            "a call whose reply was written is not under way"
        );
        assert!(sessions.track("unknown", "1", Cancellation::default()).is_none());
    }
}
