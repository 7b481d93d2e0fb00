// SPDX-License-Identifier: Apache-2.0
// ucall-codegen: TypeScript types for a server's procedures, from its OpenRPC document.
//
//   npx ucall-codegen http://127.0.0.1:8545 -o api.ts     (calls rpc.discover)
//   npx ucall-codegen http://host/openrpc.json -o api.ts  (GETs the document)
//   npx ucall-codegen openrpc.json -o api.ts              (reads a file)

import { readFile, writeFile } from "node:fs/promises";
import { Client } from "./client.js";

type Schema = {
  type?: string | string[];
  $ref?: string;
  enum?: unknown[];
  const?: unknown;
  items?: Schema | Schema[];
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  oneOf?: Schema[];
  anyOf?: Schema[];
  allOf?: Schema[];
  description?: string;
  contentEncoding?: string;
  nullable?: boolean;
  /** A value a binary message may carry as an attachment (docs/wire.md §5). */
  "x-ucall-attachment"?: "bytes" | "ndarray";
};
type Param = { name: string; schema?: Schema; required?: boolean; description?: string };
type Method = {
  name: string;
  summary?: string;
  description?: string;
  params?: Param[];
  result?: { schema?: Schema };
  paramStructure?: "by-name" | "by-position" | "either";
};
export type OpenRpc = { openrpc?: string; info?: { title?: string }; methods: Method[]; components?: { schemas?: Record<string, Schema> } };

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

function key(name: string): string {
  return IDENTIFIER.test(name) ? name : JSON.stringify(name);
}

function typeName(name: string): string {
  const cleaned = name.replace(/[^\w$]/g, "_");
  return /^\d/.test(cleaned) ? `_${cleaned}` : cleaned;
}

/**
 * The TypeScript type of a JSON Schema; `input` for parameters, where bytes may be given as
 * a Uint8Array. A value marked as a possible attachment also takes what the client sends
 * as one (an `NdArray` or typed array; bytes as an ArrayBuffer or Blob), and as a result
 * may be what it reads from one (an `NdArray`, a `Uint8Array`).
 */
export function tsType(schema: Schema | boolean | undefined, input: boolean): string {
  if (schema === undefined || schema === true) return "unknown";
  if (schema === false) return "never";
  const attachment = schema["x-ucall-attachment"];
  if (attachment) {
    const plain = tsType({ ...schema, "x-ucall-attachment": undefined }, input);
    const binary = attachment === "ndarray" ? (input ? "NdArray | TypedArray" : "NdArray") : input ? "Uint8Array | ArrayBuffer | Blob" : "Uint8Array";
    return [...new Set(`${binary} | ${plain}`.split(" | "))].join(" | ");
  }
  if (schema.$ref) return typeName(schema.$ref.split("/").pop() ?? "unknown");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ") || "never";
  const union = schema.oneOf ?? schema.anyOf;
  if (union) return union.map((s) => tsType(s, input)).join(" | ") || "never";
  if (schema.allOf) return schema.allOf.map((s) => tsType(s, input)).join(" & ") || "unknown";
  const types = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  if (types.length === 0) return schema.properties ? objectType(schema, input) : "unknown";
  const out = types.map((t) => {
    switch (t) {
      case "string":
        return schema.contentEncoding === "base64" && input ? "string | Uint8Array" : "string";
      case "integer":
      case "number":
        return "number";
      case "boolean":
        return "boolean";
      case "null":
        return "null";
      case "array":
        if (Array.isArray(schema.items)) return `[${schema.items.map((s) => tsType(s, input)).join(", ")}]`;
        return `Array<${tsType(schema.items, input)}>`;
      case "object":
        return objectType(schema, input);
      default:
        return "unknown";
    }
  });
  if (schema.nullable) out.push("null");
  return out.join(" | ");
}

function objectType(schema: Schema, input: boolean): string {
  const required = new Set(schema.required ?? []);
  const fields = Object.entries(schema.properties ?? {}).map(
    ([name, s]) => `${key(name)}${required.has(name) ? "" : "?"}: ${tsType(s, input)}`,
  );
  const extra = schema.additionalProperties;
  if (extra !== undefined && extra !== false && !(fields.length && extra === true)) {
    fields.push(`[name: string]: ${tsType(extra, input)}`);
  } else if (!schema.properties && extra === undefined) {
    fields.push("[name: string]: unknown");
  }
  return `{ ${fields.join("; ")} }`;
}

function comment(text: string | undefined, indent: string): string {
  if (!text) return "";
  return `${indent}/** ${text.replace(/\*\//g, "*\\/").replace(/\n/g, `\n${indent} * `)} */\n`;
}

/** TypeScript source declaring `Api` (one method per procedure) and a `connect` function. */
export function generate(doc: OpenRpc, from: string, importFrom = "@ucall/client"): string {
  if (!doc || !Array.isArray(doc.methods)) throw new TypeError("not an OpenRPC document (no methods array)");
  let out = `// Generated by ucall-codegen from ${from}. Do not edit; run ucall-codegen again.\n`;
  let body = "";
  for (const [name, schema] of Object.entries(doc.components?.schemas ?? {})) {
    body += comment(schema.description, "");
    body += `export type ${typeName(name)} = ${tsType(schema, false)};\n\n`;
  }
  body += comment(doc.info?.title, "");
  body += "export interface Api {\n";
  for (const method of doc.methods) {
    const params = method.params ?? [];
    let args: string;
    if (method.paramStructure === "by-position") {
      const items = params.map((p) => `${typeName(p.name)}${p.required ? "" : "?"}: ${tsType(p.schema, true)}`);
      args = `params${params.some((p) => p.required) ? "" : "?"}: [${items.join(", ")}]`;
    } else {
      const fields = params.map((p) => `${key(p.name)}${p.required ? "" : "?"}: ${tsType(p.schema, true)}`);
      args = `params${params.some((p) => p.required) ? "" : "?"}: { ${fields.join("; ")} }`;
    }
    body += comment(method.summary ?? method.description, "  ");
    body += `  ${key(method.name)}(${args}): ${tsType(method.result?.schema, false)};\n`;
  }
  body += "}\n\n";
  body += "/** A client whose `methods` are typed by `Api`. */\n";
  body += "export function connect(url: string | URL, options?: Options): Client<Api> {\n";
  body += "  return new Client<Api>(url, options);\n}\n";
  const types = ["NdArray", "TypedArray"].filter((name) => new RegExp(`\\b${name}\\b`).test(body)).map((name) => `, type ${name}`);
  out += `import { Client, type Options${types.join("")} } from ${JSON.stringify(importFrom)};\n\n`;
  return out + body;
}

async function load(source: string): Promise<OpenRpc> {
  if (!/^[a-z]+:\/\//i.test(source)) return JSON.parse(await readFile(source, "utf8")) as OpenRpc;
  const url = new URL(source);
  if (url.pathname.endsWith(".json")) {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`GET ${url.href}: HTTP ${response.status}`);
    return (await response.json()) as OpenRpc;
  }
  const client = new Client(url, { timeout: 10_000 });
  try {
    return await client.call<OpenRpc>("rpc.discover");
  } finally {
    client.close();
  }
}

const USAGE = "usage: ucall-codegen <URL or openrpc.json> [-o api.ts] [--import @ucall/client]";

export async function main(argv: string[]): Promise<number> {
  let source: string | undefined;
  let output: string | undefined;
  let importFrom: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "-o" || arg === "--output") output = argv[++i];
    else if (arg === "--import") importFrom = argv[++i];
    else if (arg === "-h" || arg === "--help") return console.log(USAGE), 0;
    else if (!source) source = arg;
    else return console.error(USAGE), 2;
  }
  if (!source) return console.error(USAGE), 2;
  try {
    const text = generate(await load(source), source, importFrom);
    if (output) await writeFile(output, text);
    else process.stdout.write(text);
    return 0;
  } catch (error) {
    console.error(`ucall-codegen: ${(error as Error).message ?? error}`);
    return 1;
  }
}
