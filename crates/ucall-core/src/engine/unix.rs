// SPDX-License-Identifier: Apache-2.0
//! The Unix domain socket listener ([`super::Config::unix_socket`]), beside the TCP ones.
//!
//! `AF_UNIX` has no `SO_REUSEPORT` spreading, so the socket is bound once per server and
//! every worker accepts from a descriptor of its own on that one socket (the kernel hands
//! each connection to one of them). Its file is the server's from bind to stop:
//! - a socket file that nobody listens on (a server that died left it) is replaced;
//! - a path where a server answers, or that is not a socket, is refused;
//! - the file is removed once the last worker stops accepting, unless another server
//!   has put a socket of its own there meanwhile.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;

/// A worker's descriptor on the server's Unix socket, and its share of the socket file.
pub(crate) struct UnixListen {
    pub(crate) listener: UnixListener,
    pub(crate) file: SocketFile,
}

/// A share of the socket file: the file is removed when the last share is dropped.
#[derive(Clone)]
pub(crate) struct SocketFile {
    _bound: Arc<Bound>,
}

/// The file this server bound, known by its device and inode so that a file another
/// server bound at the same path later is left alone.
struct Bound {
    path: PathBuf,
    id: (u64, u64),
}

impl Drop for Bound {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|meta| (meta.dev(), meta.ino()) == self.id);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl UnixListen {
    /// Another worker's descriptor on the same socket.
    pub(crate) fn share(&self) -> Result<UnixListen, Error> {
        Ok(UnixListen {
            listener: self
                .listener
                .try_clone()
                .map_err(|e| Error::io("cannot share the Unix socket between workers", e))?,
            file: self.file.clone(),
        })
    }
}

/// Bind and listen on the Unix socket `path` (non-blocking), replacing a stale socket
/// file; with `mode`, set the file's permission bits (e.g. `0o660`).
pub(crate) fn bind(path: &Path, mode: Option<u32>) -> Result<UnixListen, Error> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let shown = path.display();
    let fail = |what: &str, e: io::Error| Error::bind(format!("cannot {what} the Unix socket {shown}"), e);
    // The address first: a path too long for `sun_path` must not cost a stale file.
    let addr = SockAddr::unix(path).map_err(|e| fail("use", e))?;
    clear_stale(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(|e| fail("open", e))?;
    socket.bind(&addr).map_err(|e| fail("bind", e))?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| fail("find the file of", e))?;
    // From here the file is ours: dropped on an error below, it is removed.
    let file = SocketFile {
        _bound: Arc::new(Bound {
            path: path.to_path_buf(),
            id: (meta.dev(), meta.ino()),
        }),
    };
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| fail(&format!("set mode {mode:o} on"), e))?;
    }
    socket.listen(4096).map_err(|e| fail("listen on", e))?;
    socket.set_nonblocking(true).map_err(|e| fail("make non-blocking", e))?;
    Ok(UnixListen {
        listener: socket.into(),
        file,
    })
}

/// Make way at `path`: nothing there, or a socket file nobody listens on (removed).
fn clear_stale(path: &Path) -> Result<(), Error> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::bind(format!("cannot look at {shown}"), e)),
    };
    if !meta.file_type().is_socket() {
        return Err(Error::config(format!(
            "cannot bind the Unix socket {shown}: the path exists and is not a socket (refusing to replace it)"
        )));
    }
    // Whether a server answers there: a non-blocking connect cannot hang on a full
    // backlog (that says `EAGAIN`, someone listens), and leaves nothing behind.
    let probe = Socket::new(Domain::UNIX, Type::STREAM, None)
        .map_err(|e| Error::bind(format!("cannot probe the Unix socket {shown}"), e))?;
    let _ = probe.set_nonblocking(true);
    let addr = SockAddr::unix(path).map_err(|e| Error::bind(format!("cannot use the Unix socket {shown}"), e))?;
    match probe.connect(&addr) {
        Ok(()) => Err(Error::bind(
            format!("cannot bind the Unix socket {shown}: another server listens on it"),
            io::ErrorKind::AddrInUse.into(),
        )),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Error::bind(
            format!("cannot bind the Unix socket {shown}: another server listens on it (its backlog is full)"),
            e,
        )),
        // Nobody listens: the file a server that died left behind.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::bind(format!("cannot remove the stale Unix socket {shown}"), e)),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::bind(
            format!("cannot tell whether a server listens on the Unix socket {shown}"),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ucall-unix-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir.join("s.sock")
    }

    #[test]
    fn a_stale_file_is_replaced_and_a_live_one_refused() {
        let path = scratch("stale");
        // A listener dropped without its file removed: what a killed server leaves.
        drop(UnixListener::bind(&path).expect("bind"));
        assert!(path.exists());
        let bound = bind(&path, Some(0o600)).expect("the stale file is replaced");
        let mode = std::fs::metadata(&path).expect("the file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let error = bind(&path, None).err().expect("a live socket is refused").to_string();
        assert!(error.contains("another server listens on it"), "{error}");
        let shared = bound.share().expect("a second descriptor");
        drop(bound);
        assert!(path.exists(), "still shared");
        drop(shared);
        assert!(!path.exists(), "removed with the last share");
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_refused_and_kept() {
        let path = scratch("regular");
        std::fs::write(&path, b"data").expect("a file");
        let error = bind(&path, None).err().expect("refused").to_string();
        assert!(error.contains("is not a socket"), "{error}");
        assert_eq!(std::fs::read(&path).expect("kept"), b"data");
    }

    #[test]
    fn another_servers_file_is_not_removed() {
        let path = scratch("successor");
        let bound = bind(&path, None).expect("bind");
        // Someone removed it and bound their own at the same path.
        std::fs::remove_file(&path).expect("remove");
        let _theirs = UnixListener::bind(&path).expect("bind again");
        drop(bound);
        assert!(path.exists(), "the successor's file stays");
    }

    #[test]
    fn a_path_too_long_is_refused() {
        let path = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        assert!(bind(&path, None).is_err());
    }
}
