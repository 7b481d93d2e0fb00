// SPDX-License-Identifier: Apache-2.0
// numpy arrays as typed arrays, in the form the Python server packs and unpacks: base64 of
// a .npy file (format versions 1-3, https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).

import { fromBase64, toBase64 } from "./base64.js";

export type TypedArray =
  | Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array
  | BigInt64Array | BigUint64Array | Float32Array | Float64Array;

/**
 * numpy dtype names the client maps to typed arrays (`float16` stays raw bits in a
 * Uint16Array; a complex array holds real and imaginary parts in turn, two floats per element).
 */
export type DType =
  | "bool" | "int8" | "uint8" | "int16" | "uint16" | "int32" | "uint32"
  | "int64" | "uint64" | "float16" | "float32" | "float64" | "complex64" | "complex128";

type ArrayType = { new (buffer: ArrayBuffer, offset?: number, length?: number): TypedArray; BYTES_PER_ELEMENT: number };

export const TYPES: Record<DType, [descr: string, type: ArrayType]> = {
  bool: ["b1", Uint8Array],
  int8: ["i1", Int8Array],
  uint8: ["u1", Uint8Array],
  int16: ["i2", Int16Array],
  uint16: ["u2", Uint16Array],
  int32: ["i4", Int32Array],
  uint32: ["u4", Uint32Array],
  int64: ["i8", BigInt64Array],
  uint64: ["u8", BigUint64Array],
  float16: ["f2", Uint16Array],
  float32: ["f4", Float32Array],
  float64: ["f8", Float64Array],
  complex64: ["c8", Float32Array],
  complex128: ["c16", Float64Array],
};

/** Typed-array elements per array element: two for complex dtypes. */
export function parts(dtype: DType): number {
  return dtype.startsWith("complex") ? 2 : 1;
}

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // "\x93NUMPY"
export const LITTLE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function defaultDType(data: TypedArray): DType {
  for (const [name, [, type]] of Object.entries(TYPES)) {
    if (data instanceof type && name !== "bool" && name !== "float16" && !name.startsWith("complex")) return name as DType;
  }
  throw new TypeError("not a typed array");
}

/** An n-dimensional array: its elements in C (row-major) order, its shape and its numpy dtype. */
export class NdArray {
  readonly data: TypedArray;
  readonly shape: readonly number[];
  readonly dtype: DType;

  constructor(data: TypedArray, shape?: readonly number[], dtype: DType = defaultDType(data)) {
    if (!TYPES[dtype]) throw new TypeError(`an unknown dtype ${dtype}`);
    shape ??= [data.length / parts(dtype)];
    const size = shape.reduce((a, b) => a * b, 1);
    if (size * parts(dtype) !== data.length) throw new RangeError(`shape [${shape}] holds ${size} elements, the data ${data.length}`);
    if (!(data instanceof TYPES[dtype][1])) throw new TypeError(`${dtype} needs a ${TYPES[dtype][1].name}`);
    this.data = data;
    this.shape = shape;
    this.dtype = dtype;
  }

  /** The .npy file (version 1.0, little-endian) of this array. */
  toNpy(): Uint8Array {
    const descr = this.dtype === "bool" || this.dtype.endsWith("int8") ? `|${TYPES[this.dtype][0]}` : `<${TYPES[this.dtype][0]}`;
    const shape = this.shape.length === 1 ? `(${this.shape[0]},)` : `(${this.shape.join(", ")})`;
    let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
    // The header ends with a newline and pads the data start to a multiple of 64 bytes.
    header += " ".repeat(63 - ((10 + header.length) % 64)) + "\n";
    const bytes = new Uint8Array(10 + header.length + this.data.byteLength);
    bytes.set(MAGIC);
    bytes.set([1, 0, header.length & 0xff, header.length >> 8], 6);
    for (let i = 0; i < header.length; i++) bytes[10 + i] = header.charCodeAt(i);
    const body = new Uint8Array(this.data.buffer, this.data.byteOffset, this.data.byteLength);
    bytes.set(body, 10 + header.length);
    if (!LITTLE) swap(bytes.subarray(10 + header.length), this.data.BYTES_PER_ELEMENT);
    return bytes;
  }

  /** The array in a .npy file; a TypeError saying why for anything else. */
  static fromNpy(bytes: Uint8Array): NdArray {
    if (bytes.length < 10 || MAGIC.some((b, i) => bytes[i] !== b)) throw new TypeError("not a .npy array");
    const major = bytes[6]!;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const wide = major >= 2;
    const length = wide ? view.getUint32(8, true) : view.getUint16(8, true);
    const start = (wide ? 12 : 10) + length;
    if (start > bytes.length) throw new TypeError("a damaged .npy array: the header is cut short");
    const header = new TextDecoder().decode(bytes.subarray(wide ? 12 : 10, start));
    const descr = /'descr':\s*'([<>|=])([a-z]\d+)'/.exec(header);
    const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header);
    if (!descr || !shapeText) throw new TypeError(`an unsupported .npy header: ${header.trim()}`);
    const entry = Object.entries(TYPES).find(([, [code]]) => code === descr[2]);
    if (!entry) throw new TypeError(`an unsupported dtype ${descr[1]}${descr[2]}`);
    const [dtype, [, type]] = entry as [DType, [string, ArrayType]];
    const shape = shapeText[1]!.split(",").map((s) => s.trim()).filter(Boolean).map(Number);
    const count = shape.reduce((a, b) => a * b, 1) * parts(dtype);
    if (start + count * type.BYTES_PER_ELEMENT > bytes.length) throw new TypeError("a damaged .npy array: the data is cut short");
    // A copy: aligned for the typed array, and independent of the reply's buffer.
    const raw = bytes.slice(start, start + count * type.BYTES_PER_ELEMENT);
    if ((descr[1] === ">") === LITTLE && type.BYTES_PER_ELEMENT > 1) swap(raw, type.BYTES_PER_ELEMENT);
    let data = new type(raw.buffer, 0, count);
    if (/'fortran_order':\s*True/.test(header) && shape.length > 1) data = fromFortran(data, shape, type, parts(dtype));
    return new NdArray(data, shape, dtype);
  }

  /** JSON form: base64 of the .npy file, what a Python `numpy.ndarray` parameter takes. */
  toJSON(): string {
    return toBase64(this.toNpy());
  }
}

/** The array a procedure returned: an attachment of a binary reply (as is), or base64 of a .npy file. */
export function toNdArray(result: unknown): NdArray {
  if (result instanceof NdArray) return result;
  if (typeof result !== "string") throw new TypeError("the result is not a numpy array (an attachment or a base64 string)");
  return NdArray.fromNpy(fromBase64(result));
}

export function swap(bytes: Uint8Array, width: number): void {
  for (let i = 0; i < bytes.length; i += width) bytes.subarray(i, i + width).reverse();
}

/** Column-major elements reordered to row-major. */
function fromFortran(data: TypedArray, shape: number[], type: ArrayType, width: number): TypedArray {
  const out = new type(new ArrayBuffer(data.byteLength), 0, data.length) as TypedArray & { [i: number]: number | bigint };
  const index = new Array<number>(shape.length).fill(0);
  for (let c = 0; c < data.length / width; c++) {
    // c walks row-major order; its column-major offset sums index[k] * stride[k] with stride growing from the first axis.
    let offset = 0;
    for (let k = shape.length - 1; k >= 0; k--) offset = offset * shape[k]! + index[k]!;
    for (let j = 0; j < width; j++) out[c * width + j] = (data as unknown as { [i: number]: number | bigint })[offset * width + j]!;
    for (let k = shape.length - 1; k >= 0 && ++index[k]! === shape[k]; k--) index[k] = 0;
  }
  return out;
}
