// SPDX-License-Identifier: Apache-2.0
//! Where a client goes and how: address, protocol, path, TLS, time-out.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{Error, Result};
use crate::framing::Protocol;

/// A server's address and how to speak to it. Built from a URL or field by field:
///
/// ```
/// use ucall_client::{Endpoint, Protocol};
/// let http = Endpoint::parse("http://127.0.0.1:8545/rpc").unwrap();
/// assert_eq!((http.port(), http.protocol()), (8545, Protocol::Http));
/// let tcp = Endpoint::new("127.0.0.1", 8545).with_protocol(Protocol::Tcp);
/// assert_eq!(tcp.url(), "tcp://127.0.0.1:8545");
/// ```
///
/// TLS verifies the server's certificate and name against the system's CAs by default
/// ([`Endpoint::cacert`] trusts one bundle instead, [`Endpoint::insecure`] accepts any).
#[derive(Clone)]
#[must_use]
pub struct Endpoint {
    host: String,
    port: u16,
    protocol: Protocol,
    path: String,
    tls: Option<TlsOptions>,
    server_name: Option<String>,
    timeout: Option<Duration>,
    tls_config: Option<Arc<ClientConfig>>,
    /// Extra header lines (`Name: value\r\n` each), checked when added.
    headers: String,
    max_reply_size: usize,
    binary: Option<bool>,
}

/// Headers the client writes itself, which a caller's would contradict.
const OWN_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
];

fn check_header(name: &str, value: &str) -> Result<()> {
    // tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(tchar) {
        return Err(Error::invalid(format!("{name:?} is not an HTTP header name")));
    }
    if OWN_HEADERS.iter().any(|own| own.eq_ignore_ascii_case(name)) {
        return Err(Error::invalid(format!("the client writes the {name} header itself")));
    }
    // field-value: visible characters, spaces and tabs (obs-text allowed); no CR, LF or NUL.
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(Error::invalid(format!(
            "the value of the {name} header has a control character"
        )));
    }
    Ok(())
}

/// `name: value\r\n` added to `lines`, checked as [`Endpoint::with_header`] says.
pub(crate) fn push_header(lines: &mut String, name: &str, value: &str) -> Result<()> {
    check_header(name, value)?;
    lines.push_str(name);
    lines.push_str(": ");
    lines.push_str(value.trim_matches([' ', '\t']));
    lines.push_str("\r\n");
    Ok(())
}

/// A request's own `headers` (a call's, a trace context) as the lines of its HTTP head,
/// each checked as [`Endpoint::with_header`] says; only HTTP sends headers with a request.
pub(crate) fn request_lines(protocol: Protocol, headers: &[(&str, &str)]) -> Result<String> {
    if !headers.is_empty() && protocol != Protocol::Http {
        return Err(Error::invalid("only HTTP sends headers with each call"));
    }
    let mut lines = String::new();
    for (name, value) in headers {
        push_header(&mut lines, name, value)?;
    }
    Ok(lines)
}

#[derive(Clone, Default)]
struct TlsOptions {
    cacert: Option<PathBuf>,
    insecure: bool,
    client_cert: Option<(PathBuf, Option<PathBuf>)>,
    no_resumption: bool,
}

impl Endpoint {
    /// HTTP to `host:port`, path `/`, a 30 s time-out.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        let host = host.into();
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Endpoint {
            host,
            port,
            protocol: Protocol::Http,
            path: "/".into(),
            tls: None,
            server_name: None,
            timeout: Some(Duration::from_secs(30)),
            tls_config: None,
            headers: String::new(),
            max_reply_size: crate::framing::DEFAULT_MAX_REPLY_SIZE,
            binary: None,
        }
    }

    /// An endpoint from a URL: `http`, `https`, `ws`, `wss`, `tcp` (raw TCP) or `tls` (raw
    /// TCP over TLS); the port defaults to 8545.
    ///
    /// # Errors
    /// An unknown scheme or a URL without a host.
    pub fn parse(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| Error::invalid(format!("{url:?}: not a URL (scheme://host:port/path)")))?;
        let (protocol, tls) = match scheme.to_ascii_lowercase().as_str() {
            "http" => (Protocol::Http, false),
            "https" => (Protocol::Http, true),
            "ws" => (Protocol::WebSocket, false),
            "wss" => (Protocol::WebSocket, true),
            "tcp" => (Protocol::Tcp, false),
            "tls" => (Protocol::Tcp, true),
            _ => {
                return Err(Error::invalid(format!(
                    "{url:?}: the scheme must be one of http, https, ws, wss, tcp, tls"
                )))
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| Error::invalid(format!("{url:?}: an IPv6 address without its ']'")))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(Error::invalid(format!("{url:?} names no host")));
        }
        let port = match port {
            Some(port) => port
                .parse()
                .map_err(|_| Error::invalid(format!("{url:?}: the port is not a number from 0 to 65535")))?,
            None => 8545,
        };
        let mut endpoint = Endpoint::new(host, port).with_protocol(protocol).with_path(path);
        if tls {
            endpoint = endpoint.tls();
        }
        Ok(endpoint)
    }

    /// Speak `protocol` (HTTP by default).
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The HTTP path or WebSocket resource (`/` by default).
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Use TLS, verifying the server against the system's CAs.
    pub fn tls(mut self) -> Self {
        self.tls.get_or_insert_with(TlsOptions::default);
        self.tls_config = None;
        self
    }

    /// Use TLS, trusting only the CAs in this PEM file.
    pub fn cacert(mut self, pem: impl Into<PathBuf>) -> Self {
        self.tls.get_or_insert_with(TlsOptions::default).cacert = Some(pem.into());
        self.tls_config = None;
        self
    }

    /// Use TLS and accept any certificate (for tests: this gives up authentication).
    pub fn insecure(mut self) -> Self {
        self.tls.get_or_insert_with(TlsOptions::default).insecure = true;
        self.tls_config = None;
        self
    }

    /// Use TLS and present this certificate chain (PEM), its key in `key` or in the same file.
    pub fn client_cert(mut self, chain: impl Into<PathBuf>, key: Option<PathBuf>) -> Self {
        self.tls.get_or_insert_with(TlsOptions::default).client_cert = Some((chain.into(), key));
        self.tls_config = None;
        self
    }

    /// Use TLS and negotiate every connection in full (sessions are resumed by default,
    /// from the tickets of this endpoint's earlier connections).
    pub fn no_resumption(mut self) -> Self {
        self.tls.get_or_insert_with(TlsOptions::default).no_resumption = true;
        self.tls_config = None;
        self
    }

    /// The name to verify and send as SNI (the host by default).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// How long a connection or a call may take; `None` waits for ever.
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest reply taken, in bytes (an HTTP reply's body, a raw TCP JSON text, a
    /// WebSocket message); a larger one fails its call with [`crate::ErrorKind::Protocol`]
    /// naming both sizes, and the connection is closed. Default
    /// [`crate::framing::DEFAULT_MAX_REPLY_SIZE`] (64 MiB); `usize::MAX` takes any.
    pub fn with_max_reply_size(mut self, max: usize) -> Self {
        self.max_reply_size = max;
        self
    }

    /// Whether calls travel as binary messages (docs/wire.md): `None` (the default) where
    /// the server takes them, found out without ever running a call twice (see
    /// [`crate::Client::call`]); `Some(true)` always (a WebSocket still only where the
    /// server selects the subprotocol); `Some(false)` never: plain JSON, attachments in
    /// their plain JSON form (base64), no binary replies asked for.
    pub fn with_binary(mut self, binary: Option<bool>) -> Self {
        self.binary = binary;
        self
    }

    /// Whether calls travel as binary messages ([`Endpoint::with_binary`]).
    #[must_use]
    pub fn binary(&self) -> Option<bool> {
        self.binary
    }

    /// The largest reply taken ([`Endpoint::with_max_reply_size`]).
    #[must_use]
    pub fn max_reply_size(&self) -> usize {
        self.max_reply_size
    }

    /// Send `name: value` with every HTTP request and with the WebSocket upgrade request
    /// (an API key, a bearer token: what `ucall.auth` checks). Raw TCP carries no headers.
    ///
    /// # Errors
    /// A name that is not an HTTP token (RFC 9110 §5.1), a value with a control character
    /// (§5.5), or a header the client writes itself (`Host`, `Content-Length`, ...).
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self> {
        push_header(&mut self.headers, name, value)?;
        Ok(self)
    }

    /// The extra header lines, as [`Endpoint::with_header`] added them.
    #[must_use]
    pub fn header_lines(&self) -> &str {
        &self.headers
    }

    /// The host.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The protocol.
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The HTTP path.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether TLS is on.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The time-out.
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// `host:port` as a URL or `Host` header writes it (an IPv6 address in brackets).
    #[must_use]
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The endpoint as a URL.
    #[must_use]
    pub fn url(&self) -> String {
        let tls = self.tls.is_some();
        let scheme = match (self.protocol, tls) {
            (Protocol::Http, false) => "http",
            (Protocol::Http, true) => "https",
            (Protocol::WebSocket, false) => "ws",
            (Protocol::WebSocket, true) => "wss",
            (Protocol::Tcp, false) => "tcp",
            (Protocol::Tcp, true) => "tls",
        };
        let path = if self.protocol == Protocol::Tcp { "" } else { &self.path };
        format!("{scheme}://{}{path}", self.authority())
    }

    /// Build the TLS configuration now (it is built on first use otherwise), so that a
    /// missing file shows before any connection.
    ///
    /// # Errors
    /// A CA or certificate file that cannot be read or holds no PEM of its kind.
    pub fn prepare(&mut self) -> Result<()> {
        if self.tls_config.is_none() {
            if let Some(options) = &self.tls {
                self.tls_config = Some(Arc::new(client_config(options, self.protocol != Protocol::Tcp)?));
            }
        }
        Ok(())
    }

    /// The TLS configuration this endpoint's connections use (built now if it was not);
    /// `None` without TLS.
    ///
    /// # Errors
    /// As [`Endpoint::prepare`].
    pub fn tls_config(&mut self) -> Result<Option<Arc<ClientConfig>>> {
        self.prepare()?;
        Ok(self.tls_config.clone())
    }

    pub(crate) fn tls_session(&mut self) -> Result<Option<rustls::ClientConnection>> {
        self.prepare()?;
        let Some(config) = &self.tls_config else {
            return Ok(None);
        };
        let name = self.server_name.as_deref().unwrap_or(&self.host);
        let name = ServerName::try_from(name.to_owned())
            .map_err(|_| Error::invalid(format!("{name:?} is not a valid TLS server name")))?;
        rustls::ClientConnection::new(Arc::clone(config), name)
            .map(Some)
            .map_err(|e| Error::connect(format!("TLS with {}: {e}", self.authority())))
    }
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::invalid(format!("{what} file {}: {e}", path.display())))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::invalid(format!("{what} file {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "{what} file {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

fn client_config(options: &TlsOptions, http: bool) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::invalid(format!("TLS: {e}")))?;
    let builder = if options.insecure {
        if options.cacert.is_some() {
            return Err(Error::invalid("a CA file and insecure contradict each other: pick one"));
        }
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        match &options.cacert {
            Some(path) => {
                for cert in read_certs(path, "CA")? {
                    roots
                        .add(cert)
                        .map_err(|e| Error::invalid(format!("CA file {}: {e}", path.display())))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match &options.client_cert {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => {
            let certs = read_certs(chain, "client certificate")?;
            let key_path = key.as_deref().unwrap_or(chain);
            let key = PrivateKeyDer::from_pem_file(key_path)
                .map_err(|e| Error::invalid(format!("client key file {}: {e}", key_path.display())))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Error::invalid(format!("client key file {}: {e}", key_path.display())))?
        }
    };
    if options.no_resumption {
        config.resumption = rustls::client::Resumption::disabled();
    }
    if http {
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
    }
    Ok(config)
}

/// Accepts any server certificate: [`Endpoint::insecure`] only. Signatures are still
/// checked, so the handshake itself stays sound.
///
/// "Any" includes what webpki will not parse: an X.509 v1 certificate (what `openssl x509
/// -req` makes without extensions, UCall 0.5.4's example certificate), which the server
/// serves with a warning. So the key is read with x509-parser, not webpki, and checks the
/// handshake's signature.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl AnyCertificate {
    /// Check the handshake's signature with the key of `cert`, read without webpki: each
    /// algorithm the provider has for the scheme is tried (one whose key type is not the
    /// certificate's refuses the key).
    fn verify_with_any_version(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
        tls13: bool,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let bad = |why: &str| rustls::Error::General(format!("the server's certificate: {why}"));
        let (_, certificate) =
            x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| bad(&format!("not X.509 ({e})")))?;
        let key = &certificate.public_key().subject_public_key.data;
        // RFC 8446 §4.2.3: TLS 1.3 signs with no PKCS#1 v1.5 RSA scheme and no SHA-1.
        let legacy = matches!(
            dss.scheme,
            SignatureScheme::RSA_PKCS1_SHA1
                | SignatureScheme::RSA_PKCS1_SHA256
                | SignatureScheme::RSA_PKCS1_SHA384
                | SignatureScheme::RSA_PKCS1_SHA512
                | SignatureScheme::ECDSA_SHA1_Legacy
        );
        if tls13 && legacy {
            return Err(rustls::Error::PeerMisbehaved(
                rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
            ));
        }
        let algorithms = self.0.signature_verification_algorithms;
        let candidates = algorithms
            .mapping
            .iter()
            .find(|(scheme, _)| *scheme == dss.scheme)
            .map_or(&[][..], |(_, candidates)| *candidates);
        if candidates
            .iter()
            .any(|algorithm| algorithm.verify_signature(key, message, dss.signature()).is_ok())
        {
            Ok(HandshakeSignatureValid::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::BadSignature,
            ))
        }
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.verify_with_any_version(message, cert, dss, false)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.verify_with_any_version(message, cert, dss, true)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
