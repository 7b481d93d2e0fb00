// SPDX-License-Identifier: Apache-2.0
// HTTP transport: one POST per message through the platform's fetch.

import { HttpStatus, NotSent, type Message, type Transport } from "./base.js";

/** Options of the HTTP transport. */
export interface HttpOptions {
  /** Extra request headers (authorization, say). */
  headers?: Record<string, string>;
  /** A fetch to use instead of the global one. */
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

export class HttpTransport implements Transport {
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;

  constructor(
    private readonly url: string,
    options: HttpOptions = {},
  ) {
    this.headers = { "content-type": "application/json", ...options.headers };
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  async send(text: string, message: Message, written: () => void): Promise<string> {
    written();
    let response: Response;
    try {
      const { signal } = (message.stop = new AbortController());
      response = await this.fetch(this.url, { method: "POST", headers: this.headers, body: text, signal });
    } catch (error) {
      throw neverConnected(error) ? new NotSent(String(error), { cause: error }) : error;
    }
    const body = await response.text();
    if (response.ok) return body;
    throw new HttpStatus(response.status, body);
  }

  close(): void {}
}
