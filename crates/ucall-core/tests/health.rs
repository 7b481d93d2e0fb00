// SPDX-License-Identifier: Apache-2.0
//! Health probes over loopback: `GET /healthz` and `GET /readyz` answer while serving,
//! readiness turns 503 (or 404) while draining or when a check fails, and the paths can
//! be moved or turned off.

mod common;

use common::{get, Conn};
use ucall_core::{HealthPaths, NotReady, ReadyState};

#[test]
fn probes_follow_readiness_on_every_engine() {
    common::for_each_engine(|engine| {
        let server = common::start(engine, common::builder(engine));
        let readiness = server.stopper().readiness().clone();
        let mut conn = Conn::to(&server);
        let live = conn.roundtrip(&get("/healthz"));
        assert_eq!(
            (live.status, &live.body[..]),
            (200, &br#"{"status":"alive"}"#[..]),
            "{live:?}"
        );
        assert_eq!(live.header("content-type"), Some("application/json"));
        let ready = conn.roundtrip(&get("/readyz"));
        assert_eq!((ready.status, &ready.body[..]), (200, &br#"{"status":"serving"}"#[..]));

        readiness.set_draining(true);
        let draining = conn.roundtrip(&get("/readyz?verbose"));
        assert_eq!(
            (draining.status, &draining.body[..]),
            (503, &br#"{"status":"draining"}"#[..])
        );
        assert_eq!(conn.roundtrip(&get("/healthz")).status, 200, "alive while draining");
        assert_eq!(server.stopper().ready_state(), ReadyState::Draining);

        readiness.set_draining(false);
        readiness.set_check(|| {
            Err(NotReady {
                check: "model_loaded".into(),
                error: None,
            })
        });
        let failing = conn.roundtrip(&get("/readyz"));
        assert_eq!(
            (failing.status, &failing.body[..]),
            (503, &br#"{"status":"not ready","check":"model_loaded"}"#[..])
        );
        // The probes are GET only: a POST there is a REST call like any other.
        let post = conn.roundtrip(&common::post("/readyz", b"{}"));
        assert_eq!(post.status, 404, "{post:?}");
        server.stop();
        assert_eq!(server.stopper().ready_state(), ReadyState::Stopping);
    });
}

#[test]
fn paths_move_turn_off_and_answer_404_when_asked() {
    common::for_each_engine(|engine| {
        let builder = common::builder(engine).health(HealthPaths {
            healthz: None,
            readyz: Some("/ready".into()),
            not_ready_404: true,
        });
        let server = common::start(engine, builder);
        let mut conn = Conn::to(&server);
        assert_eq!(conn.roundtrip(&get("/healthz")).status, 404, "turned off");
        assert_eq!(conn.roundtrip(&get("/readyz")).status, 404, "moved");
        assert_eq!(conn.roundtrip(&get("/ready")).status, 200);
        server.stopper().readiness().set_draining(true);
        let draining = conn.roundtrip(&get("/ready"));
        assert_eq!(
            (draining.status, &draining.body[..]),
            (404, &br#"{"status":"draining"}"#[..])
        );
    });
}
