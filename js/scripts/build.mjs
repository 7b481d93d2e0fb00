// SPDX-License-Identifier: Apache-2.0
// Builds dist/: ESM and CommonJS bundles of each entry point, for Node and for browsers
// (`*.browser.*`: src/platform.browser.ts in place of src/platform.ts, so no node: module),
// the codegen CLI, and type declarations (tsc) for both module systems.
import { build } from "esbuild";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
rmSync(dist, { recursive: true, force: true });

const entries = { index: "src/index.ts", "http-client": "src/http-client.ts" };
const common = { bundle: true, target: "es2022", platform: "neutral", external: ["node:*"], absWorkingDir: root, logLevel: "warning" };
// Browser bundles resolve Node's modules nowhere: a node: import left in them fails the build.
const browser = { ...common, platform: "browser", external: [], plugins: [browserPlatform()] };
for (const [name, entry] of Object.entries(entries)) {
  await build({ ...common, entryPoints: [entry], format: "esm", outfile: `dist/${name}.js` });
  await build({ ...common, entryPoints: [entry], format: "cjs", outfile: `dist/${name}.cjs` });
  await build({ ...browser, entryPoints: [entry], format: "esm", outfile: `dist/${name}.browser.js` });
  await build({ ...browser, entryPoints: [entry], format: "cjs", outfile: `dist/${name}.browser.cjs` });
}
await build({
  ...common,
  platform: "node",
  entryPoints: ["src/codegen-cli.ts"],
  format: "cjs",
  outfile: "dist/codegen.cjs",
  banner: { js: "#!/usr/bin/env node" },
});

execFileSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", root], { stdio: "inherit" });
// The same declarations for require(): .d.cts files whose imports name .cjs files.
for (const file of readdirSync(dist).filter((f) => f.endsWith(".d.ts"))) {
  const text = readFileSync(join(dist, file), "utf8").replace(/(from\s+["']\.\/[\w-]+)\.js(["'])/g, "$1.cjs$2");
  writeFileSync(join(dist, file.replace(/\.d\.ts$/, ".d.cts")), text);
}

/** Resolves `./platform.js` to src/platform.browser.ts. */
function browserPlatform() {
  return {
    name: "browser-platform",
    setup(build) {
      build.onResolve({ filter: /^\.\/platform\.js$/ }, (args) => ({ path: join(args.resolveDir, "platform.browser.ts") }));
    },
  };
}
