// SPDX-License-Identifier: Apache-2.0
// Calls the example server (examples/rust sum_server) over each transport.
//
//   cargo run -p ucall-examples --bin sum_server -- --port 8545
//   node js/examples/quickstart.mjs 127.0.0.1:8545
import WebSocket from "ws"; // Node 20 has no WebSocket of its own; browsers and Node 22+ do
import { Client, RpcError } from "@ucall/client";

const address = process.argv[2] ?? "127.0.0.1:8545";

for (const url of [`http://${address}/`, `ws://${address}/`, `tcp://${address}`]) {
  const client = new Client(url, { WebSocket, timeout: 5000 });
  const sum = await client.call("sum", { a: 1, b: 2 });
  const [byPosition, missing] = await client.batch([
    ["sum", [40, 2]],
    ["sum", { a: 1 }],
  ]);
  const echoed = await client.call("echo", { data: "hello" });
  console.log(`${url}: sum=${sum} batch=[${byPosition}, ${missing instanceof RpcError ? missing.code : missing}] echo=${echoed}`);
  client.close();
}
