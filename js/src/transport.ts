// SPDX-License-Identifier: Apache-2.0
// What a client asks of a transport, and the errors transports report.

import { refusesBinary, type Body, type Reply } from "./wire.js";

/** The default `maxReplySize`: 64 MiB, the largest request a UCall server takes by default. */
export const MAX_REPLY_SIZE = 64 * 1024 * 1024;

/** A reply over the client's `maxReplySize`: `size` bytes, or more when `atLeast`. */
export class ReplyTooLarge extends Error {
  override name = "ReplyTooLarge";
  constructor(size: number, atLeast: boolean, max: number) {
    super(
      `a reply of ${size} bytes${atLeast ? " or more" : ""}, over the client's maxReplySize of ${max} bytes ` +
        "(the connection is closed; raise maxReplySize to take it)",
    );
  }
}

/** One text on the wire: how many of its calls still wait, and a way to stop its HTTP request. */
export interface Message {
  live: number;
  stop?: () => void;
  /**
   * Takes each message of a streamed HTTP reply (docs/streaming.md: `application/jsonl`, or
   * `application/vnd.ucall.binary-stream`) as it arrives: items, then the final reply. The
   * transport's promise then resolves with `""` once the body ends.
   */
  part?: (reply: Reply) => void;
}

/** A message to send, in the form the transport picks: a JSON text, or a binary message. */
export interface Outgoing {
  /** Some param holds bytes or an array (which a binary message carries as attachments). */
  readonly binary: boolean;
  /** The JSON text, binary values in their plain JSON forms (base64). */
  json(): string;
  /** The body of a binary message (docs/wire.md §1), binary values as attachments. */
  body(): Body;
}

/**
 * How a client moves messages. `send` returns nothing when it wrote the message at once
 * (a stream, whose replies come to `Sink.receive`); else a promise of the reply
 * where the transport answers each message (HTTP), or of nothing once the message is
 * written. It calls `written` as it hands the message to the network, and rejects with
 * `NotSent` when the message cannot have left; any other rejection means it may have.
 */
export interface Transport {
  /**
   * The client's messages share one connection (raw TCP, WebSocket): a stream is stopped by
   * sending `ucall.cancel`, where over HTTP it is by ending its request.
   */
  readonly multiplexed?: boolean;
  send(out: Outgoing, message: Message, written: () => void): Promise<Reply | undefined> | undefined;
  close(): void;
}

/** What a stream transport reports to its client. */
export interface Sink {
  receive(reply: Reply): void;
  dropped(reason: unknown): void;
}

/** A send that failed before any byte could leave (connection refused, client closed). */
export class NotSent extends Error {
  override name = "NotSent";
}

/** A reply with an HTTP status other than 2xx. */
export class HttpStatus extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`HTTP ${status}`);
  }
}

/**
 * Binary requests over HTTP (docs/wire.md §3.1), one rule for both HTTP transports: a message
 * with attachments goes as a binary message while the server may take one ("try") and once
 * it took one ("on"); a refusal from a server that never took one (415, or 400 with a
 * -32700) sends the same message again as JSON, which the refusal shows never ran, and every
 * later one ("off").
 */
export class BinaryRequests {
  constructor(public state: "off" | "try" | "on") {}

  async send(out: Outgoing, exchange: (binary: boolean) => Promise<Reply>): Promise<Reply> {
    const binary = out.binary && this.state !== "off";
    try {
      const reply = await exchange(binary);
      if (binary) this.state = "on";
      return reply;
    } catch (error) {
      if (!(binary && this.state !== "on" && error instanceof HttpStatus && refusesBinary(error.status, error.body))) throw error;
      this.state = "off";
      return exchange(false);
    }
  }
}
