// SPDX-License-Identifier: Apache-2.0
// What differs between Node and browsers, the browsers' side (see platform.ts): HTTP
// through fetch, and no raw TCP.

import type { Transport } from "./base.js";
import { FetchTransport, type HttpOptions } from "./http.js";
import type { Connect } from "./stream.js";
import type { TlsOptions } from "./tcp.js";

/** The HTTP transport: fetch. */
export function httpTransport(url: string, options: HttpOptions = {}): Transport {
  return new FetchTransport(url, options);
}

/** Raw TCP needs Node. */
export function tcp(url: URL, _tls?: TlsOptions, _maxReplySize?: number, _binary?: boolean): Connect {
  throw new TypeError(`${url.protocol}// URLs need Node (browsers have no raw TCP)`);
}
