// SPDX-License-Identifier: Apache-2.0
// `traceparent`: each request carries the W3C trace context it was given (a string, or a
// function called as each call is made) in its "_meta" member, where a UCall server reads
// it on every transport and for each call of a batch. Checked against a recording server
// on loopback (HTTP and raw TCP) that answers every call with its own request.
import assert from "node:assert/strict";
import { createServer as createHttpServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";

const first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/** The reply to a request (or batch) text: each call's result is the request itself. */
function answer(text) {
  const reply = (request) => ({ jsonrpc: "2.0", id: request.id, result: request });
  const parsed = JSON.parse(text);
  return JSON.stringify(Array.isArray(parsed) ? parsed.map(reply) : reply(parsed));
}

let http;
let tcp;
before(async () => {
  http = createHttpServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      response.setHeader("content-type", "application/json");
      response.end(answer(body));
    });
  });
  tcp = createTcpServer((socket) => {
    let buffered = "";
    socket.on("data", (chunk) => {
      buffered += chunk;
      let end;
      while ((end = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 1);
        if (line.trim()) socket.write(`${answer(line)}\n`);
      }
    });
  });
  await Promise.all([
    new Promise((resolve) => http.listen(0, "127.0.0.1", resolve)),
    new Promise((resolve) => tcp.listen(0, "127.0.0.1", resolve)),
  ]);
});
after(() => {
  http.close();
  tcp.close();
});

for (const transport of ["http", "tcp"]) {
  const url = () => (transport === "http" ? `http://127.0.0.1:${http.address().port}/` : `tcp://127.0.0.1:${tcp.address().port}`);

  test(`${transport}: a fixed traceparent goes in every request's _meta`, async () => {
    const client = new Client(url(), { traceparent: first, timeout: 5000 });
    try {
      const sent = await client.call("sum", [1, 2]);
      assert.deepEqual(sent._meta, { traceparent: first });
      assert.deepEqual(sent.params, [1, 2]);
      const override = await client.call("sum", [1, 2], { traceparent: second });
      assert.equal(override._meta.traceparent, second, "a call's own overrides the client's");
      const batch = await client.batch([["a"], ["b", [1]]]);
      assert.deepEqual(
        batch.map((request) => request._meta.traceparent),
        [first, first],
        "each call of a batch carries it",
      );
    } finally {
      client.close();
    }
  });

  test(`${transport}: a callback is asked as each call is made; nothing sent without one`, async () => {
    let current = first;
    let asked = 0;
    const client = new Client(url(), {
      traceparent: () => {
        asked++;
        return current;
      },
      timeout: 5000,
    });
    const plain = new Client(url(), { timeout: 5000 });
    try {
      assert.equal((await client.call("x"))._meta.traceparent, first);
      current = second;
      assert.equal((await client.call("x"))._meta.traceparent, second);
      current = undefined;
      assert.equal((await client.call("x"))._meta, undefined, "no current context: no _meta");
      assert.equal(asked, 3);
      assert.equal((await plain.call("x"))._meta, undefined);
    } finally {
      client.close();
      plain.close();
    }
  });
}
