// SPDX-License-Identifier: Apache-2.0
// The examples in js/examples run against a live example server.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { REPO, serverKinds, startServer, tlsFiles } from "./servers.mjs";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const run = (file, args, options = {}) =>
  new Promise((done, fail) =>
    execFile(file, args, { timeout: 60_000, ...options }, (error, stdout, stderr) => (error ? fail(new Error(`${error.message}\n${stderr}`)) : done(stdout))),
  );

/** A project beside the package: `@ucall/client` resolves as it would once installed. */
function project() {
  const dir = mkdtempSync(join(ROOT, "test/.codegen-examples-"));
  const modules = join(dir, "node_modules");
  cpSync(join(ROOT, "package.json"), join(modules, "@ucall/client/package.json"));
  cpSync(join(ROOT, "dist"), join(modules, "@ucall/client/dist"), { recursive: true });
  cpSync(join(ROOT, "node_modules/ws"), join(modules, "ws"), { recursive: true });
  cpSync(join(ROOT, "examples"), dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), '{"type":"module"}');
  return { dir, modules };
}

async function sumServer() {
  const child = spawn(join(REPO, "target/debug/sum_server"), ["--host", "127.0.0.1", "--port", "0"], { stdio: ["ignore", "inherit", "pipe"] });
  const port = await new Promise((resolve, reject) => {
    let text = "";
    child.stderr.on("data", (d) => {
      // The start-up line on stderr: "ucall: listening on http://127.0.0.1:PORT (...)".
      const m = /ucall: listening on \S+:(\d+)/.exec((text += d));
      if (m) resolve(Number(m[1]));
    });
    child.on("exit", (code) => reject(new Error(`sum_server exited (${code})`)));
  });
  return { port, stop: () => new Promise((done) => (child.removeAllListeners("exit"), child.once("exit", done), child.kill("SIGTERM"))) };
}

test("quickstart.mjs and typed.ts against sum_server", async () => {
  const server = await sumServer();
  const { dir, modules } = project();
  try {

    const out = await run(process.execPath, [join(dir, "quickstart.mjs"), `127.0.0.1:${server.port}`]);
    for (const scheme of ["http", "ws", "tcp"]) {
      assert.match(out, new RegExp(`^${scheme}://.*: sum=3 batch=\\[42, -32602\\] echo=hello$`, "m"));
    }

    // typed.ts: generate api.ts from the fixture document, type-check, then run the compiled code.
    await run(process.execPath, [join(ROOT, "dist/codegen.cjs"), join(ROOT, "test/fixtures/openrpc.json"), "-o", join(dir, "api.ts")]);
    const tsconfig = { compilerOptions: { strict: true, target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2022", "DOM"], types: [], skipLibCheck: true, outDir: "out" }, files: ["typed.ts", "api.ts"] };
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(tsconfig));
    await run(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", dir]);
    const compiled = join(dir, "out/typed.js");
    writeFileSync(join(dir, "out/package.json"), '{"type":"module"}');
    writeFileSync(compiled, readFileSync(compiled, "utf8").replace("http://127.0.0.1:8545/", `http://127.0.0.1:${server.port}/`));
    cpSync(modules, join(dir, "out/node_modules"), { recursive: true });
    assert.equal((await run(process.execPath, [compiled])).trim(), "3");
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
});

const noPython = serverKinds().includes("python") ? false : "the Python package is not built here";
test("arrays.mjs: a float32 array to examples/python/arrays.py and back over every transport", { skip: noPython, timeout: 120_000 }, async () => {
  const server = await startServer({ kind: "python-arrays", tls: true });
  const { dir } = project();
  try {
    const plain = `127.0.0.1:${server.port}`;
    const tls = `127.0.0.1:${server.tlsPort}`;
    const urls = [`http://${plain}/`, `ws://${plain}/`, `tcp://${plain}`, `https://${tls}/`, `wss://${tls}/`, `tls://${tls}`];
    // The server's self-signed certificate, trusted as its comment says.
    const out = await run(process.execPath, [join(dir, "arrays.mjs"), ...urls], { env: { ...process.env, NODE_EXTRA_CA_CERTS: tlsFiles().cert } });
    for (const scheme of ["http", "ws", "tcp", "https", "wss", "tls"]) {
      assert.match(out, new RegExp(`^${scheme}: float32 \\[400,1000\\] equal: true, attachments both ways: true$`, "m"), out);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
});

test("stream.mjs: streamed results from js/test/apps/stream_server.py over every transport", { skip: noPython, timeout: 120_000 }, async () => {
  const server = await startServer({ kind: "python-stream" });
  const { dir } = project();
  try {
    const out = await run(process.execPath, [join(dir, "stream.mjs"), `127.0.0.1:${server.port}`]);
    for (const scheme of ["http", "ws", "tcp"]) {
      assert.match(out, new RegExp(`^${scheme}://.*: items=0,1,2 result=done cancelled=true frames=\\[2,2\\] \\[2,2\\] error=-32010$`, "m"), out);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
});
