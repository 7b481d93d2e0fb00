// SPDX-License-Identifier: Apache-2.0
// WebSocket transport: one JSON text per message, through the platform's WebSocket or a
// compatible constructor such as the `ws` package's.

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

export function webSocket(url: string, Socket?: WebSocketConstructor): Connect {
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
      const receive = (data: unknown) => sink.receive(typeof data === "string" ? data : decoder.decode(data as Uint8Array));
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
