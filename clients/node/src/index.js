// @tooljail/client: run LLM agents' tool calls (Anthropic tool_use blocks) through a tooljail
// daemon over gRPC. index.d.ts holds the types and the documentation of every export.

/** This package's version, which is the wire contract's (proto/VERSION). */
export const VERSION = "1.0.0";
/** The protobuf package this client speaks. */
export const PROTOCOL = "tooljail.v1";

export { Client, DEFAULT_RETRIES, DEFAULT_TIMEOUT_MS, RETRY_PAUSE_MS } from "./client.js";
export { DEFAULT_TARGET, resolveConnection } from "./connection.js";
export {
  newToolUseId,
  toToolResultBlock,
  toolResultMessage,
  toolUse,
  toolUses,
} from "./convert.js";
export {
  CancelledError,
  DeadlineExceededError,
  FailedPreconditionError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  Status,
  TooljailError,
  UnauthenticatedError,
  UnavailableError,
  UnimplementedError,
  fromGrpcError,
} from "./errors.js";
export { PROTO_DIR } from "./proto.js";
