// SPDX-License-Identifier: Apache-2.0
// The official MCP TypeScript SDK's client gives up one of two tool calls under way: it
// calls `wait` (which runs until its caller has gone) and `nap` ({"seconds": 1.5}) at once,
// aborts `wait` after 0.5 s (the SDK then posts notifications/cancelled), and prints what
// it saw as one JSON object (tests/python_api/test_mcp.py reads it).
//
//   node mcp_cancel.mjs http://127.0.0.1:8545/mcp
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url] = process.argv.slice(2);
const client = new Client({ name: "ucall-cancel", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const errors = [];
client.onerror = (error) => errors.push(String(error));
const abort = new AbortController();
const waited = client.callTool({ name: "wait", arguments: {} }, undefined, { signal: abort.signal }).then(
  (result) => ({ result }),
  (error) => ({ error: String(error) }),
);
const napped = client.callTool({ name: "nap", arguments: { seconds: 1.5 } });
setTimeout(() => abort.abort("the user stopped it"), 500);
const seen = { sessionId: transport.sessionId ?? null, wait: await waited, nap: await napped };
// Let the abandoned call's POST end while the client is open, as a real client would be.
await new Promise((resolve) => setTimeout(resolve, 300));
seen.errors = errors;
await client.close();
console.log(JSON.stringify(seen));
