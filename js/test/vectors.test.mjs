// SPDX-License-Identifier: Apache-2.0
// The shared vectors (tests/vectors/jsonrpc) that a client can send: well-formed calls,
// notifications and batches of calls. Malformed requests, which this client never
// writes, and vectors about the raw reply text are left to the wire suites.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import { Client, RpcError } from "../dist/index.js";
import { REPO, serverKinds, startServer, urls } from "./servers.mjs";

const DIR = join(REPO, "tests/vectors/jsonrpc");

/** The request as [method, params, isCall] when the client can send it, else undefined. */
function sendable(request) {
  if (request === null || typeof request !== "object" || Array.isArray(request)) return undefined;
  const keys = Object.keys(request);
  if (request.jsonrpc !== "2.0" || typeof request.method !== "string" || request.method === "") return undefined;
  if (keys.some((k) => !["jsonrpc", "method", "params", "id"].includes(k))) return undefined;
  if ("params" in request && (request.params === null || typeof request.params !== "object")) return undefined;
  if ("id" in request && !Number.isSafeInteger(request.id) && typeof request.id !== "string") return undefined;
  return [request.method, request.params, "id" in request];
}

function hasUnsafeNumber(value) {
  if (typeof value === "number") return Number.isInteger(value) && !Number.isSafeInteger(value);
  if (value && typeof value === "object") return Object.values(value).some(hasUnsafeNumber);
  return false;
}

const vectors = [];
for (const name of readdirSync(DIR).filter((f) => f.endsWith(".json")).sort()) {
  const vector = JSON.parse(readFileSync(join(DIR, name), "utf8"));
  if (!vector.request || vector.reply_text_contains) continue;
  let request;
  try {
    request = JSON.parse(vector.request);
  } catch {
    continue;
  }
  if (hasUnsafeNumber(request) || hasUnsafeNumber(vector.reply)) continue;
  if (Array.isArray(request)) {
    const calls = request.map(sendable);
    if (calls.length === 0 || calls.some((c) => !c || !c[2])) continue;
    vectors.push({ name, vector, batch: calls });
  } else {
    const call = sendable(request);
    if (call) vectors.push({ name, vector, call });
  }
}

function check(vector, expected, actual) {
  if ("error" in expected) {
    assert.ok(actual instanceof RpcError, `expected an error, got ${JSON.stringify(actual)}`);
    assert.equal(actual.code, expected.error.code);
    if (vector.error_message_contains) assert.ok(actual.message.includes(vector.error_message_contains), actual.message);
    if (vector.error_exact) assert.deepEqual([actual.message, actual.data], [expected.error.message, expected.error.data]);
  } else {
    assert.ok(!(actual instanceof RpcError), `expected a result, got ${actual}`);
    assert.deepEqual(actual, expected.result);
  }
}

test("the client can send a good share of the shared vectors", () => {
  assert.ok(vectors.length >= 30, `${vectors.length} vectors apply`);
});

for (const kind of serverKinds()) {
  describe(`${kind} server`, () => {
    let server;
    before(async () => {
      server = await startServer({ kind });
    });
    after(() => server?.stop());
    for (const transport of ["http", "ws", "tcp"]) {
      test(`vectors over ${transport}`, async () => {
        const client = new Client(urls(server)[transport], { WebSocket, timeout: 10_000 });
        try {
          for (const { name, vector, call, batch } of vectors) {
            await test(name, async () => {
              if (batch) {
                const entries = await client.batch(batch.map(([method, params]) => [method, params]));
                // A server answers a batch in request order, as the client's entries are.
                assert.equal(entries.length, vector.reply.length);
                entries.forEach((entry, i) => check(vector, vector.reply[i], entry));
              } else if (!call[2]) {
                assert.equal(vector.reply, null);
                assert.equal(await client.notify(call[0], call[1]), undefined);
              } else {
                const actual = await client.call(call[0], call[1]).catch((e) => e);
                check(vector, vector.reply, actual);
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
