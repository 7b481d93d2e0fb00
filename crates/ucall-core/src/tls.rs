// SPDX-License-Identifier: Apache-2.0
//! TLS through rustls, on byte buffers only: the engine hands it the ciphertext it read
//! and the plaintext replies the session wrote, and writes out what it produces. No
//! socket I/O happens here, so every engine shares this glue.
//!
//! TLS 1.2 and 1.3, ALPN `http/1.1`, session resumption (a session cache and tickets),
//! and optional client-certificate verification against a CA bundle.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SigningKey, SingleCertAndKey};
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use crate::buffer::OutBuf;
use crate::error::Error;

/// Where a server finds its certificate material, and how it listens with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file with the certificate chain, leaf first.
    pub cert_chain: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
    /// PEM bundle of CAs that client certificates must chain to; `None`: no client
    /// certificates are asked for.
    pub client_ca: Option<PathBuf>,
    /// `None`: the server's port speaks TLS. `Some(port)`: the port stays plaintext and
    /// TLS listens on this one too (`0` picks a free port).
    pub port: Option<u16>,
}

impl TlsConfig {
    /// TLS with this certificate chain and key, on the server's port.
    pub fn new(cert_chain: impl Into<PathBuf>, private_key: impl Into<PathBuf>) -> Self {
        TlsConfig {
            cert_chain: cert_chain.into(),
            private_key: private_key.into(),
            client_ca: None,
            port: None,
        }
    }
}

/// Build the rustls configuration, failing with a message that names the file at fault.
/// Also returns what is odd about the server's certificate, for the server to warn of.
pub(crate) fn server_config(config: &TlsConfig) -> Result<(Arc<ServerConfig>, Vec<String>), Error> {
    for (path, what) in [
        (&config.cert_chain, "certificate chain"),
        (&config.private_key, "private key"),
    ] {
        if path.as_os_str().is_empty() {
            return Err(Error::config(format!(
                "TLS needs both a certificate chain and a private key: no {what} given"
            )));
        }
    }
    let chain = read_certificates(&config.cert_chain, "certificate chain")?;
    let key = PrivateKeyDer::from_pem_file(&config.private_key).map_err(|e| {
        Error::config(format!(
            "TLS private key {}: {}",
            config.private_key.display(),
            pem_problem(&e)
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| Error::config(format!("TLS private key {}: {e}", config.private_key.display())))?;
    let warnings = check_leaf(config, &chain[0], key.as_ref())?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::config(format!("TLS: {e}")))?;
    let builder = match &config.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for certificate in read_certificates(path, "client CA bundle")? {
                roots
                    .add(certificate)
                    .map_err(|e| Error::config(format!("TLS client CA bundle {}: {e}", path.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| Error::config(format!("TLS client CA bundle {}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    // Not `with_single_cert`: it checks the pair by parsing the certificate with webpki, which
    // refuses X.509 v1 (`UnsupportedCertVersion`); `check_leaf` did that check already.
    let certified = CertifiedKey::new(chain, key);
    let mut server = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Resumption: stateful (the default in-memory cache) and stateless (tickets).
    server.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| Error::config(format!("TLS tickets: {e}")))?;
    Ok((Arc::new(server), warnings))
}

/// Check that `key` is the leaf certificate's and list what is odd about the certificate.
///
/// The server's own certificate is its operator's choice and each client decides whether to
/// trust it, so an X.509 v1 certificate (what `openssl x509 -req` makes without extensions,
/// as in UCall's examples) or one outside its validity period is served with a warning. A
/// key that is not the certificate's cannot serve anyone and is refused.
fn check_leaf(config: &TlsConfig, leaf: &CertificateDer<'_>, key: &dyn SigningKey) -> Result<Vec<String>, Error> {
    let path = config.cert_chain.display();
    let unusable = |why: &str| {
        Error::config(format!(
            "TLS certificate {path} and key {} do not make a usable pair: {why}",
            config.private_key.display()
        ))
    };
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| unusable(&format!("the first certificate is not valid X.509 ({e})")))?;
    let mut warnings = Vec::new();
    match key.public_key() {
        Some(spki) if spki.as_ref() != certificate.public_key().raw => {
            return Err(unusable(
                "the private key is not the certificate's (their public keys differ)",
            ));
        }
        Some(_) => {}
        None => warnings.push(format!(
            "TLS certificate {path}: cannot tell whether the private key is the certificate's"
        )),
    }
    let version = certificate.version().0 + 1;
    if version < 3 {
        warnings.push(format!(
            "TLS certificate {path} is X.509 v{version}: clients that check certificates \
             with webpki (rustls) refuse it; make a v3 one (openssl req -x509)"
        ));
    }
    let validity = certificate.validity();
    let now = x509_parser::time::ASN1Time::now();
    if now < validity.not_before {
        warnings.push(format!(
            "TLS certificate {path} is not valid yet: not before {}",
            validity.not_before
        ));
    }
    if now > validity.not_after {
        warnings.push(format!(
            "TLS certificate {path} has expired: not after {}",
            validity.not_after
        ));
    }
    Ok(warnings)
}

fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certificates: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| Error::config(format!("TLS {what} {}: {}", path.display(), pem_problem(&e))))?;
    if certificates.is_empty() {
        return Err(Error::config(format!(
            "TLS {what} {}: no certificate found in the file",
            path.display()
        )));
    }
    Ok(certificates)
}

fn pem_problem(error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(e) => e.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind found".into(),
        rustls::pki_types::pem::Error::MissingSectionEnd { end_marker } => format!(
            "not valid PEM: no \"-----END {}-----\" line (is the file cut short?)",
            String::from_utf8_lossy(end_marker)
        ),
        rustls::pki_types::pem::Error::IllegalSectionStart { line } => {
            format!(
                "not valid PEM: a bad \"-----BEGIN\" line: {:?}",
                String::from_utf8_lossy(line)
            )
        }
        other => format!("not valid PEM: {other}"),
    }
}

/// One connection's TLS state.
pub(crate) struct TlsSession {
    conn: ServerConnection,
    /// Where the client's records stand (see [`TlsSession::is_mid_record`]).
    records: RecordCursor,
}

/// Follows the record layer's framing (a 5-byte header whose last two bytes give the
/// body's length) over the ciphertext received, to tell whether it stops inside a record.
#[derive(Default)]
struct RecordCursor {
    header: [u8; 5],
    /// Header bytes seen of the record under way.
    header_seen: usize,
    /// Body bytes still to come of the record under way.
    body_left: usize,
}

impl RecordCursor {
    fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let taken = self.body_left.min(bytes.len());
                self.body_left -= taken;
                bytes = &bytes[taken..];
                continue;
            }
            let taken = (self.header.len() - self.header_seen).min(bytes.len());
            self.header[self.header_seen..self.header_seen + taken].copy_from_slice(&bytes[..taken]);
            self.header_seen += taken;
            bytes = &bytes[taken..];
            if self.header_seen == self.header.len() {
                self.header_seen = 0;
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
        }
    }
}

/// What receiving ciphertext produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// Plaintext (possibly none yet) was appended.
    Open,
    /// The client sent `close_notify`: no more plaintext will come.
    Closed,
}

impl TlsSession {
    pub(crate) fn new(config: &Arc<ServerConfig>) -> io::Result<Self> {
        let conn = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
        Ok(TlsSession {
            conn,
            records: RecordCursor::default(),
        })
    }

    /// Decrypt `ciphertext`, appending the plaintext to `plain`.
    ///
    /// # Errors
    /// A TLS failure (bad record, failed handshake, plaintext on a TLS port): the alert
    /// rustls queued should still be written out before closing.
    pub(crate) fn receive(&mut self, mut ciphertext: &[u8], plain: &mut Vec<u8>) -> Result<Received, rustls::Error> {
        self.records.advance(ciphertext);
        let mut state = Received::Open;
        while !ciphertext.is_empty() {
            // Reading from a slice cannot fail; rustls takes what fits its buffer.
            if self.conn.read_tls(&mut ciphertext).unwrap_or(0) == 0 {
                break;
            }
            let io_state = self.conn.process_new_packets()?;
            if io_state.plaintext_bytes_to_read() > 0 {
                let start = plain.len();
                plain.resize(start + io_state.plaintext_bytes_to_read(), 0);
                let read = self.conn.reader().read(&mut plain[start..]).unwrap_or(0);
                plain.truncate(start + read);
            }
            if io_state.peer_has_closed() {
                state = Received::Closed;
            }
        }
        Ok(state)
    }

    /// Encrypt what the session queued (up to the first hole).
    pub(crate) fn seal(&mut self, out: &mut OutBuf) {
        while out.has_sendable() {
            let written = {
                let mut slices = [io::IoSlice::new(&[]); 64];
                let count = out.io_slices(&mut slices);
                self.conn.writer().write_vectored(&slices[..count]).unwrap_or(0)
            };
            if written == 0 {
                break;
            }
            out.advance(written);
        }
    }

    /// Whether ciphertext waits to be written to the socket.
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Whether the ciphertext received so far stops inside a record. Its plaintext comes
    /// out only once the record is whole, so a client that sends a request head inside a
    /// record it never finishes, a byte at a time, shows the session no head bytes at all:
    /// the engines count such a record as a head under way (header time-out).
    pub(crate) fn is_mid_record(&self) -> bool {
        self.records.header_seen > 0 || self.records.body_left > 0
    }

    /// The subject of the certificate the client presented (mutual TLS), as RFC 4514
    /// writes a distinguished name (`CN=alice, O=Example`); `None` without one.
    pub(crate) fn client_subject(&self) -> Option<Box<str>> {
        let leaf = self.conn.peer_certificates()?.first()?;
        let (_, certificate) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
        Some(certificate.subject().to_string().into_boxed_str())
    }

    /// Whether the handshake is still under way.
    pub(crate) fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Write queued ciphertext to `socket`; `Ok` also when the socket is full.
    pub(crate) fn write_to(&mut self, socket: &mut impl Write) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(socket) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Queue `close_notify` (a clean end the client can tell from a truncation).
    pub(crate) fn close(&mut self) {
        self.conn.send_close_notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `localhost` valid from `from` to `until` (years), and
    /// the files of it and its key in a fresh directory.
    fn certificate(name: &str, from: i32, until: i32) -> (TlsConfig, KeyPairFiles) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params");
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(until, 1, 1);
        let cert = params.self_signed(&key).expect("certificate");
        let dir = std::env::temp_dir().join(format!("ucall-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("cert.pem"), cert.pem()).expect("write");
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("write");
        (
            TlsConfig::new(dir.join("cert.pem"), dir.join("key.pem")),
            KeyPairFiles(dir),
        )
    }

    /// Removes the directory of [`certificate`] when dropped.
    struct KeyPairFiles(PathBuf);

    impl Drop for KeyPairFiles {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn warnings(config: &TlsConfig) -> Vec<String> {
        match server_config(config) {
            Ok((_, warnings)) => warnings,
            Err(e) => panic!("refused: {e}"),
        }
    }

    #[test]
    fn a_current_v3_certificate_has_no_warning() {
        let (config, _files) = certificate("current", 2020, 2200);
        assert_eq!(warnings(&config), Vec::<String>::new());
    }

    #[test]
    fn an_expired_certificate_is_served_with_a_warning() {
        let (config, _files) = certificate("expired", 2023, 2024);
        let warnings = warnings(&config);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("has expired: not after Jan  1 00:00:00 2024"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_certificate_not_valid_yet_is_served_with_a_warning() {
        let (config, _files) = certificate("future", 2190, 2200);
        let warnings = warnings(&config);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("is not valid yet: not before Jan  1 00:00:00 2190"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let (mut config, _files) = certificate("mismatch-a", 2020, 2200);
        let (other, _other_files) = certificate("mismatch-b", 2020, 2200);
        config.private_key = other.private_key.clone();
        let error = server_config(&config)
            .map(|_| ())
            .expect_err("a key of another certificate");
        assert!(
            error
                .to_string()
                .contains("do not make a usable pair: the private key is not the certificate's"),
            "{error}"
        );
    }
}
