// SPDX-License-Identifier: Apache-2.0
// The client against live UCall servers (Rust, and Python where built) over HTTP,
// WebSocket and raw TCP, plain and TLS.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { Client, ErrorCode, RpcError, fromBase64 } from "../dist/index.js";
import { serverKinds, startServer, tlsFiles, urls } from "./servers.mjs";

for (const kind of serverKinds()) {
  describe(`${kind} server`, () => {
    let server;
    before(async () => {
      server = await startServer({ kind, tls: true });
    });
    after(() => server?.stop());

    for (const transport of ["http", "ws", "tcp"]) {
      describe(transport, () => {
        let client;
        before(() => {
          client = new Client(urls(server)[transport], { WebSocket, timeout: 10_000 });
        });
        after(() => client.close());

        test("calls with positional and named params", async () => {
          assert.equal(await client.call("subtract", [42, 23]), 19);
          assert.equal(await client.call("subtract", { subtrahend: 23, minuend: 42 }), 19);
          assert.deepEqual(await client.call("get_data"), ["hello", 5]);
          assert.equal(await client.methods.sum([1, 2, 3]), 6);
        });

        test("notifies", async () => {
          assert.equal(await client.notify("notify_hello", [7]), undefined);
          assert.equal(await client.call("subtract", [1, 1]), 0, "the connection still serves after a notification");
        });

        test("a batch resolves to one entry per call, in order, errors included", async () => {
          const entries = await client.batch([
            ["subtract", [5, 3]],
            ["fail"],
            ["no_such_method", []],
            ["subtract", { minuend: 1 }],
            ["echo", { data: { nested: [1, "two", null] } }],
          ]);
          assert.equal(entries.length, 5);
          assert.equal(entries[0], 2);
          assert.ok(entries[1] instanceof RpcError);
          assert.deepEqual([entries[1].code, entries[1].message, entries[1].data, entries[1].executed], [-32001, "boom", { why: "asked to fail" }, "yes"]);
          assert.deepEqual([entries[2].code, entries[2].executed], [-32601, "no"]);
          assert.deepEqual([entries[3].code, entries[3].executed], [-32602, "no"]);
          assert.deepEqual(entries[4], { nested: [1, "two", null] });
          assert.deepEqual(await client.batch([]), []);
        });

        test("a failing call rejects with the server's error", async () => {
          await assert.rejects(client.call("fail"), (e) => e instanceof RpcError && e.code === -32001 && e.executed === "yes");
          await assert.rejects(client.call("panic"), (e) => e.code === -32603 && e.executed === "yes");
        });

        test("many calls in flight at once", async () => {
          // HTTP/1.1 holds one call per connection: fewer there, so as not to open hundreds.
          const n = transport === "http" ? 64 : 500;
          const calls = Array.from({ length: n }, (_, i) => client.call("sum", [i, 1]));
          assert.deepEqual(await Promise.all(calls), Array.from({ length: n }, (_, i) => i + 1));
        });

        test("automatic batching groups calls and keeps each answer with its call", async () => {
          const batching = new Client(urls(server)[transport], { WebSocket, maxBatchSize: 16, wait: 1 });
          try {
            const calls = Array.from({ length: 70 }, (_, i) => (i % 7 === 3 ? batching.call("fail") : batching.call("subtract", [i, 1])));
            const settled = await Promise.allSettled(calls);
            settled.forEach((s, i) => {
              if (i % 7 === 3) assert.equal(s.reason.code, -32001);
              else assert.equal(s.value, i - 1);
            });
            assert.equal(await batching.notify("update", [1]), undefined);
          } finally {
            batching.close();
          }
        });

        test("bytes go as an attachment, or as base64 with binary: false", async () => {
          const bytes = new Uint8Array([0, 1, 2, 250, 255, 10, 13]);
          assert.equal(await client.call("hex", { data: bytes }), "000102faff0a0d");
          const plain = new Client(urls(server)[transport], { WebSocket, timeout: 10_000, binary: false });
          try {
            // echo returns its param as it reads it: base64 text here (a placeholder object in a binary message)
            const echoed = await plain.call("echo", { data: bytes });
            assert.equal(echoed, Buffer.from(bytes).toString("base64"));
            assert.deepEqual(fromBase64(echoed), bytes);
            assert.equal(await plain.call("hex", { data: bytes }), "000102faff0a0d");
          } finally {
            plain.close();
          }
        });

        test("an aborted signal stops a call before it is sent", async () => {
          const controller = new AbortController();
          controller.abort(new Error("changed my mind"));
          await assert.rejects(client.call("sum", [1], { signal: controller.signal }), (e) => {
            assert.deepEqual([e.code, e.executed, e.cause.message], [ErrorCode.Aborted, "no", "changed my mind"]);
            return true;
          });
        });
      });
    }

    test("https, wss and tls:// with the server's certificate", () => {
      // fetch takes its CA list at start-up: a child process with NODE_EXTRA_CA_CERTS.
      const child = fileURLToPath(new URL("./tls-calls.mjs", import.meta.url));
      const { https, wss, tls } = urls(server);
      const out = execFileSync(process.execPath, [child, https, wss, tls], {
        env: { ...process.env, NODE_EXTRA_CA_CERTS: tlsFiles().cert },
        encoding: "utf8",
        timeout: 30_000,
      });
      assert.deepEqual(JSON.parse(out), { [https]: [19, 3], [wss]: [19, 3], [tls]: [19, 3] });
    });
  });
}
