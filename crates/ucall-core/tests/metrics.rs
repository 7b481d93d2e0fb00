// SPDX-License-Identifier: Apache-2.0
//! `GET /metrics` over loopback: the path moves or turns off, buckets are configurable,
//! and a deferred call is counted once its reply completes (in flight until then).
//! `tests/python/test_metrics.py` reads the page with Prometheus's own parser.

mod common;

use std::time::Duration;

use common::{call, get, post, Conn};
use ucall_core::{Call, ExtraMetrics, MetricsConfig, Reply, RpcError};

/// The value of the sample line `series` (`name{labels}`) on `page`.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn scrape(conn: &mut Conn, path: &str) -> String {
    let page = conn.roundtrip(&get(path));
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        page.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    String::from_utf8(page.body).expect("UTF-8")
}

#[test]
fn the_path_moves_or_turns_off() {
    common::for_each_engine(|engine| {
        let off = MetricsConfig {
            path: None,
            ..MetricsConfig::default()
        };
        let server = common::start(engine, common::builder(engine).metrics(off));
        let mut conn = Conn::to(&server);
        assert_eq!(conn.roundtrip(&get("/metrics")).status, 404, "turned off");
        drop(server);

        let moved = MetricsConfig {
            path: Some("/stats".into()),
            buckets: vec![0.001, 0.5],
            extra: Some(ExtraMetrics::new(|page| {
                page.push_str(
                    "# HELP app_models_loaded Models in memory.\n# TYPE app_models_loaded gauge\napp_models_loaded 2\n",
                );
            })),
        };
        let server = common::start(engine, common::builder(engine).metrics(moved));
        let mut conn = Conn::to(&server);
        assert_eq!(conn.roundtrip(&get("/metrics")).status, 404, "moved");
        let reply = conn.roundtrip(&post("/", call("sum", "[1, 2]", "1").as_bytes()));
        assert_eq!(reply.status, 200);
        let page = scrape(&mut conn, "/stats?x=1");
        // The buckets given, then +Inf: nothing else.
        let buckets: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("ucall_call_duration_seconds_bucket{method=\"sum\""))
            .collect();
        assert_eq!(buckets.len(), 3, "{page}");
        assert!(
            buckets[0].contains("le=\"0.001\"") && buckets[1].contains("le=\"0.5\""),
            "{page}"
        );
        assert_eq!(
            sample(&page, "ucall_call_duration_seconds_bucket{method=\"sum\",le=\"+Inf\"}"),
            Some(1.0)
        );
        assert!(
            !page.contains("ucall_batch"),
            "no batch procedure, no batch histograms: {page}"
        );
        let info = format!("ucall_engine_info{{engine=\"{}\",threads=\"2\"}}", engine.name());
        assert_eq!(sample(&page, &info), Some(1.0), "{page}");
        // The host's own metrics come after the server's, as given.
        assert!(
            page.ends_with("# TYPE app_models_loaded gauge\napp_models_loaded 2\n"),
            "{page}"
        );
    });
}

#[test]
fn buckets_that_do_not_ascend_are_refused_when_binding() {
    for (buckets, why) in [
        (vec![0.5, 0.001], "must ascend"),
        (vec![0.1, 0.1], "must ascend"),
        (vec![0.0], "above 0"),
        (vec![f64::NAN], "finite"),
        (vec![1.0, f64::INFINITY], "finite"),
    ] {
        let config = MetricsConfig {
            buckets,
            ..MetricsConfig::default()
        };
        let Err(error) = common::builder(ucall_core::EngineKind::Poll).metrics(config).bind() else {
            panic!("{why}: bound");
        };
        assert!(error.is_config() && error.to_string().contains(why), "{error}");
    }
}

#[test]
fn a_deferred_call_is_in_flight_until_it_completes() {
    common::for_each_engine(|engine| {
        let (park, parked) = std::sync::mpsc::channel();
        let park = std::sync::Mutex::new(park);
        let later = move |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
            let deferred = reply.defer()?;
            park.lock().expect("lock").send(deferred).expect("send");
            Ok(())
        };
        let server = common::start(engine, common::builder(engine).handler("later", later));
        let mut caller = Conn::to(&server);
        caller.send(&post("/", call("later", "[]", "7").as_bytes()));
        let deferred = parked.recv_timeout(Duration::from_secs(5)).expect("the call deferred");
        let mut scraper = Conn::to(&server);
        // The worker counts the call once its handler has returned, which may be just
        // after the handler handed the deferred reply over: scrape until it shows.
        let mut page = String::new();
        let counted = common::wait_until(Duration::from_secs(5), || {
            page = scrape(&mut scraper, "/metrics");
            sample(&page, "ucall_calls_in_flight{method=\"later\"}") == Some(1.0)
        });
        assert!(counted, "{page}");
        assert_eq!(sample(&page, "ucall_calls_started_total{method=\"later\"}"), Some(1.0));
        std::thread::sleep(Duration::from_millis(20));
        deferred.error(RpcError::new(-32050, "not today"));
        let reply = caller.read_response();
        let code = reply
            .json()
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(|c| c.as_i64());
        assert_eq!(code, Some(-32050), "{reply:?}");
        let page = scrape(&mut scraper, "/metrics");
        assert_eq!(
            sample(&page, "ucall_calls_in_flight{method=\"later\"}"),
            Some(0.0),
            "{page}"
        );
        let series = "ucall_calls_handled_total{method=\"later\",code=\"server_error\"}";
        assert_eq!(sample(&page, series), Some(1.0), "{page}");
        // Timed until its completion: at least the 20 ms it was held.
        let took = sample(&page, "ucall_call_duration_seconds_sum{method=\"later\"}").expect("timed");
        assert!(took >= 0.02, "{took} s\n{page}");
    });
}
