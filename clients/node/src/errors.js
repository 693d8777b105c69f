// What can go wrong talking to the daemon, as one error class per gRPC status, all under
// TooljailError. What the *model* did wrong is not here: a denied or failed call resolves to a
// result whose `isError` is set, with a decision that says why.

/** gRPC status codes by name (the numbers are the wire contract of gRPC itself). */
export const Status = Object.freeze({
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
});

const NAMES = Object.fromEntries(Object.entries(Status).map(([name, code]) => [code, name]));

/**
 * Any failure of a call to the daemon: the RPC itself, not the tool.
 *
 * `code` is the gRPC status code, `codeName` its name ("UNAVAILABLE"), `details` the daemon's
 * message, `metadata` the trailing metadata it sent (values are strings, or Buffers for `-bin`
 * keys).
 */
export class TooljailError extends Error {
  /** The status code this class stands for (the base class: UNKNOWN). */
  static code = Status.UNKNOWN;

  /**
   * @param {string} details What went wrong, as the daemon (or the client) said it.
   * @param {{code?: number, metadata?: Record<string, string | Buffer>, cause?: unknown}} [options]
   */
  constructor(details, { code, metadata = {}, cause } = {}) {
    const status = code ?? new.target.code;
    const name = NAMES[status] ?? `STATUS_${status}`;
    super(`${name}: ${details}`, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = status;
    this.codeName = name;
    this.details = details;
    this.metadata = metadata;
  }
}

/** The call was cancelled (by its AbortSignal, or the daemon cancelled it while closing). */
export class CancelledError extends TooljailError {
  static code = Status.CANCELLED;
}

/** The request was malformed: the details say what to fix. */
export class InvalidArgumentError extends TooljailError {
  static code = Status.INVALID_ARGUMENT;
}

/** The call's deadline (`timeoutMs`) passed before the answer came. */
export class DeadlineExceededError extends TooljailError {
  static code = Status.DEADLINE_EXCEEDED;
}

/** The session or approval does not exist, or is not the caller's. */
export class NotFoundError extends TooljailError {
  static code = Status.NOT_FOUND;
}

/** The caller may not do this (an Admin RPC without being an admin principal, for one). */
export class PermissionDeniedError extends TooljailError {
  static code = Status.PERMISSION_DENIED;
}

/** The daemon is at a limit (calls in flight, sessions, streams): retry later. */
export class ResourceExhaustedError extends TooljailError {
  static code = Status.RESOURCE_EXHAUSTED;
}

/** The daemon is not in a state to do this now. */
export class FailedPreconditionError extends TooljailError {
  static code = Status.FAILED_PRECONDITION;
}

/** The daemon does not implement this RPC (an older daemon than this client). */
export class UnimplementedError extends TooljailError {
  static code = Status.UNIMPLEMENTED;
}

/** The daemon failed, or answered against the contract (results out of order, for one). */
export class InternalError extends TooljailError {
  static code = Status.INTERNAL;
}

/**
 * The daemon could not be reached, is stopping, or its policy engine is down. `execute` retries
 * these with the same tool_use id, which a running daemon runs at most once.
 */
export class UnavailableError extends TooljailError {
  static code = Status.UNAVAILABLE;
}

/** No valid credentials: a bearer token or client certificate the daemon accepts is needed. */
export class UnauthenticatedError extends TooljailError {
  static code = Status.UNAUTHENTICATED;
}

const BY_CODE = new Map(
  [
    CancelledError,
    InvalidArgumentError,
    DeadlineExceededError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    FailedPreconditionError,
    UnimplementedError,
    InternalError,
    UnavailableError,
    UnauthenticatedError,
  ].map((cls) => [cls.code, cls]),
);

/**
 * The TooljailError (subclass picked by status code) for a failed gRPC call: anything with a
 * numeric `code` and `details`, as @grpc/grpc-js rejects with. Any other error is returned as
 * it is, and so is an error that already is a TooljailError.
 *
 * @param {unknown} error
 * @returns {unknown}
 */
export function fromGrpcError(error) {
  if (error instanceof TooljailError) return error;
  if (error === null || typeof error !== "object" || typeof error.code !== "number") return error;
  const cls = BY_CODE.get(error.code) ?? TooljailError;
  const details = error.details || error.message || NAMES[error.code] || "no details";
  const metadata = typeof error.metadata?.getMap === "function" ? error.metadata.getMap() : {};
  return new cls(details, { code: error.code, metadata, cause: error });
}
