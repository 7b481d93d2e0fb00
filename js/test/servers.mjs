// SPDX-License-Identifier: Apache-2.0
// Starts the repository's test servers on loopback (port 0 unless told), waits for the
// start-up line every UCall server says on stderr (docs/operations.md) and stops them by PID.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const PYTHON = join(REPO, ".venv/bin/python");
// "ucall: listening on http://HOST:PORT (engine E, N threads[, TLS on port P][; ...])"
export const LISTENING = /^ucall: listening on [a-z]+:\/\/(\[[^\]]+\]|[^\s:/]+):(\d+)/;
const TLS = /\(engine [^)]*, TLS on port (\d+)/;

/**
 * The server kinds to test against: UCALL_JS_SERVERS (comma-separated; `make test-js`
 * asks for rust,python), else the Rust spec server plus the Python one once built.
 */
export function serverKinds() {
  if (process.env.UCALL_JS_SERVERS) return process.env.UCALL_JS_SERVERS.split(",").map((k) => k.trim());
  const kinds = ["rust"];
  if (existsSync(PYTHON)) {
    try {
      execFileSync(PYTHON, ["-c", "import ucall"], { stdio: "ignore" });
      kinds.push("python");
    } catch {
      /* the package is not built here */
    }
  }
  return kinds;
}

export function command(kind, args) {
  if (kind === "rust") {
    const binary = process.env.UCALL_SPEC_SERVER_RUST ?? join(REPO, "target/debug/spec_server");
    if (!existsSync(binary)) throw new Error(`${binary} not found: cargo build -p ucall-examples --bin spec_server`);
    return [binary, args];
  }
  if (kind === "rust-described") {
    const binary = join(REPO, "target/debug/described_server");
    if (!existsSync(binary)) throw new Error(`${binary} not found: cargo build -p ucall-examples --bin described_server`);
    return [binary, args];
  }
  if (kind === "python") return [PYTHON, [join(REPO, "tests/python_api/spec_server.py"), ...args]];
  if (kind === "python-rich") return [PYTHON, [join(REPO, "js/test/apps/rich_server.py"), ...args]];
  if (kind === "python-stream") return [PYTHON, [join(REPO, "js/test/apps/stream_server.py"), ...args]];
  if (kind === "python-arrays") return [PYTHON, [join(REPO, "examples/python/arrays.py"), "--serve", ...args]];
  throw new Error(`unknown server kind ${kind}`);
}

/** Certificate and key for localhost, made once per run with openssl. */
let certs;
export function tlsFiles() {
  if (!certs) {
    const dir = mkdtempSync(join(tmpdir(), "ucall-js-tls-"));
    execFileSync("openssl", [
      "req", "-x509", "-newkey", "rsa:2048", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"),
      "-days", "1", "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    ], { stdio: "ignore" });
    certs = { cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
  }
  return certs;
}

/**
 * Starts a server; resolves with { host, port, tlsPort, stop() }. Options: kind ("rust",
 * "rust-described", "python", "python-rich", "python-stream", "python-arrays"), port, tls (also listen with TLS), args (more flags).
 */
export async function startServer({ kind = "rust", port = 0, tls = false, args = [] } = {}) {
  const flags = ["--host", "127.0.0.1", "--port", String(port), "--threads", "1", "--engine", process.env.UCALL_ENGINE ?? "auto", ...args];
  if (tls) {
    const { cert, key } = tlsFiles();
    flags.push("--tls-cert", cert, "--tls-key", key, "--tls-port", "0");
  }
  const [file, argv] = command(kind, flags);
  const child = spawn(file, argv, { stdio: ["ignore", "pipe", "pipe"], cwd: REPO });
  let stderr = "";
  const server = await new Promise((resolvePromise, reject) => {
    const found = {};
    let buffer = "";
    const timer = setTimeout(() => fail(new Error(`${kind} server: no listening line in 15 s\n${stderr}`)), 15_000);
    const fail = (error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(error);
    };
    child.on("exit", (code) => fail(new Error(`${kind} server exited (${code}) before listening\n${stderr}`)));
    child.stdout.resume(); // not read: drained so that the server never blocks on it
    child.stderr.on("data", (data) => {
      stderr += data;
      buffer += data;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).trim();
        buffer = buffer.slice(end + 1);
        const m = LISTENING.exec(line);
        if (!m) continue;
        found.port = Number(m[2]);
        const separate = TLS.exec(line);
        if (separate) found.tlsPort = Number(separate[1]);
        if (!tls || found.tlsPort) {
          clearTimeout(timer);
          child.removeAllListeners("exit");
          return resolvePromise({ host: "127.0.0.1", ...found });
        }
      }
    });
  });
  return {
    ...server,
    kind,
    pid: child.pid,
    /** Stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it to exit. */
    stop() {
      if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
      return new Promise((done) => {
        const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
        child.once("exit", () => {
          clearTimeout(timer);
          done();
        });
        child.kill("SIGTERM");
      });
    },
    /** Kills the server at once, as a crash would. */
    kill() {
      return new Promise((done) => {
        if (child.exitCode !== null || child.signalCode !== null) return done();
        child.once("exit", () => done());
        child.kill("SIGKILL");
      });
    },
  };
}

/** URLs of every transport of a server started with tls: true. */
export function urls(server) {
  return {
    http: `http://127.0.0.1:${server.port}/`,
    ws: `ws://127.0.0.1:${server.port}/`,
    tcp: `tcp://127.0.0.1:${server.port}`,
    ...(server.tlsPort && {
      https: `https://localhost:${server.tlsPort}/`,
      wss: `wss://localhost:${server.tlsPort}/`,
      tls: `tls://localhost:${server.tlsPort}`,
    }),
  };
}
