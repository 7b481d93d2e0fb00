// SPDX-License-Identifier: Apache-2.0
// Streamed results (docs/streaming.md): a procedure that sends items, then its final reply.
// Each item is a notification `{"method":"ucall.stream","params":{"id":<call id>,"item":...}}`
// on raw TCP and WebSocket, and a line (or binary message) of a chunked HTTP body.

import { ErrorCode, RpcError } from "./errors.js";

/** What the error of `call()` on a procedure that streams its result says (use `stream()`). */
export const STREAMS_ITS_RESULT = "streams its result";
/** The method of the notifications that carry a stream's items. */
export const STREAM_METHOD = "ucall.stream";
/** The method that asks the server to stop a stream, `{"id": <the streamed call's id>}`. */
export const CANCEL_METHOD = "ucall.cancel";
/** The error code ending a stream its caller cancelled ("Request cancelled"). */
export const CANCELLED = -32800;

/** The error of `call()` on a procedure whose items came in place of one reply. */
export function streamsError(method: string): RpcError {
  return new RpcError(
    ErrorCode.BadReply,
    `the procedure ${JSON.stringify(method)} ${STREAMS_ITS_RESULT} (items came in place of one reply): ` +
      "read them with client.stream() (docs/streaming.md)",
    undefined,
    "yes",
  );
}

/** What a stream asks of its client. */
export interface StreamControl {
  /** Asks the server to stop the stream (`ucall.cancel`, or over HTTP by ending the request). */
  cancel(): void;
  /** Ends the call here: no more items are delivered, and the server is told to stop. */
  close(): void;
}

/** How a client hands a stream what comes for it. */
export interface StreamFeed {
  item(value: unknown): void;
  end(result: unknown): void;
  fail(error: RpcError): void;
}

const feeds = new WeakMap<object, StreamFeed>();

/** The feed of a stream made by a client. */
export function feedOf(stream: Stream<unknown, unknown>): StreamFeed {
  return feeds.get(stream)!;
}

/**
 * The items of a streamed call (`client.stream()`), as they arrive: iterate it with
 * `for await`. `result` is the final reply's result; an error reply rejects it and the loop
 * where it is, after the items sent before the error. Leaving the loop early (`break`,
 * `return`, a throw) or `close()` ends the stream, and the server stops producing;
 * `cancel()` asks the server to stop and lets the loop end after the items already on
 * their way. A stream is iterated once.
 */
export class Stream<T = unknown, R = unknown> implements AsyncIterable<T> {
  /** The final reply's result: `undefined` after `cancel()`; rejects with an `RpcError` on an error reply, and after `close()`. */
  readonly result: Promise<R>;
  private readonly items: T[] = [];
  private waiter?: { resolve(step: IteratorResult<T, undefined>): void; reject(error: unknown): void };
  private ended = false;
  private closed = false;
  private cancelled = false;
  /** The error the loop is to throw, once its items are read. */
  private error?: RpcError;

  constructor(private readonly control: StreamControl) {
    let resolve!: (result: R) => void;
    let reject!: (error: unknown) => void;
    this.result = new Promise<R>((yes, no) => {
      resolve = yes;
      reject = no;
    });
    // A stream read only by its loop leaves no unhandled rejection behind.
    this.result.catch(() => {});
    feeds.set(this, {
      item: (value) => {
        if (this.ended || this.closed) return;
        if (this.waiter) this.wake({ value: value as T, done: false });
        else this.items.push(value as T);
      },
      end: (result) => {
        if (this.ended) return;
        this.ended = true;
        resolve(result as R);
        if (this.items.length === 0) this.wake({ value: undefined, done: true });
      },
      fail: (error) => {
        if (this.ended) return;
        if (this.cancelled && error.code === CANCELLED) return feedOf(this).end(undefined);
        this.ended = true;
        reject(error);
        if (this.closed) return this.wake({ value: undefined, done: true });
        this.error = error;
        if (this.items.length === 0 && this.waiter) {
          const waiter = this.waiter;
          this.waiter = undefined;
          this.error = undefined;
          waiter.reject(error);
        }
      },
    });
  }

  /** Asks the server to stop the stream: the loop ends after the items already on their way (over HTTP, at once). */
  cancel(): void {
    if (this.ended || this.closed || this.cancelled) return;
    this.cancelled = true;
    this.control.cancel();
  }

  /** Ends the stream here: the loop gets no more items and the server stops producing them. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.items.length = 0;
    this.error = undefined;
    if (!this.ended) this.control.close();
    this.wake({ value: undefined, done: true });
  }

  /** The next item; `done` once the stream ended. */
  next(): Promise<IteratorResult<T, undefined>> {
    if (this.items.length) return Promise.resolve({ value: this.items.shift()!, done: false });
    if (this.error) {
      const error = this.error;
      this.error = undefined;
      return Promise.reject(error);
    }
    if (this.ended || this.closed) return Promise.resolve({ value: undefined, done: true });
    if (this.waiter) return Promise.reject(new TypeError("a stream is read by one loop at a time"));
    return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
  }

  /** Leaving a `for await` loop early: closes the stream. */
  return(): Promise<IteratorResult<T, undefined>> {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<T, undefined> {
    return { next: () => this.next(), return: () => this.return() };
  }

  private wake(step: IteratorResult<T, undefined>): void {
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.resolve(step);
  }
}
