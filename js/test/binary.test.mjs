// SPDX-License-Identifier: Apache-2.0
// The binary vectors (tests/vectors/binary) a client can send, against live servers over
// HTTP, WebSocket and raw TCP: each placeholder of a vector's JSON text is given to the
// client as the value it stands for (a Uint8Array, an NdArray), which the client sends as
// an attachment again. Vectors whose reply differs when sent as JSON (an array's bytes are
// not its .npy file) show that the value did travel as an attachment.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { Client, NdArray, RpcError } from "../dist/index.js";
import { REPO, serverKinds, startServer, urls } from "./servers.mjs";

const DIR = join(REPO, "tests/vectors/binary");
const TYPES = {
  bool: Uint8Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, int32: Int32Array,
  uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array, float16: Uint16Array, float32: Float32Array, float64: Float64Array,
};

/** The vector's JSON value with each placeholder replaced by the value it stands for. */
function values(value, section) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => values(v, section));
  if (!("$ucall" in value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, values(v, section)]));
  const bytes = section.slice(value.offset, value.offset + value.length);
  if (value.$ucall === "bytes") return new Uint8Array(bytes);
  const type = TYPES[value.dtype];
  return new NdArray(new type(bytes.buffer, 0, bytes.length / type.BYTES_PER_ELEMENT), value.shape, value.dtype);
}

const vectors = [];
for (const name of readdirSync(DIR).filter((f) => f.startsWith("valid_") && f.endsWith(".json")).sort()) {
  const vector = JSON.parse(readFileSync(join(DIR, name), "utf8"));
  if (vector.json === undefined) continue; // raw framing, which this client writes one way only
  const section = Buffer.alloc(vector.section_length ?? Math.max(0, ...vector.attachments.map((a) => a.offset + a.hex.length / 2)));
  for (const a of vector.attachments) Buffer.from(a.hex, "hex").copy(section, a.offset);
  const request = values(JSON.parse(vector.json), section);
  vectors.push({ name, vector, request });
}

function check(expected, actual) {
  if ("error" in expected) {
    assert.ok(actual instanceof RpcError, `expected an error, got ${JSON.stringify(actual)}`);
    assert.equal(actual.code, expected.error.code);
  } else assert.deepEqual(actual, expected.result);
}

test("the client sends most of the binary vectors", () => assert.ok(vectors.length >= 12, `${vectors.length}`));

for (const kind of serverKinds()) {
  describe(`${kind} server: binary vectors`, () => {
    let server;
    before(async () => {
      server = await startServer({ kind });
    });
    after(() => server?.stop());
    for (const transport of ["http", "ws", "tcp"]) {
      test(transport, async () => {
        const client = new Client(urls(server)[transport], { WebSocket, timeout: 10_000 });
        try {
          for (const { name, vector, request } of vectors) {
            await test(name, async () => {
              if (Array.isArray(request)) {
                const entries = await client.batch(request.map((r) => [r.method, r.params]));
                vector.reply.forEach((reply, i) => check(reply, entries[i]));
              } else if (!("id" in request)) {
                assert.equal(vector.reply, null);
                assert.equal(await client.notify(request.method, request.params), undefined);
              } else {
                check(vector.reply, await client.call(request.method, request.params).catch((e) => e));
              }
            });
          }
        } finally {
          client.close();
        }
      });
    }
  });
}
