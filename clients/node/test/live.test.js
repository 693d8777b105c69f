// Against a real daemon (TOOLJAIL_TARGET): Read runs on the host, Bash in a Docker sandbox, the
// default policy decides. Skipped without TOOLJAIL_TARGET; see live-env.js for the variables.

import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";

import {
  Client,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  newToolUseId,
  toToolResultBlock,
  toolResultMessage,
} from "@tooljail/client";

import { env, liveSkip } from "./live-env.js";

const skip = liveSkip("live tests", [
  "TOOLJAIL_TARGET",
  "TOOLJAIL_TEST_WORKSPACE",
  "TOOLJAIL_TEST_MARKER",
]);
const workspace = env.TOOLJAIL_TEST_WORKSPACE ?? "";
const note = path.join(workspace, "note.txt");

// Throws unless the call was allowed and succeeded, saying what came back instead.
function assertRan(result, what) {
  assert.equal(result.decision.outcome, "ALLOW", `${what}: ${result.decision.reasons.join("; ")}`);
  assert.equal(result.isError, false, `${what}: ${result.text}`);
}

describe("a live daemon", { skip, timeout: 120_000 }, () => {
  let jail;
  before(() => {
    jail = new Client({ timeoutMs: 60_000 }); // TOOLJAIL_TARGET, TOOLJAIL_TOKEN
  });
  after(() => jail?.close());

  it("lists Read and Bash, with plain JSON Schemas and the Messages API shape", async () => {
    const tools = await jail.listTools();
    const byName = new Map(tools.map((tool) => [tool.name, tool]));
    assert.ok(byName.has("Read") && byName.has("Bash"), [...byName.keys()].join(", "));
    const read = byName.get("Read");
    assert.equal(read.inputSchema.type, "object");
    assert.equal(read.inputSchema.properties.file_path.type, "string");
    assert.equal(read.traits.readOnly, true);
    assert.equal(read.traits.sandboxed, false);
    assert.equal(byName.get("Bash").traits.sandboxed, true);

    const anthropic = await jail.anthropicTools();
    assert.deepEqual(
      anthropic.map((tool) => tool.name),
      tools.map((tool) => tool.name),
    );
    for (const tool of anthropic) {
      assert.deepEqual(Object.keys(tool).slice(0, 3), ["name", "description", "input_schema"]);
      assert.equal(tool.input_schema.type, "object");
    }
    assert.deepEqual(anthropic.find((tool) => tool.name === "Read").input_schema, read.inputSchema);
  });

  it("Reads a workspace file on the host", async () => {
    const result = await jail.execute({
      type: "tool_use",
      id: newToolUseId(),
      name: "Read",
      input: { file_path: note },
    });
    assertRan(result, "Read note.txt");
    assert.ok(result.text.includes(env.TOOLJAIL_TEST_MARKER), result.text);
    assert.match(result.text, /^ {5}1\t/, "cat -n numbering");
    assert.equal(result.report.sandboxed, false);
    assert.equal(result.report.replayed, false);
    // The block made here is the daemon's own tool_result, key for key.
    assert.deepEqual(toToolResultBlock(result), JSON.parse(result.toolResultJson));
  });

  it("streams a sandboxed Bash command's output before its result", async () => {
    const use = {
      id: newToolUseId(),
      name: "Bash",
      input: { command: "for i in 1 2 3; do echo line $i; sleep 0.3; done" },
    };
    const events = [];
    for await (const event of jail.stream(use)) events.push(event);
    const last = events.at(-1);
    assert.equal(last?.type, "result", JSON.stringify(events));
    assert.equal(events.filter((event) => event.type === "result").length, 1);
    const progress = events.filter((event) => event.type === "progress");
    assert.ok(progress.length >= 1, "at least one progress event before the result");
    assert.ok(progress.every((event) => event.toolUseId === use.id));
    assert.match(progress.map((event) => event.output).join(""), /line 1/);
    assertRan(last.result, "the streamed Bash");
    assert.equal(last.result.report.sandboxed, true);
    assert.equal(last.result.report.exitCode, 0);
    assert.equal(last.result.text, "line 1\nline 2\nline 3\n");
  });

  it("answers a batch in request order, skipping the turn's other blocks", async () => {
    const content = [
      { type: "text", text: "Three calls:" },
      {
        type: "tool_use",
        id: newToolUseId(),
        name: "Bash",
        input: { command: "sleep 0.5; echo batch one" },
      },
      { type: "tool_use", id: newToolUseId(), name: "Read", input: { file_path: note } },
      { type: "tool_use", id: newToolUseId(), name: "LS", input: { path: workspace } },
    ];
    const results = await jail.executeBatch(content);
    assert.deepEqual(
      results.map((result) => result.toolUseId),
      content.slice(1).map((block) => block.id),
    );
    for (const result of results) assertRan(result, result.toolUseId);
    assert.equal(results[0].text.trim(), "batch one");
    assert.equal(results[0].report.sandboxed, true);
    assert.ok(results[1].text.includes(env.TOOLJAIL_TEST_MARKER));
    assert.match(results[2].text, /note\.txt/);
    const message = toolResultMessage(results);
    assert.deepEqual(
      message.content.map((block) => block.tool_use_id),
      content.slice(1).map((block) => block.id),
    );
  });

  it("runs an ASKed call once it is approved and sent again with its token", async () => {
    const use = {
      id: newToolUseId(),
      name: "Bash",
      input: { command: "git push --force origin main" },
    };
    const asked = await jail.execute(use);
    assert.equal(asked.decision.outcome, "ASK", asked.text);
    assert.ok(asked.decision.approvalToken, "an ASK carries an approval token");
    assert.equal(asked.isError, true, "the model is told it did not run");
    assert.match(asked.decision.reasons.join(" "), /force push/);

    // The caller on the Unix socket may answer its own asks (the default policy's self_approve).
    const pending = (await jail.listPendingApprovals()).find((ask) => ask.toolUseId === use.id);
    assert.ok(pending, "the ask waits for a person");
    assert.equal(pending.tool, "Bash");
    assert.equal(JSON.parse(pending.inputJson).command, use.input.command);
    const approved = await jail.approve(pending.approvalId, { note: "node client test" });
    assert.equal(approved.state, "approved");

    const ran = await jail.execute(use, { approvalToken: asked.decision.approvalToken });
    assert.equal(ran.decision.outcome, "ALLOW", ran.decision.reasons.join("; "));
    assert.equal(ran.toolUseId, use.id);
    assert.equal(ran.report.sandboxed, true, "it ran, in the sandbox");
    assert.notEqual(ran.report.exitCode, 0, "no git repository in the workspace: the push fails");
  });

  it("answers a call the policy denies with an is_error result, not an exception", async () => {
    for (const [input, name, reason] of [
      [{ file_path: "/etc/passwd" }, "Read", /outside the workspace/],
      [{ command: "sudo id" }, "Bash", /sudo/],
    ]) {
      const result = await jail.execute({ name, input });
      assert.equal(result.decision.outcome, "DENY", `${name}: ${result.text}`);
      assert.equal(result.isError, true);
      assert.match(result.decision.reasons.join(" "), reason);
      assert.match(result.text, /denied by policy/);
      assert.equal(result.report.sandboxed, false, "nothing ran");
      assert.equal(toToolResultBlock(result).is_error, true);
    }
  });

  it("opens a session, runs a call in its workspace, and closes it", async () => {
    const session = await jail.openSession();
    assert.match(session.id, /\S/);
    assert.ok(path.isAbsolute(session.workspace), session.workspace);
    try {
      const result = await jail.execute(
        { name: "Bash", input: { command: "pwd; echo in the session > s.txt" } },
        { sessionId: session.id },
      );
      assertRan(result, "Bash in the session");
      assert.equal(result.text.trim(), session.workspace);
      const read = await jail.execute(
        { name: "Read", input: { file_path: path.join(session.workspace, "s.txt") } },
        { sessionId: session.id },
      );
      assertRan(read, "Read in the session");
      assert.match(read.text, /in the session/);
      const tools = await jail.listTools({ sessionId: session.id });
      assert.ok(tools.some((tool) => tool.name === "Bash"));
    } finally {
      const closed = await jail.closeSession(session.id, { deleteWorkspace: true });
      assert.equal(closed.cancelledCalls, 0);
      assert.equal(closed.workspaceDeleted, true);
    }
    await assert.rejects(
      jail.execute({ name: "LS", input: { path: session.workspace } }, { sessionId: session.id }),
      NotFoundError,
    );
  });

  it("maps the daemon's statuses to error classes", async () => {
    // The same tool_use id with another input is a request error, never a second run.
    const id = newToolUseId();
    assertRan(
      await jail.execute({ id, name: "Bash", input: { command: "echo first" } }),
      "the first use of an id",
    );
    await assert.rejects(
      jail.execute({ id, name: "Bash", input: { command: "echo second" } }),
      (error) => {
        assert.ok(error instanceof InvalidArgumentError, String(error));
        assert.equal(error.codeName, "INVALID_ARGUMENT");
        assert.match(error.details, /already used/);
        return true;
      },
    );
    // Admin RPCs are for admin principals: either answered, or PERMISSION_DENIED.
    try {
      const status = await jail.status();
      assert.equal(status.opaHealthy, true);
      assert.equal(status.dockerHealthy, true);
      assert.match(status.version, /\S/);
    } catch (error) {
      assert.ok(error instanceof PermissionDeniedError, String(error));
    }
  });

  it("answers a resent tool_use from memory", async () => {
    const use = { id: newToolUseId(), name: "Bash", input: { command: "echo once" } };
    const first = await jail.execute(use);
    const again = await jail.execute(use);
    assert.equal(first.report.replayed, false);
    assert.equal(again.report.replayed, true);
    assert.equal(again.text, first.text);
  });
});
