// SPDX-License-Identifier: Apache-2.0
//! What the client's integration tests share: throwaway certificates and a handler that
//! echoes an array attachment. Not every test binary uses every item.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use ucall_core::{Call, Reply, RpcError};

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

/// `echo_array`: attachment 0, `x`, sent back as the result array, with its dtype and
/// shape. Anything but an array attachment is refused, so a reply shows the param came as one.
pub fn echo_array(call: &Call<'_>, reply: &mut Reply<'_>) -> Result<(), RpcError> {
    let found = call.params().attachment(0, "x")?;
    let info = found
        .array
        .ok_or_else(|| RpcError::invalid_params("x is not an array"))?;
    let shape: Vec<usize> = info.shape().collect();
    reply.array(info.dtype, &shape, found.bytes.to_vec())
}
