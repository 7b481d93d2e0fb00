// SPDX-License-Identifier: Apache-2.0
//! TLS over loopback with throwaway certificates made at test time (never committed):
//! HTTP, raw TCP and large bodies over TLS 1.2 and 1.3, ALPN, resumption, client
//! certificates, a separate TLS port, and clients that misbehave (plaintext on the TLS
//! port, stalled handshakes) without disturbing anyone else.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use ucall_core::{EngineKind, Server, ServerHandle, TlsConfig};

mod common;

struct Material {
    dir: PathBuf,
    ca: CertificateDer<'static>,
    client_chain: Vec<CertificateDer<'static>>,
    client_key: PrivateKeyDer<'static>,
}

impl Material {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Material {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, as PEM
/// files in a fresh directory.
fn material(tag: &str) -> Material {
    let dir = std::env::temp_dir().join(format!("ucall-tls-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(vec!["client".to_string()]).unwrap();
    client_params.distinguished_name = DistinguishedName::new();
    client_params.distinguished_name.push(DnType::CommonName, "alice");
    client_params
        .distinguished_name
        .push(DnType::OrganizationName, "Example");
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server_cert.pem() + &ca_cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
    Material {
        dir,
        ca: ca_cert.der().clone(),
        client_chain: vec![client_cert.der().clone()],
        client_key: PrivateKeyDer::try_from(client_key.serialize_der()).unwrap(),
    }
}

fn tls_config(m: &Material) -> TlsConfig {
    TlsConfig::new(m.path("server.pem"), m.path("server.key"))
}

fn serve(engine: EngineKind, tls: TlsConfig, header_timeout: Duration) -> ServerHandle {
    Server::builder()
        .port(0)
        .threads(2)
        .engine(engine)
        .header_timeout(header_timeout)
        .tls(tls)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .procedure("echo", |call| call.get::<String>(0, "data"))
        .procedure("whoami", |call| Ok(call.context().tls_subject().map(str::to_owned)))
        .bind()
        .expect("bind")
        .spawn()
        .expect("spawn")
}

fn client(m: &Material, versions: &[&'static rustls::SupportedProtocolVersion], with_cert: bool) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(m.ca.clone()).unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = if with_cert {
        builder
            .with_client_auth_cert(m.client_chain.clone(), m.client_key.clone_key())
            .unwrap()
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> Tls {
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let conn = ClientConnection::new(Arc::clone(config), ServerName::try_from("localhost").unwrap()).unwrap();
    StreamOwned::new(conn, sock)
}

/// POST a JSON-RPC body and read the reply body (by Content-Length).
fn post(stream: &mut Tls, body: &str) -> std::io::Result<String> {
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if let Some(value) = line.strip_prefix("Content-Length: ") {
            length = value.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut reply = vec![0; length];
    reader.read_exact(&mut reply)?;
    Ok(String::from_utf8(reply).unwrap())
}

const SUM: &str = r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#;
const SUM_REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":3}"#;

#[test]
fn http_and_raw_tcp_over_tls_1_3_and_1_2() {
    common::for_each_engine(|engine| {
        let m = material(&format!("basic-{}", engine.name()));
        let server = serve(engine, tls_config(&m), Duration::from_secs(10));
        let addr = server.tls_addr().expect("TLS address");
        assert_eq!(
            addr,
            server.local_addr(),
            "without a port of its own, TLS takes the server's port"
        );
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
            let config = client(&m, versions, false);
            let mut stream = connect(addr, &config);
            assert_eq!(post(&mut stream, SUM).unwrap(), SUM_REPLY);
            assert_eq!(post(&mut stream, SUM).unwrap(), SUM_REPLY, "keep-alive over TLS");
            assert_eq!(stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
            assert_eq!(stream.conn.protocol_version(), Some(versions[0].version));
        }
        let mut tcp = connect(addr, &client(&m, &[&rustls::version::TLS13], false));
        writeln!(tcp, "{SUM}").unwrap();
        let mut line = String::new();
        BufReader::new(&mut tcp).read_line(&mut line).unwrap();
        assert_eq!(line, format!("{SUM_REPLY}\n"));
    });
}

/// Ask `GET /healthz` over `stream` and read the head of the answer.
fn healthz_head<S: std::io::Read + std::io::Write>(stream: &mut S) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    stream.flush().unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(reader.read_line(&mut head).unwrap() > 0, "closed: {head}");
    }
    head
}

#[test]
fn hsts_is_said_over_tls_only_when_asked() {
    let m = material("hsts");
    for asked in [false, true] {
        let mut tls = tls_config(&m);
        tls.port = Some(0);
        let mut builder = Server::builder().port(0).tls(tls).procedure("ping", |_| Ok("pong"));
        if asked {
            builder = builder.hsts(Duration::from_secs(31_536_000));
        }
        let server = builder.bind().expect("bind").spawn().expect("spawn");
        let secure = server.tls_addr().expect("TLS port");
        let head = healthz_head(&mut connect(secure, &client(&m, &[&rustls::version::TLS13], false)));
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        let said = head.contains("Strict-Transport-Security: max-age=31536000\r\n");
        assert_eq!(said, asked, "{head}");
        // RFC 6797 §7.2: never over plain HTTP.
        let mut plain = TcpStream::connect(server.local_addr()).unwrap();
        plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let head = healthz_head(&mut plain);
        assert!(
            head.starts_with("HTTP/1.1 200 ") && !head.contains("Strict-Transport"),
            "{head}"
        );
    }
}

#[test]
fn a_1_6_megabyte_echo_over_tls() {
    common::for_each_engine(|engine| {
        let m = material(&format!("large-{}", engine.name()));
        let server = serve(engine, tls_config(&m), Duration::from_secs(10));
        let mut stream = connect(
            server.tls_addr().unwrap(),
            &client(&m, &[&rustls::version::TLS13], false),
        );
        let blob = "z".repeat(1_600_000);
        let reply = post(
            &mut stream,
            &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{blob}"],"id":2}}"#),
        )
        .unwrap();
        assert_eq!(reply, format!(r#"{{"jsonrpc":"2.0","id":2,"result":"{blob}"}}"#));
    });
}

#[test]
fn sessions_resume() {
    common::for_each_engine(|engine| {
        let m = material(&format!("resume-{}", engine.name()));
        let server = serve(engine, tls_config(&m), Duration::from_secs(10));
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
            let config = client(&m, versions, false);
            let mut first = connect(server.tls_addr().unwrap(), &config);
            post(&mut first, SUM).unwrap();
            assert_eq!(first.conn.handshake_kind(), Some(rustls::HandshakeKind::Full));
            let mut second = connect(server.tls_addr().unwrap(), &config);
            post(&mut second, SUM).unwrap();
            assert_eq!(
                second.conn.handshake_kind(),
                Some(rustls::HandshakeKind::Resumed),
                "{versions:?}"
            );
        }
    });
}

#[test]
fn client_certificates_are_required_when_a_ca_is_given() {
    common::for_each_engine(|engine| {
        let m = material(&format!("mtls-{}", engine.name()));
        let mut tls = tls_config(&m);
        tls.client_ca = Some(m.path("ca.pem"));
        let server = serve(engine, tls, Duration::from_secs(10));
        let addr = server.tls_addr().unwrap();
        let mut with = connect(addr, &client(&m, &[&rustls::version::TLS13], true));
        assert_eq!(post(&mut with, SUM).unwrap(), SUM_REPLY);
        // The handler sees who the certificate names, on every call of the connection.
        let whoami = r#"{"jsonrpc":"2.0","method":"whoami","id":2}"#;
        for _ in 0..2 {
            assert_eq!(
                post(&mut with, whoami).unwrap(),
                r#"{"jsonrpc":"2.0","id":2,"result":"CN=alice, O=Example"}"#
            );
        }
        // TLS 1.2 too, where the certificate comes in another flight of the handshake.
        let mut older = connect(addr, &client(&m, &[&rustls::version::TLS12], true));
        assert_eq!(
            post(&mut older, whoami).unwrap(),
            r#"{"jsonrpc":"2.0","id":2,"result":"CN=alice, O=Example"}"#
        );
        let mut without = connect(addr, &client(&m, &[&rustls::version::TLS13], false));
        assert!(
            post(&mut without, SUM).is_err(),
            "a client without a certificate is refused"
        );
    });
}

#[test]
fn plain_and_tls_on_two_ports_of_one_server() {
    common::for_each_engine(|engine| {
        let m = material(&format!("ports-{}", engine.name()));
        let mut tls = tls_config(&m);
        tls.port = Some(0);
        let server = serve(engine, tls, Duration::from_secs(10));
        let (plain, secure) = (server.local_addr(), server.tls_addr().unwrap());
        assert_ne!(plain.port(), secure.port());
        let mut stream = connect(secure, &client(&m, &[&rustls::version::TLS13], false));
        assert_eq!(post(&mut stream, SUM).unwrap(), SUM_REPLY);
        let whoami = r#"{"jsonrpc":"2.0","method":"whoami","id":2}"#;
        assert_eq!(
            post(&mut stream, whoami).unwrap(),
            r#"{"jsonrpc":"2.0","id":2,"result":null}"#,
            "no client certificate, no subject"
        );
        let mut raw = TcpStream::connect(plain).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        writeln!(raw, "{SUM}").unwrap();
        let mut line = String::new();
        BufReader::new(&raw).read_line(&mut line).unwrap();
        assert_eq!(line, format!("{SUM_REPLY}\n"), "the plain port stays plaintext");
        let mut wrong = connect(plain, &client(&m, &[&rustls::version::TLS13], false));
        assert!(post(&mut wrong, SUM).is_err(), "TLS on the plain port fails");
    });
}

#[test]
fn plaintext_and_stalled_handshakes_disturb_no_one() {
    common::for_each_engine(|engine| {
        let m = material(&format!("hostile-{}", engine.name()));
        let server = serve(engine, tls_config(&m), Duration::from_millis(400));
        let addr = server.tls_addr().unwrap();
        let config = client(&m, &[&rustls::version::TLS13], false);
        let mut good = connect(addr, &config);
        assert_eq!(post(&mut good, SUM).unwrap(), SUM_REPLY);

        let mut plaintext = TcpStream::connect(addr).unwrap();
        plaintext.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The server may refuse after the first bytes, so the rest of the write can fail.
        let _ = write!(
            plaintext,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{SUM}",
            SUM.len()
        );
        let mut answer = Vec::new();
        let _ = plaintext.read_to_end(&mut answer);
        assert!(
            !String::from_utf8_lossy(&answer).contains("result"),
            "plaintext is never served on the TLS port"
        );

        let started = Instant::now();
        let mut stalled = TcpStream::connect(addr).unwrap();
        stalled.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stalled.write_all(&[0x16, 0x03, 0x01]).unwrap(); // the start of a ClientHello, then nothing
        assert_eq!(
            post(&mut good, SUM).unwrap(),
            SUM_REPLY,
            "served while another handshake stalls"
        );
        let mut rest = Vec::new();
        let _ = stalled.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
            "cut after {waited:?}"
        );
        assert_eq!(post(&mut good, SUM).unwrap(), SUM_REPLY);
    });
}

/// A request head sent inside a TLS record that never ends, a byte at a time: no
/// plaintext ever comes out, yet every byte is progress. The header time-out must still
/// cut it, as it cuts a plaintext head sent a byte at a time.
#[test]
fn a_record_trickled_and_never_finished_is_cut_at_the_header_time_out() {
    common::for_each_engine(|engine| {
        let m = material(&format!("trickle-{}", engine.name()));
        let server = serve(engine, tls_config(&m), Duration::from_millis(400));
        let addr = server.tls_addr().unwrap();
        let config = client(&m, &[&rustls::version::TLS13], false);
        let mut slow = connect(addr, &config);
        assert_eq!(post(&mut slow, SUM).unwrap(), SUM_REPLY);
        let started = Instant::now();
        // The header of a 16 KiB application-data record, then its body a byte at a time.
        let mut written = slow.sock.write_all(&[0x17, 0x03, 0x03, 0x40, 0x00]).is_ok();
        while written && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(100));
            written = slow.sock.write_all(&[0]).is_ok();
        }
        let lasted = started.elapsed();
        assert!(!written, "{}: still open after {lasted:?} of trickling", engine.name());
        assert!(
            lasted < Duration::from_secs(3),
            "{}: cut after {lasted:?}",
            engine.name()
        );
        let mut good = connect(addr, &config);
        assert_eq!(post(&mut good, SUM).unwrap(), SUM_REPLY);
    });
}

#[test]
fn bad_certificate_material_fails_at_start_naming_the_file() {
    let m = material("bad");
    let missing = TlsConfig::new(m.path("nope.pem"), m.path("server.key"));
    let error = Server::builder().port(0).tls(missing).bind().err().expect("bind fails");
    assert!(error.is_config() && error.to_string().contains("nope.pem"), "{error}");
    let no_key = TlsConfig::new(m.path("server.pem"), "");
    let error = Server::builder().port(0).tls(no_key).bind().err().expect("bind fails");
    assert!(error.to_string().contains("no private key given"), "{error}");
    let pem = std::fs::read_to_string(m.path("server.pem")).unwrap();
    std::fs::write(m.path("cut.pem"), &pem[..pem.len() / 3]).unwrap();
    let cut = TlsConfig::new(m.path("cut.pem"), m.path("server.key"));
    let error = Server::builder().port(0).tls(cut).bind().err().expect("bind fails");
    assert!(
        error.to_string().contains("cut.pem") && error.to_string().contains("no \"-----END CERTIFICATE-----\" line"),
        "{error}"
    );
    std::fs::write(m.path("garbage.key"), "not a key").unwrap();
    let garbage = TlsConfig::new(m.path("server.pem"), m.path("garbage.key"));
    let error = Server::builder().port(0).tls(garbage).bind().err().expect("bind fails");
    assert!(error.to_string().contains("garbage.key"), "{error}");
    let mut same_port = tls_config(&m);
    same_port.port = Some(18545);
    let error = Server::builder()
        .port(18545)
        .tls(same_port)
        .bind()
        .err()
        .expect("bind fails");
    assert!(
        error.is_config() && error.to_string().contains("TLS port 18545"),
        "{error}"
    );
    let mismatched = TlsConfig::new(m.path("ca.pem"), m.path("server.key"));
    let error = Server::builder()
        .port(0)
        .tls(mismatched)
        .bind()
        .err()
        .expect("bind fails");
    assert!(
        error.to_string().contains("ca.pem") && error.to_string().contains("server.key"),
        "{error}"
    );
}

#[test]
fn the_listening_line_says_https_or_the_tls_port() {
    let m = material("listening-line");
    let bind = |tls: TlsConfig| {
        Server::builder()
            .host("127.0.0.1")
            .port(0)
            .threads(1)
            .engine(EngineKind::Poll)
            .tls(tls)
            .bind()
            .expect("bind")
    };
    let tls_only = bind(tls_config(&m));
    assert_eq!(
        tls_only.listening_line(),
        format!("listening on https://{} (engine poll, 1 thread)", tls_only.local_addr())
    );
    let mut beside = tls_config(&m);
    beside.port = Some(0);
    let beside = bind(beside);
    assert_eq!(
        beside.listening_line(),
        format!(
            "listening on http://{} (engine poll, 1 thread, TLS on port {})",
            beside.local_addr(),
            beside.tls_addr().unwrap().port()
        )
    );
}
