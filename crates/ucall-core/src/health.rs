// SPDX-License-Identifier: Apache-2.0
//! Health probes: `GET /healthz` (liveness: the process answers) and `GET /readyz`
//! (readiness: whether a load balancer should send new calls). The one readiness rule
//! lives here, [`Readiness::state`], and every front end asks it: the HTTP probe, and
//! the Python `rpc.health` method.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// Where the probes are served, and how "not ready" is said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthPaths {
    /// Liveness path; `None` turns it off. Default `/healthz`.
    pub healthz: Option<String>,
    /// Readiness path; `None` turns it off. Default `/readyz`.
    pub readyz: Option<String>,
    /// Answer `404` rather than `503` when not ready, for HAProxy's
    /// `http-check disable-on-404` (the server is drained gently rather than marked down).
    pub not_ready_404: bool,
}

impl Default for HealthPaths {
    fn default() -> Self {
        HealthPaths {
            healthz: Some("/healthz".into()),
            readyz: Some("/readyz".into()),
            not_ready_404: false,
        }
    }
}

/// Why a readiness check failed: the check's name, and its error when it raised one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    /// The failed check.
    pub check: String,
    /// What it raised, if anything.
    pub error: Option<String>,
}

/// A readiness check of the application's (a model loaded, a database reachable).
type Check = dyn Fn() -> Result<(), NotReady> + Send + Sync;

/// Whether the server should be sent new calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyState {
    /// Serving: send calls.
    Serving,
    /// Still serving, but going away (`drain_delay` after SIGTERM): send no new calls.
    Draining,
    /// Stopping: no longer accepting.
    Stopping,
    /// An application check failed.
    NotReady(NotReady),
}

impl ReadyState {
    /// The short JSON object the probe answers: `{"status":"serving"}` and so on.
    #[must_use]
    pub fn to_json(&self) -> String {
        match self {
            ReadyState::Serving => r#"{"status":"serving"}"#.into(),
            ReadyState::Draining => r#"{"status":"draining"}"#.into(),
            ReadyState::Stopping => r#"{"status":"stopping"}"#.into(),
            ReadyState::NotReady(why) => {
                let text = |s: &str| serde_json::Value::from(s).to_string();
                let error = why.error.as_deref().map(|e| format!(r#","error":{}"#, text(e)));
                format!(
                    r#"{{"status":"not ready","check":{}{}}}"#,
                    text(&why.check),
                    error.unwrap_or_default()
                )
            }
        }
    }
}

/// The readiness one server shares between its workers and its front end: draining is
/// set by the front end (SIGTERM with a `drain_delay`), checks are the application's.
#[derive(Default)]
pub struct Readiness {
    draining: AtomicBool,
    check: RwLock<Option<Arc<Check>>>,
}

impl Readiness {
    /// Mark the server as draining (or serving again).
    pub fn set_draining(&self, on: bool) {
        self.draining.store(on, Ordering::SeqCst);
    }

    /// Run `check` on every readiness probe (keep it quick): the server is ready only
    /// while it passes.
    pub fn set_check(&self, check: impl Fn() -> Result<(), NotReady> + Send + Sync + 'static) {
        *self.check.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(check));
    }

    /// The rule: stopping, then draining, then the application's check, else serving.
    /// `stopping` is the server's own shutdown flag.
    #[must_use]
    pub fn state(&self, stopping: bool) -> ReadyState {
        if stopping {
            return ReadyState::Stopping;
        }
        if self.draining.load(Ordering::SeqCst) {
            return ReadyState::Draining;
        }
        // Cloned out so that the check runs without the lock held.
        let check = self.check.read().unwrap_or_else(PoisonError::into_inner).clone();
        match check.map_or(Ok(()), |check| check()) {
            Ok(()) => ReadyState::Serving,
            Err(why) => ReadyState::NotReady(why),
        }
    }
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("draining", &self.draining.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A probe's answer: whether it passed, and its JSON body.
#[derive(Debug)]
pub struct Probe {
    /// `false` answers `503` (or `404` when so configured).
    pub ok: bool,
    /// Answer `404` rather than `503` when not `ok`.
    pub not_found: bool,
    /// The JSON body.
    pub body: String,
}

/// The probes of one server: their paths and its readiness.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Boxed: the router, which carries this, stays small in the builders that hold it.
    paths: Box<HealthPaths>,
    readiness: Arc<Readiness>,
}

impl Health {
    /// Serve the probes at `paths`.
    pub fn set_paths(&mut self, paths: HealthPaths) {
        *self.paths = paths;
    }

    /// The readiness state shared with the front end.
    #[must_use]
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// The probe served at `target` (query ignored), if any; `stopping` as in
    /// [`Readiness::state`].
    #[must_use]
    pub fn probe(&self, target: &str, stopping: bool) -> Option<Probe> {
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        let is = |wanted: &Option<String>| wanted.as_deref() == Some(path);
        if is(&self.paths.healthz) {
            Some(Probe {
                ok: true,
                not_found: false,
                body: r#"{"status":"alive"}"#.into(),
            })
        } else if is(&self.paths.readyz) {
            let state = self.readiness.state(stopping);
            Some(Probe {
                ok: state == ReadyState::Serving,
                not_found: self.paths.not_ready_404,
                body: state.to_json(),
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_stopping_draining_and_the_check() {
        let mut health = Health::default();
        assert!(health.probe("/readyz?x=1", false).is_some_and(|p| p.ok));
        assert_eq!(
            health.probe("/healthz", true).map(|p| p.body),
            Some(r#"{"status":"alive"}"#.into())
        );
        assert_eq!(
            health.probe("/readyz", true).map(|p| p.body),
            Some(r#"{"status":"stopping"}"#.into())
        );
        health.readiness().set_draining(true);
        let probe = health.probe("/readyz", false).expect("served");
        assert!(!probe.ok && probe.body == r#"{"status":"draining"}"#);
        health.readiness().set_draining(false);
        health.readiness().set_check(|| {
            Err(NotReady {
                check: "model".into(),
                error: Some("not \"loaded\"".into()),
            })
        });
        let probe = health.probe("/readyz", false).expect("served");
        assert_eq!(
            probe.body,
            r#"{"status":"not ready","check":"model","error":"not \"loaded\""}"#
        );
        health.set_paths(HealthPaths {
            healthz: None,
            readyz: Some("/ready".into()),
            not_ready_404: true,
        });
        assert!(health.probe("/healthz", false).is_none() && health.probe("/readyz", false).is_none());
        assert!(health.probe("/ready", false).is_some_and(|p| !p.ok && p.not_found));
    }
}
