// SPDX-License-Identifier: Apache-2.0
//! TLS from the config's `ssl_*` fields: the certificate files checked one by one (so
//! that a failure names the file at fault) and, when there are several, their
//! certificates concatenated in order into one chain for the core.
//!
//! The core reads its chain from one PEM file while binding. A single file is handed over
//! as it is; several are joined into a private temporary file (certificates only, never
//! a key) that lives until `ucall_init` has bound, then is removed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
const END: &[u8] = b"-----END CERTIFICATE-----";

/// The certificate chain the core reads: a caller's file, or a temporary one of ours.
#[derive(Debug)]
pub(crate) struct Chain {
    path: PathBuf,
    /// The caller's files the chain was made of, when it was made (for messages).
    joined: Option<Vec<String>>,
}

impl Chain {
    /// Check each file of `paths` and make the chain of their certificates, in order.
    pub(crate) fn from_files(paths: &[&str]) -> Result<Chain, String> {
        let mut blocks = Vec::new();
        for (index, path) in paths.iter().enumerate() {
            let field = format!("config.ssl_certificates_paths[{index}] = {path}");
            let pem = std::fs::read(path).map_err(|e| format!("{field}: cannot read the file: {e}"))?;
            let found = certificates(&pem).map_err(|why| format!("{field}: {why}"))?;
            blocks.extend(found.into_iter().map(<[u8]>::to_vec));
        }
        match paths {
            [] => Err("config.use_ssl: no certificate file: set ssl_certificates_paths and \
                       ssl_certificates_count"
                .into()),
            [only] => Ok(Chain {
                path: PathBuf::from(only),
                joined: None,
            }),
            _ => Ok(Chain {
                path: write_temporary(&blocks)
                    .map_err(|e| format!("config.ssl_certificates_paths: cannot join the certificates: {e}"))?,
                joined: Some(paths.iter().map(|p| (*p).to_owned()).collect()),
            }),
        }
    }

    /// The file the core reads the chain from.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `message` from the core, with the temporary file's name replaced by the caller's.
    pub(crate) fn explain(&self, message: String) -> String {
        match &self.joined {
            Some(files) => message.replace(
                &self.path.display().to_string(),
                &format!("(the chain joined from {})", files.join(", ")),
            ),
            None => message,
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        if self.joined.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The PEM certificate blocks of `pem`, each from its BEGIN line to its END line, after
/// checking that each holds base64 of a DER structure; or what is wrong with the file.
fn certificates(pem: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut found = Vec::new();
    let mut rest = pem;
    while let Some(start) = find(rest, BEGIN) {
        let block = &rest[start..];
        let number = found.len() + 1;
        let end = find(block, END)
            .ok_or_else(|| format!("certificate {number} has no \"-----END CERTIFICATE-----\" line"))?
            + END.len();
        let body: Vec<u8> = block[BEGIN.len()..end - END.len()]
            .iter()
            .copied()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        // A certificate is a DER SEQUENCE: its first byte is 0x30.
        match ucall_core::params::base64::decode(&body) {
            Some(der) if der.first() == Some(&0x30) => {}
            _ => return Err(format!("certificate {number} is not base64 of a DER certificate")),
        }
        found.push(&block[..end]);
        rest = &block[end..];
    }
    if found.is_empty() {
        return Err("no PEM certificate in the file (no \"-----BEGIN CERTIFICATE-----\" line)".into());
    }
    Ok(found)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// Write `blocks`, one after the other, to a new file only this user can read.
fn write_temporary(blocks: &[Vec<u8>]) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut attempts = 0;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "libucall-chain-{}-{}-{nanos}.pem",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match options.open(&path) {
            Ok(mut file) => {
                let written = blocks.iter().try_for_each(|block| {
                    file.write_all(block)?;
                    file.write_all(b"\n")
                });
                if let Err(e) = written {
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A syntactically valid certificate block (DER: an empty SEQUENCE, then a marker).
    fn block(marker: u8) -> String {
        let der = [0x30, 0x01, marker];
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bits = u32::from(der[0]) << 16 | u32::from(der[1]) << 8 | u32::from(der[2]);
        let text: String = (0..4)
            .map(|i| char::from(alphabet[((bits >> (18 - 6 * i)) & 63) as usize]))
            .collect();
        format!("-----BEGIN CERTIFICATE-----\n{text}\n-----END CERTIFICATE-----")
    }

    #[test]
    fn finds_each_certificate_and_checks_it() {
        let two = format!("junk before\n{}\r\n{}\n", block(1), block(2));
        let found = certificates(two.as_bytes()).unwrap();
        assert_eq!(found, [block(1).as_bytes(), block(2).as_bytes()]);
        assert!(certificates(b"").unwrap_err().contains("no PEM certificate"));
        assert!(
            certificates(b"-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----")
                .unwrap_err()
                .contains("no PEM certificate")
        );
        let cut = format!("{}\n-----BEGIN CERTIFICATE-----\nMAA=\n", block(1));
        assert!(certificates(cut.as_bytes())
            .unwrap_err()
            .contains("certificate 2 has no"));
        let garbage = "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----";
        assert!(certificates(garbage.as_bytes())
            .unwrap_err()
            .contains("certificate 1 is not"));
        let not_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----";
        assert!(certificates(not_der.as_bytes())
            .unwrap_err()
            .contains("certificate 1 is not"));
    }

    #[test]
    fn several_files_make_one_chain_in_order_and_it_is_removed() {
        let dir = std::env::temp_dir().join(format!("libucall-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let leaf = dir.join("leaf.pem");
        let rest = dir.join("rest.pem");
        std::fs::write(&leaf, block(1)).unwrap();
        std::fs::write(&rest, format!("{}\n{}", block(2), block(3))).unwrap();
        let (leaf, rest) = (leaf.to_str().unwrap(), rest.to_str().unwrap());

        let single = Chain::from_files(&[leaf]).unwrap();
        assert_eq!(single.path(), Path::new(leaf));
        drop(single);
        assert!(Path::new(leaf).exists(), "the caller's file is never removed");

        let chain = Chain::from_files(&[rest, leaf]).unwrap();
        let joined = std::fs::read_to_string(chain.path()).unwrap();
        assert_eq!(joined, format!("{}\n{}\n{}\n", block(2), block(3), block(1)));
        let temporary = chain.path().to_path_buf();
        assert!(chain
            .explain(format!("TLS certificate chain {}: bad", temporary.display()))
            .contains(&format!("joined from {rest}, {leaf}")));
        drop(chain);
        assert!(!temporary.exists(), "the joined chain is removed");

        let missing = dir.join("missing.pem");
        let error = Chain::from_files(&[leaf, missing.to_str().unwrap()]).unwrap_err();
        assert!(
            error.contains("ssl_certificates_paths[1]") && error.contains("missing.pem"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
