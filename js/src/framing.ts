// SPDX-License-Identifier: Apache-2.0
// The body of a streamed HTTP reply (docs/streaming.md) split into its messages as they
// arrive: JSON texts, one a line (`application/jsonl`), and in an
// `application/vnd.ucall.binary-stream` body also binary messages after their 16-byte
// prefix, framed as on raw TCP (docs/wire.md §3.2). Uint8Array only, for browsers too.

import { ReplyTooLarge } from "./transport.js";
import { MAGIC, concat, readMessage, type Reply } from "./wire.js";

/** Content types of a streamed reply's body. */
export const JSONL = "application/jsonl";
export const BINARY_STREAM = "application/vnd.ucall.binary-stream";

/** Whether a reply's `Content-Type` says its body is a stream of messages. */
export function isStreamed(contentType: string | null | undefined): boolean {
  const type = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  return type === JSONL || type === BINARY_STREAM;
}

const decoder = new TextDecoder();

/** Splits bytes into messages; each message over `max` bytes is refused (`ReplyTooLarge`). */
export class Framer {
  private held: Uint8Array[] = [];
  private size = 0;
  /** Bytes needed before the next message can be complete. */
  private need = 0;

  constructor(private readonly max: number) {}

  /** The messages complete once `chunk` is added, in order. */
  feed(chunk: Uint8Array): Reply[] {
    if (chunk.length === 0) return [];
    this.held.push(chunk);
    this.size += chunk.length;
    if (this.size < this.need) return [];
    const buf = concat(this.held, this.size);
    const out: Reply[] = [];
    let at = 0;
    this.need = 0;
    while (at < buf.length) {
      if (buf[at] === MAGIC) {
        if (buf.length - at < 16) {
          this.need = 16;
          break;
        }
        const view = new DataView(buf.buffer, buf.byteOffset + at + 8, 8);
        const length = 16 + Number(view.getBigUint64(0, true));
        if (length > this.max) throw new ReplyTooLarge(length, false, this.max);
        if (at + length > buf.length) {
          this.need = length;
          break;
        }
        out.push(readMessage(buf.subarray(at, at + length)));
        at += length;
      } else {
        const end = buf.indexOf(10, at);
        if (end < 0) {
          if (buf.length - at > this.max) throw new ReplyTooLarge(buf.length - at, true, this.max);
          break;
        }
        if (end - at > this.max) throw new ReplyTooLarge(end - at, false, this.max);
        const line = decoder.decode(buf.subarray(at, end));
        at = end + 1;
        if (line.trim()) out.push(line);
      }
    }
    this.held = at < buf.length ? [buf.subarray(at)] : [];
    this.size = buf.length - at;
    return out;
  }

  /** What is left once the body ended: a last JSON text without its line break, if any. */
  end(): Reply[] {
    const rest = concat(this.held, this.size);
    this.held = [];
    this.size = 0;
    if (rest.length === 0 || rest[0] === MAGIC) return [];
    const line = decoder.decode(rest);
    return line.trim() ? [line] : [];
  }
}
