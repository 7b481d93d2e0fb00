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
pub(crate) fn server_config(config: &TlsConfig) -> Result<Arc<ServerConfig>, Error> {
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
    let mut server = builder.with_single_cert(chain, key).map_err(|e| {
        Error::config(format!(
            "TLS certificate {} and key {} do not make a usable pair: {e}",
            config.cert_chain.display(),
            config.private_key.display()
        ))
    })?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Resumption: stateful (the default in-memory cache) and stateless (tickets).
    server.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| Error::config(format!("TLS tickets: {e}")))?;
    Ok(Arc::new(server))
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
