// SPDX-License-Identifier: Apache-2.0
// The transport-independent client: ids, pending calls, batching, time-outs, retries.

import { ErrorCode, RpcError, fromErrorObject, isRetryable, type Executed } from "./errors.js";
import { BINARY, BLOB, Section, body, pack, readBlobs, scan, unpack, type Reply } from "./wire.js";
import { CANCEL_METHOD, STREAM_METHOD, Stream, feedOf, streamsError, type StreamFeed } from "./streamed.js";
import { HttpStatus, NotSent, ReplyTooLarge, type Message, type Outgoing, type Transport } from "./transport.js";

export type { BinaryReply, Body, Reply } from "./wire.js";
export { BinaryRequests, HttpStatus, MAX_REPLY_SIZE, NotSent, ReplyTooLarge } from "./transport.js";
export type { Message, Outgoing, Sink, Transport } from "./transport.js";

/** Positional or named parameters (JSON-RPC 2.0 §4.2). */
export type Params = readonly unknown[] | { readonly [name: string]: unknown };

/** Per-call options. */
export interface CallOptions {
  /** Gives up on the call when it fires (the server may still run a call already sent). */
  signal?: AbortSignal;
  /** Milliseconds to wait for the reply; overrides the client's `timeout`. */
  timeout?: number;
  /** The W3C `traceparent` this call continues; overrides the client's `traceparent`. */
  traceparent?: Traceparent;
}

/**
 * A W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`), or a function returning the
 * current one (or nothing), called as each call is made. It goes in the request's `"_meta"`
 * member, where a UCall server reads it on every transport and for each call of a batch.
 */
export type Traceparent = string | (() => string | undefined);

/** Options shared by every transport. */
export interface ClientOptions {
  /** Default time-out of a call in milliseconds; 0 (the default) waits for ever. */
  timeout?: number;
  /** How many times a call that cannot have run is sent again (default 3). */
  retries?: number;
  /** First retry delay in milliseconds, doubled on each attempt up to 5 s, with jitter (default 50). */
  retryDelay?: number;
  /** Automatic batching: calls made close together leave as one batch of at most this many. */
  maxBatchSize?: number;
  /** Automatic batching: milliseconds to wait for more calls (default 0: the current task's calls). */
  wait?: number;
  /** The trace context every call continues (see `Traceparent`); none by default. */
  traceparent?: Traceparent;
  /**
   * The largest reply taken, in bytes (an HTTP body, a raw TCP line, a WebSocket message;
   * default `MAX_REPLY_SIZE`, 64 MiB; `Infinity`: any size). A larger one fails its call
   * with `ErrorCode.BadReply`, naming both sizes, and its connection is closed.
   */
  maxReplySize?: number;
  /**
   * Binary messages (docs/wire.md): bytes and arrays in params travel as raw attachments,
   * and binary replies come back as typed arrays, when the server takes them (default
   * true). `false` keeps every message plain JSON, binary values as base64.
   */
  binary?: boolean;
}

interface Pending {
  id: number | undefined;
  method: string;
  params: unknown;
  /** `params` holds bytes or arrays. */
  binary: boolean;
  resolve(value: unknown): void;
  reject(error: RpcError): void;
  attempts: number;
  sent: boolean;
  done: boolean;
  timer?: ReturnType<typeof setTimeout>;
  signal?: AbortSignal;
  onAbort?: () => void;
  /** Starts the time-out again (a stream's item came). */
  rearm?: () => void;
  message?: Message;
  /** The `traceparent` the request carries, if any. */
  traceparent?: string;
  /** A streamed call (`stream()`): where its items go. */
  feed?: StreamFeed;
}

/** The request's JSON text, written directly (a third faster than stringifying an object). */
function requestOf(p: Pending, section?: Section): string {
  let text = `{"jsonrpc":"2.0","method":${JSON.stringify(p.method)}`;
  if (p.params !== undefined) text += `,"params":${JSON.stringify(p.binary ? pack(p.params, section) : p.params)}`;
  if (p.traceparent !== undefined) text += `,"_meta":{"traceparent":${JSON.stringify(p.traceparent)}}`;
  return p.id === undefined ? `${text}}` : `${text},"id":${p.id}}`;
}

/** Typed methods: `client.methods.sum({ a: 1, b: 2 })` for a server described by `M`. */
export type Methods<M> = {
  [K in keyof M]: M[K] extends (...args: infer A) => infer R
    ? (...args: [...params: A, options?: CallOptions]) => Promise<Awaited<R>>
    : never;
};

/** A JSON-RPC 2.0 client over one transport; see `Client` for the transports by URL. */
export class BaseClient<M = Record<string, (params?: Params) => unknown>> {
  /** Procedures as methods, typed by `M` (see `ucall-codegen`). */
  readonly methods: Methods<M>;
  private readonly inFlight = new Map<number, Pending>();
  private queue: Pending[] = [];
  private flushing = false;
  private nextId = 0;
  private closed = false;
  private readonly timeout: number;
  private readonly retries: number;
  private readonly retryDelay: number;
  private readonly maxBatch: number;
  private readonly wait: number;
  private readonly traceparent: Traceparent | undefined;
  private readonly binary: boolean;
  protected transport!: Transport;

  constructor(options: ClientOptions = {}) {
    this.timeout = options.timeout ?? 0;
    this.retries = options.retries ?? 3;
    this.retryDelay = options.retryDelay ?? 50;
    this.maxBatch = options.maxBatchSize ?? 1;
    this.wait = options.wait ?? 0;
    this.traceparent = options.traceparent;
    this.binary = options.binary ?? true;
    this.methods = new Proxy({} as Methods<M>, {
      // `then` stays undefined, so that awaiting `client.methods` does not call a procedure.
      get: (_, name) =>
        typeof name === "string" && name !== "then"
          ? (params?: Params, options?: CallOptions) => this.call(name, params, options)
          : undefined,
    });
  }

  /** Calls `method` and resolves with its result; rejects with an `RpcError`. */
  call<T = unknown>(method: string, params?: Params, options: CallOptions = {}): Promise<T> {
    const found = scan(params);
    if (found & BLOB) return readBlobs(params).then((read) => this.call<T>(method, read, options));
    return new Promise<T>((resolve, reject) => {
      const p = this.pending(method, params, found, resolve as (v: unknown) => void, reject, ++this.nextId, options);
      if (p) this.enqueue([p], this.maxBatch > 1);
    });
  }

  /**
   * Calls `method`, which streams its result (docs/streaming.md): iterate the `Stream` for
   * its items as they come (`for await (const item of client.stream(...))`), then read its
   * `result`. An error reply rejects the loop after the items sent before it. `options.timeout`
   * is the longest wait for each item and for the final reply. Over raw TCP and WebSocket the
   * stream shares the client's connection: calls made after it are answered after it ends.
   */
  stream<T = unknown, R = unknown>(method: string, params?: Params, options: CallOptions = {}): Stream<T, R> {
    let p: Pending | undefined;
    let gone = false; // closed before its call was made (Blobs still being read)
    const stream = new Stream<T, R>({
      cancel: () => {
        if (!p || p.done) return;
        if (this.transport.multiplexed) this.cancelOnServer(p.id);
        else this.settle(p, undefined); // over HTTP, ending the request stops the stream
      },
      close: () => {
        gone = true;
        if (p) this.fail(p, ErrorCode.Aborted, "the stream was closed before its final reply", p.sent ? "maybe" : "no");
      },
    });
    const feed = feedOf(stream as Stream<unknown, unknown>);
    const start = (params: Params | undefined) => {
      if (gone) return;
      p = this.pending(method, params, scan(params), feed.end, feed.fail, ++this.nextId, options);
      if (!p) return;
      p.feed = feed;
      this.transmit([p], false); // alone: a server streams no call of a batch
    };
    if (scan(params) & BLOB) {
      readBlobs(params).then(start, (error: unknown) => feed.fail(new RpcError(ErrorCode.Aborted, `cannot read a Blob: ${error}`, undefined, "no", error)));
    } else start(params);
    return stream;
  }

  /** Sends a notification (no reply); resolves once it was delivered as far as the transport tells. */
  notify(method: string, params?: Params): Promise<void> {
    const found = scan(params);
    if (found & BLOB) return readBlobs(params).then((read) => this.notify(method, read));
    return new Promise<void>((resolve, reject) => {
      const p = this.pending(method, params, found, () => resolve(), reject, undefined, {});
      if (p) this.enqueue([p], this.maxBatch > 1);
    });
  }

  /** Sends the calls as one batch; resolves with one entry per call, in order: its result or its `RpcError`. */
  batch(calls: readonly (readonly [method: string, params?: Params])[], options: CallOptions = {}): Promise<unknown[]> {
    if (scan(calls) & BLOB) return readBlobs(calls).then((read) => this.batch(read, options));
    const results: unknown[] = new Array(calls.length);
    let left = calls.length;
    return new Promise<unknown[]>((resolve) => {
      if (left === 0) return resolve(results);
      const settle = (i: number) => (value: unknown) => {
        results[i] = value;
        if (--left === 0) resolve(results);
      };
      const group: Pending[] = [];
      calls.forEach(([method, params], i) => {
        const p = this.pending(method, params, scan(params), settle(i), settle(i), ++this.nextId, options);
        if (p) group.push(p);
      });
      if (group.length) this.enqueue(group, false);
    });
  }

  /** Rejects every call still waiting (`executed` says whether it may have run) and closes the transport. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.queue) this.fail(p, ErrorCode.Closed, "the client was closed", "no");
    for (const p of [...this.inFlight.values()]) this.fail(p, ErrorCode.Closed, "the client was closed", p.sent ? "maybe" : "no");
    this.queue = [];
    this.transport.close();
  }

  private pending(
    method: string,
    params: Params | undefined,
    found: number,
    resolve: (value: unknown) => void,
    reject: (error: RpcError) => void,
    id: number | undefined,
    options: CallOptions,
  ): Pending | undefined {
    const binary = (found & BINARY) !== 0;
    const p: Pending = { id, method, params, binary, resolve, reject, attempts: 0, sent: false, done: false };
    const traceparent = options.traceparent ?? this.traceparent;
    if (traceparent !== undefined) {
      const value = typeof traceparent === "function" ? traceparent() : traceparent;
      if (value) p.traceparent = value;
    }
    if (this.closed) return void this.fail(p, ErrorCode.Closed, "the client was closed", "no");
    const { signal } = options;
    if (signal) {
      if (signal.aborted) return void this.fail(p, ErrorCode.Aborted, "aborted", "no", signal.reason);
      p.signal = signal;
      p.onAbort = () => this.fail(p, ErrorCode.Aborted, "aborted", p.sent ? "maybe" : "no", signal.reason);
      signal.addEventListener("abort", p.onAbort, { once: true });
    }
    const timeout = options.timeout ?? this.timeout;
    if (timeout > 0) this.arm(p, timeout, "reply");
    if (id !== undefined) this.inFlight.set(id, p);
    return p;
  }

  /** Fails `p` unless its reply (or, streaming, its next item) comes within `timeout` ms. */
  private arm(p: Pending, timeout: number, what: string): void {
    const fire = () => this.fail(p, ErrorCode.Timeout, `no ${what} within ${timeout} ms`, p.sent ? "maybe" : "no");
    p.timer = setTimeout(fire, timeout);
    p.rearm = () => {
      clearTimeout(p.timer);
      p.timer = setTimeout(fire, timeout);
    };
  }

  /** Asks the server to stop the stream of call `id` (over a shared connection). */
  private cancelOnServer(id: number | undefined): void {
    if (id !== undefined && !this.closed) this.notify(CANCEL_METHOD, { id }).catch(() => {});
  }

  /** An item of a streamed reply (docs/streaming.md): to its stream, or the end of a call that did not expect one. */
  private item(params: unknown, section: Uint8Array | undefined): void {
    const { id, item } = (params ?? {}) as { id?: unknown; item?: unknown };
    const p = typeof id === "number" ? this.inFlight.get(id) : undefined;
    if (!p || p.done) return; // a stream closed here, or a call already failed: its items are dropped
    if (!p.feed) {
      // call() on a procedure that streams: fail it now, and stop the stream (over HTTP, the request ends).
      this.finish(p, streamsError(p.method));
      if (this.transport.multiplexed) this.cancelOnServer(p.id);
      return;
    }
    let value = item;
    if (section) {
      try {
        value = unpack(item, section);
      } catch (e) {
        return this.fail(p, ErrorCode.BadReply, `an item's attachments cannot be read: ${(e as Error).message}`, "yes", e);
      }
    }
    p.rearm?.();
    p.feed.item(value);
  }

  private enqueue(group: Pending[], merge: boolean): void {
    if (!merge) return void this.transmit(group, false);
    this.queue.push(...group);
    if (this.queue.length >= this.maxBatch) return this.flush();
    if (this.flushing) return;
    this.flushing = true;
    if (this.wait > 0) setTimeout(() => this.flush(), this.wait);
    else queueMicrotask(() => this.flush());
  }

  private flush(): void {
    this.flushing = false;
    const queue = this.queue.filter((p) => !p.done);
    this.queue = [];
    for (let i = 0; i < queue.length; i += this.maxBatch) this.transmit(queue.slice(i, i + this.maxBatch), true);
  }

  private transmit(group: Pending[], asBatch: boolean): void {
    group = group.filter((p) => !p.done);
    if (group.length === 0) return;
    const message: Message = { live: group.length };
    // A streamed HTTP reply's messages (items, then the final reply) as they come.
    message.part = (reply) => this.receive(reply, group, message, true);
    for (const p of group) {
      p.attempts++;
      p.message = message;
    }
    const many = asBatch || group.length > 1;
    const textOf = (section?: Section) => (many ? `[${group.map((p) => requestOf(p, section)).join(",")}]` : requestOf(group[0]!, section));
    const out: Outgoing = {
      binary: this.binary && group.some((p) => p.binary),
      json: () => textOf(),
      body: () => {
        const section = new Section();
        return body(textOf(section), section);
      },
    };
    const written = () => {
      for (const p of group) p.sent = true;
    };
    const sending = this.transport.send(out, message, written);
    if (!sending) {
      // Written at once to a stream: notifications are done, calls wait for their replies.
      for (const p of group) if (p.id === undefined) this.settle(p, undefined);
      return;
    }
    sending.then(
      (reply) => {
        if (reply !== undefined) return this.receive(reply, group, message);
        // A stream transport wrote it: notifications are done, calls wait for their replies.
        for (const p of group) if (p.id === undefined) this.settle(p, undefined);
      },
      (error: unknown) => {
        const notSent = error instanceof NotSent;
        for (const p of group) {
          if (p.done || p.message !== message) continue;
          if (notSent) p.sent = false;
          if (error instanceof HttpStatus) this.fromHttp(p, error);
          else if (error instanceof ReplyTooLarge) this.fail(p, ErrorCode.BadReply, error.message, "yes", error);
          else if (notSent && p.attempts <= this.retries && !this.closed) this.retry(p);
          else {
            const why = `connection failed: ${(error as Error)?.message ?? error}`;
            this.fail(p, ErrorCode.Connection, why, notSent ? "no" : "maybe", error);
          }
        }
      },
    );
  }

  /** A refusal from the HTTP layer: 4xx means nothing ran; 5xx may be a proxy's, after the call ran. */
  private fromHttp(p: Pending, error: HttpStatus): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(error.body);
    } catch {
      /* not JSON: the status says it all */
    }
    const object = (parsed as { error?: unknown })?.error ?? parsed;
    const base = typeof (object as { code?: unknown })?.code === "number" ? fromErrorObject(object) : undefined;
    const executed: Executed = error.status < 500 || base?.executed === "no" ? "no" : "maybe";
    const rpc = new RpcError(base?.code ?? ErrorCode.BadReply, base?.message ?? error.message, base?.data, executed, error);
    if (isRetryable(rpc) && p.attempts <= this.retries) this.retry(p);
    else this.finish(p, rpc);
  }

  /**
   * Handles a reply: a Response object or an array of them, as JSON text or a binary message
   * whose results' placeholders become typed arrays. `group` is the message it answers (HTTP).
   */
  protected receive(reply: Reply, group?: Pending[], message?: Message, part = false): void {
    const text = typeof reply === "string" ? reply : reply.text;
    const section = typeof reply === "string" ? undefined : reply.section;
    let replies: unknown;
    try {
      replies = text === "" ? [] : JSON.parse(text);
    } catch (error) {
      const victims = group?.filter((p) => p.message === message) ?? [...this.inFlight.values()].filter((p) => p.sent);
      for (const p of victims) this.fail(p, ErrorCode.BadReply, "the reply is not JSON", "maybe", error);
      return;
    }
    let orphan: unknown;
    for (const reply of Array.isArray(replies) ? replies : [replies]) {
      const { id, error, result, method, params } = (reply ?? {}) as { id?: unknown; error?: unknown; result?: unknown; method?: unknown; params?: unknown };
      if (method === STREAM_METHOD && id === undefined) {
        this.item(params, section);
        continue;
      }
      // A streamed HTTP reply's final message: its request ends by itself, nothing left to stop.
      if (part && message) message.stop = undefined;
      const p = typeof id === "number" ? this.inFlight.get(id) : undefined;
      if (!p) {
        if (id === null && error) orphan = error;
        continue;
      }
      if (error === undefined) {
        if (!section) this.settle(p, result);
        else {
          try {
            this.settle(p, unpack(result, section));
          } catch (e) {
            this.fail(p, ErrorCode.BadReply, `the reply's attachments cannot be read: ${(e as Error).message}`, "yes", e);
          }
        }
      } else {
        const rpc = fromErrorObject(error);
        if (isRetryable(rpc) && p.attempts <= this.retries && !this.closed) this.retry(p);
        else this.finish(p, rpc);
      }
    }
    if (!group || part) return;
    // HTTP: calls of this message without their own reply share the id-less error, if any.
    for (const p of group) {
      if (p.done || p.message !== message) continue;
      if (p.id === undefined) this.settle(p, undefined);
      else if (orphan) this.finish(p, fromErrorObject(orphan));
      else this.fail(p, ErrorCode.BadReply, "the reply has no answer for this call", "maybe");
    }
  }

  /** A stream transport lost its connection: calls sent on it can no longer be answered. */
  protected dropped(reason: unknown): void {
    // A reply over maxReplySize closes the connection: the calls on it say so.
    const [code, why] =
      reason instanceof ReplyTooLarge
        ? [ErrorCode.BadReply, `${reason.message}, before this call's reply`]
        : [ErrorCode.Connection, "the connection closed before the reply"];
    for (const p of [...this.inFlight.values()]) {
      if (p.sent) this.fail(p, code, why, "maybe", reason);
    }
  }

  private retry(p: Pending): void {
    p.sent = false;
    p.message = undefined;
    const delay = Math.min(this.retryDelay * 2 ** (p.attempts - 1), 5000) * (0.5 + Math.random() / 2);
    setTimeout(() => {
      if (p.done) return;
      if (p.id !== undefined) {
        // A fresh id, so that a late reply to the earlier attempt cannot answer this one.
        this.inFlight.delete(p.id);
        p.id = ++this.nextId;
        this.inFlight.set(p.id, p);
      }
      this.transmit([p], false);
    }, delay);
  }

  private settle(p: Pending, result: unknown): void {
    if (this.release(p)) p.resolve(result);
  }

  private finish(p: Pending, error: RpcError): void {
    if (this.release(p)) p.reject(error);
  }

  private fail(p: Pending, code: number, text: string, executed: Executed, cause?: unknown): void {
    if (p.done) return;
    this.finish(p, new RpcError(code, text, undefined, executed, cause));
    // A stream ended here (closed, timed out, aborted) on a shared connection: the server stops it.
    if (p.feed && this.transport.multiplexed && code !== ErrorCode.Connection && code !== ErrorCode.Closed) this.cancelOnServer(p.id);
  }

  /** Marks `p` done; false when it already was. Stops its HTTP request once no call of it waits. */
  private release(p: Pending): boolean {
    if (p.done) return false;
    p.done = true;
    if (p.id !== undefined) this.inFlight.delete(p.id);
    if (p.timer !== undefined) clearTimeout(p.timer);
    p.rearm = undefined;
    if (p.onAbort) p.signal?.removeEventListener("abort", p.onAbort);
    if (p.message && --p.message.live === 0) p.message.stop?.();
    return true;
  }
}
