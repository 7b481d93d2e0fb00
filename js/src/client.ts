// SPDX-License-Identifier: Apache-2.0
// The client for every transport, picked by the URL's scheme.

import { BaseClient, type ClientOptions, type Params, type Sink } from "./base.js";
import type { HttpOptions } from "./http.js";
import { httpTransport, tcp } from "./platform.js";
import { StreamTransport } from "./stream.js";
import type { TlsOptions } from "./tcp.js";
import { webSocket, type WebSocketConstructor } from "./ws.js";

/** Options of `Client`: the common ones plus each transport's. */
export interface Options extends ClientOptions, HttpOptions {
  /** WebSocket constructor for ws:// and wss:// where the platform has none (Node 20: the `ws` package's). */
  WebSocket?: WebSocketConstructor;
  /** TLS settings for tls:// and, in Node, https:// (Node's `tls.connect` options: ca, cert, key, servername...). */
  tls?: TlsOptions;
}

/**
 * A JSON-RPC 2.0 client. The URL picks the transport: `http://`, `https://` (POST per
 * message), `ws://`, `wss://` (one WebSocket), and in Node `tcp://`, `tls://` (one raw
 * TCP connection, newline-delimited JSON).
 */
export class Client<M = Record<string, (params?: Params) => unknown>> extends BaseClient<M> {
  constructor(url: string | URL, options: Options = {}) {
    super(options);
    const parsed = new URL(url);
    const sink: Sink = { receive: (reply) => this.receive(reply), dropped: (why) => this.dropped(why) };
    switch (parsed.protocol) {
      case "http:":
      case "https:":
        this.transport = httpTransport(parsed.href, options);
        break;
      case "ws:":
      case "wss:":
        this.transport = new StreamTransport(webSocket(parsed.href, options.WebSocket, options.maxReplySize, options.binary ?? true), sink);
        break;
      case "tcp:":
      case "tls:":
        this.transport = new StreamTransport(tcp(parsed, options.tls, options.maxReplySize, options.binary ?? true), sink);
        break;
      default:
        throw new TypeError(`unsupported URL scheme ${parsed.protocol} (http, https, ws, wss, tcp, tls)`);
    }
  }
}
