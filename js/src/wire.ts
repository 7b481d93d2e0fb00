// SPDX-License-Identifier: Apache-2.0
// Binary messages (docs/wire.md): the JSON-RPC text with each binary value replaced by a
// placeholder, then the values' bytes as attachments, each at a multiple of 64 bytes.
// Without them (a server that does not take binary messages, or `binary: false`) the same
// values travel in their plain JSON forms: base64, and base64 of a .npy file for arrays.

import { toBase64 } from "./base64.js";
import { LITTLE, NdArray, TYPES, parts, swap, type DType, type TypedArray } from "./ndarray.js";

export const CONTENT_TYPE = "application/vnd.ucall.binary";
export const JSON_LENGTH = "ucall-json-length";
export const SUBPROTOCOL = "ucall.binary.v1";
export const MAGIC = 0xc1;
const ALIGN = 64;

/** A reply that came as a binary message: its JSON text and its attachment section. */
export interface BinaryReply {
  text: string;
  section: Uint8Array;
}

/** A reply as a transport hands it over. */
export type Reply = string | BinaryReply;

/** A binary body (docs/wire.md §1) in pieces: the JSON text first, attachments left where they are. */
export interface Body {
  json: number;
  length: number;
  chunks: Uint8Array[];
}

/** What `scan` finds in params. */
export const BINARY = 1;
export const BLOB = 2;

const hasBlob = typeof Blob === "function";

/** `BINARY` when `value` holds bytes or an array, plus `BLOB` when one of them is a Blob still to be read. */
export function scan(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof NdArray) return BINARY;
  if (hasBlob && value instanceof Blob) return BINARY | BLOB;
  let found = 0;
  if (Array.isArray(value)) for (const item of value) found |= scan(item);
  else if (Object.getPrototypeOf(value) === Object.prototype) for (const key in value) found |= scan((value as Record<string, unknown>)[key]);
  return found;
}

/** `value` with each Blob replaced by its bytes. */
export async function readBlobs<T>(value: T): Promise<T> {
  if (value === null || typeof value !== "object" || !(scan(value) & BLOB)) return value;
  if (value instanceof Blob) return new Uint8Array(await value.arrayBuffer()) as T;
  if (Array.isArray(value)) return (await Promise.all(value.map(readBlobs))) as T;
  const copy: Record<string, unknown> = {};
  for (const key in value) copy[key] = await readBlobs((value as Record<string, unknown>)[key]);
  return copy as T;
}

/** The bytes a binary value stands for, and its array form when it is one. */
function binaryOf(value: object): [Uint8Array, NdArray?] | undefined {
  if (value instanceof NdArray) return [bytesOf(value.data), value];
  if (value instanceof Uint8Array && !(value instanceof Uint8ClampedArray)) return [value];
  if (value instanceof ArrayBuffer) return [new Uint8Array(value)];
  if (value instanceof DataView || value instanceof Uint8ClampedArray) return [new Uint8Array(value.buffer, value.byteOffset, value.byteLength)];
  if (ArrayBuffer.isView(value)) {
    const array = new NdArray(value as TypedArray);
    return [bytesOf(array.data), array];
  }
  return undefined;
}

/** A typed array's elements as little-endian bytes: its own memory, or a swapped copy on a big-endian host. */
function bytesOf(data: TypedArray): Uint8Array {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (LITTLE || data.BYTES_PER_ELEMENT === 1) return bytes;
  const copy = bytes.slice();
  swap(copy, data.BYTES_PER_ELEMENT);
  return copy;
}

/** Attachments of a message being written, and where each starts. */
export class Section {
  readonly chunks: Uint8Array[] = [];
  length = 0;

  /** Places `bytes` at the next multiple of 64 and returns that offset. */
  add(bytes: Uint8Array): number {
    const offset = align(this.length);
    if (offset > this.length) this.chunks.push(new Uint8Array(offset - this.length));
    this.chunks.push(bytes);
    this.length = offset + bytes.length;
    return offset;
  }
}

export function align(n: number): number {
  return Math.ceil(n / ALIGN) * ALIGN;
}

/**
 * `value` ready for JSON.stringify: each binary value replaced by a placeholder naming its
 * place in `section`, or, without a section, by its plain JSON form (base64; an array's
 * .npy as base64). Parts without binary values are shared, not copied.
 */
export function pack(value: unknown, section?: Section): unknown {
  if (value === null || typeof value !== "object") return value;
  const binary = binaryOf(value);
  if (binary) {
    const [bytes, array] = binary;
    if (!section) return array ? array.toJSON() : toBase64(bytes);
    const offset = section.add(bytes);
    return array
      ? { $ucall: "ndarray", offset, length: bytes.length, dtype: array.dtype, shape: array.shape }
      : { $ucall: "bytes", offset, length: bytes.length };
  }
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const packed = pack(value[i], section);
      if (packed !== value[i]) (copy ??= value.slice())[i] = packed;
    }
    return copy ?? value;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return value; // toJSON() or plain fields
  let copy: Record<string, unknown> | undefined;
  for (const key in value) {
    const item = (value as Record<string, unknown>)[key];
    const packed = pack(item, section);
    if (packed !== item) (copy ??= { ...value })[key] = packed;
  }
  return copy ?? value;
}

const encoder = new TextEncoder();

/** The body of a binary message: `text` (with placeholders into `section`), zeros to a multiple of 64, the section. */
export function body(text: string, section: Section): Body {
  const json = encoder.encode(text);
  if (section.length === 0) return { json: json.length, length: json.length, chunks: [json] };
  const start = align(json.length);
  const chunks: Uint8Array[] = [json];
  if (start > json.length) chunks.push(new Uint8Array(start - json.length));
  chunks.push(...section.chunks);
  return { json: json.length, length: start + section.length, chunks };
}

/** The 16-byte prefix of a binary message on raw TCP and WebSocket (docs/wire.md §3.2). */
export function prefix(b: Body): Uint8Array {
  const bytes = new Uint8Array(16);
  const view = new DataView(bytes.buffer);
  bytes[0] = MAGIC;
  bytes[1] = 1;
  view.setUint32(4, b.json, true);
  view.setBigUint64(8, BigInt(b.length), true);
  return bytes;
}

/** `chunks` as one array. */
export function concat(chunks: Uint8Array[], length: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

const decoder = new TextDecoder();

/**
 * A binary reply's body (`json` bytes of JSON text, padding, section) read as JSON text and
 * section. The section is viewed where it lies when its address suits every element type
 * (a multiple of 8), else copied once to memory that does.
 */
export function readBody(bytes: Uint8Array, json: number): BinaryReply {
  const start = align(json);
  if (json > bytes.length) throw new TypeError("a binary reply whose JSON length passes its end");
  if (bytes.length > json && bytes.length < start) throw new TypeError("a binary reply that ends inside its padding");
  // A plain Uint8Array (not Node's Buffer) in every environment, so attachments are of one type.
  let section = bytes.length > json ? new Uint8Array(bytes.buffer, bytes.byteOffset + start, bytes.length - start) : new Uint8Array(0);
  if (section.byteOffset % 8 !== 0) section = section.slice();
  return { text: decoder.decode(bytes.subarray(0, json)), section };
}

/** A whole prefixed message (raw TCP, WebSocket): its body read by `readBody`. */
export function readMessage(bytes: Uint8Array): BinaryReply {
  if (bytes.length < 16 || bytes[0] !== MAGIC || bytes[1] !== 1 || bytes[2] || bytes[3]) throw new TypeError("not a binary message");
  const view = new DataView(bytes.buffer, bytes.byteOffset, 16);
  const length = view.getBigUint64(8, true);
  if (length !== BigInt(bytes.length - 16)) throw new TypeError("a binary message whose length does not match");
  return readBody(bytes.subarray(16), view.getUint32(4, true));
}

/**
 * Whether an HTTP refusal of a binary request says the server reads no binary messages:
 * 415, or a parse error (id null) from a server that read the body as JSON text.
 */
export function refusesBinary(status: number, body: string): boolean {
  if (status === 415) return true;
  if (status !== 400) return false;
  try {
    const reply = JSON.parse(body) as { id?: unknown; error?: { code?: unknown } };
    return reply.id === null && reply.error?.code === -32700;
  } catch {
    return false;
  }
}

const PLACEHOLDER_BYTES = ["$ucall", "length", "offset"];
const PLACEHOLDER_NDARRAY = ["$ucall", "dtype", "length", "offset", "shape"];
const isCount = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0;

/** One placeholder's value: a Uint8Array or an NdArray viewing `section`. */
function resolve(placeholder: Record<string, unknown>, section: Uint8Array): Uint8Array | NdArray {
  const { $ucall: kind, offset, length } = placeholder;
  const members = Object.keys(placeholder).sort().join();
  if (kind !== "bytes" && kind !== "ndarray") throw new TypeError(`an unknown placeholder kind ${JSON.stringify(kind)}`);
  if (members !== (kind === "bytes" ? PLACEHOLDER_BYTES : PLACEHOLDER_NDARRAY).join()) throw new TypeError(`a ${kind} placeholder with members ${members}`);
  if (!isCount(offset) || offset % ALIGN !== 0) throw new TypeError(`a placeholder offset ${offset} that is not a multiple of ${ALIGN}`);
  if (!isCount(length) || offset + length > section.length) throw new TypeError(`a placeholder (offset ${offset}, length ${length}) past the section's ${section.length} bytes`);
  const bytes = section.subarray(offset, offset + length);
  if (kind === "bytes") return bytes;
  const { dtype, shape } = placeholder as { dtype: DType; shape: unknown };
  const entry = Object.prototype.hasOwnProperty.call(TYPES, dtype) ? TYPES[dtype] : undefined;
  if (!entry) throw new TypeError(`an unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every(isCount)) throw new TypeError(`a shape ${JSON.stringify(shape)} that is not a list of sizes`);
  const type = entry[1];
  const count = shape.reduce((a: number, b: number) => a * b, 1) * parts(dtype);
  if (count * type.BYTES_PER_ELEMENT !== length) throw new TypeError(`${length} bytes for shape [${shape}] of ${dtype}`);
  let data: TypedArray;
  if (LITTLE && bytes.byteOffset % type.BYTES_PER_ELEMENT === 0) data = new type(bytes.buffer as ArrayBuffer, bytes.byteOffset, count);
  else {
    const copy = bytes.slice();
    if (!LITTLE) swap(copy, type.BYTES_PER_ELEMENT);
    data = new type(copy.buffer, 0, count);
  }
  return new NdArray(data, shape, dtype);
}

/** A result of a binary reply with each placeholder replaced by its attachment. */
export function unpack(value: unknown, section: Uint8Array): unknown {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((item) => unpack(item, section));
  const object = value as Record<string, unknown>;
  if ("$ucall" in object) return resolve(object, section);
  for (const key in object) object[key] = unpack(object[key], section);
  return object;
}
