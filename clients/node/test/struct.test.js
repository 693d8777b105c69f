// google.protobuf.Struct conversion, checked against the real protobuf codec: what the client
// sends must come back from the wire as the same JSON.

import assert from "node:assert/strict";
import { test } from "node:test";

import protoLoader from "@grpc/proto-loader";

import { PROTO_DIR } from "../src/proto.js";
import { fromStruct, fromValue, toStruct, toValue } from "../src/struct.js";

const LOADER = {
  includeDirs: [PROTO_DIR],
  enums: String,
  longs: Number,
  defaults: true,
  oneofs: true,
};
const ToolUse = protoLoader.loadSync("tooljail/v1/executor.proto", LOADER)["tooljail.v1.ToolUse"];

// Encodes and decodes a tool_use through protobuf, as a call to the daemon and back would.
function roundTrip(input) {
  const bytes = ToolUse.serialize({ id: "toolu_1", name: "Bash", input: toStruct(input) });
  return fromStruct(ToolUse.deserialize(bytes).input);
}

test("a nested JSON object survives the wire unchanged", () => {
  const input = {
    command: "ls -la",
    timeout: 120000,
    ratio: 0.25,
    negative: -3,
    run_in_background: false,
    yes: true,
    nothing: null,
    empty: "",
    zero: 0,
    list: [1, "two", false, null, { three: [3] }, []],
    nested: { deeper: { deepest: "x" }, empty: {} },
    unicode: "é ✓ 🚀 \u0000",
  };
  assert.deepEqual(roundTrip(input), input);
});

test("an empty input is an empty object", () => {
  assert.deepEqual(roundTrip({}), {});
  assert.deepEqual(fromStruct(undefined), {});
  assert.deepEqual(fromStruct(null), {});
});

test("undefined properties are left out and toJSON is used, as JSON.stringify does", () => {
  const when = new Date("2025-01-02T03:04:05Z");
  const input = { gone: undefined, when, list: [undefined, 1] };
  assert.deepEqual(roundTrip(input), JSON.parse(JSON.stringify(input)));
});

test("values JSON cannot carry are refused, not sent as something else", () => {
  assert.throws(() => toStruct({ n: Number.NaN }), TypeError);
  assert.throws(() => toStruct({ n: Infinity }), /finite/);
  assert.throws(() => toStruct({ n: 10n }), /bigint/);
  assert.throws(() => toStruct({ f() {} }), /function/);
  assert.throws(() => toStruct({ s: Symbol("s") }), /symbol/);
});

test("a Struct is made from an object only", () => {
  assert.throws(() => toStruct([1, 2]), /an array/);
  assert.throws(() => toStruct("text"), /a string/);
  assert.throws(() => toStruct(null), /null/);
});

test("a Value built by hand (no oneof field name) converts too", () => {
  assert.equal(fromValue({ stringValue: "a" }), "a");
  assert.equal(fromValue({ numberValue: 0 }), 0);
  assert.equal(fromValue({ boolValue: false }), false);
  assert.equal(fromValue({ nullValue: "NULL_VALUE" }), null);
  assert.equal(fromValue(undefined), null);
  assert.deepEqual(fromValue(toValue({ a: [1] })), { a: [1] });
});
