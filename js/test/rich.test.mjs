// SPDX-License-Identifier: Apache-2.0
// Bytes and numpy arrays against a Python server whose procedures take and return them,
// and retries that the server allows (executed: false).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { Client, NdArray, fromBase64, toNdArray } from "../dist/index.js";
import { serverKinds, startServer, urls } from "./servers.mjs";

// The Python server needs the package built (make python; make test-js does it first).
describe("Python server with rich types", { skip: !serverKinds().includes("python") && "the Python package is not built" }, () => {
  let server;
  before(async () => {
    server = await startServer({ kind: "python-rich" });
  });
  after(() => server?.stop());

  for (const transport of ["http", "ws", "tcp"]) {
    test(`${transport}: bytes and arrays both ways`, async () => {
      const client = new Client(urls(server)[transport], { WebSocket, timeout: 10_000 });
      try {
        const bytes = new Uint8Array(300).map((_, i) => (i * 7) & 0xff);
        assert.deepEqual(fromBase64(await client.call("reverse", { data: bytes })), bytes.slice().reverse());
        assert.deepEqual(fromBase64(await client.call("reverse", [new Uint8Array()])), new Uint8Array());

        const matrix = new NdArray(new Float64Array([1, 2, 3, 4, 5, 6]), [2, 3]);
        const scaled = toNdArray(await client.call("scale", { array: matrix, factor: 0.5 }));
        assert.deepEqual([scaled.dtype, scaled.shape, [...scaled.data]], ["float64", [2, 3], [0.5, 1, 1.5, 2, 2.5, 3]]);

        for (const [data, dtype] of [
          [new Int32Array([-1, 2, 3, 4]), "int32"],
          [new Float32Array([0.5, 1.5, -2, 8]), "float32"],
          [new BigInt64Array([1n, -2n, 3n, 2n ** 40n]), "int64"],
          [new Uint8Array([1, 0, 1, 1]), "bool"],
          [new Uint16Array([1, 2, 65535, 4]), "uint16"],
        ]) {
          const array = new NdArray(data, [2, 2], dtype);
          const seen = await client.call("describe", [array]);
          const sum = [...data].reduce((a, b) => a + Number(b), 0);
          assert.deepEqual(seen, { dtype, shape: [2, 2], sum }, dtype);
        }

        for (const fortran of [false, true]) {
          const made = toNdArray(await client.call("make", ["int16", 2, 3, fortran]));
          assert.deepEqual([made.dtype, made.shape, [...made.data]], ["int16", [2, 3], [0, 1, 2, 3, 4, 5]], `fortran ${fortran}`);
        }
      } finally {
        client.close();
      }
    });
  }

  for (const transport of ["http", "ws", "tcp"]) {
    test(`${transport}: a float32 array of 1.6 MB sent and received back equal, as an attachment or as JSON`, async () => {
      for (const binary of [true, false]) {
        const client = new Client(urls(server)[transport], { WebSocket, timeout: 30_000, binary });
        try {
          const data = new Float32Array(400 * 1000).map((_, i) => Math.fround(Math.sin(i) * 1000));
          const reply = await client.call("echo_array", [new NdArray(data, [400, 1000])]);
          // a binary reply's attachment, or base64 of a .npy file in plain JSON
          assert.equal(reply instanceof NdArray, binary, `binary ${binary}`);
          const back = toNdArray(reply);
          assert.deepEqual([back.dtype, back.shape], ["float32", [400, 1000]], `binary ${binary}`);
          assert.ok(back.data instanceof Float32Array);
          assert.equal(Buffer.compare(Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength), Buffer.from(data.buffer)), 0, `binary ${binary}`);
          // a bare typed array is a one-dimensional array
          const flat = toNdArray(await client.call("echo_array", { array: new Float32Array([1.5, -2]) }));
          assert.deepEqual([flat.shape, [...flat.data]], [[2], [1.5, -2]]);
        } finally {
          client.close();
        }
      }
    });
  }

  test("a call the server refuses with executed: false is retried until it runs", async () => {
    const client = new Client(urls(server).http, { retryDelay: 5, timeout: 10_000 });
    try {
      await client.call("refuse_next", [2]);
      assert.equal(await client.call("busy"), "done");
      await client.call("refuse_next", [5]);
      const limited = new Client(urls(server).http, { retries: 2, retryDelay: 5 });
      await assert.rejects(limited.call("busy"), (e) => e.code === -32000 && e.executed === "no");
      // Three of five refusals used: the two left take two of the next call's four attempts.
      assert.equal(await client.call("busy"), "done");
    } finally {
      client.close();
    }
  });
});

test("NdArray refuses a shape that does not fit its data, and data that is not .npy", () => {
  assert.throws(() => new NdArray(new Float64Array(5), [2, 3]), RangeError);
  assert.throws(() => toNdArray(Buffer.from("not an array").toString("base64")), /not a \.npy array/);
  assert.throws(() => toNdArray(42), TypeError);
});
