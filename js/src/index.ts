// SPDX-License-Identifier: Apache-2.0
// `@ucall/client`: a JSON-RPC 2.0 client for UCall servers, for Node 20+ and browsers.

export { Client, type Options } from "./client.js";
export {
  BaseClient,
  MAX_REPLY_SIZE,
  ReplyTooLarge,
  type CallOptions,
  type ClientOptions,
  type Methods,
  type Params,
  type Traceparent,
  type Transport,
} from "./base.js";
export { RpcError, ErrorCode, type Executed } from "./errors.js";
export { Stream, STREAMS_ITS_RESULT } from "./streamed.js";
export { toBase64, fromBase64 } from "./base64.js";
export { NdArray, toNdArray, type DType, type TypedArray } from "./ndarray.js";
export type { WebSocketConstructor, WebSocketLike } from "./ws.js";
