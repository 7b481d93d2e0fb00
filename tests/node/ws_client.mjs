// SPDX-License-Identifier: Apache-2.0
// Talks JSON-RPC to a UCall server over WebSocket with the `ws` package and prints one
// JSON line with what it saw. Usage: node ws_client.mjs ws://127.0.0.1:PORT/ [CA.pem]
import { readFileSync } from "node:fs";
import WebSocket from "ws";

const [url, caPath] = process.argv.slice(2);
const options = caPath ? { ca: readFileSync(caPath), servername: "localhost" } : {};
const ws = new WebSocket(url, options);
const replies = [];
let pongs = 0;
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out", replies }));
  process.exit(2);
}, 10000);

ws.on("open", () => {
  ws.ping(Buffer.from("node"));
  ws.send('{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}');
  ws.send(Buffer.from('{"jsonrpc":"2.0","method":"get_data","id":2}'), { binary: true });
  ws.send('{"jsonrpc":"2.0","method":"update","params":[1]}');
  ws.send('[{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":3},{"jsonrpc":"2.0","method":"nope","id":4}]');
});
ws.on("pong", () => {
  pongs += 1;
});
ws.on("message", (data, isBinary) => {
  replies.push({ text: !isBinary, reply: JSON.parse(data.toString()) });
  if (replies.length === 3) ws.close(1000, "done");
});
ws.on("close", (code) => {
  clearTimeout(timer);
  console.log(JSON.stringify({ code, pongs, replies }));
});
ws.on("error", (error) => {
  clearTimeout(timer);
  console.log(JSON.stringify({ error: String(error), replies }));
  process.exit(1);
});
