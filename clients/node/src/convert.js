// The one place that knows proto-loader's message shapes: tool_use blocks to the wire, the
// daemon's answers to the plain objects the client hands out (index.d.ts describes them).

import { randomBytes } from "node:crypto";

import { fromStruct, toStruct } from "./struct.js";

const OUTCOMES = new Set(["ALLOW", "DENY", "ASK"]);

/**
 * A fresh tool_use id (`toolu_` and 24 hex digits). The daemon runs a given id at most once and
 * answers a resend with the first answer, so every new call needs a new id.
 *
 * @returns {string}
 */
export function newToolUseId() {
  return `toolu_${randomBytes(12).toString("hex")}`;
}

/**
 * A tool_use block as a plain {id, name, input}: the id kept (a fresh one when it has none),
 * the input an object (`{}` when it has none).
 *
 * @param {{id?: string, name: string, input?: unknown}} block
 * @returns {{id: string, name: string, input: Record<string, unknown>}}
 * @throws {TypeError} when the block has no name.
 */
export function toolUse(block) {
  if (!block || typeof block.name !== "string" || block.name === "") {
    throw new TypeError("a tool_use needs a name");
  }
  return {
    id: block.id ? String(block.id) : newToolUseId(),
    name: block.name,
    input: block.input ?? {},
  };
}

/**
 * The tool_use blocks among content blocks (an assistant message's `content`): blocks of another
 * type (text, thinking) are skipped; blocks without a type are taken as tool_use blocks.
 *
 * @param {Iterable<{type?: string, id?: string, name?: string, input?: unknown}>} blocks
 * @returns {Array<{id: string, name: string, input: Record<string, unknown>}>}
 */
export function toolUses(blocks) {
  const found = [];
  for (const block of blocks) {
    if (block?.type === undefined || block.type === "tool_use") found.push(toolUse(block));
  }
  return found;
}

/**
 * A filled-in tool_use as a ToolUse message (its input as a Struct).
 *
 * @param {{id: string, name: string, input: Record<string, unknown>}} use
 * @throws {TypeError} when the input is not an object of what JSON can carry.
 */
export function toolUseToWire(use) {
  return { id: use.id, name: use.name, input: toStruct(use.input) };
}

/**
 * The exact Anthropic Messages API `tool_result` block for a result, to put in the next user
 * message: `{type: "tool_result", tool_use_id, content, is_error}`, images as base64 sources.
 *
 * @param {{toolUseId: string, content: Array<object>, isError: boolean}} result
 * @returns {object}
 */
export function toToolResultBlock(result) {
  const content = result.content.map((block) =>
    block.type === "image"
      ? {
          type: "image",
          source: {
            type: "base64",
            media_type: block.mediaType,
            data: Buffer.from(block.data).toString("base64"),
          },
        }
      : { type: "text", text: block.text },
  );
  return {
    type: "tool_result",
    tool_use_id: result.toolUseId,
    content,
    is_error: result.isError,
  };
}

/**
 * The user message answering a turn's tool_use blocks: one tool_result block per result, in
 * the results' order.
 *
 * @param {Array<{toolUseId: string, content: Array<object>, isError: boolean}>} results
 * @returns {{role: "user", content: Array<object>}}
 */
export function toolResultMessage(results) {
  return { role: "user", content: results.map(toToolResultBlock) };
}

// --- from the wire ---------------------------------------------------------------------------

/** A ToolDefinition message as a plain ToolDefinition (its input schema a plain object). */
export function toolDefinitionFromWire(tool) {
  const traits = tool.traits ?? {};
  return {
    name: tool.name,
    description: tool.description,
    inputSchema: fromStruct(tool.inputSchema),
    traits: {
      readOnly: Boolean(traits.readOnly),
      destructive: Boolean(traits.destructive),
      concurrencySafe: Boolean(traits.concurrencySafe),
      sandboxed: Boolean(traits.sandboxed),
      maxResultChars: Number(traits.maxResultChars ?? 0),
    },
    deferLoading: Boolean(tool.deferLoading),
    aliases: [...(tool.aliases ?? [])],
    origin: {
      kind: tool.origin?.kind ?? "",
      server: tool.origin?.server ?? "",
      trusted: Boolean(tool.origin?.trusted),
    },
  };
}

/** A ContentBlock message as `{type: "text", text}` or `{type: "image", mediaType, data}`. */
export function contentFromWire(block) {
  if (block.image) {
    return {
      type: "image",
      mediaType: block.image.mediaType,
      data: Buffer.from(block.image.data ?? []),
    };
  }
  return { type: "text", text: block.text?.text ?? "" };
}

/** An ExecuteResponse message as a plain ExecuteResult (outcome "" when nothing was decided). */
export function resultFromWire(response) {
  const result = response.result ?? {};
  const content = (result.content ?? []).map(contentFromWire);
  const decision = response.decision ?? {};
  const report = response.report ?? {};
  return {
    toolUseId: result.toolUseId ?? "",
    content,
    isError: Boolean(result.isError),
    text: content.map((block) => (block.type === "text" ? block.text : "")).join(""),
    decision: {
      outcome: OUTCOMES.has(decision.outcome) ? decision.outcome : "",
      reasons: [...(decision.reasons ?? [])],
      decisionId: decision.decisionId ?? "",
      policyRevision: decision.policyRevision ?? "",
      approvalToken: decision.approvalToken ?? "",
    },
    report: {
      sandboxed: Boolean(report.sandboxed),
      sandboxId: report.sandboxId ?? "",
      exitCode: report.exitCode ?? 0,
      timedOut: Boolean(report.timedOut),
      oomKilled: Boolean(report.oomKilled),
      durationMs: Number(report.durationMs ?? 0),
      truncated: Boolean(report.truncated),
      originalChars: Number(report.originalChars ?? 0),
      replayed: Boolean(report.replayed),
      keptOutput: report.keptOutput ?? "",
    },
    summary: response.summary ?? "",
    systemMessages: [...(response.systemMessages ?? [])],
    toolResultJson: response.toolResultJson ?? "",
  };
}

/** A Progress message as a `{type: "progress"}` event. */
export function progressFromWire(progress) {
  return {
    type: "progress",
    toolUseId: progress.toolUseId ?? "",
    output: progress.output ?? "",
    filesScanned: Number(progress.filesScanned ?? 0),
    message: progress.message ?? "",
    droppedChunks: Number(progress.droppedChunks ?? 0),
  };
}

/** An ExecuteEvent as a StreamEvent, or null for a kind this client does not know. */
export function eventFromWire(event) {
  if (event.progress) return progressFromWire(event.progress);
  if (event.response) return { type: "result", result: resultFromWire(event.response) };
  if (event.batchEnd) {
    return {
      type: "batchEnd",
      additionalContext: [...(event.batchEnd.additionalContext ?? [])],
      systemMessages: [...(event.batchEnd.systemMessages ?? [])],
    };
  }
  return null;
}

/** A Session message as a plain Session. */
export function sessionFromWire(session) {
  return {
    id: session.id,
    workspace: session.workspace,
    idleTtlS: Number(session.idleTtlS ?? 0),
    mode: session.mode ?? "",
  };
}

/** A PendingApproval message as a plain PendingApproval. */
export function pendingApprovalFromWire(ask) {
  return {
    approvalId: ask.approvalId,
    principal: ask.principal ?? "",
    sessionId: ask.sessionId ?? "",
    toolUseId: ask.toolUseId ?? "",
    tool: ask.tool ?? "",
    inputJson: ask.inputJson ?? "",
    inputChars: Number(ask.inputChars ?? 0),
    reasons: [...(ask.reasons ?? [])],
    askedAt: Number(ask.askedAt ?? 0),
    expiresAt: Number(ask.expiresAt ?? 0),
    state: ask.state ?? "",
    decidedBy: ask.decidedBy ?? "",
    scope: ask.scope ?? "",
    note: ask.note ?? "",
  };
}

/** A StatusResponse message as a plain DaemonStatus. */
export function statusFromWire(status) {
  return {
    version: status.version ?? "",
    policyRevision: status.policyRevision ?? "",
    opaHealthy: Boolean(status.opaHealthy),
    dockerHealthy: Boolean(status.dockerHealthy),
    poolReady: status.poolReady ?? 0,
    inFlight: status.inFlight ?? 0,
    sessions: status.sessions ?? 0,
    instanceId: status.instanceId ?? "",
    principal: status.principal ?? "",
  };
}

/** A Grant message as a plain Grant. */
export function grantFromWire(grant) {
  return {
    tool: grant.tool ?? "",
    pattern: grant.pattern ?? "",
    approvedBy: grant.approvedBy ?? "",
    grantedAt: Number(grant.grantedAt ?? 0),
  };
}
