// Calls a running tooljail daemon through @tooljail/client (clients/node): lists the tools, runs
// a Read, a Bash command, a batch of three calls, and goes through a policy ASK with an approval
// token.
//
// It prints one "OK <step> ..." line per step and exits 1 with a "FAIL <step>: ..." line on the
// first unexpected answer, so it doubles as an interoperability check (scripts/interop.sh runs it).
//
//   node client.js --target unix:///run/tooljail/tooljail.sock --read /path/in/workspace/file.txt

import path from "node:path";
import { parseArgs } from "node:util";

import { Client, DEFAULT_TARGET, newToolUseId } from "@tooljail/client";

// A tool_use block the way a model emits it: a fresh id, a tool name, a JSON object input.
function toolUse(name, input) {
  return { type: "tool_use", id: newToolUseId(), name, input };
}

function firstLine(s) {
  return s.trim().split("\n", 1)[0];
}

// Throws unless the call was allowed and succeeded; the message says what came back instead.
function expectAllowed(result, what) {
  const { outcome, reasons } = result.decision;
  if (outcome !== "ALLOW") {
    throw new Error(
      `${what}: decision ${outcome}, want ALLOW; reasons: ${JSON.stringify(reasons)}`,
    );
  }
  if (result.isError) {
    throw new Error(`${what}: tool_result is an error: ${firstLine(result.text)}`);
  }
}

async function listTools(jail) {
  const tools = await jail.listTools();
  const names = tools.map((tool) => tool.name);
  for (const want of ["Read", "Bash"]) {
    if (!names.includes(want)) {
      throw new Error(`tool ${want} missing from ListTools: got ${names.join(", ")}`);
    }
  }
  // Input schemas arrive as plain JSON Schema objects.
  const readSchema = tools[names.indexOf("Read")].inputSchema;
  if (!readSchema.properties?.file_path) {
    throw new Error(`Read's input_schema has no file_path: ${JSON.stringify(readSchema)}`);
  }
  console.log(`OK listtools ${names.length} tools: ${names.join(", ")}`);
}

async function read(jail, filePath, expect) {
  const result = await jail.execute(toolUse("Read", { file_path: filePath }));
  expectAllowed(result, `Read ${filePath}`);
  if (!result.text.includes(expect)) {
    throw new Error(
      `Read ${filePath}: result does not contain ${JSON.stringify(expect)}:\n${result.text}`,
    );
  }
  const first = JSON.stringify(firstLine(result.text));
  console.log(`OK read ${filePath}: ${result.text.length} chars, first line ${first}`);
}

async function bash(jail) {
  const result = await jail.execute(toolUse("Bash", { command: "echo hello from node" }));
  expectAllowed(result, "Bash echo");
  const got = result.text.trim();
  if (got !== "hello from node") {
    throw new Error(`Bash echo: got ${JSON.stringify(got)}, want "hello from node"`);
  }
  const { sandboxed, exitCode, durationMs } = result.report;
  console.log(`OK bash "${got}" (sandboxed=${sandboxed}, exit ${exitCode}, ${durationMs} ms)`);
}

// The tool_use blocks of one assistant turn; the client checks that results come in request order.
async function batch(jail, filePath) {
  const toolUses = [
    toolUse("Bash", { command: "echo batch one" }),
    toolUse("Read", { file_path: filePath }),
    toolUse("LS", { path: path.dirname(filePath) }),
  ];
  const results = await jail.executeBatch(toolUses);
  for (const [index, result] of results.entries()) {
    const { name, id } = toolUses[index];
    expectAllowed(result, `result ${index + 1} (${name})`);
    console.log(
      `OK batch ${index + 1}/${toolUses.length} ${name} ${id}: ${JSON.stringify(firstLine(result.text))}`,
    );
  }
}

// A call the policy wants a person to approve, then the same tool_use (same id, same input) again
// with the approval token, as a client does once the person said yes. A caller on the Unix socket
// may approve its own call, so no separate approve step is needed here.
async function askThenApprove(jail) {
  const use = toolUse("Bash", { command: "git push --force origin main" });
  const first = await jail.execute(use);
  const { outcome, reasons, approvalToken } = first.decision;
  if (outcome !== "ASK") {
    throw new Error(
      `force push: decision ${outcome}, want ASK; reasons: ${JSON.stringify(reasons)}`,
    );
  }
  if (!approvalToken) {
    throw new Error("force push: decision ASK came without an approval_token");
  }
  console.log(
    `OK ask ${use.id}: ASK with an approval token; reason: ${firstLine(reasons.join("; "))}`,
  );

  const second = await jail.execute(use, { approvalToken });
  if (second.decision.outcome !== "ALLOW") {
    throw new Error(
      `approved force push: decision ${second.decision.outcome}, want ALLOW; ` +
        `reasons: ${JSON.stringify(second.decision.reasons)}`,
    );
  }
  // With no git repository in the workspace the push fails: what matters is that it ran.
  const { sandboxed, exitCode } = second.report;
  const line = JSON.stringify(firstLine(second.text));
  console.log(
    `OK approve ${use.id}: ALLOW, ran (sandboxed=${sandboxed}, exit ${exitCode}): ${line}`,
  );
}

async function main() {
  const { values } = parseArgs({
    options: {
      target: { type: "string", default: process.env.TOOLJAIL_TARGET || DEFAULT_TARGET },
      read: { type: "string", default: process.env.TOOLJAIL_READ_FILE || "" },
      expect: { type: "string", default: "" },
      "timeout-ms": { type: "string", default: "120000" },
    },
  });
  if (!values.read) {
    console.error("FAIL usage: give --read /absolute/path/of/a/file/in/the/workspace");
    return 2;
  }
  // Each call gets its own deadline, so a stuck daemon fails one step instead of hanging.
  const jail = new Client({ target: values.target, timeoutMs: Number(values["timeout-ms"]) });
  const steps = [
    ["listtools", () => listTools(jail)],
    ["read", () => read(jail, values.read, values.expect)],
    ["bash", () => bash(jail)],
    ["batch", () => batch(jail, values.read)],
    ["ask", () => askThenApprove(jail)],
  ];
  try {
    for (const [name, run] of steps) {
      try {
        await run();
      } catch (error) {
        // A TooljailError's message starts with the gRPC status ("UNAVAILABLE: ...").
        console.error(`FAIL ${name}: ${error.message}`);
        return 1;
      }
    }
  } finally {
    jail.close();
  }
  console.log(`PASS node client: ${steps.length} steps against ${values.target}`);
  return 0;
}

process.exitCode = await main();
