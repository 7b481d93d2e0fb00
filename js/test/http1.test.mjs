// SPDX-License-Identifier: Apache-2.0
// The Node HTTP/1.1 transport on the wire: replies framed every way RFC 9112 allows,
// connection limits, pipelining, and idle connections that keep no process alive.
// Small loopback servers written with node:net play each reply byte for byte.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer as createHttpServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { describe, test } from "node:test";
import { promisify } from "node:util";
import { Client, ErrorCode } from "../dist/index.js";

const listen = (server) => new Promise((done) => server.listen(0, "127.0.0.1", () => done(server.address().port)));

/**
 * A server that answers the n-th request (a head and a Content-Length body) with the
 * bytes `reply(request, n)` returns (a latin1 string): nothing for undefined, a close for null.
 */
async function rawServer(reply) {
  const sockets = new Set();
  const seen = [];
  let connections = 0;
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    connections++;
    socket.on("close", () => sockets.delete(socket));
    let buffer = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk) => {
      buffer += chunk;
      for (;;) {
        const end = buffer.indexOf("\r\n\r\n");
        if (end < 0) return;
        const length = Number(/content-length: (\d+)/i.exec(buffer.slice(0, end))?.[1] ?? 0);
        if (buffer.length < end + 4 + length) return;
        const request = { head: buffer.slice(0, end), body: JSON.parse(Buffer.from(buffer.slice(end + 4, end + 4 + length), "latin1").toString()) };
        buffer = buffer.slice(end + 4 + length);
        seen.push(request);
        const bytes = reply(request, seen.length);
        if (bytes === null) socket.end();
        else if (bytes !== undefined) socket.write(bytes, "latin1");
      }
    });
  });
  const port = await listen(server);
  return {
    url: `http://127.0.0.1:${port}/rpc?x=1`,
    seen,
    sockets,
    connections: () => connections,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((done) => server.close(done));
    },
  };
}

const answer = (request) => JSON.stringify({ jsonrpc: "2.0", result: request.body.params, id: request.body.id });
const withLength = (body, extra = "") =>
  `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${Buffer.from(body).toString("latin1")}`;

describe("HTTP/1.1 replies", () => {
  test("Content-Length, chunked with extensions and trailers, interim 100, UTF-8 split across chunks", async () => {
    const server = await rawServer((request, n) => {
      const body = answer(request);
      if (n === 1) return withLength(body);
      if (n === 2) {
        const cut = Buffer.from(body).indexOf(Buffer.from("ü")) + 1; // inside the character's two bytes
        const a = Buffer.from(body).subarray(0, cut);
        const b = Buffer.from(body).subarray(cut);
        return `HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${a.length.toString(16)};ext=1\r\n${a.toString("latin1")}\r\n${b.length.toString(16)}\r\n${b.toString("latin1")}\r\n0\r\nx-trailer: y\r\n\r\n`;
      }
      return withLength(body);
    });
    const client = new Client(server.url, { headers: { Authorization: "Bearer t" } });
    try {
      assert.deepEqual(await client.call("echo", ["first"]), ["first"]);
      assert.deepEqual(await client.call("echo", ["ünïcødé ✓"]), ["ünïcødé ✓"]);
      assert.deepEqual(await client.call("echo", ["third"]), ["third"]);
      const head = server.seen[0].head;
      assert.match(head, /^POST \/rpc\?x=1 HTTP\/1\.1\r\n/);
      assert.match(head, /\r\nhost: 127\.0\.0\.1:\d+\r\n/);
      assert.match(head, /\r\nauthorization: Bearer t\r\n/);
      assert.equal(server.connections(), 1, "one keep-alive connection for calls made one after another");
    } finally {
      client.close();
      await server.close();
    }
  });

  test("a body that runs to the end of the connection (HTTP/1.0, no length)", async () => {
    const server = await rawServer(() => undefined);
    const client = new Client(server.url);
    try {
      const call = client.call("echo", ["old"]);
      while (server.seen.length === 0) await new Promise((done) => setTimeout(done, 5));
      // Answer in two writes, then close: the body is everything up to the close.
      const body = answer(server.seen[0]);
      const [socket] = server.sockets;
      socket.write(`HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n${body.slice(0, 5)}`);
      setTimeout(() => socket.end(body.slice(5)), 20);
      assert.deepEqual(await call, ["old"]);
      // The next call opens a new connection.
      const next = client.call("echo", ["new"]);
      while (server.seen.length === 1) await new Promise((done) => setTimeout(done, 5));
      for (const s of server.sockets) s.write(withLength(answer(server.seen[1])));
      assert.deepEqual(await next, ["new"]);
      assert.equal(server.connections(), 2);
    } finally {
      client.close();
      await server.close();
    }
  });

  test("Connection: close ends the connection after its reply; the next call opens another", async () => {
    const server = await rawServer((request) => withLength(answer(request), "connection: close\r\n"));
    const client = new Client(server.url);
    try {
      for (const word of ["a", "b", "c"]) assert.deepEqual(await client.call("echo", [word]), [word]);
      assert.equal(server.connections(), 3);
    } finally {
      client.close();
      await server.close();
    }
  });

  test("a 4xx reply is an error that did not run; a reply that is not HTTP fails the call as maybe run", async () => {
    const server = await rawServer((request, n) =>
      n === 1
        ? `HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found`
        : `SSH-2.0-OpenSSH\r\n\r\n`,
    );
    const client = new Client(server.url, { retries: 0 });
    try {
      await assert.rejects(client.call("echo", [1]), (e) => e.code === ErrorCode.BadReply && e.executed === "no" && /404/.test(e.message));
      await assert.rejects(client.call("echo", [2]), (e) => e.code === ErrorCode.Connection && e.executed === "maybe");
    } finally {
      client.close();
      await server.close();
    }
  });

  test("a header with a line break is refused at once", () => {
    assert.throws(() => new Client("http://127.0.0.1:1/", { headers: { "x-a": "1\r\nx-b: 2" } }), TypeError);
  });
});

describe("connections", () => {
  test("at most `connections` sockets, one call at a time on each unless pipelining", async () => {
    let open = 0;
    let most = 0;
    let inFlight = 0;
    let mostInFlight = 0;
    const server = createHttpServer((req, res) => {
      let body = "";
      inFlight++;
      mostInFlight = Math.max(mostInFlight, inFlight);
      req.on("data", (d) => (body += d));
      req.on("end", () =>
        setTimeout(() => {
          inFlight--;
          const request = JSON.parse(body);
          res.setHeader("content-type", "application/json");
          res.end(JSON.stringify({ jsonrpc: "2.0", result: request.params[0], id: request.id }));
        }, 2),
      );
    });
    server.on("connection", (socket) => {
      most = Math.max(most, ++open);
      socket.on("close", () => open--);
    });
    const port = await listen(server);
    try {
      const client = new Client(`http://127.0.0.1:${port}/`, { connections: 4 });
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) => client.call("echo", [i])));
      assert.deepEqual(results, Array.from({ length: 100 }, (_, i) => i));
      assert.equal(most, 4, "four connections, no more");
      assert.equal(mostInFlight, 4, "one request at a time on each");
      client.close();
    } finally {
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    }
  });

  test("pipelining: several requests in flight on one connection, replies matched in order", async () => {
    const pending = [];
    const server = await rawServer((request) => {
      pending.push(request);
      // Hold replies until eight requests arrived on the one connection, then answer all.
      if (pending.length === 8) return pending.splice(0).map((r) => withLength(answer(r))).join("");
      return undefined;
    });
    const client = new Client(server.url, { connections: 1, pipelining: 8 });
    try {
      const results = await Promise.all(Array.from({ length: 16 }, (_, i) => client.call("echo", [i])));
      assert.deepEqual(results, Array.from({ length: 16 }, (_, i) => [i]));
      assert.equal(server.connections(), 1);
    } finally {
      client.close();
      await server.close();
    }
  });

  test("an idle keep-alive connection does not keep Node running", async () => {
    // The server (here) keeps the connection open; the program must end without client.close().
    const server = await rawServer((request) => withLength(answer(request)));
    const program = `
      import { Client } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
      const client = new Client(${JSON.stringify(server.url)});
      console.log(JSON.stringify(await client.call("echo", [7])), Date.now());`;
    try {
      const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", program], { timeout: 20_000 });
      const [result, answered] = stdout.trim().split(" ");
      assert.equal(result, "[7]");
      // The client closes an idle connection after 4 s: ending well before that, Node did not wait for it.
      assert.ok(Date.now() - Number(answered) < 2000, `ended ${Date.now() - Number(answered)} ms after its call`);
    } finally {
      await server.close();
    }
  });
});
