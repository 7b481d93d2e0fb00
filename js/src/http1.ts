// SPDX-License-Identifier: Apache-2.0
// HTTP/1.1 transport for Node: keep-alive connections over node:net or node:tls, a few
// dozen at most, each carrying one request at a time (or `pipelining` of them). Node's
// fetch spends about ten times the CPU per call and opens a connection per call in flight
// (bench/echo.mjs: 556 calls/s beside 6,791 for node:http on the same server).

import type { Socket } from "node:net";
import { BinaryRequests, HttpStatus, MAX_REPLY_SIZE, NotSent, ReplyTooLarge, type ClientOptions, type Message, type Outgoing, type Transport } from "./base.js";
import { BINARY_STREAM, Framer, isStreamed } from "./framing.js";
import { CONTENT_TYPE, JSON_LENGTH, readBody, type Reply } from "./wire.js";

/** Options of the Node HTTP/1.1 transport. */
export interface Http1Options extends Pick<ClientOptions, "maxReplySize"> {
  /** Extra request headers (authorization, say). */
  headers?: Record<string, string>;
  /** Most connections open to the server at once (default 32). */
  connections?: number;
  /** Requests in flight on one connection (default 1). Above 1, a connection that fails
   * fails every call on it as "maybe" run (RFC 9112 §9.3.2), so it is for servers known to pipeline, such as UCall. */
  pipelining?: number;
  /** TLS settings for https:// (Node's `tls.connect` options: ca, cert, key, servername...). */
  tls?: Record<string, unknown>;
  /** Binary messages (docs/wire.md) when the server takes them (default true). */
  binary?: boolean;
}

interface Request {
  chunks: (string | Uint8Array)[];
  written(): void;
  resolve(reply: Reply): void;
  reject(error: unknown): void;
  /** Takes each message of a streamed reply as it arrives (`Message.part`). */
  part?: (reply: Reply) => void;
  done: boolean;
  conn?: Conn;
}

interface Conn {
  socket: Socket;
  /** Requests written, in order, waiting for their replies. */
  queue: Request[];
  open: boolean;
  /** The server will close it (Connection: close, or a body that runs to the end). */
  closing: boolean;
  untilClose: boolean;
  status: number;
  /** The head of a reply whose body runs to the end of the connection. */
  head: string;
  chunks: Buffer[];
  size: number;
  /** Why the connection was given up (a reply over maxReplySize), for the request it answered. */
  error?: Error;
  /** Bytes needed before the next parse can make progress. */
  need: number;
  corked: boolean;
  /** The streamed reply being read (docs/streaming.md): its request and the messages so far. */
  streaming?: { request: Request; framer: Framer };
}

/** Idle connections close on our side first, before a server's idle time-out can race a request. */
const IDLE_MS = 4000;
const MAX_HEAD = 64 * 1024;

/** `[body, next]` of a chunked body starting at `at` (RFC 9112 §7.1), or undefined while incomplete;
 * throws `ReplyTooLarge` once its chunks add up to more than `max` bytes. */
function dechunk(buf: Buffer, at: number, max: number): [Buffer, number] | undefined {
  const parts: Buffer[] = [];
  let total = 0;
  for (;;) {
    const eol = buf.indexOf("\r\n", at);
    if (eol < 0) return;
    const size = parseInt(buf.toString("latin1", at, eol), 16); // stops at a chunk extension's ';'
    if (!(size >= 0)) throw new Error("bad chunk size in the reply");
    total += size;
    if (total > max) throw new ReplyTooLarge(total, true, max);
    if (size === 0) {
      const end = buf.indexOf("\r\n\r\n", eol); // after any trailer fields
      return end < 0 ? undefined : [Buffer.concat(parts), end + 4];
    }
    if (buf.length < eol + 4 + size) return;
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    at = eol + 4 + size;
  }
}

/** The chunks complete in `buf` (a streamed body, read as it comes): their data, where the
 * rest starts, whether the last chunk came, and how many bytes the next chunk needs. */
function chunksIn(buf: Buffer): { parts: Buffer[]; next: number; last: boolean; need: number } {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = buf.indexOf("\r\n", at);
    if (eol < 0) return { parts, next: at, last: false, need: buf.length - at + 1 };
    const size = parseInt(buf.toString("latin1", at, eol), 16);
    if (!(size >= 0)) throw new Error("bad chunk size in the reply");
    if (size === 0) {
      const end = buf.indexOf("\r\n\r\n", eol);
      if (end < 0) return { parts, next: at, last: false, need: buf.length - at + 1 };
      return { parts, next: end + 4, last: true, need: 0 };
    }
    if (buf.length < eol + 4 + size) return { parts, next: at, last: false, need: eol + 4 + size - at };
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    at = eol + 4 + size;
  }
}

const BINARY_REPLY = new RegExp(`\\r\\ncontent-type:[ \\t]*${CONTENT_TYPE.replace(/[.]/g, "\\.")}`);
const JSON_LENGTH_FIELD = new RegExp(`\\r\\n${JSON_LENGTH}:[ \\t]*(\\d+)`);

/** A reply body: JSON text, or a binary message when the head says so. */
function replyOf(head: string, body: Buffer): Reply {
  if (!BINARY_REPLY.test(head)) return body.toString("utf8");
  const json = JSON_LENGTH_FIELD.exec(head);
  if (!json) throw new Error("a binary reply without its JSON length");
  return readBody(body, Number(json[1]));
}

export class Http1Transport implements Transport {
  private readonly prefix: string;
  private readonly binaryPrefix: string;
  /** Binary requests: sent when they have attachments until the server refuses one it never took. */
  private readonly binary: BinaryRequests;
  private readonly host: string;
  private readonly port: number;
  private readonly secure: boolean;
  private readonly max: number;
  private readonly depth: number;
  private readonly maxReply: number;
  private readonly conns = new Set<Conn>();
  private waiting: Request[] = [];
  private net?: typeof import("node:net") | typeof import("node:tls");
  private loading = false;
  private closed = false;

  constructor(
    url: URL,
    private readonly options: Http1Options = {},
  ) {
    this.secure = url.protocol === "https:";
    this.host = url.hostname.replace(/^\[|\]$/g, "");
    this.port = Number(url.port) || (this.secure ? 443 : 80);
    this.max = options.connections ?? 32;
    this.depth = options.pipelining ?? 1;
    this.maxReply = options.maxReplySize ?? MAX_REPLY_SIZE;
    this.binary = new BinaryRequests(options.binary === false ? "off" : "try");
    const headers: Record<string, string> = {};
    // Streamed replies' items as binary messages too (docs/streaming.md, "Binary items").
    if (this.binary.state !== "off") headers.accept = `${BINARY_STREAM}, ${CONTENT_TYPE}, application/json`;
    for (const [name, value] of Object.entries(options.headers ?? {})) headers[name.toLowerCase()] = value;
    let head = `POST ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\n`;
    for (const [name, value] of Object.entries(headers)) {
      if (/[\r\n:]/.test(name) || /[\r\n]/.test(value)) throw new TypeError(`bad header ${JSON.stringify(name)}`);
      if (name !== "content-length" && name !== "host" && name !== "content-type") head += `${name}: ${value}\r\n`;
    }
    this.prefix = `${head}content-type: ${headers["content-type"] ?? "application/json"}\r\ncontent-length: `;
    this.binaryPrefix = `${head}content-type: ${CONTENT_TYPE}\r\ncontent-length: `;
  }

  send(out: Outgoing, message: Message, written: () => void): Promise<Reply> {
    return this.binary.send(out, (binary) => this.exchange(out, binary, message, written));
  }

  private exchange(out: Outgoing, binary: boolean, message: Message, written: () => void): Promise<Reply> {
    if (this.closed) return Promise.reject(new NotSent("the client was closed"));
    let chunks: (string | Uint8Array)[];
    if (binary) {
      const b = out.body();
      chunks = [`${this.binaryPrefix}${b.length}\r\n${JSON_LENGTH}: ${b.json}\r\n\r\n`, ...b.chunks];
    } else {
      const text = out.json();
      chunks = [`${this.prefix}${Buffer.byteLength(text)}\r\n\r\n${text}`];
    }
    return new Promise((resolve, reject) => {
      const request: Request = {
        chunks,
        written,
        resolve,
        reject,
        part: message.part,
        done: false,
      };
      message.stop = () => this.stop(request);
      this.waiting.push(request);
      this.pump();
    });
  }

  close(): void {
    this.closed = true;
    for (const c of this.conns) c.socket.destroy();
    this.fail(this.waiting.splice(0), new NotSent("the client was closed"));
  }

  /** Gives waiting requests to connections with room, opening connections up to the limit. */
  private pump(): void {
    if (!this.net) return this.load();
    while (this.waiting.length) {
      let conn: Conn | undefined;
      for (const c of this.conns) {
        if (!c.closing && c.queue.length < this.depth) {
          conn = c;
          break;
        }
      }
      if (!conn) {
        if (this.conns.size >= this.max) return;
        conn = this.connect(this.net);
      }
      const request = this.waiting.shift()!;
      if (conn.queue.length === 0) conn.socket.ref();
      conn.queue.push(request);
      request.conn = conn;
      request.written();
      if ((this.depth > 1 || request.chunks.length > 1) && !conn.corked) {
        // Requests of one turn of the event loop leave together.
        conn.corked = true;
        conn.socket.cork();
        process.nextTick(() => {
          conn.corked = false;
          conn.socket.uncork();
        });
      }
      for (const chunk of request.chunks) conn.socket.write(chunk);
    }
  }

  /** Loads node:net or node:tls on first use, so that browser bundles need not resolve them. */
  private load(): void {
    if (this.loading) return;
    this.loading = true;
    (this.secure ? import("node:tls") : import("node:net")).then(
      (net) => {
        this.net = net;
        this.pump();
      },
      (error: unknown) => this.fail(this.waiting.splice(0), new NotSent(`no sockets here: ${error}`, { cause: error })),
    );
  }

  private connect(net: typeof import("node:net") | typeof import("node:tls")): Conn {
    const { host, port } = this;
    const options = this.secure ? { servername: /^[\d.:]+$/.test(host) ? undefined : host, ...this.options.tls, host, port } : { host, port };
    const socket = (net.connect as (o: object) => Socket)(options);
    const conn: Conn = { socket, queue: [], open: false, closing: false, untilClose: false, status: 0, head: "", chunks: [], size: 0, need: 0, corked: false };
    this.conns.add(conn);
    socket.setNoDelay(true);
    socket.setTimeout(IDLE_MS);
    socket.once(this.secure ? "secureConnect" : "connect", () => (conn.open = true));
    socket.on("timeout", () => {
      if (conn.queue.length === 0) socket.destroy();
    });
    socket.on("data", (chunk: Buffer) => {
      conn.chunks.push(chunk);
      conn.size += chunk.length;
      try {
        if (conn.untilClose && conn.size > this.maxReply) throw new ReplyTooLarge(conn.size, true, this.maxReply);
        if (conn.size < conn.need) return;
        this.parse(conn);
      } catch (error) {
        conn.error = error as Error;
        conn.untilClose = false;
        socket.destroy(error as Error);
      }
    });
    socket.on("error", () => {}); // 'close' follows and reports
    socket.on("close", () => {
      this.conns.delete(conn);
      const queue = conn.queue.splice(0);
      if (conn.untilClose && queue.length) {
        const request = queue.shift()!;
        try {
          this.answer(request, conn.status, replyOf(conn.head, Buffer.concat(conn.chunks)));
        } catch {
          queue.unshift(request); // an unreadable reply: failed below with the rest
        }
      }
      if (conn.error instanceof ReplyTooLarge && queue.length) this.fail([queue.shift()!], conn.error);
      // Requests on a connection that never opened cannot have left.
      this.fail(queue, conn.open ? new Error("the connection closed before the reply") : new NotSent("cannot connect"));
      this.pump();
    });
    return conn;
  }

  /** Reads the replies complete in `conn`'s bytes (RFC 9112 §6), in request order. */
  private parse(conn: Conn): void {
    let buf: Buffer | undefined = conn.chunks.length === 1 ? conn.chunks[0]! : Buffer.concat(conn.chunks);
    conn.need = 0;
    while (buf && conn.queue.length && !conn.untilClose) {
      if (conn.streaming) {
        const { parts, next, last, need } = chunksIn(buf);
        const { request, framer } = conn.streaming;
        for (const part of parts) {
          for (const reply of framer.feed(part)) {
            if (request.done || conn.socket.destroyed) return; // stopped (the stream closed)
            request.part?.(reply);
          }
        }
        buf = next < buf.length ? buf.subarray(next) : undefined;
        if (!last) {
          conn.need = need;
          break;
        }
        conn.streaming = undefined;
        for (const reply of framer.end()) request.part?.(reply);
        this.answer(conn.queue.shift()!, 200, "");
        continue;
      }
      const end: number = buf.indexOf("\r\n\r\n");
      if (end < 0) {
        if (buf.length > MAX_HEAD) throw new Error("the reply's head is too large");
        conn.need = buf.length + 1;
        break;
      }
      const head = buf.toString("latin1", 0, end).toLowerCase();
      const status = Number(head.slice(9, 12));
      if (!head.startsWith("http/1.") || !(status >= 100)) throw new Error("the reply is not HTTP/1.x");
      let body: Reply = "";
      let next: number = end + 4;
      if (status >= 200 && status !== 204 && status !== 304) {
        const length = /\r\ncontent-length:[ \t]*(\d+)/.exec(head);
        const chunked = /\r\ntransfer-encoding:[^\r]*chunked/.test(head);
        if (chunked && status < 300 && conn.queue[0]!.part && isStreamed(/\r\ncontent-type:[ \t]*([^\r]*)/.exec(head)?.[1])) {
          // A streamed reply: its messages are handed over as its chunks come (above).
          conn.streaming = { request: conn.queue[0]!, framer: new Framer(this.maxReply) };
          if (/\r\nconnection:[^\r]*close/.test(head)) conn.closing = true;
          buf = next < buf.length ? buf.subarray(next) : undefined;
          continue;
        }
        if (chunked) {
          const chunked = dechunk(buf, next, this.maxReply);
          if (!chunked) {
            conn.need = buf.length * 2; // re-parse at most log(n) times while a large body arrives
            break;
          }
          body = replyOf(head, chunked[0]);
          next = chunked[1];
        } else if (length) {
          if (Number(length[1]) > this.maxReply) throw new ReplyTooLarge(Number(length[1]), false, this.maxReply);
          next += Number(length[1]);
          if (buf.length < next) {
            conn.need = next;
            break;
          }
          body = replyOf(head, buf.subarray(end + 4, next));
        } else {
          // Neither length nor chunks: the body runs to the end of the connection.
          conn.untilClose = conn.closing = true;
          conn.status = status;
          conn.head = head;
          conn.need = Infinity;
          next = end + 4;
        }
      }
      buf = next < buf.length ? buf.subarray(next) : undefined;
      if (status < 200 || conn.untilClose) continue; // 1xx: an interim reply before the real one
      if (/\r\nconnection:[^\r]*close/.test(head) || (head.startsWith("http/1.0") && !/\r\nconnection:[^\r]*keep-alive/.test(head))) {
        conn.closing = true;
      }
      this.answer(conn.queue.shift()!, status, body);
    }
    conn.chunks = buf ? [buf] : [];
    conn.size = buf ? buf.length : 0;
    if (conn.closing && conn.queue.length === 0) conn.socket.destroy();
    this.pump();
    if (conn.queue.length === 0) conn.socket.unref(); // an idle connection keeps no process alive
  }

  private answer(request: Request, status: number, body: Reply): void {
    request.done = true;
    if (status >= 200 && status < 300) request.resolve(body);
    else request.reject(new HttpStatus(status, typeof body === "string" ? body : body.text));
  }

  private fail(requests: Request[], error: unknown): void {
    for (const r of requests) {
      r.done = true;
      r.reject(error);
    }
  }

  /** No call of `request` waits any more (abort, time-out): drop it, or its connection if it was sent. */
  private stop(request: Request): void {
    if (request.done) return;
    if (request.conn) return void request.conn.socket.destroy();
    const i = this.waiting.indexOf(request);
    if (i >= 0) this.waiting.splice(i, 1);
    this.fail([request], new NotSent("stopped before it was sent"));
  }
}
