// SPDX-License-Identifier: Apache-2.0
//! Shared command-line handling for the example servers.

pub mod spec;

use std::time::Duration;

use ucall_core::{Config, EngineKind};

/// Read `--host --port --threads --engine` and the limit flags into a [`Config`].
///
/// # Panics
/// On an unknown flag or a malformed value, with a message saying which.
#[must_use]
pub fn config_from_args() -> Config {
    let mut config = Config {
        threads: 1,
        ..Config::default()
    };
    let mut args = std::env::args().skip(1);
    let (mut request_log, mut format) = (None, ucall_core::LogFormat::Text);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!(
                "options: --host H --port P --threads N --engine auto|poll|uring --max-body-bytes N \
                 --max-header-bytes N --max-batch N --max-connections N --header-timeout-ms N --idle-timeout-ms N \
                 --tls-cert PEM --tls-key PEM [--tls-port P] [--tls-client-ca PEM] [--cors-origin ORIGIN]... \
                 [--request-log PATH [--request-log-format text|json]] [--metrics-path PATH (\"\": off)]"
            );
            std::process::exit(0);
        }
        let value = args.next().unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        let number = || {
            value
                .parse::<usize>()
                .unwrap_or_else(|_| fail(&format!("{flag}: {value:?} is not a number")))
        };
        match flag.as_str() {
            "--host" => config.host.clone_from(&value),
            "--port" => config.port = u16::try_from(number()).unwrap_or_else(|_| fail("--port: out of range")),
            "--threads" => config.threads = number(),
            "--engine" => {
                config.engine = EngineKind::parse(&value).unwrap_or_else(|| fail("--engine: auto, poll or uring"))
            }
            "--max-body-bytes" => config.limits.max_body_bytes = number(),
            "--max-header-bytes" => config.limits.max_head_bytes = number(),
            "--max-batch" => config.limits.max_batch = number(),
            "--max-connections" => config.max_connections = number(),
            "--header-timeout-ms" => config.header_timeout = Duration::from_millis(number() as u64),
            "--idle-timeout-ms" => config.idle_timeout = Duration::from_millis(number() as u64),
            "--tls-cert" => tls(&mut config).cert_chain = value.into(),
            "--tls-key" => tls(&mut config).private_key = value.into(),
            "--tls-client-ca" => tls(&mut config).client_ca = Some(value.into()),
            "--cors-origin" => {
                let cors = config
                    .limits
                    .cors
                    .take()
                    .unwrap_or_else(|| ucall_core::Cors::new(Vec::<String>::new()));
                config.limits.cors = Some(cors.allow_origin(value));
            }
            "--tls-port" => {
                tls(&mut config).port =
                    Some(u16::try_from(number()).unwrap_or_else(|_| fail("--tls-port: out of range")));
            }
            "--request-log" => request_log = Some(value),
            // An empty path turns metrics off (what `benches/callgrind.py --metrics-off` measures).
            "--metrics-path" => config.metrics.path = Some(value).filter(|path| !path.is_empty()),
            "--request-log-format" => {
                format =
                    ucall_core::LogFormat::parse(&value).unwrap_or_else(|| fail("--request-log-format: text or json"));
            }
            _ => fail(&format!("unknown option {flag} (try --help)")),
        }
    }
    if let Some(path) = request_log {
        let log =
            ucall_core::RequestLog::open(&path, format).unwrap_or_else(|e| fail(&format!("--request-log {path}: {e}")));
        config.request_log = Some(log);
    }
    config
}

/// The TLS part of `config`, created empty on first use (paths are checked at bind).
fn tls(config: &mut Config) -> &mut ucall_core::TlsConfig {
    config.tls.get_or_insert_with(|| ucall_core::TlsConfig::new("", ""))
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2);
}
