// SPDX-License-Identifier: Apache-2.0
// The packed @ucall/client as an ES module: sum over HTTP, WebSocket and raw TCP. Node 20
// has no WebSocket of its own: the ws package's, as js/README.md says.
import { Client } from "@ucall/client";
import WebSocket from "ws";

const port = process.argv[2];
for (const url of [`http://127.0.0.1:${port}/`, `ws://127.0.0.1:${port}/`, `tcp://127.0.0.1:${port}`]) {
  const client = new Client(url, { WebSocket });
  const sum = await client.call("sum", { a: 1, b: 2 });
  client.close();
  if (sum !== 3) throw new Error(`${url}: sum answered ${sum}`);
}
console.log("ok esm");
