// SPDX-License-Identifier: Apache-2.0
//! The fallback path: where io_uring is forbidden, `auto` serves with the poll engine and
//! forcing `uring` fails with a clear error.
//!
//! The test runs itself again as a child process under a seccomp filter that fails
//! `io_uring_setup` (with EPERM, as container runtimes do, then with ENOSYS, as a kernel
//! without io_uring does), so the engine's real probe meets a real refusal.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use ucall_core::{EngineKind, Server};

/// Set in the child: the errno its filter returns.
const CHILD: &str = "UCALL_FALLBACK_TEST_ERRNO";
const TEST_NAME: &str = "auto_falls_back_to_poll_where_io_uring_is_forbidden";

#[test]
fn auto_falls_back_to_poll_where_io_uring_is_forbidden() {
    if let Ok(errno) = std::env::var(CHILD) {
        child(&errno);
        return;
    }
    for (errno, name) in [(libc::EPERM, "EPERM"), (libc::ENOSYS, "ENOSYS")] {
        let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
        command
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, name)
            .env_remove("UCALL_ENGINE");
        // SAFETY: the hook runs in the forked child before exec and makes only prctl
        // system calls on memory it owns (async-signal-safe, no allocation).
        unsafe { command.pre_exec(move || forbid_io_uring(errno)) };
        let output = command.output().expect("run the test binary as a child");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("fallback child served with poll"),
            "child with io_uring_setup failing {name}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            output.status
        );
        // The one start-up line: where, the engine, the threads and why `auto` fell back.
        let line = stderr.lines().find(|line| line.starts_with("ucall: listening on "));
        assert!(
            line.is_some_and(|line| line.starts_with("ucall: listening on http://127.0.0.1:")
                && line.contains(" (engine poll, 1 thread; io_uring unavailable: ")
                && line.contains(name)
                && line.ends_with(')')),
            "the start-up line names neither the fallback nor its cause ({name}):\n{stderr}"
        );
        assert_eq!(
            stderr.matches("listening on").count(),
            1,
            "said once, by the one server bound:\n{stderr}"
        );
    }
}

/// In the child, io_uring_setup fails: check what `auto` and `uring` do.
fn child(errno_name: &str) {
    let server = Server::builder()
        .host("127.0.0.1")
        .port(0)
        .threads(1)
        .procedure("sum", |call| Ok(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
        .bind()
        .expect("auto binds where io_uring is forbidden");
    assert_eq!(server.engine(), EngineKind::Poll, "auto must fall back to poll");
    let why = server.engine_fallback().expect("the server tells why it fell back");
    assert!(
        why.contains(errno_name),
        "the fallback's reason names {errno_name}: {why}"
    );
    let handle = server.spawn().expect("spawn");
    let mut stream = TcpStream::connect(handle.local_addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("set a time-out");
    let body = r#"{"jsonrpc":"2.0","method":"sum","params":[2,3],"id":7}"#;
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read the reply");
    assert!(reply.ends_with(r#"{"jsonrpc":"2.0","id":7,"result":5}"#), "{reply}");
    handle.stop();
    handle.join();

    let Err(error) = Server::builder().port(0).threads(1).engine(EngineKind::Uring).bind() else {
        panic!("forcing uring where io_uring_setup fails must not bind");
    };
    let message = error.to_string();
    assert!(
        message.contains("the uring engine cannot run here") && message.contains(errno_name),
        "unclear error: {message}"
    );
    println!("fallback child served with poll; uring refused: {message}");
}

/// Install a seccomp filter that fails `io_uring_setup` with `errno`, allowing all else.
fn forbid_io_uring(errno: i32) -> std::io::Result<()> {
    /// `io_uring_setup`: one number on every architecture (it came after their tables merged).
    const IO_URING_SETUP: u32 = 425;
    let statement = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // Load the system call number (offset 0 of struct seccomp_data).
        statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        // io_uring_setup: fall through to the refusal; anything else: skip it.
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: IO_URING_SETUP,
        },
        statement(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | (errno.unsigned_abs() & libc::SECCOMP_RET_DATA),
        ),
        statement(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `program` and the filter it points to live until prctl returns; the kernel
    // copies them.
    if unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &raw const program) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
