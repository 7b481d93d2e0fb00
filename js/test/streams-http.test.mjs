// SPDX-License-Identifier: Apache-2.0
// Streamed HTTP bodies (docs/streaming.md) read as they arrive, through a fetch that serves
// them in pieces of any size: JSON lines, binary messages between them
// (application/vnd.ucall.binary-stream), and what a call() on a streaming procedure does.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, ErrorCode, NdArray, RpcError, STREAMS_ITS_RESULT } from "../dist/index.js";

const encoder = new TextEncoder();

/** A binary message (docs/wire.md §3.2): prefix, JSON text, padding, section. */
function binaryMessage(text, section) {
  const json = encoder.encode(text);
  const start = Math.ceil(json.length / 64) * 64;
  const body = new Uint8Array(start + section.length);
  body.set(json);
  body.set(section, start);
  const message = new Uint8Array(16 + body.length);
  const view = new DataView(message.buffer);
  message[0] = 0xc1;
  message[1] = 1;
  view.setUint32(4, json.length, true);
  view.setBigUint64(8, BigInt(body.length), true);
  message.set(body, 16);
  return message;
}

/** A fetch answering each request with `messages(id)`, a streamed body in pieces of `piece` bytes. */
function fakeFetch(type, messages, piece, seen = []) {
  return async (_url, init) => {
    const id = JSON.parse(init.body).id;
    seen.push(init);
    const parts = messages(id).map((m) => (typeof m === "string" ? encoder.encode(m + "\n") : m));
    const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    let sent = 0;
    const body = new ReadableStream({
      pull(controller) {
        if (sent >= all.length) return controller.close();
        controller.enqueue(all.slice(sent, sent + piece));
        sent += piece;
      },
    });
    return new Response(body, { status: 200, headers: { "content-type": type } });
  };
}

const item = (id, value) => JSON.stringify({ jsonrpc: "2.0", method: "ucall.stream", params: { id, item: value } });

for (const piece of [1, 7, 4096]) {
  test(`JSON lines in pieces of ${piece} bytes`, async () => {
    const seen = [];
    const fetch = fakeFetch("application/jsonl", (id) => [item(id, "a"), item(id, { b: [1, 2] }), JSON.stringify({ jsonrpc: "2.0", id, result: "stop" })], piece, seen);
    const client = new Client("http://127.0.0.1:1/", { fetch });
    const stream = client.stream("generate", { prompt: "hi" });
    const items = [];
    for await (const value of stream) items.push(value);
    assert.deepEqual(items, ["a", { b: [1, 2] }]);
    assert.equal(await stream.result, "stop");
    assert.match(seen[0].headers.accept, /application\/vnd\.ucall\.binary-stream/);
    assert.match(seen[0].headers.accept, /application\/vnd\.ucall\.binary(,|$)/);
  });

  test(`binary messages among JSON lines in pieces of ${piece} bytes`, async () => {
    const section = new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer);
    const fetch = fakeFetch(
      "application/vnd.ucall.binary-stream",
      (id) => [
        item(id, 0),
        binaryMessage(JSON.stringify({ jsonrpc: "2.0", method: "ucall.stream", params: { id, item: { $ucall: "ndarray", offset: 0, length: 16, dtype: "float32", shape: [2, 2] } } }), section),
        binaryMessage(JSON.stringify({ jsonrpc: "2.0", id, result: { $ucall: "bytes", offset: 0, length: 3 } }), new Uint8Array([1, 2, 3])),
      ],
      piece,
    );
    const client = new Client("http://127.0.0.1:1/", { fetch });
    const stream = client.stream("frames");
    const items = [];
    for await (const value of stream) items.push(value);
    assert.equal(items[0], 0);
    assert.ok(items[1] instanceof NdArray);
    assert.deepEqual([items[1].shape, [...items[1].data]], [[2, 2], [1, 2, 3, 4]]);
    assert.deepEqual(await stream.result, new Uint8Array([1, 2, 3]));
  });
}

test("an error reply after items rejects the loop after them", async () => {
  const fetch = fakeFetch("application/jsonl", (id) => [item(id, 1), JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32010, message: "ran dry" } })], 5);
  const client = new Client("http://127.0.0.1:1/", { fetch });
  const items = [];
  await assert.rejects(async () => {
    for await (const value of client.stream("broken")) items.push(value);
  }, (e) => e instanceof RpcError && e.code === -32010);
  assert.deepEqual(items, [1]);
});

test("a body that ends before the final reply fails the stream", async () => {
  const fetch = fakeFetch("application/jsonl", (id) => [item(id, 1)], 3);
  const client = new Client("http://127.0.0.1:1/", { fetch });
  const stream = client.stream("cut");
  await assert.rejects(async () => {
    for await (const _ of stream);
  }, (e) => e instanceof RpcError && e.code === ErrorCode.BadReply);
});

test("call() on a streaming procedure says to stream it", async () => {
  const fetch = fakeFetch("application/jsonl", (id) => [item(id, 1), item(id, 2), JSON.stringify({ jsonrpc: "2.0", id, result: 0 })], 4);
  const client = new Client("http://127.0.0.1:1/", { fetch });
  await assert.rejects(client.call("generate"), (e) => e instanceof RpcError && e.message.includes(STREAMS_ITS_RESULT) && e.message.includes("client.stream("));
});
