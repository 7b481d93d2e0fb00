// SPDX-License-Identifier: Apache-2.0
// HTTP transport through fetch: one POST per message. What browsers use, and Node where a
// fetch is passed in (platform.ts picks Node's own connections otherwise).

import { HttpStatus, MAX_REPLY_SIZE, NotSent, ReplyTooLarge, type Message, type Transport } from "./base.js";
import type { Http1Options } from "./http1.js";

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

  constructor(
    private readonly url: string,
    options: HttpOptions,
  ) {
    this.headers = { "content-type": "application/json", ...options.headers };
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.maxReply = options.maxReplySize ?? MAX_REPLY_SIZE;
  }

  async send(text: string, message: Message, written: () => void): Promise<string> {
    written();
    let response: Response;
    const controller = new AbortController();
    message.stop = () => controller.abort();
    try {
      response = await this.fetch(this.url, { method: "POST", headers: this.headers, body: text, signal: controller.signal });
    } catch (error) {
      throw neverConnected(error) ? new NotSent(String(error), { cause: error }) : error;
    }
    const body = await this.text(response, controller);
    message.stop = undefined; // the exchange is over: nothing left to stop
    if (response.ok) return body;
    throw new HttpStatus(response.status, body);
  }

  close(): void {}

  /** The body as text, read as it arrives and given up past maxReplySize (the request is aborted). */
  private async text(response: Response, controller: AbortController): Promise<string> {
    const announced = Number(response.headers.get("content-length") ?? NaN);
    if (announced > this.maxReply) {
      controller.abort();
      throw new ReplyTooLarge(announced, false, this.maxReply);
    }
    if (!response.body) return response.text();
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
    return new TextDecoder().decode(body);
  }
}
