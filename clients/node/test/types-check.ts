// Type-checked (never run) by `npm test` through `tsc -p tsconfig.json`: uses the package by its
// own name, as TypeScript code that depends on it does, so index.d.ts and the exports map are
// exercised. `@ts-expect-error` lines are mistakes the types must catch.

import {
  Client,
  DEFAULT_TARGET,
  InvalidArgumentError,
  PROTOCOL,
  TooljailError,
  UnavailableError,
  VERSION,
  newToolUseId,
  resolveConnection,
  toToolResultBlock,
  toolResultMessage,
  type AbortSignalLike,
  type AnthropicTool,
  type ExecuteResult,
  type Outcome,
  type StreamEvent,
  type ToolResultBlock,
  type ToolUseBlock,
} from "@tooljail/client";

// A minimal stand-in for the Anthropic SDK's message shapes.
type AssistantContent = Array<
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }
>;

export async function agentTurn(
  content: AssistantContent,
): Promise<{ role: "user"; content: ToolResultBlock[] }> {
  const jail = new Client({ target: DEFAULT_TARGET, timeoutMs: 60_000 });
  try {
    const session = await jail.openSession({ mode: "default" });
    const tools: AnthropicTool[] = await jail.anthropicTools({ sessionId: session.id });
    const names: string[] = tools.map((tool) => tool.name);
    void names;
    const results: ExecuteResult[] = await jail.executeBatch(content, { sessionId: session.id });
    await jail.closeSession(session.id, { deleteWorkspace: true });
    return toolResultMessage(results);
  } finally {
    jail.close();
  }
}

export async function oneCall(): Promise<string> {
  const jail = Client.fromEnv(undefined, { timeoutMs: 0 });
  const use: ToolUseBlock = { id: newToolUseId(), name: "Bash", input: { command: "echo hi" } };
  let result = await jail.execute(use, { retries: 0 });
  const outcome: Outcome = result.decision.outcome;
  if (outcome === "ASK") {
    const [ask] = await jail.listPendingApprovals();
    if (ask) await jail.approve(ask.approvalId, { scope: "once", note: "looked fine" });
    result = await jail.execute(use, { approvalToken: result.decision.approvalToken });
  }
  const block = toToolResultBlock(result);
  const first = block.content[0];
  if (first?.type === "image") return first.source.media_type;
  const exit: number = result.report.exitCode;
  const replayed: boolean = result.report.replayed;
  return `${block.tool_use_id} ${block.is_error} ${exit} ${replayed} ${result.text}`;
}

export async function streamed(signal: AbortSignalLike): Promise<number> {
  const jail = new Client({ tls: { ca: "/etc/tooljail/ca.pem" }, token: "t" });
  let chunks = 0;
  for await (const event of jail.stream({ name: "Bash", input: { command: "ls" } }, { signal })) {
    const e: StreamEvent = event;
    if (e.type === "progress") chunks += e.output.length;
    else if (e.type === "result") chunks += e.result.report.durationMs;
  }
  return chunks;
}

export async function errors(jail: Client): Promise<string> {
  try {
    const status = await jail.status();
    return `${status.version} ${status.opaHealthy}`;
  } catch (error) {
    if (error instanceof UnavailableError) return `retry later: ${error.details}`;
    if (error instanceof InvalidArgumentError) return error.codeName;
    if (error instanceof TooljailError) return `${error.code} ${error.message}`;
    throw error;
  }
}

export const facts: string = `${VERSION} ${PROTOCOL} ${resolveConnection({}, {}).target}`;

// Mistakes the types catch.
// @ts-expect-error -- outcomes are upper case, as in the proto
export const lower: Outcome = "allow";
// @ts-expect-error -- a tool_use needs a name
export const nameless: ToolUseBlock = { id: "toolu_1", input: {} };
export async function wrongOptions(jail: Client): Promise<void> {
  // @ts-expect-error -- retries is a number
  await jail.execute({ name: "Read" }, { retries: "3" });
  // @ts-expect-error -- setSessionMode takes a known mode
  await jail.setSessionMode("s", "yolo");
}
