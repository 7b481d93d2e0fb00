// SPDX-License-Identifier: Apache-2.0
// Failures on the way: time-outs, aborts, refused connections, retries the server allows,
// a WebSocket that drops, a server that restarts. Small loopback servers play the faults.
import assert from "node:assert/strict";
import { createServer as createHttpServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { describe, test } from "node:test";
import WebSocket, { WebSocketServer } from "ws";
import { Client, ErrorCode, MAX_REPLY_SIZE } from "../dist/index.js";
import { startServer, urls } from "./servers.mjs";

const listen = (server) => new Promise((done) => server.listen(0, "127.0.0.1", () => done(server.address().port)));
const closeServer = (server) => new Promise((done) => server.close(() => done()));

/** A port nothing listens on: one that was free a moment ago. */
async function freePort() {
  const server = createTcpServer();
  const port = await listen(server);
  await closeServer(server);
  return port;
}

/** Servers that read requests and never answer. */
async function blackHoles() {
  const sockets = new Set();
  const http = createHttpServer(() => {});
  const tcp = createTcpServer((s) => (sockets.add(s), s.on("close", () => sockets.delete(s))));
  const ws = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await new Promise((done) => ws.once("listening", done));
  const ports = { http: await listen(http), tcp: await listen(tcp), ws: ws.address().port };
  return {
    urls: { http: `http://127.0.0.1:${ports.http}/`, tcp: `tcp://127.0.0.1:${ports.tcp}`, ws: `ws://127.0.0.1:${ports.ws}/` },
    async close() {
      http.closeAllConnections();
      for (const s of sockets) s.destroy();
      for (const c of ws.clients) c.terminate();
      await Promise.all([closeServer(http), closeServer(tcp), new Promise((done) => ws.close(done))]);
    },
  };
}

describe("a server that never answers", () => {
  for (const transport of ["http", "ws", "tcp"]) {
    test(`${transport}: time-out and abort of a sent call say it may have run`, async () => {
      const holes = await blackHoles();
      const client = new Client(holes.urls[transport], { WebSocket, timeout: 200 });
      try {
        const started = Date.now();
        await assert.rejects(client.call("sum", [1, 2]), (e) => e.code === ErrorCode.Timeout && e.executed === "maybe");
        assert.ok(Date.now() - started >= 190, "not before the time-out");
        const controller = new AbortController();
        const call = client.call("sum", [1, 2], { signal: controller.signal, timeout: 0 });
        setTimeout(() => controller.abort(), 50);
        await assert.rejects(call, (e) => e.code === ErrorCode.Aborted && e.executed === "maybe");
        const overridden = Date.now();
        await assert.rejects(client.call("sum", [], { timeout: 50 }), (e) => e.code === ErrorCode.Timeout);
        assert.ok(Date.now() - overridden < 180, "the call's own time-out wins");
      } finally {
        client.close();
        await holes.close();
      }
    });
  }
});

describe("a connection that cannot be made", () => {
  for (const transport of ["http", "ws", "tcp"]) {
    test(`${transport}: the call fails after its retries and did not run`, async () => {
      const port = await freePort();
      const url = { http: `http://127.0.0.1:${port}/`, ws: `ws://127.0.0.1:${port}/`, tcp: `tcp://127.0.0.1:${port}` }[transport];
      const client = new Client(url, { WebSocket, retries: 2, retryDelay: 20 });
      const started = Date.now();
      await assert.rejects(client.call("sum", [1]), (e) => e.code === ErrorCode.Connection && e.executed === "no");
      // Two retries after 10-20 ms and 20-40 ms of backoff.
      assert.ok(Date.now() - started >= 30, `retried with backoff (${Date.now() - started} ms)`);
      client.close();
    });
  }
});

describe("retries", () => {
  test("a call the server refused with executed: false is sent again, with a new id", async () => {
    const seen = [];
    const server = createHttpServer((req, res) => {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        const request = JSON.parse(body);
        seen.push(request.id);
        res.setHeader("content-type", "application/json");
        if (seen.length <= 2) {
          res.statusCode = seen.length === 1 ? 503 : 200;
          const error = { code: -32000, message: "overloaded", data: { executed: false } };
          res.end(JSON.stringify(seen.length === 1 ? { jsonrpc: "2.0", error, id: request.id } : { jsonrpc: "2.0", error, id: request.id }));
        } else res.end(JSON.stringify({ jsonrpc: "2.0", result: "ran", id: request.id }));
      });
    });
    const port = await listen(server);
    try {
      const client = new Client(`http://127.0.0.1:${port}/`, { retryDelay: 5 });
      assert.equal(await client.call("work"), "ran");
      assert.equal(seen.length, 3);
      assert.equal(new Set(seen).size, 3, "each attempt has its own id");
      seen.length = 0;
      const impatient = new Client(`http://127.0.0.1:${port}/`, { retries: 1, retryDelay: 5 });
      await assert.rejects(impatient.call("work"), (e) => e.code === -32000 && e.executed === "no" && e.data.executed === false);
      assert.equal(seen.length, 2, "one retry only");
      // An error that does not say executed: false is never retried.
      seen.length = 3;
      const once = new Client(`http://127.0.0.1:${port}/`, { retryDelay: 5 });
      assert.equal(await once.call("work"), "ran");
      assert.equal(seen.length, 4);
    } finally {
      server.closeAllConnections();
      await closeServer(server);
    }
  });

  test("an HTTP 5xx without executed: false is not retried and may have run", async () => {
    let requests = 0;
    const server = createHttpServer((req, res) => {
      requests++;
      req.resume();
      req.on("end", () => res.writeHead(502).end("bad gateway"));
    });
    const port = await listen(server);
    try {
      const client = new Client(`http://127.0.0.1:${port}/`, { retryDelay: 5 });
      await assert.rejects(client.call("work"), (e) => e.executed === "maybe");
      assert.equal(requests, 1);
    } finally {
      server.closeAllConnections();
      await closeServer(server);
    }
  });
});

describe("a WebSocket that drops", () => {
  test("fails the calls in flight, never sends them again, and reconnects for the next ones", async () => {
    const received = [];
    let connections = 0;
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    await new Promise((done) => wss.once("listening", done));
    wss.on("connection", (socket) => {
      const n = ++connections;
      socket.on("message", (data) => {
        const request = JSON.parse(data.toString());
        received.push(request.method);
        // The first connection drops as soon as its first call arrives.
        if (n === 1) socket.terminate();
        else socket.send(JSON.stringify({ jsonrpc: "2.0", result: `${request.method} on ${n}`, id: request.id }));
      });
    });
    const client = new Client(`ws://127.0.0.1:${wss.address().port}/`, { WebSocket, retryDelay: 5 });
    try {
      await assert.rejects(client.call("first"), (e) => e.code === ErrorCode.Connection && e.executed === "maybe");
      assert.equal(await client.call("second"), "second on 2");
      await new Promise((done) => setTimeout(done, 100));
      assert.deepEqual(received, ["first", "second"], "the dropped call was not replayed");
      assert.equal(connections, 2);
    } finally {
      client.close();
      for (const c of wss.clients) c.terminate();
      await new Promise((done) => wss.close(done));
    }
  });
});

describe("a reply over maxReplySize", () => {
  /** A reply to `request`: 2,000 bytes of result for the method "big", 3 otherwise. */
  const answer = (request) =>
    JSON.stringify({ jsonrpc: "2.0", result: request.method === "big" ? "x".repeat(2000) : 3, id: request.id });

  async function servers() {
    const sockets = new Set();
    const http = createHttpServer((req, res) => {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        const text = answer(JSON.parse(body));
        // Sized, or chunked when the path says so.
        if (req.url === "/chunked") res.write(text.slice(0, 10)), res.end(text.slice(10));
        else res.end(text);
      });
    });
    const tcp = createTcpServer((s) => {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      let rest = "";
      s.on("data", (chunk) => {
        const lines = (rest + chunk).split("\n");
        rest = lines.pop();
        for (const line of lines) if (line.trim()) s.write(answer(JSON.parse(line)) + "\n");
      });
    });
    const ws = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    ws.on("connection", (socket) => socket.on("message", (data) => socket.send(answer(JSON.parse(data.toString())))));
    await new Promise((done) => ws.once("listening", done));
    const ports = { http: await listen(http), tcp: await listen(tcp), ws: ws.address().port };
    return {
      urls: {
        http: `http://127.0.0.1:${ports.http}/`,
        "http chunked": `http://127.0.0.1:${ports.http}/chunked`,
        fetch: `http://127.0.0.1:${ports.http}/`,
        "fetch chunked": `http://127.0.0.1:${ports.http}/chunked`,
        tcp: `tcp://127.0.0.1:${ports.tcp}`,
        ws: `ws://127.0.0.1:${ports.ws}/`,
      },
      async close() {
        http.closeAllConnections();
        for (const s of sockets) s.destroy();
        for (const c of ws.clients) c.terminate();
        await Promise.all([closeServer(http), closeServer(tcp), new Promise((done) => ws.close(done))]);
      },
    };
  }

  test("fails its call naming both sizes, closes the connection, and the next call works", async () => {
    assert.equal(MAX_REPLY_SIZE, 64 * 1024 * 1024);
    const running = await servers();
    try {
      for (const [transport, url] of Object.entries(running.urls)) {
        const options = { WebSocket, maxReplySize: 1000, timeout: 5000 };
        if (transport.startsWith("fetch")) options.fetch = globalThis.fetch;
        const client = new Client(url, options);
        try {
          await assert.rejects(client.call("big"), (e) => {
            assert.equal(e.code, ErrorCode.BadReply, `${transport}: ${e.message}`);
            assert.match(e.message, /a reply of \d+ bytes( or more)?, over the client's maxReplySize of 1000 bytes/, transport);
            return true;
          });
          assert.equal(await client.call("small"), 3, `${transport}: the next call`);
        } finally {
          client.close();
        }
        const roomy = new Client(url, { WebSocket, timeout: 5000, ...(transport.startsWith("fetch") ? { fetch: globalThis.fetch } : {}) });
        try {
          assert.equal((await roomy.call("big")).length, 2000, `${transport}: under the default`);
        } finally {
          roomy.close();
        }
      }
    } finally {
      await running.close();
    }
  });
});

describe("a server that restarts", () => {
  for (const transport of ["http", "ws", "tcp"]) {
    test(`${transport}: calls after the restart reach the new server`, async () => {
      let server = await startServer({ kind: "rust" });
      const port = server.port;
      const client = new Client(urls(server)[transport], { WebSocket, retries: 8, retryDelay: 50, timeout: 15_000 });
      try {
        assert.equal(await client.call("subtract", [3, 1]), 2);
        await server.kill();
        // Give the client the moment it needs to see its connection end (a call written
        // before that may have run, as far as the client can tell).
        await new Promise((done) => setTimeout(done, 100));
        // Calls made while it is down wait out the restart through their retries (never sent until then).
        const during = client.call("subtract", [10, 1]);
        server = await startServer({ kind: "rust", port });
        assert.equal(await during, 9);
        assert.equal(await client.call("subtract", [5, 1]), 4);
      } finally {
        client.close();
        await server.stop();
      }
    });
  }
});
