// SPDX-License-Identifier: Apache-2.0
// The size budget: what a browser page ships, minified and gzipped.
import assert from "node:assert/strict";
import { build } from "esbuild";
import { test } from "node:test";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

const SRC = fileURLToPath(new URL("../src/", import.meta.url));

/** Minified, gzipped bytes of a browser bundle of `code` (an entry module importing the client). */
async function shipped(code) {
  const result = await build({
    stdin: { contents: code, resolveDir: SRC, loader: "ts" },
    bundle: true,
    minify: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    external: ["node:*"],
    write: false,
  });
  return gzipSync(result.outputFiles[0].contents, { level: 9 }).length;
}

test("HTTP client: at most 5 kB minified and gzipped", async () => {
  const bytes = await shipped(`export { Client, RpcError } from "./http-client.ts";`);
  console.log(`HTTP client: ${bytes} bytes`);
  assert.ok(bytes <= 5 * 1024, `${bytes} bytes`);
});

test("client with WebSocket (every transport): at most 7 kB minified and gzipped", async () => {
  const bytes = await shipped(`export { Client, RpcError } from "./index.ts";`);
  console.log(`full client: ${bytes} bytes`);
  assert.ok(bytes <= 7 * 1024, `${bytes} bytes`);
});
