// SPDX-License-Identifier: Apache-2.0
// Raw TCP transport (Node only): newline-delimited JSON texts, plain (tcp://) or TLS (tls://).

import { MAX_REPLY_SIZE, ReplyTooLarge } from "./base.js";
import type { Connect } from "./stream.js";

/** TLS settings for `tls://` URLs (those of Node's `tls.connect`: ca, cert, key, servername...). */
export type TlsOptions = Record<string, unknown>;

/** Bytes of `text` as UTF-8 when that may be over `max` (counted only then: a character is 1 to 3 bytes). */
function overSize(text: string, max: number): number | undefined {
  if (text.length * 3 <= max) return undefined;
  const size = Buffer.byteLength(text);
  return size > max ? size : undefined;
}

export function tcp(url: URL, tlsOptions?: TlsOptions, maxReplySize = MAX_REPLY_SIZE): Connect {
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
      const tooLarge = (size: number, atLeast: boolean) => {
        open = false; // reported here, not again on 'close'
        socket.destroy();
        sink.dropped(new ReplyTooLarge(size, atLeast, maxReplySize));
      };
      socket.on("data", (chunk: string) => {
        if (!open) return;
        let start = 0;
        for (let end = chunk.indexOf("\n"); end >= 0; end = chunk.indexOf("\n", start)) {
          const line = rest + chunk.slice(start, end);
          rest = "";
          start = end + 1;
          const size = overSize(line, maxReplySize);
          if (size !== undefined) return tooLarge(size, false);
          if (line.trim()) sink.receive(line);
        }
        rest += chunk.slice(start);
        const size = overSize(rest, maxReplySize);
        if (size !== undefined) tooLarge(size, true);
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
