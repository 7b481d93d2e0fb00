// SPDX-License-Identifier: Apache-2.0
// Raw TCP transport (Node only): newline-delimited JSON texts, plain (tcp://) or TLS (tls://).

import type { Connect } from "./stream.js";

/** TLS settings for `tls://` URLs (those of Node's `tls.connect`: ca, cert, key, servername...). */
export type TlsOptions = Record<string, unknown>;

export function tcp(url: URL, tlsOptions?: TlsOptions): Connect {
  const secure = url.protocol === "tls:";
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port);
  if (!port) throw new TypeError(`${url.href}: a raw TCP URL needs a port`);
  return async (sink) => {
    // Loaded on first use, so that browser bundles need not resolve Node's modules.
    const net = secure ? await import("node:tls") : await import("node:net");
    return new Promise((resolve, reject) => {
      const options = secure ? { servername: /^[\d.:]+$/.test(host) ? undefined : host, ...tlsOptions, host, port } : { host, port };
      const socket = (net.connect as (o: object) => import("node:net").Socket)(options);
      let open = false;
      let rest = "";
      let corked = false;
      socket.setEncoding("utf8");
      socket.once(secure ? "secureConnect" : "connect", () => {
        open = true;
        socket.setNoDelay(true);
        resolve({
          write(text) {
            // Writes of one turn of the event loop leave together.
            if (!corked) {
              corked = true;
              socket.cork();
              process.nextTick(() => {
                corked = false;
                socket.uncork();
              });
            }
            socket.write(text + "\n");
          },
          close: () => socket.end(),
        });
      });
      socket.on("data", (chunk: string) => {
        let start = 0;
        for (let end = chunk.indexOf("\n"); end >= 0; end = chunk.indexOf("\n", start)) {
          const line = rest + chunk.slice(start, end);
          rest = "";
          start = end + 1;
          if (line.trim()) sink.receive(line);
        }
        rest += chunk.slice(start);
      });
      socket.on("error", (error) => {
        if (!open) reject(error);
      });
      socket.on("close", () => {
        if (open) sink.dropped(new Error("the connection closed"));
        open = false;
      });
    });
  };
}
