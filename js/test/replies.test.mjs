// SPDX-License-Identifier: Apache-2.0
// Binary replies (tests/vectors/binary/replies) from the live Rust spec server: over HTTP
// (Accept) and WebSocket (ucall.binary.v1) a result's attachments come back as Uint8Array
// and NdArray values; over raw TCP these requests carry no attachment, so the client sends
// JSON texts and gets the plain form (base64), which fromBase64 and toNdArray read the same.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { Client, NdArray, RpcError, fromBase64, toNdArray } from "../dist/index.js";
import { REPO, startServer, urls } from "./servers.mjs";

const DIR = join(REPO, "tests/vectors/binary/replies");
const TYPES = { uint8: Uint8Array, int32: Int32Array, float32: Float32Array, float64: Float64Array, int64: BigInt64Array };

/** The vector's reply value with each placeholder replaced by the value it names. */
function values(value, section) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => values(v, section));
  if (!("$ucall" in value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, values(v, section)]));
  const bytes = new Uint8Array(section.subarray(value.offset, value.offset + value.length));
  if (value.$ucall === "bytes") return bytes;
  const type = TYPES[value.dtype];
  return new NdArray(new type(bytes.buffer, 0, bytes.length / type.BYTES_PER_ELEMENT), value.shape, value.dtype);
}

function check(expected, actual, binary) {
  if ("error" in expected) {
    assert.ok(actual instanceof RpcError, `expected an error, got ${actual}`);
    return assert.equal(actual.code, expected.error.code);
  }
  const want = expected.result;
  if (want instanceof Uint8Array) {
    if (binary) assert.ok(actual instanceof Uint8Array, `an attachment, not ${JSON.stringify(actual)}`);
    return assert.deepEqual(fromBase64(actual), want);
  }
  if (want instanceof NdArray) {
    if (binary) assert.ok(actual instanceof NdArray, `an attachment, not ${JSON.stringify(actual)}`);
    const got = toNdArray(actual);
    return assert.deepEqual([got.dtype, got.shape, [...got.data]], [want.dtype, want.shape, [...want.data]]);
  }
  assert.deepEqual(actual, want);
}

const vectors = [];
for (const name of existsSync(DIR) ? readdirSync(DIR).filter((f) => f.endsWith(".json")).sort() : []) {
  const vector = JSON.parse(readFileSync(join(DIR, name), "utf8"));
  const request = JSON.parse(vector.json);
  // The client sends batches of calls only, and runs every vector on a server with an engine.
  if (vector.attachments.length || (Array.isArray(request) && request.some((r) => !("id" in r)))) continue;
  const section = Buffer.alloc(Math.max(0, ...vector.reply_attachments.map((a) => a.offset + a.hex.length / 2)));
  for (const a of vector.reply_attachments) Buffer.from(a.hex, "hex").copy(section, a.offset);
  vectors.push({ name, request, reply: vector.reply && values(vector.reply, section) });
}

describe("rust server: binary replies", { skip: vectors.length === 0 && "no reply vectors here (tests/vectors/binary/replies)" }, () => {
  let server;
  before(async () => {
    server = await startServer({ kind: "rust" });
  });
  after(() => server?.stop());
  for (const transport of ["http", "ws", "tcp"]) {
    test(transport, async () => {
      const client = new Client(urls(server)[transport], { WebSocket, timeout: 10_000 });
      const binary = transport !== "tcp";
      try {
        for (const { name, request, reply } of vectors) {
          await test(name, async () => {
            if (Array.isArray(request)) {
              const entries = await client.batch(request.map((r) => [r.method, r.params]));
              reply.forEach((expected, i) => check(expected, entries[i], binary));
            } else if (!("id" in request)) {
              assert.equal(await client.notify(request.method, request.params), undefined);
            } else {
              check(reply, await client.call(request.method, request.params).catch((e) => e), binary);
            }
          });
        }
      } finally {
        client.close();
      }
    });
  }
});
