// SPDX-License-Identifier: Apache-2.0
// A transport over one long-lived connection (WebSocket, raw TCP): connects on demand,
// writes messages as they come, and reports replies and drops to its client.

import { NotSent, type Message, type Outgoing, type Sink, type Transport } from "./base.js";

/** An open connection. */
export interface Link {
  /** Writes `out` as a JSON text, or as a binary message where the connection carries them. */
  write(out: Outgoing): void;
  close(): void;
}

/** Opens a connection whose incoming replies go to `sink.receive` and whose end to `sink.dropped`. */
export type Connect = (sink: Sink) => Promise<Link>;

export class StreamTransport implements Transport {
  readonly multiplexed = true;
  private link?: Link;
  private opening?: Promise<Link>;
  private closed = false;

  constructor(
    private readonly connect: Connect,
    private readonly sink: Sink,
  ) {}

  send(out: Outgoing, _message: Message, written: () => void): Promise<undefined> | undefined {
    if (this.link) return this.write(this.link, out, written);
    return this.open().then((link) => this.write(link, out, written));
  }

  private write(link: Link, out: Outgoing, written: () => void): undefined {
    if (this.closed) throw new NotSent("the client was closed");
    written();
    link.write(out);
    return undefined;
  }

  private open(): Promise<Link> {
    if (this.closed) return Promise.reject(new NotSent("the client was closed"));
    this.opening ??= this.connect({
      receive: (reply) => this.sink.receive(reply),
      dropped: (reason) => {
        this.link = undefined;
        this.sink.dropped(reason);
      },
    }).then(
      (link) => {
        this.opening = undefined;
        if (this.closed) link.close();
        return (this.link = link);
      },
      (error: unknown) => {
        // Calls waiting for this connection were never sent: the client retries them with backoff.
        this.opening = undefined;
        throw new NotSent(`cannot connect: ${(error as Error)?.message ?? error}`, { cause: error });
      },
    );
    return this.opening;
  }

  close(): void {
    this.closed = true;
    this.link?.close();
    this.link = undefined;
  }
}
