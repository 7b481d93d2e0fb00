// SPDX-License-Identifier: Apache-2.0
// Reads streamed results (docs/streaming.md) from a Python server whose procedures are
// generators, over each transport.
//
//   python js/test/apps/stream_server.py --port 8545
//   node js/examples/stream.mjs 127.0.0.1:8545
import WebSocket from "ws"; // Node 20 has no WebSocket of its own; browsers and Node 22+ do
import { Client, NdArray, RpcError } from "@ucall/client";

const address = process.argv[2] ?? "127.0.0.1:8545";

for (const url of [`http://${address}/`, `ws://${address}/`, `tcp://${address}`]) {
  const client = new Client(url, { WebSocket, timeout: 5000 });

  // Items as they come, then the final reply's result.
  const stream = client.stream("count", { n: 3 });
  const items = [];
  for await (const item of stream) items.push(item);
  const result = await stream.result;

  // An endless one: cancel() asks the server to stop; the loop ends after the items on their way.
  const ticks = client.stream("endless", { tag: "tick" });
  let seen = 0;
  for await (const _ of ticks) if (++seen === 3) ticks.cancel();

  // Arrays yielded by the server come back as NdArray when the call went as a binary message.
  const x = new NdArray(new Float32Array([1, 2, 3, 4]), [2, 2]);
  const frames = [];
  for await (const frame of client.stream("frames", { x, n: 2 })) frames.push(frame);

  // An error reply rejects the loop after the items sent before it.
  let error;
  try {
    for await (const _ of client.stream("broken", { n: 1 }));
  } catch (e) {
    error = e instanceof RpcError ? e.code : e;
  }

  const shapes = frames.map((f) => (f instanceof NdArray ? `[${f.shape}]` : typeof f)).join(" ");
  console.log(`${url}: items=${items} result=${result} cancelled=${seen >= 3} frames=${shapes} error=${error}`);
  client.close();
}
