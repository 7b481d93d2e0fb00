// SPDX-License-Identifier: Apache-2.0
// Streamed results (docs/streaming.md) against a live Python server whose procedures are
// generators, over every transport: `client.stream()` gives the items in order and then
// the result, an error after items, `cancel()`, leaving the loop early, binary items, and
// `call()` on a generator failing clearly while the client goes on.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { Client, ErrorCode, NdArray, RpcError, Stream, STREAMS_ITS_RESULT, toNdArray } from "../dist/index.js";
import { serverKinds, startServer, tlsFiles, urls } from "./servers.mjs";

const TRANSPORTS = ["http", "fetch", "tcp", "ws", "https", "tls", "wss"];

function clientFor(server, transport, options = {}) {
  const all = urls(server);
  const ca = readFileSync(tlsFiles().cert);
  // The `ws` package takes the certificate to trust as a third argument.
  class TrustingWebSocket extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols, { ca });
    }
  }
  const common = { timeout: 10_000, WebSocket: transport === "wss" ? TrustingWebSocket : WebSocket, tls: { ca }, ...options };
  if (transport === "fetch") return new Client(all.http, { ...common, fetch: globalThis.fetch });
  return new Client(all[transport], common);
}

async function collect(stream) {
  const items = [];
  for await (const item of stream) items.push(item);
  return items;
}

/** Polls `check` until it holds (the server notices a hang-up or a cancel a little later). */
async function eventually(check, limit = 10_000) {
  const deadline = Date.now() + limit;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

describe("streams", { skip: !serverKinds().includes("python") && "the Python package is not built" }, () => {
  let server;
  before(async () => {
    server = await startServer({ kind: "python-stream", tls: true });
  });
  after(() => server?.stop());

  for (const transport of TRANSPORTS) {
    describe(transport, () => {
      test("items in order, then the result", async () => {
        const client = clientFor(server, transport);
        try {
          const stream = client.stream("count", { n: 5 });
          assert.ok(stream instanceof Stream);
          assert.deepEqual(await collect(stream), [0, 1, 2, 3, 4]);
          assert.equal(await stream.result, "done");
          const words = client.stream("words", { text: "a b c" });
          assert.deepEqual(await collect(words), ["a", "b", "c"]);
          assert.equal(await words.result, null);
          // A procedure that does not stream: no items, its result.
          const plain = client.stream("plain", [3]);
          assert.deepEqual(await collect(plain), []);
          assert.equal(await plain.result, 3);
        } finally {
          client.close();
        }
      });

      test("an error after items rejects the loop there", async () => {
        const client = clientFor(server, transport);
        try {
          const stream = client.stream("broken", { n: 3 });
          const items = [];
          await assert.rejects(
            async () => {
              for await (const item of stream) items.push(item);
            },
            (error) => error instanceof RpcError && error.code === -32010 && error.message === "ran dry",
          );
          assert.deepEqual(items, [0, 1, 2]);
          await assert.rejects(stream.result, (error) => error instanceof RpcError && error.code === -32010);
          assert.deepEqual((await stream.result.catch((e) => e)).data, { after: 3 });
          assert.equal(await client.call("plain", [4]), 4);
        } finally {
          client.close();
        }
      });

      test("cancel() ends the loop after the items on their way and stops the generator", async () => {
        const client = clientFor(server, transport);
        const tag = `cancel-${transport}`;
        try {
          const stream = client.stream("endless", { tag });
          let seen = 0;
          for await (const item of stream) {
            assert.equal(item, tag);
            if (++seen === 3) stream.cancel();
            assert.ok(seen < 10_000);
          }
          assert.ok(seen >= 3);
          assert.equal(await stream.result, undefined);
          assert.ok(await eventually(() => client.call("was_stopped", { tag })), "the generator was not stopped");
          assert.equal(await client.call("plain", [5]), 5);
        } finally {
          client.close();
        }
      });

      test("leaving the loop early stops the stream; the next call works", async () => {
        const client = clientFor(server, transport);
        const tag = `break-${transport}`;
        try {
          const stream = client.stream("endless", { tag });
          let seen = 0;
          for await (const item of stream) {
            assert.equal(item, tag);
            if (++seen === 2) break;
          }
          assert.equal(seen, 2);
          await assert.rejects(stream.result, (error) => error instanceof RpcError && error.code === ErrorCode.Aborted);
          assert.equal(await client.call("plain", [6]), 6);
          assert.ok(await eventually(() => client.call("was_stopped", { tag })), "the generator was not stopped");
          // close() before reading: the loop has nothing to give.
          const closed = client.stream("count", { n: 3 });
          closed.close();
          assert.deepEqual(await collect(closed), []);
          assert.equal(await client.call("plain", [7]), 7);
        } finally {
          client.close();
        }
      });

      test("binary items: arrays come back as NdArray", async () => {
        const client = clientFor(server, transport);
        try {
          const x = new NdArray(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
          const stream = client.stream("frames", { x, n: 3 });
          const items = await collect(stream);
          assert.equal(items.length, 3);
          items.forEach((item, i) => {
            assert.ok(item instanceof NdArray, `item ${i}: ${typeof item}`);
            assert.deepEqual([item.dtype, item.shape, [...item.data]], ["float32", [2, 3], [...x.data].map((v) => v * i)]);
          });
          const result = await stream.result;
          assert.equal(result.frames, 3);
          assert.ok(result.last instanceof NdArray);
          assert.deepEqual([...result.last.data], [...x.data].map((v) => v * 2));
          assert.deepEqual(result.raw, new Uint8Array([101, 110, 100]));
        } finally {
          client.close();
        }
        // binary: false: the same items as base64 .npy files.
        const plain = clientFor(server, transport, { binary: false });
        try {
          const x = new NdArray(new Float32Array([1, 2]), [2]);
          const items = await collect(plain.stream("frames", { x, n: 2 }));
          assert.ok(items.every((item) => typeof item === "string"));
          assert.deepEqual(items.map((item) => [...toNdArray(item).data]), [[0, 0], [1, 2]]);
        } finally {
          plain.close();
        }
      });

      test("call() on a generator says to stream it; the client goes on", async () => {
        const client = clientFor(server, transport);
        try {
          const streams = (error) =>
            error instanceof RpcError && error.code === ErrorCode.BadReply && error.message.includes(STREAMS_ITS_RESULT) && /stream\(\)/.test(error.message);
          await assert.rejects(client.call("count", { n: 3 }), streams);
          assert.equal(await client.call("plain", [8]), 8);
          // One that never ends: the client stops it, and the connection it shares goes on.
          await assert.rejects(client.call("endless", { tag: `call-${transport}` }), streams);
          assert.equal(await client.call("plain", [9]), 9);
          assert.ok(await eventually(() => client.call("was_stopped", { tag: `call-${transport}` })), "the generator was not stopped");
        } finally {
          client.close();
        }
      });
    });
  }

  test("items and the result keep order beside other calls on one connection", async () => {
    const client = clientFor(server, "tcp");
    try {
      const stream = client.stream("count", { n: 50 });
      const other = client.call("plain", [1]);
      assert.deepEqual(await collect(stream), [...Array(50).keys()]);
      assert.equal(await other, 1);
    } finally {
      client.close();
    }
  });

  test("an AbortSignal ends the stream where the loop is", async () => {
    const client = clientFor(server, "tcp");
    try {
      const controller = new AbortController();
      const stream = client.stream("endless", { tag: "signal" }, { signal: controller.signal });
      let seen = 0;
      await assert.rejects(
        async () => {
          for await (const _ of stream) if (++seen === 2) controller.abort();
        },
        (error) => error instanceof RpcError && error.code === ErrorCode.Aborted,
      );
      assert.equal(seen, 2);
      assert.equal(await client.call("plain", [2]), 2);
    } finally {
      client.close();
    }
  });
});
