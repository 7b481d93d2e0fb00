// SPDX-License-Identifier: Apache-2.0
//! What the client's integration tests share: throwaway certificates.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A folder of certificates made for one test (`ca.pem`, `server.pem`/`.key`,
/// `client.pem`/`.key`), removed when dropped.
pub struct Certs(pub PathBuf);

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A CA, a server certificate for `localhost` and `127.0.0.1`, and a client one.
pub fn certs() -> Certs {
    // One folder per call: tests run in parallel, and each removes its own at the end.
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let made = MADE.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ucall-client-tls-{}-{made}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("a CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("a key");
    let cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("a certificate");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("server.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("write");
    let key = KeyPair::generate().expect("a key");
    let cert = CertificateParams::new(Vec::<String>::new())
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("a certificate");
    std::fs::write(dir.join("client.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("client.key"), key.serialize_pem()).expect("write");
    Certs(dir)
}
