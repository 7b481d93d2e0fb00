// SPDX-License-Identifier: Apache-2.0
// WebSocket transport: one JSON text per message, through the platform's WebSocket or a
// compatible constructor such as the `ws` package's.

import { MAX_REPLY_SIZE, ReplyTooLarge } from "./base.js";
import type { Connect } from "./stream.js";

/** The part of the WebSocket API the client uses (browsers', Node 22's, the `ws` package's). */
export interface WebSocketLike {
  send(data: string): void;
  close(code?: number): void;
  onopen: ((event: unknown) => void) | null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export function webSocket(url: string, Socket?: WebSocketConstructor, maxReplySize = MAX_REPLY_SIZE): Connect {
  const Ctor = Socket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (!Ctor) throw new TypeError("no WebSocket here: pass one in the options (`WebSocket` from the ws package)");
  const decoder = new TextDecoder();
  return (sink) =>
    new Promise((resolve, reject) => {
      const ws = new Ctor(url);
      let open = false;
      ws.onopen = () => {
        open = true;
        // The `ws` package writes each message with its own system call; holding its socket
        // corked for a turn of the event loop sends the turn's messages together.
        const socket = (ws as { _socket?: { cork?: () => void; uncork: () => void } })._socket;
        let corked = false;
        resolve({
          write(text) {
            try {
              if (socket?.cork && !corked) {
                corked = true;
                socket.cork();
                process.nextTick(() => {
                  corked = false;
                  socket.uncork();
                });
              }
              ws.send(text);
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
          typeof data !== "string" ? (data as Uint8Array).byteLength : data.length * 3 <= maxReplySize ? 0 : new TextEncoder().encode(data).byteLength;
        if (size > maxReplySize) {
          open = false;
          ws.close(1009);
          return sink.dropped(new ReplyTooLarge(size, false, maxReplySize));
        }
        sink.receive(typeof data === "string" ? data : decoder.decode(data as Uint8Array));
      };
      // The `ws` package's own event skips the MessageEvent it makes for onmessage (a third of a call's cost there).
      const emitter = ws as unknown as { on?: (event: string, listener: (data: unknown) => void) => void };
      if (typeof emitter.on === "function") emitter.on("message", receive);
      else ws.onmessage = ({ data }) => receive(data);
      ws.onerror = () => {};
      ws.onclose = (event) => {
        const why = new Error(`WebSocket closed (${event.code ?? "no code"}${event.reason ? `: ${event.reason}` : ""})`);
        if (open) sink.dropped(why);
        else reject(why);
        open = false;
      };
    });
}
