// SPDX-License-Identifier: Apache-2.0
// `@ucall/client/http`: the client with the HTTP transport only, for the smallest bundles.

import { BaseClient, type ClientOptions, type Params } from "./base.js";
import type { HttpOptions } from "./http.js";
import { httpTransport } from "./platform.js";

export { RpcError, ErrorCode, type Executed } from "./errors.js";
export { Stream, STREAMS_ITS_RESULT } from "./streamed.js";
export type { CallOptions, ClientOptions, Methods, Params } from "./base.js";
export { toBase64, fromBase64 } from "./base64.js";

/** A JSON-RPC 2.0 client over HTTP(S) only (`http://`, `https://`). */
export class Client<M = Record<string, (params?: Params) => unknown>> extends BaseClient<M> {
  constructor(url: string | URL, options: ClientOptions & HttpOptions = {}) {
    super(options);
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError(`${parsed.protocol} URLs need the full client (@ucall/client)`);
    }
    this.transport = httpTransport(parsed.href, options);
  }
}
