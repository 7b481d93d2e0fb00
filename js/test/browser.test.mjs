// SPDX-License-Identifier: Apache-2.0
// The client in headless Chromium (Debian's, driven over the DevTools protocol by
// puppeteer-core): a page served on one loopback port calls a Rust server on another,
// over HTTP (CORS) and WebSocket.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import puppeteer from "puppeteer-core";
import { startServer } from "./servers.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
// The bundle a browser bundler picks for the page (package.json's "browser" condition).
const EXPORTS = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).exports;
const CLIENT = readFileSync(new URL(`../${EXPORTS["."].browser.import.default}`, import.meta.url));
const PAGE = `<!doctype html><meta charset="utf-8"><title>ucall</title>
<script type="module">
import { Client, ErrorCode, RpcError, fromBase64 } from "/client.js";
const describe = (e) => e instanceof RpcError ? { code: e.code, executed: e.executed, message: e.message } : String(e);
window.exercise = async (http, ws) => {
  const out = {};
  try {
    new Client("tcp://127.0.0.1:1");
    out.tcp = "made";
  } catch (e) {
    out.tcp = String(e);
  }
  for (const [name, url] of [["http", http], ["ws", ws]]) {
    const client = new Client(url, { timeout: 10000 });
    const seen = (out[name] = {});
    seen.call = await client.call("subtract", [42, 23]);
    seen.named = await client.call("subtract", { minuend: 5, subtrahend: 3 });
    seen.batch = (await client.batch([["sum", [1, 2]], ["fail"], ["nope"]])).map((e) => (e instanceof RpcError ? e.code : e));
    const bytes = new Uint8Array([0, 1, 2, 253, 254, 255]);
    // As base64 text (HTTP to another origin) or as an attachment (WebSocket, ucall.binary.v1), hex reads the same bytes.
    const hex = await client.call("hex", [bytes]);
    const echoed = await new Client(url, { timeout: 10000, binary: false }).call("echo", [bytes]);
    seen.bytes = [hex, echoed, Array.from(fromBase64(echoed))];
    const before = new AbortController();
    before.abort();
    seen.abortedBefore = await client.call("sum", [1], { signal: before.signal }).catch(describe);
    const during = new AbortController();
    const pending = client.call("sum", [1], { signal: during.signal });
    during.abort();
    seen.abortedDuring = await pending.catch(describe);
    seen.after = await client.call("sum", [40, 2]);
    client.close();
  }
  return out;
};
window.refused = async (url, text = "") => {
  const client = new Client(url, { timeout: 10000, retryDelay: 5 });
  try {
    return await client.call(text ? "echo" : "subtract", text ? [text] : [1, 1]);
  } catch (e) {
    return describe(e);
  } finally {
    client.close();
  }
};
window.ready = true;
</script>`;

let pages, pageOrigin, allowing, refusing, small, elsewhere, browser;

before(async () => {
  assert.ok(existsSync(CHROMIUM), `no Chromium at ${CHROMIUM} (scripts/setup.sh installs Debian's)`);
  pages = createServer((req, res) => {
    if (req.url === "/client.js") res.writeHead(200, { "content-type": "text/javascript" }).end(CLIENT);
    else if (req.url === "/") res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
    else res.writeHead(404).end();
  });
  await new Promise((done) => pages.listen(0, "127.0.0.1", done));
  pageOrigin = `http://127.0.0.1:${pages.address().port}`;
  allowing = await startServer({ args: ["--cors-origin", pageOrigin] });
  refusing = await startServer();
  small = await startServer({ args: ["--cors-origin", pageOrigin, "--max-body-bytes", "256"] });
  elsewhere = await startServer({ args: ["--cors-origin", "http://elsewhere.example"] });
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Root in a container has no user namespaces for Chromium's sandbox.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
    timeout: 60_000,
  });
});

after(async () => {
  await browser?.close();
  await allowing?.stop();
  await refusing?.stop();
  await small?.stop();
  await elsewhere?.stop();
  pages?.closeAllConnections();
  await new Promise((done) => (pages ? pages.close(done) : done()));
});

test("HTTP and WebSocket calls, batches, bytes and aborts from a page", { timeout: 120_000 }, async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${pageOrigin}/`);
  await page.waitForFunction("window.ready === true", { timeout: 30_000 });
  const out = await page.evaluate(
    (http, ws) => window.exercise(http, ws),
    `http://127.0.0.1:${allowing.port}/`,
    `ws://127.0.0.1:${allowing.port}/`,
  );
  for (const transport of ["http", "ws"]) {
    const seen = out[transport];
    assert.equal(seen.call, 19, transport);
    assert.equal(seen.named, 2, transport);
    assert.deepEqual(seen.batch, [3, -32001, -32601], transport);
    assert.deepEqual(seen.bytes, ["000102fdfeff", "AAEC/f7/", [0, 1, 2, 253, 254, 255]], transport);
    assert.deepEqual(seen.abortedBefore, { code: -3, executed: "no", message: "aborted" }, transport);
    assert.equal(seen.abortedDuring.code, -3, transport);
    assert.equal(seen.after, 42, transport);
  }
  assert.equal(out.http.abortedDuring.executed, "maybe");
  assert.match(out.tcp, /^TypeError: tcp:\/\/ URLs need Node/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a server without CORS for the page's origin is refused by the browser", { timeout: 60_000 }, async () => {
  const page = await browser.newPage();
  await page.goto(`${pageOrigin}/`);
  await page.waitForFunction("window.ready === true", { timeout: 30_000 });
  const seen = await page.evaluate((http) => window.refused(http), `http://127.0.0.1:${refusing.port}/`);
  assert.equal(seen.code, -1, JSON.stringify(seen));
  assert.equal(seen.executed, "maybe");
  await page.close();
});

test("a refusal reaches the page with its status; a WebSocket from an origin not allowed is refused", { timeout: 60_000 }, async () => {
  const page = await browser.newPage();
  await page.goto(`${pageOrigin}/`);
  await page.waitForFunction("window.ready === true", { timeout: 30_000 });
  // 413 for a body over the limit: readable by the page because the refusal allows its origin.
  const large = await page.evaluate((http) => window.refused(http, "x".repeat(1000)), `http://127.0.0.1:${small.port}/`);
  assert.deepEqual([large.code, large.executed], [-32600, "no"], JSON.stringify(large));
  assert.match(large.message, /413/);
  // The server allows another origin only: its WebSocket handshake is refused, nothing was sent.
  const ws = await page.evaluate((url) => window.refused(url), `ws://127.0.0.1:${elsewhere.port}/`);
  assert.deepEqual([ws.code, ws.executed], [-1, "no"], JSON.stringify(ws));
  await page.close();
});
