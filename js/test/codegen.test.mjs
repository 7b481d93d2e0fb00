// SPDX-License-Identifier: Apache-2.0
// ucall-codegen: from an OpenRPC document (a committed fixture, a file served over HTTP,
// and rpc.discover) to TypeScript that tsc checks, right and wrong uses alike.
import assert from "node:assert/strict";
import { execFile, execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(ROOT, "dist/codegen.cjs");
const FIXTURE = join(ROOT, "test/fixtures/openrpc.json");

function tsc(dir, files) {
  const tsconfig = {
    compilerOptions: { strict: true, noEmit: true, target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2022", "DOM"], types: [], skipLibCheck: true },
    files,
  };
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(tsconfig));
  return spawnSync(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", dir], { encoding: "utf8" });
}

test("generated types accept right calls and reject wrong ones", () => {
  // Inside the package, so that the generated import of the client resolves to dist/.
  const dir = mkdtempSync(join(ROOT, "test/.codegen-"));
  try {
    execFileSync(process.execPath, [CLI, FIXTURE, "-o", join(dir, "api.ts"), "--import", "../../dist/index.js"]);
    copyFileSync(join(ROOT, "test/fixtures/uses_api.ts"), join(dir, "uses_api.ts"));
    const api = readFileSync(join(dir, "api.ts"), "utf8");
    assert.match(api, /sum\(params: \{ a: number; b: number \}\): number;/);
    assert.match(api, /\/\*\* A registered user\. \*\/\nexport type User = \{ id: number; name: string; tags\?: Array<string> \};/);
    const result = tsc(dir, ["api.ts", "uses_api.ts"]);
    assert.equal(result.status, 0, result.stdout + result.stderr);
    // The check can fail: the same use with one mistake no longer compiles.
    writeFileSync(join(dir, "uses_api.ts"), readFileSync(join(dir, "uses_api.ts"), "utf8").replace("sum({ a: 1, b: 2 });\n  const difference", 'sum({ a: 1, b: "2" });\n  const difference'));
    const broken = tsc(dir, ["api.ts", "uses_api.ts"]);
    assert.notEqual(broken.status, 0);
    assert.match(broken.stdout, /uses_api\.ts\(9,/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("reads the document from a URL: GET of a .json path, or rpc.discover", async () => {
  const doc = readFileSync(FIXTURE, "utf8");
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      if (req.method === "GET" && req.url === "/openrpc.json") return res.end(doc);
      const request = JSON.parse(body);
      if (request.method !== "rpc.discover") return res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32601, message: "no" }, id: request.id }));
      res.end(`{"jsonrpc":"2.0","result":${doc},"id":${request.id}}`);
    });
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    // Asynchronously: a synchronous spawn would block this process's own server.
    const output = (url) =>
      new Promise((done, fail) => execFile(process.execPath, [CLI, url], { timeout: 20_000 }, (e, out) => (e ? fail(e) : done(out))));
    const viaGet = await output(`${base}/openrpc.json`);
    const viaDiscover = await output(`${base}/`);
    assert.match(viaGet, /export interface Api/);
    assert.equal(viaGet.replace(/^.*\n/, ""), viaDiscover.replace(/^.*\n/, ""), "same types either way");
  } finally {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
});

test("a bad source is a clear error and a non-zero status", () => {
  const missing = spawnSync(process.execPath, [CLI, join(ROOT, "test/fixtures/no-such.json")], { encoding: "utf8" });
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /^ucall-codegen: .*no-such\.json/);
  const usage = spawnSync(process.execPath, [CLI], { encoding: "utf8" });
  assert.equal(usage.status, 2);
  assert.match(usage.stderr, /usage: ucall-codegen/);
});
