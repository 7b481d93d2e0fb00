// SPDX-License-Identifier: Apache-2.0
// WebSocket transport: one JSON text per message, through the platform's WebSocket or a
// compatible constructor such as the `ws` package's. Under the subprotocol ucall.binary.v1
// (docs/wire.md §3.3), messages go as binary messages, and replies with attachments come so.

import { MAX_REPLY_SIZE, ReplyTooLarge } from "./base.js";
import type { Connect } from "./stream.js";
import { MAGIC, SUBPROTOCOL, concat, prefix, readMessage } from "./wire.js";

/** The part of the WebSocket API the client uses (browsers', Node 22's, the `ws` package's). */
export interface WebSocketLike {
  send(data: string | Uint8Array): void;
  close(code?: number): void;
  /** The subprotocol the server selected ("" for none). */
  protocol?: string;
  binaryType?: string;
  onopen: ((event: unknown) => void) | null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
}

export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/**
 * `binary`: offer the binary-message subprotocol, beside `ucall` (plain JSON-RPC) for a
 * UCall server without binary messages. A server that selects neither answers without a
 * subprotocol, which the `ws` package refuses: the client then connects without offering.
 */
export function webSocket(url: string, Socket?: WebSocketConstructor, maxReplySize = MAX_REPLY_SIZE, binary = true): Connect {
  const Ctor = Socket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (!Ctor) throw new TypeError("no WebSocket here: pass one in the options (`WebSocket` from the ws package)");
  const decoder = new TextDecoder();
  let offer = binary;
  const connect: Connect = (sink) =>
    new Promise((resolve, reject) => {
      const ws = offer ? new Ctor(url, ["ucall", SUBPROTOCOL]) : new Ctor(url);
      let open = false;
      let failure: unknown;
      let binaryMessages = false;
      ws.onopen = () => {
        open = true;
        binaryMessages = ws.protocol === SUBPROTOCOL;
        // The `ws` package writes each message with its own system call; holding its socket
        // corked for a turn of the event loop sends the turn's messages together.
        const socket = (ws as { _socket?: { cork?: () => void; uncork: () => void } })._socket;
        let corked = false;
        resolve({
          write(out) {
            try {
              if (socket?.cork && !corked) {
                corked = true;
                socket.cork();
                process.nextTick(() => {
                  corked = false;
                  socket.uncork();
                });
              }
              if (!binaryMessages) ws.send(out.json());
              else {
                const body = out.body();
                ws.send(concat([prefix(body), ...body.chunks], 16 + body.length));
              }
            } catch (error) {
              ws.close();
              sink.dropped(error);
            }
          },
          close: () => ws.close(1000),
        });
      };
      // A message over maxReplySize is refused once received (the WebSocket API gives no way
      // to stop one under way) and the connection closed with 1009, "message too big".
      const receive = (data: unknown) => {
        if (!open) return;
        // A character is 1 to 3 bytes of UTF-8: a text is encoded to count it only when it may be over.
        const size =
          typeof data !== "string"
            ? (data as Uint8Array | ArrayBuffer).byteLength
            : data.length * 3 <= maxReplySize
              ? 0
              : new TextEncoder().encode(data).byteLength;
        if (size > maxReplySize) {
          open = false;
          ws.close(1009);
          return sink.dropped(new ReplyTooLarge(size, false, maxReplySize));
        }
        if (typeof data === "string") return sink.receive(data);
        const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : (data as Uint8Array);
        if (!binaryMessages || bytes[0] !== MAGIC) return sink.receive(decoder.decode(bytes));
        try {
          sink.receive(readMessage(bytes));
        } catch {
          ws.close(1002); // a protocol error: the calls on this connection fail as maybe run
        }
      };
      // The `ws` package's own event skips the MessageEvent it makes for onmessage (a third of a call's cost there).
      const emitter = ws as unknown as { on?: (event: string, listener: (data: unknown) => void) => void };
      if (typeof emitter.on === "function") emitter.on("message", receive);
      else {
        ws.binaryType = "arraybuffer"; // browsers give a Blob otherwise
        ws.onmessage = ({ data }) => receive(data);
      }
      ws.onerror = (event) => (failure = (event as { error?: unknown; message?: unknown })?.message ?? event);
      ws.onclose = (event) => {
        const why = new Error(`WebSocket closed (${event.code ?? "no code"}${event.reason ? `: ${event.reason}` : ""})`);
        if (open) sink.dropped(why);
        else if (offer && /subprotocol/i.test(String(failure))) {
          offer = false;
          connect(sink).then(resolve, reject);
        } else reject(why);
        open = false;
      };
    });
  return connect;
}
