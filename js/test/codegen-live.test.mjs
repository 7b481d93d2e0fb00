// SPDX-License-Identifier: Apache-2.0
// ucall-codegen against live servers: the types come from a running Rust or Python server's
// rpc.discover and /openrpc.json, tsc checks a program written against them (and refuses
// one with a wrong call), and the compiled program calls the same server.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { serverKinds, startServer } from "./servers.mjs";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(ROOT, "dist/codegen.cjs");
// Asynchronous, so that a Python server this process waits on is never starved of its pipe.
const run = promisify(execFile);

async function tsc(dir, files) {
  const compilerOptions = { strict: true, target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2022", "DOM"], types: ["node"], skipLibCheck: true };
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files }));
  try {
    await run(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", dir], { timeout: 60_000 });
    return { status: 0, stdout: "" };
  } catch (error) {
    return { status: error.code, stdout: String(error.stdout) };
  }
}

/** What each live server is called with: a right program, its output, and wrong calls (each must not compile). */
const CASES = {
  "rust-described": {
    right: `
      const total: number = await client.methods.sum({ a: 1, b: 2 });
      const scaled = await client.methods.scale({ point: { x: 1, y: -2 }, factor: 3 });
      const x: number = scaled.x;
      const greeting: string = await client.methods.greet({ name: "Ada", tone: "formal" });
      console.log(JSON.stringify([total, x, greeting]));`,
    output: [3, 3, "Good day, Ada."],
    wrong: [
      ['await client.methods.sum({ a: 1, b: "2" });', "TS2322"], // a string for an integer
      ['await client.methods.greet({ name: "Ada", tone: "rude" });', "TS2322"], // not one of the enum's values
      ["await client.methods.product({ a: 1, b: 2 });", "TS2339"], // no such procedure
      ["const y: string = (await client.methods.scale({ point: { x: 1, y: 2 } })).y;", "TS2322"], // y is a number
    ],
  },
  "python-rich": {
    // numpy.ndarray and bytes params take what the client sends as attachments (an NdArray
    // once failed TS2322 here); results are read with toNdArray and fromBase64 in either form.
    right: `
      import { NdArray, fromBase64, toNdArray } from "../../dist/index.js";
      const reversed: string | Uint8Array = await client.methods.reverse({ data: new Uint8Array([1, 2, 3]) });
      const y: NdArray = toNdArray(await client.methods.echo_array({ array: new NdArray(new Float32Array([1.5, -2]), [2]) }));
      const times: number = await client.methods.refuse_next({ times: 0 });
      console.log(JSON.stringify([Array.from(fromBase64(reversed)), y.dtype, Array.from(y.data as Float32Array), times]));`,
    output: [[3, 2, 1], "float32", [1.5, -2], 0],
    wrong: [
      ["await client.methods.echo_array({ array: 5 });", "TS2322"], // a number for an array
      ["await client.methods.reverse({ data: 5 });", "TS2322"], // a number for bytes
      ['await client.methods.refuse_next({ times: "0" });', "TS2322"], // a string for an integer
      ["await client.methods.missing();", "TS2339"], // no such procedure
    ],
  },
};

const available = serverKinds();
describe("ucall-codegen against a live server", () => {
  for (const [kind, use] of Object.entries(CASES)) {
    const skip = kind.startsWith("python") && !available.includes("python") ? "the Python package is not built here" : false;
    test(`${kind}: rpc.discover and /openrpc.json give the same types; tsc checks right and wrong calls`, { skip, timeout: 180_000 }, async () => {
      const server = await startServer({ kind });
      // Inside the package, so that the generated import of the client resolves to dist/.
      const dir = mkdtempSync(join(ROOT, "test/.codegen-live-"));
      try {
        const base = `http://127.0.0.1:${server.port}`;
        await run(process.execPath, [CLI, `${base}/`, "-o", join(dir, "api.ts"), "--import", "../../dist/index.js"], { timeout: 30_000 });
        const { stdout: viaGet } = await run(process.execPath, [CLI, `${base}/openrpc.json`, "--import", "../../dist/index.js"], { timeout: 30_000 });
        const viaDiscover = readFileSync(join(dir, "api.ts"), "utf8");
        assert.match(viaDiscover, /export interface Api \{/);
        assert.equal(viaGet.replace(/^.*\n/, ""), viaDiscover.replace(/^.*\n/, ""), "same types from rpc.discover and GET /openrpc.json");

        const program = (body) => `import { connect } from "./api.js";\nconst client = connect(process.argv[2]!);\n${body}\nclient.close();\n`;
        writeFileSync(join(dir, "right.ts"), program(use.right));
        const right = await tsc(dir, ["api.ts", "right.ts"]);
        assert.equal(right.status, 0, `the right program type-checks:\n${right.stdout}\n${viaDiscover}`);
        const { stdout } = await run(process.execPath, [join(dir, "right.js"), `${base}/`], { timeout: 30_000 });
        assert.deepEqual(JSON.parse(stdout), use.output);

        for (const [line, code] of use.wrong) {
          writeFileSync(join(dir, "wrong.ts"), program(line));
          const wrong = await tsc(dir, ["api.ts", "wrong.ts"]);
          assert.notEqual(wrong.status, 0, `must not type-check: ${line}`);
          // The error is on the wrong call's line (3: after the import and connect lines).
          assert.match(wrong.stdout, new RegExp(`wrong\\.ts\\(3,\\d+\\): error ${code}`), `${line}\n${wrong.stdout}`);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
        await server.stop();
      }
    });
  }
});
