// SPDX-License-Identifier: Apache-2.0
// HTTP transport through fetch: one POST per message. What browsers use, and Node where a
// fetch is passed in (platform.ts picks Node's own connections otherwise).

import { HttpStatus, NotSent, type Message, type Transport } from "./base.js";
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

  constructor(
    private readonly url: string,
    options: HttpOptions,
  ) {
    this.headers = { "content-type": "application/json", ...options.headers };
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
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
    const body = await response.text();
    message.stop = undefined; // the exchange is over: nothing left to stop
    if (response.ok) return body;
    throw new HttpStatus(response.status, body);
  }

  close(): void {}
}
