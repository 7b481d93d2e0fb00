// SPDX-License-Identifier: Apache-2.0
// Raw TCP transport (Node only): newline-delimited JSON texts, plain (tcp://) or TLS (tls://),
// and binary messages (docs/wire.md §3.2), which start with a byte no JSON text starts with.

import { MAX_REPLY_SIZE, ReplyTooLarge } from "./base.js";
import type { Connect } from "./stream.js";
import { MAGIC, prefix, readMessage } from "./wire.js";

/** TLS settings for `tls://` URLs (those of Node's `tls.connect`: ca, cert, key, servername...). */
export type TlsOptions = Record<string, unknown>;

/**
 * `binary`: send a message with bytes or arrays as a binary message (whose reply may be one
 * too). Others stay JSON texts, which any raw TCP JSON-RPC server reads.
 */
export function tcp(url: URL, tlsOptions?: TlsOptions, maxReplySize = MAX_REPLY_SIZE, binary = true): Connect {
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
      let corked = false;
      let held: Buffer[] = [];
      let size = 0;
      let need = 0;
      socket.once(secure ? "secureConnect" : "connect", () => {
        open = true;
        socket.setNoDelay(true);
        resolve({
          write(out) {
            // Writes of one turn of the event loop leave together.
            if (!corked) {
              corked = true;
              socket.cork();
              process.nextTick(() => {
                corked = false;
                socket.uncork();
              });
            }
            if (!binary || !out.binary) return void socket.write(out.json() + "\n");
            const body = out.body();
            socket.write(prefix(body));
            for (const chunk of body.chunks) socket.write(chunk);
          },
          close: () => socket.end(),
        });
      });
      const tooLarge = (size: number, atLeast: boolean) => {
        open = false; // reported here, not again on 'close'
        socket.destroy();
        sink.dropped(new ReplyTooLarge(size, atLeast, maxReplySize));
      };
      socket.on("data", (chunk: Buffer) => {
        if (!open) return;
        held.push(chunk);
        size += chunk.length;
        if (size < need) return;
        const buf = held.length === 1 ? chunk : Buffer.concat(held, size);
        let at = 0;
        need = 0;
        while (at < buf.length) {
          if (buf[at] === MAGIC) {
            // A binary message: 16 bytes of prefix, then as many of body as it says.
            const end = buf.length - at < 16 ? Infinity : at + 16 + Number(buf.readBigUInt64LE(at + 8));
            if (end !== Infinity && end - at > maxReplySize) return tooLarge(end - at, false);
            if (end > buf.length) {
              need = end === Infinity ? 16 : end - at;
              break;
            }
            try {
              sink.receive(readMessage(buf.subarray(at, end)));
            } catch (error) {
              return void socket.destroy(error as Error);
            }
            at = end;
          } else {
            const end = buf.indexOf(10, at);
            if (end < 0) {
              if (buf.length - at > maxReplySize) return tooLarge(buf.length - at, true);
              break;
            }
            if (end - at > maxReplySize) return tooLarge(end - at, false);
            const line = buf.toString("utf8", at, end);
            at = end + 1;
            if (line.trim()) sink.receive(line);
          }
        }
        held = at < buf.length ? [buf.subarray(at)] : [];
        size = buf.length - at;
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
