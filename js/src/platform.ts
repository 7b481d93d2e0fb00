// SPDX-License-Identifier: Apache-2.0
// What differs between Node and browsers, Node's side. Browser builds take
// platform.browser.ts in its place (scripts/build.mjs; package.json's "browser" condition),
// so that no Node-only code (node:net, node:tls) reaches a page.

import type { Transport } from "./base.js";
import { FetchTransport, type HttpOptions } from "./http.js";
import { Http1Transport } from "./http1.js";

export { tcp } from "./tcp.js";

/** The HTTP transport: Node's own keep-alive connections, or fetch where one is passed in
 * (or where this build runs outside Node after all). */
export function httpTransport(url: string, options: HttpOptions = {}): Transport {
  const node = typeof process === "object" && !!process.versions?.node;
  return node && !options.fetch ? new Http1Transport(new URL(url), options) : new FetchTransport(url, options);
}
