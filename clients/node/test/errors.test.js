// gRPC statuses map to one error class each, under TooljailError.

import assert from "node:assert/strict";
import { test } from "node:test";

import grpc from "@grpc/grpc-js";

import {
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
} from "@tooljail/client";

// What @grpc/grpc-js rejects a call with.
function serviceError(code, details) {
  const metadata = new grpc.Metadata();
  metadata.set("x-tooljail-reason", "test");
  return Object.assign(new Error(`${code} ${grpc.status[code]}: ${details}`), {
    code,
    details,
    metadata,
  });
}

const CLASSES = [
  [grpc.status.CANCELLED, CancelledError],
  [grpc.status.INVALID_ARGUMENT, InvalidArgumentError],
  [grpc.status.DEADLINE_EXCEEDED, DeadlineExceededError],
  [grpc.status.NOT_FOUND, NotFoundError],
  [grpc.status.PERMISSION_DENIED, PermissionDeniedError],
  [grpc.status.RESOURCE_EXHAUSTED, ResourceExhaustedError],
  [grpc.status.FAILED_PRECONDITION, FailedPreconditionError],
  [grpc.status.UNIMPLEMENTED, UnimplementedError],
  [grpc.status.INTERNAL, InternalError],
  [grpc.status.UNAVAILABLE, UnavailableError],
  [grpc.status.UNAUTHENTICATED, UnauthenticatedError],
];

for (const [code, cls] of CLASSES) {
  test(`${grpc.status[code]} becomes ${cls.name}`, () => {
    const cause = serviceError(code, "what the daemon said");
    const error = fromGrpcError(cause);
    assert.ok(error instanceof cls);
    assert.ok(error instanceof TooljailError);
    assert.ok(error instanceof Error);
    assert.equal(error.name, cls.name);
    assert.equal(error.code, code);
    assert.equal(cls.code, code);
    assert.equal(error.codeName, grpc.status[code]);
    assert.equal(error.details, "what the daemon said");
    assert.equal(error.message, `${grpc.status[code]}: what the daemon said`);
    assert.deepEqual(error.metadata, { "x-tooljail-reason": "test" });
    assert.equal(error.cause, cause);
  });
}

test("our Status names agree with gRPC's", () => {
  for (const [name, code] of Object.entries(Status)) assert.equal(grpc.status[name], code);
});

test("a status without a class of its own is a plain TooljailError with its code", () => {
  const error = fromGrpcError(serviceError(grpc.status.ABORTED, "aborted"));
  assert.equal(error.constructor, TooljailError);
  assert.equal(error.code, grpc.status.ABORTED);
  assert.equal(error.codeName, "ABORTED");
});

test("anything that is not a gRPC error passes through unchanged", () => {
  const plain = new TypeError("not grpc");
  assert.equal(fromGrpcError(plain), plain);
  assert.equal(fromGrpcError("text"), "text");
  const already = new UnavailableError("down");
  assert.equal(fromGrpcError(already), already);
});

test("an error made by hand takes its class's code", () => {
  const error = new UnavailableError("the socket is gone");
  assert.equal(error.code, Status.UNAVAILABLE);
  assert.equal(error.message, "UNAVAILABLE: the socket is gone");
});
