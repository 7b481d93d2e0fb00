// SPDX-License-Identifier: Apache-2.0
// Binary messages as docs/wire.md writes them: the client's bytes against the page's own
// hex dumps (section 6), replies decoded into typed arrays over HTTP, raw TCP and
// WebSocket, and the plain JSON form where the server does not take binary messages.
// The servers here are small loopback stand-ins that record what they receive.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import WebSocket, { WebSocketServer } from "ws";
import { Client, ErrorCode, NdArray, RpcError, fromBase64, toNdArray } from "../dist/index.js";
import { REPO } from "./servers.mjs";

/** The hex dumps of docs/wire.md section 6, in order, as bytes. */
function examples() {
  const page = readFileSync(join(REPO, "docs/wire.md"), "utf8");
  const section = page.slice(page.indexOf("## 6. Examples"), page.indexOf("## 7."));
  return [...section.matchAll(/```\n([\s\S]*?)```/g)]
    .map(([, block]) => block.split("\n").filter((line) => /^[0-9a-f]{8}: /.test(line)))
    .filter((lines) => lines.length)
    .map((lines) => Buffer.from(lines.map((line) => line.slice(10, 49).replace(/ /g, "")).join(""), "hex"));
}
const [TCP_REQUEST, HTTP_REPLY] = examples();
const FOO = new Uint8Array([0x66, 0x6f, 0x6f]);

const servers = [];
after(() => servers.forEach((s) => s.close()));

/** An HTTP server answering each request with `answer(request, body)` -> [status, headers, body]. */
async function httpServer(answer) {
  const seen = [];
  const server = createHttpServer((req, res) => {
    const parts = [];
    req.on("data", (d) => parts.push(d));
    req.on("end", () => {
      const body = Buffer.concat(parts);
      seen.push({ headers: req.headers, body });
      const [status, headers, reply] = answer(req, body);
      res.writeHead(status, headers).end(reply);
    });
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  servers.push({ close: () => (server.closeAllConnections(), server.close()) });
  return { url: `http://127.0.0.1:${server.address().port}/`, seen };
}

/** A raw TCP server that reads `expect` bytes, then writes `reply` (each of its parts 20 ms apart). */
async function tcpServer(expect, reply) {
  const seen = [];
  const server = createTcpServer((socket) => {
    let got = Buffer.alloc(0);
    socket.on("data", async (chunk) => {
      got = Buffer.concat([got, chunk]);
      if (got.length < expect) return;
      seen.push(got);
      got = Buffer.alloc(0);
      for (const part of Array.isArray(reply) ? reply : [reply]) {
        socket.write(part);
        await new Promise((done) => setTimeout(done, 20));
      }
    });
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  servers.push(server);
  return { url: `tcp://127.0.0.1:${server.address().port}`, seen };
}

const clients = [];
function client(url, options = {}) {
  const c = new Client(url, { WebSocket, timeout: 5000, retries: 0, ...options });
  clients.push(c);
  return c;
}
after(() => clients.forEach((c) => c.close()));

describe("requests", () => {
  test("section 6's raw TCP request, byte for byte", async () => {
    const server = await tcpServer(TCP_REQUEST.length, '{"jsonrpc":"2.0","result":"666f6f","id":1}\n');
    assert.equal(await client(server.url).call("hex", [FOO]), "666f6f");
    assert.deepEqual(server.seen, [TCP_REQUEST]);
  });

  test("section 6's request over HTTP: the body after the prefix, its content type and JSON length", async () => {
    const server = await httpServer(() => [200, { "content-type": "application/json" }, '{"jsonrpc":"2.0","result":"666f6f","id":1}']);
    assert.equal(await client(server.url).call("hex", [FOO]), "666f6f");
    const [{ headers, body }] = server.seen;
    assert.deepEqual(body, TCP_REQUEST.subarray(16));
    assert.equal(headers["content-type"], "application/vnd.ucall.binary");
    assert.equal(headers["ucall-json-length"], "91");
    assert.equal(headers["content-length"], "131");
    assert.match(headers.accept, /application\/vnd\.ucall\.binary/);
  });

  test("arrays, typed arrays, ArrayBuffers and Blobs become placeholders, each attachment at a multiple of 64", async () => {
    const server = await tcpServer(1, '{"jsonrpc":"2.0","result":null,"id":1}\n');
    const matrix = new NdArray(new Float32Array([1.5, -2, 3, 4, 5, 6]), [2, 3]);
    const params = { m: matrix, v: new Int16Array([-1, 2]), raw: new Uint8Array([1, 2, 3]).buffer, file: new Blob(["hi"]), n: 7 };
    await client(server.url).call("take", params);
    const message = server.seen[0];
    assert.equal(message[0], 0xc1);
    const json = message.readUInt32LE(4);
    assert.equal(Number(message.readBigUInt64LE(8)), message.length - 16);
    const request = JSON.parse(message.subarray(16, 16 + json).toString());
    const section = message.subarray(16 + Math.ceil(json / 64) * 64);
    assert.deepEqual(request.params, {
      m: { $ucall: "ndarray", offset: 0, length: 24, dtype: "float32", shape: [2, 3] },
      v: { $ucall: "ndarray", offset: 64, length: 4, dtype: "int16", shape: [2] },
      raw: { $ucall: "bytes", offset: 128, length: 3 },
      file: { $ucall: "bytes", offset: 192, length: 2 },
      n: 7,
    });
    assert.deepEqual(new Float32Array(new Uint8Array(section.subarray(0, 24)).buffer), matrix.data);
    assert.deepEqual([...section.subarray(64, 68)], [0xff, 0xff, 2, 0]);
    assert.deepEqual([...section.subarray(128, 131)], [1, 2, 3]);
    assert.equal(section.subarray(192, 194).toString(), "hi");
    assert.equal(section.length, 194);
  });
});

describe("replies", () => {
  // Section 6's reply answers id 7; the same bytes with id 1 answer a client's first call.
  const REPLY = Buffer.from(HTTP_REPLY);
  REPLY.write("1", REPLY.indexOf('"id":7}') + 5);
  const REPLY_JSON = REPLY.indexOf(0); // the JSON text ends where the padding starts
  const HEADERS = { "content-type": "application/vnd.ucall.binary", "ucall-json-length": String(REPLY_JSON) };
  const check = (result) => {
    assert.ok(result instanceof NdArray, `an NdArray, not ${JSON.stringify(result)}`);
    assert.deepEqual([result.dtype, result.shape, [...result.data]], ["float32", [2], [1.5, -2]]);
    assert.ok(result.data instanceof Float32Array);
    assert.equal(toNdArray(result), result, "toNdArray takes an attachment as it is");
  };
  const prefixed = (body) => {
    const prefix = Buffer.alloc(16);
    prefix.set([0xc1, 1]);
    prefix.writeUInt32LE(body.indexOf(0), 4);
    prefix.writeBigUInt64LE(BigInt(body.length), 8);
    return Buffer.concat([prefix, body]);
  };

  test("section 6's HTTP reply becomes a float32 NdArray (Node's connections and fetch)", async () => {
    const server = await httpServer(() => [200, HEADERS, REPLY]);
    check(await client(server.url).call("make"));
    check(await client(server.url, { fetch }).call("make"));
  });

  test("the same body after the prefix over raw TCP, arriving in two parts, then a JSON text", async () => {
    const message = prefixed(REPLY);
    const server = await tcpServer(1, [message.subarray(0, 10), Buffer.concat([message.subarray(10), Buffer.from('{"jsonrpc":"2.0","result":5,"id":2}\n')])]);
    const c = client(server.url);
    const [first, second] = await Promise.all([c.call("make"), c.call("five")]);
    check(first);
    assert.equal(second, 5);
  });

  test("the same as a binary WebSocket message under the subprotocol ucall.binary.v1", async () => {
    const wss = new WebSocketServer({ port: 0, host: "127.0.0.1", handleProtocols: (offered) => (offered.has("ucall.binary.v1") ? "ucall.binary.v1" : false) });
    servers.push(wss);
    const received = [];
    wss.on("connection", (ws) =>
      ws.on("message", (data, isBinary) => {
        received.push(isBinary);
        const id = isBinary ? JSON.parse(data.subarray(16, 16 + data.readUInt32LE(4))).id : JSON.parse(data).id;
        ws.send(id === 1 ? prefixed(REPLY) : `{"jsonrpc":"2.0","result":${id},"id":${id}}`);
      }),
    );
    await new Promise((done) => wss.on("listening", done));
    const ws = client(`ws://127.0.0.1:${wss.address().port}`);
    check(await ws.call("make"));
    assert.equal(await ws.call("noop", [1]), 2);
    assert.deepEqual(received, [true, true], "every message binary under the subprotocol");
  });

  test("a binary message over maxReplySize fails its call from its prefix, before its body arrives", async () => {
    const message = prefixed(REPLY);
    message.writeBigUInt64LE(5000n, 8); // announces a 5,000-byte body; only the prefix is sent
    const server = await tcpServer(1, message.subarray(0, 16));
    await assert.rejects(client(server.url, { maxReplySize: 1000 }).call("make"), (e) => {
      assert.equal(e.code, ErrorCode.BadReply);
      assert.match(e.message, /a reply of 5016 bytes, over the client's maxReplySize of 1000 bytes/);
      return true;
    });
  });

  test("a reply whose placeholder breaks a rule fails its call with BadReply", async () => {
    const bad = Buffer.from(REPLY);
    bad.write('"shape":[3]', bad.indexOf('"shape":[2]')); // 8 bytes are two float32, not three
    const server = await httpServer(() => [200, HEADERS, bad]);
    await assert.rejects(client(server.url).call("make"), (e) => e instanceof RpcError && e.code === ErrorCode.BadReply && e.executed === "yes" && /8 bytes for shape \[3\] of float32/.test(e.message));
  });
});

describe("plain JSON where the server takes no binary messages", () => {
  test("an HTTP server that refuses the content type (415) gets the same call as JSON, and JSON from then on", async () => {
    const server = await httpServer((req, body) => {
      if (req.headers["content-type"] !== "application/json") return [415, {}, "unsupported"];
      const { id, params } = JSON.parse(body);
      return [200, { "content-type": "application/json" }, JSON.stringify({ jsonrpc: "2.0", result: params, id })];
    });
    const c = client(server.url);
    assert.deepEqual(await c.call("echo", [FOO]), ["Zm9v"]);
    assert.deepEqual(await c.call("echo", [new NdArray(new Int8Array([1, -1]))]), [new NdArray(new Int8Array([1, -1])).toJSON()]);
    assert.deepEqual(server.seen.map((s) => s.headers["content-type"]), ["application/vnd.ucall.binary", "application/json", "application/json"]);
  });

  test("a JSON-RPC server that reads the body as JSON (400, -32700) too", async () => {
    const server = await httpServer((req, body) => {
      try {
        const { id, params } = JSON.parse(body);
        return [200, {}, JSON.stringify({ jsonrpc: "2.0", result: params, id })];
      } catch {
        return [400, {}, '{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}'];
      }
    });
    assert.deepEqual(await client(server.url).call("echo", { data: FOO }), { data: "Zm9v" });
    assert.equal(server.seen.length, 2);
  });

  test("binary: false sends JSON and asks for no binary reply; so does a WebSocket without the subprotocol", async () => {
    const server = await httpServer((req, body) => [200, {}, JSON.stringify({ jsonrpc: "2.0", result: JSON.parse(body).params, id: 1 })]);
    assert.deepEqual(await client(server.url, { binary: false }).call("echo", [FOO, new Float64Array([0.5])]), ["Zm9v", new NdArray(new Float64Array([0.5])).toJSON()]);
    assert.equal(server.seen[0].headers["content-type"], "application/json");
    assert.doesNotMatch(server.seen[0].headers.accept ?? "", /ucall/);

    for (const [options, select] of [[{}, false], [{ binary: false }, true]]) {
      const wss = new WebSocketServer({ port: 0, host: "127.0.0.1", handleProtocols: (offered) => (select && offered.size ? [...offered][0] : false) });
      servers.push(wss);
      const offered = [];
      wss.on("connection", (ws, req) => {
        offered.push(req.headers["sec-websocket-protocol"]);
        ws.on("message", (data, isBinary) => ws.send(JSON.stringify({ jsonrpc: "2.0", result: isBinary ? "binary" : JSON.parse(data).params, id: 1 })));
      });
      await new Promise((done) => wss.on("listening", done));
      assert.deepEqual(await client(`ws://127.0.0.1:${wss.address().port}`, options).call("echo", [FOO]), ["Zm9v"]);
      // Offered, and selected by none: the ws package fails such a handshake, so the client connects again without.
      assert.deepEqual(offered, options.binary === false ? [undefined] : ["ucall,ucall.binary.v1", undefined]);
    }
  });

  test("bytes results stay base64 text in JSON replies; fromBase64 and toNdArray read either form", () => {
    assert.deepEqual(fromBase64("Zm9v"), FOO);
    assert.equal(fromBase64(FOO), FOO);
  });
});
