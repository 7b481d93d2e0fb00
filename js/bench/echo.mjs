// SPDX-License-Identifier: Apache-2.0
// Calls per second from Node with 1,000 calls in flight, each an `echo` of 16 bytes, to
// the Rust bench server, for @ucall/client and for jayson and json-rpc-2.0 in the same run.
//
//   node bench/echo.mjs [--seconds 3] [--in-flight 1000] [--server target/release/bench_server]
//                       [--only REGEX] [--append benches/results/latest-brief.md]
//
// --only runs the rows whose "client transport how" matches; --append adds the tables to a
// Markdown file, as `make bench` does with its brief. Exits 1 when a transport misses the goal.
//
// Each client keeps `in-flight` calls outstanding (a new call as each one answers) for
// `seconds` after a warm-up of a fifth of that; every reply is checked.
import { spawn } from "node:child_process";
import { appendFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import jayson from "jayson";
import { JSONRPCClient } from "json-rpc-2.0";
import WebSocket from "ws";
import { Client } from "../dist/index.js";
import { REPO } from "../test/servers.mjs";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => (arg.startsWith("--") ? [...pairs, [arg.slice(2), all[i + 1]]] : pairs), []),
);
const SECONDS = Number(args.seconds ?? 3);
const IN_FLIGHT = Number(args["in-flight"] ?? 1000);
const ONLY = new RegExp(args.only ?? "", "i"); // rows whose "client transport" matches
const SERVER = args.server ?? join(REPO, "target/release/bench_server");
const DATA = "0123456789abcdef"; // 16 bytes

async function startBenchServer() {
  if (!existsSync(SERVER)) throw new Error(`${SERVER} not found: cargo build --release -p ucall-examples --bin bench_server`);
  const child = spawn(SERVER, ["--host", "127.0.0.1", "--port", "0", "--threads", "1"], { stdio: ["ignore", "inherit", "pipe"] });
  const port = await new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(() => reject(new Error("bench server: no listening line")), 15_000);
    child.stderr.on("data", (d) => {
      // The start-up line on stderr: "ucall: listening on http://127.0.0.1:PORT (...)".
      const m = /ucall: listening on \S+:(\d+)/.exec((text += d));
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on("exit", (code) => reject(new Error(`bench server exited (${code})`)));
  });
  return { port, stop: () => new Promise((done) => (child.once("exit", done), child.kill("SIGTERM"))) };
}

/** Keeps IN_FLIGHT calls of `echo` outstanding for `seconds`; calls per second. */
async function measure(echo, seconds) {
  let done = 0;
  let stop = false;
  const worker = async () => {
    while (!stop) {
      const result = await echo(DATA);
      if (result !== DATA) throw new Error(`wrong echo: ${JSON.stringify(result)}`);
      done++;
    }
  };
  const started = performance.now();
  const workers = Array.from({ length: IN_FLIGHT }, worker);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  stop = true;
  const elapsed = (performance.now() - started) / 1000;
  const counted = done;
  await Promise.all(workers);
  return counted / elapsed;
}

function jsonRpc2OverFetch(url) {
  const client = new JSONRPCClient(async (request) => {
    const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request) });
    if (response.status === 200) client.receive(await response.json());
    else if (request.id !== undefined) throw new Error(response.statusText);
  });
  return { echo: (data) => client.request("echo", { data }), close() {} };
}

async function jsonRpc2OverWs(url) {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
  const client = new JSONRPCClient((request) => ws.send(JSON.stringify(request)));
  ws.on("message", (data) => client.receive(JSON.parse(data.toString())));
  return { echo: (data) => client.request("echo", { data }), close: () => ws.close() };
}

function jaysonClient(make) {
  const client = make();
  return {
    echo: (data) =>
      new Promise((resolve, reject) =>
        client.request("echo", { data }, (error, reply) => (error ? reject(error) : reply.error ? reject(reply.error) : resolve(reply.result))),
      ),
    close() {},
  };
}

function ucall(url, options) {
  const client = new Client(url, { WebSocket, ...options });
  return { echo: (data) => client.call("echo", { data }), close: () => client.close() };
}

const server = await startBenchServer();
const port = server.port;
const http = `http://127.0.0.1:${port}/`;
const ws = `ws://127.0.0.1:${port}/`;
// [client, transport, how, make]: rows of one transport are compared with each other.
const clients = [
  ["@ucall/client", "HTTP", "", () => ucall(http)],
  ["@ucall/client", "HTTP", "16 pipelined per connection", () => ucall(http, { pipelining: 16 })],
  ["@ucall/client", "HTTP", "through fetch (as in browsers)", () => ucall(http, { fetch })],
  ["@ucall/client", "HTTP", "automatic batches of 100", () => ucall(http, { maxBatchSize: 100 })],
  ["@ucall/client", "WebSocket", "", () => ucall(ws)],
  ["@ucall/client", "WebSocket", "automatic batches of 100", () => ucall(ws, { maxBatchSize: 100 })],
  ["@ucall/client", "raw TCP", "", () => ucall(`tcp://127.0.0.1:${port}`)],
  ["@ucall/client", "raw TCP", "automatic batches of 100", () => ucall(`tcp://127.0.0.1:${port}`, { maxBatchSize: 100 })],
  ["jayson", "HTTP", "node:http", () => jaysonClient(() => jayson.client.http({ host: "127.0.0.1", port }))],
  ["jayson", "raw TCP", "a connection per call", () => jaysonClient(() => jayson.client.tcp({ host: "127.0.0.1", port }))],
  ["json-rpc-2.0", "HTTP", "fetch", () => jsonRpc2OverFetch(http)],
  ["json-rpc-2.0", "WebSocket", "ws", () => jsonRpc2OverWs(ws)],
];
const rows = [];
try {
  for (const [name, transport, how, make] of clients) {
    if (!ONLY.test(`${name} ${transport} ${how}`)) continue;
    const client = await make();
    try {
      await measure(client.echo, SECONDS / 5);
      rows.push({ name, transport, how, rate: await measure(client.echo, SECONDS) });
    } catch (error) {
      rows.push({ name, transport, how, rate: NaN, error: String(error?.message ?? error) });
    } finally {
      client.close();
    }
    const last = rows.at(-1);
    console.error(`${name} ${transport} ${how}: ${last.error ?? `${Math.round(last.rate)} calls/s`}`);
  }
} finally {
  await server.stop();
}

const OURS = "@ucall/client";
const fmt = (rate) => Math.round(rate).toLocaleString("en");
const label = (r) => `${r.name}, ${r.how || "one call per message"}`;
/** The fastest row that passes `test`, if any. */
const fastest = (test) => rows.filter((r) => test(r) && Number.isFinite(r.rate)).sort((a, b) => b.rate - a.rate)[0];
const lines = [
  "### JavaScript clients (js/bench/echo.mjs)",
  "",
  `\`node js/bench/echo.mjs\`: calls per second from one Node ${process.version} process keeping ${IN_FLIGHT.toLocaleString("en")} ` +
    `calls in flight, each an \`echo\` of 16 bytes, to the Rust \`bench_server --threads 1\` on loopback; ${SECONDS} s per row ` +
    `after a warm-up, every reply checked. Goal (JS client issue): on each transport, at least 2x the faster of jayson and json-rpc-2.0.`,
  "",
  "| client | transport | how | calls/s |",
  "|---|---|---|---:|",
  ...rows.map((r) => `| ${r.name} | ${r.transport} | ${r.how || "one call per message"} | ${r.error ? `failed: ${r.error}` : fmt(r.rate)} |`),
  "",
  "| transport | fastest @ucall/client | @ucall/client, one call per message | fastest peer | ratio of the fastest | goal met |",
  "|---|---|---:|---|---:|---|",
];
let met = true;
for (const transport of [...new Set(rows.map((r) => r.transport))]) {
  const ours = fastest((r) => r.transport === transport && r.name === OURS);
  const plain = fastest((r) => r.transport === transport && r.name === OURS && !r.how);
  const peer = fastest((r) => r.transport === transport && r.name !== OURS);
  if (!ours || !peer) continue;
  const ratio = ours.rate / peer.rate;
  met &&= ratio >= 2;
  const single = plain ? `${fmt(plain.rate)} (${(plain.rate / peer.rate).toFixed(1)}x)` : "n/a";
  lines.push(
    `| ${transport} | ${fmt(ours.rate)} (${label(ours)}) | ${single} | ${fmt(peer.rate)} (${label(peer)}) | ${ratio.toFixed(1)}x | ${ratio >= 2 ? "yes" : "no"} |`,
  );
}
const text = lines.join("\n") + "\n";
console.log(`\n${text}`);
if (args.append) appendFileSync(args.append, `\n${text}`);
process.exitCode = met ? 0 : 1;
