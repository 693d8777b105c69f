// The daemon's answers as plain objects, and the exact Anthropic blocks made from them.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  newToolUseId,
  toToolResultBlock,
  toolResultMessage,
  toolUse,
  toolUses,
} from "@tooljail/client";

import { eventFromWire, resultFromWire, toolDefinitionFromWire } from "../src/convert.js";
import { toStruct } from "../src/struct.js";

// An ExecuteResponse as @grpc/proto-loader decodes it (camelCase, enums as names, defaults set).
function wireResponse(overrides = {}) {
  return {
    result: {
      toolUseId: "toolu_abc",
      content: [
        { text: { text: "line one\n" }, kind: "text" },
        { text: { text: "line two" }, kind: "text" },
      ],
      isError: false,
    },
    decision: {
      outcome: "ALLOW",
      reasons: [],
      decisionId: "d1",
      policyRevision: "rev",
      approvalToken: "",
    },
    report: {
      sandboxed: true,
      sandboxId: "c1",
      exitCode: 0,
      timedOut: false,
      oomKilled: false,
      durationMs: 12,
      truncated: false,
      originalChars: 0,
      replayed: false,
      keptOutput: "",
    },
    toolResultJson: "",
    summary: "ran echo",
    systemMessages: [],
    ...overrides,
  };
}

test("a response becomes a plain result", () => {
  const result = resultFromWire(wireResponse());
  assert.equal(result.toolUseId, "toolu_abc");
  assert.equal(result.isError, false);
  assert.equal(result.text, "line one\nline two");
  assert.deepEqual(result.content, [
    { type: "text", text: "line one\n" },
    { type: "text", text: "line two" },
  ]);
  assert.equal(result.decision.outcome, "ALLOW");
  assert.equal(result.report.sandboxed, true);
  assert.equal(result.report.durationMs, 12);
  assert.equal(result.summary, "ran echo");
});

test('an undecided call (unknown tool, invalid input) has the outcome ""', () => {
  const response = wireResponse({
    decision: { outcome: "OUTCOME_UNSPECIFIED", reasons: ["no tool"] },
  });
  assert.equal(resultFromWire(response).decision.outcome, "");
});

test("toToolResultBlock is the exact Anthropic tool_result, key for key", () => {
  const png = Buffer.from([0x89, 0x50, 0x4e, 0x47]);
  const response = wireResponse({
    result: {
      toolUseId: "toolu_img",
      isError: false,
      content: [{ text: { text: "a picture:" } }, { image: { mediaType: "image/png", data: png } }],
    },
  });
  const block = toToolResultBlock(resultFromWire(response));
  assert.deepEqual(Object.keys(block), ["type", "tool_use_id", "content", "is_error"]);
  assert.deepEqual(block, {
    type: "tool_result",
    tool_use_id: "toolu_img",
    content: [
      { type: "text", text: "a picture:" },
      {
        type: "image",
        source: { type: "base64", media_type: "image/png", data: png.toString("base64") },
      },
    ],
    is_error: false,
  });
  assert.deepEqual(JSON.parse(JSON.stringify(block)), block, "plain JSON, no Buffers left");
});

test("an error result keeps is_error and its text", () => {
  const response = wireResponse({
    result: { toolUseId: "toolu_x", isError: true, content: [{ text: { text: "denied" } }] },
    decision: { outcome: "DENY", reasons: ["outside the workspace"] },
  });
  const block = toToolResultBlock(resultFromWire(response));
  assert.deepEqual(block, {
    type: "tool_result",
    tool_use_id: "toolu_x",
    content: [{ type: "text", text: "denied" }],
    is_error: true,
  });
});

test("toolResultMessage answers a turn in the results' order", () => {
  const a = resultFromWire(
    wireResponse({ result: { toolUseId: "a", content: [], isError: false } }),
  );
  const b = resultFromWire(
    wireResponse({ result: { toolUseId: "b", content: [], isError: true } }),
  );
  const message = toolResultMessage([a, b]);
  assert.equal(message.role, "user");
  assert.deepEqual(
    message.content.map((block) => block.tool_use_id),
    ["a", "b"],
  );
});

test("progress and result events", () => {
  const progress = eventFromWire({
    progress: { toolUseId: "t", output: "line 1\n", filesScanned: 0 },
    kind: "progress",
  });
  assert.deepEqual(progress, {
    type: "progress",
    toolUseId: "t",
    output: "line 1\n",
    filesScanned: 0,
    message: "",
    droppedChunks: 0,
  });
  const result = eventFromWire({ response: wireResponse(), kind: "response" });
  assert.equal(result.type, "result");
  assert.equal(result.result.toolUseId, "toolu_abc");
  assert.equal(eventFromWire({}), null);
});

test("a tool definition's schema is a plain object", () => {
  const schema = {
    type: "object",
    properties: { file_path: { type: "string" } },
    required: ["file_path"],
  };
  const tool = toolDefinitionFromWire({
    name: "Read",
    description: "Reads a file",
    inputSchema: toStruct(schema),
    traits: { readOnly: true, concurrencySafe: true, maxResultChars: 100000 },
    aliases: [],
    origin: { kind: "builtin", trusted: true },
  });
  assert.deepEqual(tool.inputSchema, schema);
  assert.equal(tool.traits.readOnly, true);
  assert.equal(tool.traits.sandboxed, false);
  assert.equal(tool.origin.kind, "builtin");
});

test("newToolUseId makes distinct toolu_ ids", () => {
  const ids = new Set(Array.from({ length: 1000 }, newToolUseId));
  assert.equal(ids.size, 1000);
  for (const id of ids) assert.match(id, /^toolu_[0-9a-f]{24}$/);
});

test("toolUse fills in an id and an input; toolUses skips other blocks", () => {
  const filled = toolUse({ name: "LS" });
  assert.match(filled.id, /^toolu_/);
  assert.deepEqual(filled.input, {});
  assert.deepEqual(toolUse({ id: "toolu_keep", name: "Read", input: { file_path: "/a" } }), {
    id: "toolu_keep",
    name: "Read",
    input: { file_path: "/a" },
  });
  assert.throws(() => toolUse({ id: "x" }), /needs a name/);
  const content = [
    { type: "text", text: "Let me look." },
    { type: "tool_use", id: "toolu_1", name: "Read", input: { file_path: "/a" } },
    { type: "thinking", thinking: "..." },
    { type: "tool_use", id: "toolu_2", name: "LS", input: { path: "/" } },
  ];
  assert.deepEqual(
    toolUses(content).map((use) => use.id),
    ["toolu_1", "toolu_2"],
  );
});
