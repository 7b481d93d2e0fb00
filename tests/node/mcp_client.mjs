// SPDX-License-Identifier: Apache-2.0
// The official MCP TypeScript SDK's client over Streamable HTTP: connect to the URL given,
// list the tools, call the ones named on the command line with their JSON arguments, and
// print what it saw as one JSON object (tests/python_api/test_mcp.py reads it).
//
//   node mcp_client.mjs http://127.0.0.1:8545/mcp add '{"a":2,"b":3}' ...
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, ...calls] = process.argv.slice(2);
const client = new Client({ name: "ucall-interop", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const seen = { protocolVersion: transport.protocolVersion ?? null, tools: [], calls: [] };
seen.tools = (await client.listTools()).tools;
for (let i = 0; i + 1 < calls.length; i += 2) {
  const progress = [];
  const result = await client.callTool({ name: calls[i], arguments: JSON.parse(calls[i + 1]) }, undefined, {
    onprogress: (p) => progress.push(p),
  });
  seen.calls.push({ name: calls[i], result, progress });
}
await client.close();
console.log(JSON.stringify(seen));
