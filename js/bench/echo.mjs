// SPDX-License-Identifier: Apache-2.0
// Calls per second from Node with 1,000 calls in flight, each an `echo` of 16 bytes, to
// the Rust bench server, for @ucall/client and for jayson and json-rpc-2.0 in the same run.
//
//   node bench/echo.mjs [--seconds 3] [--in-flight 1000] [--server target/release/bench_server]
//
// Each client keeps `in-flight` calls outstanding (a new call as each one answers) for
// `seconds` after a warm-up of a fifth of that; every reply is checked.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
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
const SERVER = args.server ?? join(REPO, "target/release/bench_server");
const DATA = "0123456789abcdef"; // 16 bytes

async function startBenchServer() {
  if (!existsSync(SERVER)) throw new Error(`${SERVER} not found: cargo build --release -p ucall-examples --bin bench_server`);
  const child = spawn(SERVER, ["--host", "127.0.0.1", "--port", "0", "--threads", "1"], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(() => reject(new Error("bench server: no listening line")), 15_000);
    child.stdout.on("data", (d) => {
      const m = /listening on \S+:(\d+)/.exec((text += d));
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
const clients = [
  ["@ucall/client", "HTTP", () => ucall(http)],
  ["@ucall/client", "HTTP, automatic batches of 100", () => ucall(http, { maxBatchSize: 100 })],
  ["@ucall/client", "WebSocket", () => ucall(ws)],
  ["@ucall/client", "WebSocket, automatic batches of 100", () => ucall(ws, { maxBatchSize: 100 })],
  ["@ucall/client", "raw TCP", () => ucall(`tcp://127.0.0.1:${port}`)],
  ["@ucall/client", "raw TCP, automatic batches of 100", () => ucall(`tcp://127.0.0.1:${port}`, { maxBatchSize: 100 })],
  ["jayson", "HTTP", () => jaysonClient(() => jayson.client.http({ host: "127.0.0.1", port }))],
  ["jayson", "raw TCP", () => jaysonClient(() => jayson.client.tcp({ host: "127.0.0.1", port }))],
  ["json-rpc-2.0", "HTTP (fetch)", () => jsonRpc2OverFetch(http)],
  ["json-rpc-2.0", "WebSocket (ws)", () => jsonRpc2OverWs(ws)],
];
const rows = [];
try {
  for (const [name, transport, make] of clients) {
    const client = await make();
    try {
      await measure(client.echo, SECONDS / 5);
      rows.push({ name, transport, rate: await measure(client.echo, SECONDS) });
    } catch (error) {
      rows.push({ name, transport, rate: NaN, error: String(error?.message ?? error) });
    } finally {
      client.close();
    }
    const last = rows.at(-1);
    console.error(`${name} ${transport}: ${last.error ?? `${Math.round(last.rate)} calls/s`}`);
  }
} finally {
  await server.stop();
}

const best = (test) => Math.max(...rows.filter((r) => test(r.name) && Number.isFinite(r.rate)).map((r) => r.rate));
const ours = best((n) => n === "@ucall/client");
const peers = best((n) => n !== "@ucall/client");
console.log(`\n16-byte echo, ${IN_FLIGHT} calls in flight, ${SECONDS} s each, Node ${process.version}, bench_server --threads 1\n`);
console.log("| client | transport | calls/s |");
console.log("|---|---|---:|");
for (const r of rows) console.log(`| ${r.name} | ${r.transport} | ${r.error ? `failed: ${r.error}` : Math.round(r.rate).toLocaleString("en")} |`);
const ratio = ours / peers;
console.log(`\nbest @ucall/client / best peer: ${ratio.toFixed(2)}x (goal: at least 2x) ${ratio >= 2 ? "met" : "NOT met"}`);
process.exitCode = ratio >= 2 ? 0 : 1;
