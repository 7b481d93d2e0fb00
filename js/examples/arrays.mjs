// SPDX-License-Identifier: Apache-2.0
// A numpy array from Node and back, over each URL given: the Python server of
// examples/python/arrays.py (echo and scale of a numpy.ndarray).
//
//   python examples/python/arrays.py --serve --port 8545
//   node js/examples/arrays.mjs http://127.0.0.1:8545/ ws://127.0.0.1:8545/ tcp://127.0.0.1:8545
//
// https://, wss:// and tls:// work the same against a server with --tls-cert, --tls-key and
// --tls-port; for a self-signed certificate start Node with NODE_EXTRA_CA_CERTS=cert.pem.
import WebSocket from "ws"; // Node 20 has no WebSocket of its own; browsers and Node 22+ do
import { Client, NdArray, toNdArray } from "@ucall/client";

const urls = process.argv.length > 2 ? process.argv.slice(2) : ["http://127.0.0.1:8545/", "ws://127.0.0.1:8545/", "tcp://127.0.0.1:8545"];

// 400 x 1000 float32 values (1.6 MB): sent as an attachment beside the JSON text, not as base64.
const data = Float32Array.from({ length: 400_000 }, (_, i) => Math.sin(i));
const x = new NdArray(data, [400, 1000]);
const equal = (array, expected) =>
  array.dtype === "float32" && array.shape.join() === "400,1000" && array.data.every((v, i) => v === expected[i]);

for (const url of urls) {
  const client = new Client(url, { WebSocket, timeout: 10_000 });
  try {
    // The result comes back as an NdArray viewing the reply's bytes (toNdArray also reads base64).
    const echoed = await client.call("echo", { x });
    // Both ways as attachments: the server's handler viewed x in its receive buffer, and the
    // reply carried the array as an attachment (an NdArray), not as a base64 string.
    const inPlace = (await client.call("in_place")) === true && echoed instanceof NdArray;
    const back = toNdArray(echoed);
    const doubled = toNdArray(await client.call("scale", { x, factor: 2 }));
    const same = equal(back, data) && equal(doubled, data.map((v) => 2 * v));
    console.log(`${url.split(":")[0]}: ${back.dtype} [${back.shape}] equal: ${same}, attachments both ways: ${inPlace}`);
  } finally {
    client.close();
  }
}
