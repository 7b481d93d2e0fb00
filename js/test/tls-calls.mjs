// SPDX-License-Identifier: Apache-2.0
// Calls each URL given (https, wss, tls) and prints what came back, as JSON.
import WebSocket from "ws";
import { Client } from "../dist/index.js";

const seen = {};
for (const url of process.argv.slice(2)) {
  const client = new Client(url, { WebSocket, timeout: 10_000 });
  try {
    seen[url] = [await client.call("subtract", [42, 23]), (await client.batch([["sum", [1, 2]]]))[0]];
  } finally {
    client.close();
  }
}
console.log(JSON.stringify(seen));
