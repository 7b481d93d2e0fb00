// SPDX-License-Identifier: Apache-2.0
// HTTP transport through fetch: one POST per message. What browsers use, and Node where a
// fetch is passed in (platform.ts picks Node's own connections otherwise).

import { BinaryRequests, HttpStatus, MAX_REPLY_SIZE, NotSent, ReplyTooLarge, type Message, type Outgoing, type Transport } from "./base.js";
import { BINARY_STREAM, Framer, isStreamed } from "./framing.js";
import type { Http1Options } from "./http1.js";
import { CONTENT_TYPE, JSON_LENGTH, readBody, type Reply } from "./wire.js";

/** Options of the HTTP transport. */
export interface HttpOptions extends Http1Options {
  /** A fetch to use instead of Node's own connections (in Node) or the global fetch. */
  fetch?: typeof fetch;
}

/** Error codes (Node's undici) of a connection that was never made, so nothing was sent. */
const NEVER_CONNECTED = ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"];

function neverConnected(error: unknown): boolean {
  for (let e = error as { code?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 4; e = e.cause as typeof e, depth++) {
    if (typeof e.code === "string" && NEVER_CONNECTED.includes(e.code)) return true;
    const errors = (e as { errors?: unknown[] }).errors; // AggregateError of a dual-stack connect
    if (Array.isArray(errors) && errors.length && errors.every(neverConnected)) return true;
  }
  return false;
}

export class FetchTransport implements Transport {
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;
  private readonly maxReply: number;
  /** Binary requests: sent when they have attachments until the server refuses one it never took. */
  private readonly binary: BinaryRequests;

  constructor(
    private readonly url: string,
    options: HttpOptions,
  ) {
    // A page calling another origin needs that server's CORS to allow UCall-JSON-Length and
    // expose it on replies, which CORS set-ups do not by default: there, only when asked.
    const page = (globalThis as { location?: { origin?: string } }).location?.origin;
    const crossOrigin = page !== undefined && new URL(url).origin !== page;
    this.binary = new BinaryRequests(options.binary === false || (options.binary === undefined && crossOrigin) ? "off" : "try");
    this.headers = { "content-type": "application/json", ...options.headers };
    // Streamed replies' items as binary messages too (docs/streaming.md, "Binary items").
    if (this.binary.state !== "off") this.headers.accept ??= `${BINARY_STREAM}, ${CONTENT_TYPE}, application/json`;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.maxReply = options.maxReplySize ?? MAX_REPLY_SIZE;
  }

  send(out: Outgoing, message: Message, written: () => void): Promise<Reply> {
    return this.binary.send(out, (binary) => this.exchange(out, binary, message, written));
  }

  private async exchange(out: Outgoing, binary: boolean, message: Message, written: () => void): Promise<Reply> {
    written();
    let response: Response;
    const controller = new AbortController();
    message.stop = () => controller.abort();
    let headers = this.headers;
    let body: string | Blob;
    if (binary) {
      const b = out.body();
      headers = { ...headers, "content-type": CONTENT_TYPE, [JSON_LENGTH]: String(b.json) };
      body = new Blob(b.chunks as BlobPart[]);
    } else body = out.json();
    try {
      response = await this.fetch(this.url, { method: "POST", headers, body, signal: controller.signal });
    } catch (error) {
      throw neverConnected(error) ? new NotSent(String(error), { cause: error }) : error;
    }
    if (response.ok && message.part && isStreamed(response.headers.get("content-type"))) {
      await this.messages(response, controller, message.part);
      message.stop = undefined;
      return "";
    }
    const json = response.headers.get(JSON_LENGTH);
    const isBinary = response.ok && response.headers.get("content-type")?.startsWith(CONTENT_TYPE) && json !== null;
    const bytes = await this.bytes(response, controller);
    const reply = isBinary ? readBody(bytes, Number(json)) : new TextDecoder().decode(bytes);
    message.stop = undefined; // the exchange is over: nothing left to stop
    if (response.ok) return reply;
    throw new HttpStatus(response.status, reply as string);
  }

  close(): void {}

  /** A streamed body's messages, each handed to `part` as it arrives, until the body ends or the request is aborted. */
  private async messages(response: Response, controller: AbortController, part: (reply: Reply) => void): Promise<void> {
    const framer = new Framer(this.maxReply);
    const take = (bytes: Uint8Array) => {
      for (const reply of framer.feed(bytes)) {
        if (controller.signal.aborted) return;
        part(reply);
      }
    };
    try {
      if (!response.body) take(new Uint8Array(await response.arrayBuffer()));
      else {
        const reader = response.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          take(value);
          if (controller.signal.aborted) return void reader.cancel().catch(() => {});
        }
      }
    } catch (error) {
      controller.abort();
      throw error;
    }
    for (const reply of framer.end()) part(reply);
  }

  /** The body, read as it arrives and given up past maxReplySize (the request is aborted). */
  private async bytes(response: Response, controller: AbortController): Promise<Uint8Array> {
    const announced = Number(response.headers.get("content-length") ?? NaN);
    if (announced > this.maxReply) {
      controller.abort();
      throw new ReplyTooLarge(announced, false, this.maxReply);
    }
    if (!response.body) return new Uint8Array(await response.arrayBuffer());
    const parts: Uint8Array[] = [];
    let size = 0;
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > this.maxReply) {
        controller.abort();
        throw new ReplyTooLarge(size, true, this.maxReply);
      }
      parts.push(value);
    }
    const body = new Uint8Array(size);
    let at = 0;
    for (const part of parts) {
      body.set(part, at);
      at += part.byteLength;
    }
    return body;
  }
}
