// SPDX-License-Identifier: Apache-2.0
/**
 * Whether a failed call may have run on the server:
 * - `"no"`: it cannot have run (never sent, refused before running, or the server said
 *   `executed: false`); such a call is safe to send again;
 * - `"maybe"`: it was sent and no answer came (connection lost, time-out, abort);
 * - `"yes"`: the server ran it and answered with this error.
 */
export type Executed = "no" | "maybe" | "yes";

/** Codes of failures found by the client itself, outside JSON-RPC's reserved range. */
export const ErrorCode = {
  /** The connection failed or closed before the reply came. */
  Connection: -1,
  /** The call's time-out passed. */
  Timeout: -2,
  /** The call's AbortSignal fired. */
  Aborted: -3,
  /** The reply was not a JSON-RPC reply to this call. */
  BadReply: -4,
  /** The client was closed. */
  Closed: -5,
} as const;

/** A call that failed: a JSON-RPC error object from the server, or a failure on the way. */
export class RpcError extends Error {
  readonly code: number;
  readonly data: unknown;
  readonly executed: Executed;

  constructor(code: number, message: string, data?: unknown, executed: Executed = "yes", cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "RpcError";
    this.code = code;
    this.data = data;
    this.executed = executed;
  }
}

/** JSON-RPC 2.0 §5.1: these codes say the request was refused before any procedure ran. */
const REFUSED = [-32700, -32600, -32601, -32602];

/** The error a server's error object stands for. */
export function fromErrorObject(error: unknown): RpcError {
  const e = (error ?? {}) as { code?: unknown; message?: unknown; data?: unknown };
  const code = typeof e.code === "number" ? e.code : ErrorCode.BadReply;
  const data = e.data as { executed?: unknown } | undefined;
  const notRun = REFUSED.includes(code) || (data !== null && typeof data === "object" && data.executed === false);
  return new RpcError(code, typeof e.message === "string" ? e.message : "error", e.data, notRun ? "no" : "yes");
}

/** The server said so: sending the call again is safe and may succeed (overload, draining). */
export function isRetryable(error: RpcError): boolean {
  const data = error.data as { executed?: unknown } | null | undefined;
  return error.executed === "no" && (error.code === ErrorCode.Connection || (typeof data === "object" && data !== null && data.executed === false));
}
