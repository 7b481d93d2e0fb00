// SPDX-License-Identifier: Apache-2.0
// Standard base64 (RFC 4648 §4) with btoa/atob, which Node 20 and every browser have.

/** Standard base64 of `bytes`, as the server's `bytes` parameters expect. */
export function toBase64(bytes: Uint8Array): string {
  let text = "";
  // fromCharCode takes its arguments on the stack: 32 KiB at a time stays well inside it.
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000) as unknown as number[]);
  }
  return btoa(text);
}

/**
 * The bytes of a standard base64 string (a result of a procedure returning `bytes`); an
 * attachment of a binary reply, already bytes, is returned as it is.
 */
export function fromBase64(text: string | Uint8Array): Uint8Array {
  if (text instanceof Uint8Array) return text;
  if (typeof text !== "string") throw new TypeError("expected a base64 string");
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
