// Calls a running tooljail daemon from Node.js: lists the tools, executes a Read, a Bash command, a
// batch of three calls, and goes through a policy ASK with an approval token.
//
// The .proto is loaded at run time from the repository's proto/ folder: no generated code. It prints
// one "OK <step> ..." line per step and exits 1 with a "FAIL <step>: ..." line on the first unexpected
// answer, so it doubles as an interoperability check (scripts/interop.sh runs it).
//
//   node client.js --target unix:///run/tooljail/tooljail.sock --read /path/in/workspace/file.txt

import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs, promisify } from "node:util";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

import { fromValue, toStruct } from "./struct.js";

const PROTO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../proto");
const DEFAULT_TARGET = "unix:///run/tooljail/tooljail.sock";

function loadExecutor() {
  const definition = protoLoader.loadSync("tooljail/v1/executor.proto", {
    includeDirs: [PROTO_ROOT],
    // Enums as their names ("ASK") and unset fields as their defaults (is_error: false).
    enums: String,
    longs: Number,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).tooljail.v1.Executor;
}

class Client {
  constructor(target, timeoutMs) {
    // The daemon listens on a local socket without TLS; a remote daemon would take TLS credentials.
    const Executor = loadExecutor();
    this.stub = new Executor(target, grpc.credentials.createInsecure());
    this.timeoutMs = timeoutMs;
    // The daemon remembers answers by tool_use id: ids must be unique across runs.
    this.runId = `${Date.now().toString(16)}${process.pid.toString(16)}`;
    this.calls = 0;
  }

  // Each call gets its own deadline, so a stuck daemon fails one step instead of hanging.
  options() {
    return { deadline: new Date(Date.now() + this.timeoutMs) };
  }

  unary(method, request) {
    return promisify(this.stub[method].bind(this.stub))(request, this.options());
  }

  // A tool_use block the way a model emits it: an id, a tool name, a JSON object input.
  toolUse(name, input) {
    this.calls += 1;
    return { id: `toolu_node_${this.runId}_${this.calls}`, name, input: toStruct(input) };
  }

  execute(toolUse, approvalToken = "") {
    return this.unary("execute", { toolUse, approvalToken });
  }

  close() {
    this.stub.close();
  }
}

// The text blocks of a tool_result, joined (image blocks are left out).
function text(result) {
  return result.content.map((block) => block.text?.text ?? "").join("");
}

function firstLine(s) {
  return s.trim().split("\n", 1)[0];
}

// Throws unless the call was allowed and succeeded; the message says what came back instead.
function expectAllowed(response, what) {
  const { outcome, reasons } = response.decision;
  if (outcome !== "ALLOW") {
    throw new Error(`${what}: decision ${outcome}, want ALLOW; reasons: ${JSON.stringify(reasons)}`);
  }
  if (response.result.isError) {
    throw new Error(`${what}: tool_result is an error: ${firstLine(text(response.result))}`);
  }
}

async function listTools(client) {
  const response = await client.unary("listTools", {});
  const names = response.tools.map((tool) => tool.name);
  for (const want of ["Read", "Bash"]) {
    if (!names.includes(want)) {
      throw new Error(`tool ${want} missing from ListTools: got ${names.join(", ")}`);
    }
  }
  // Each input_schema arrives as a google.protobuf.Struct; this is how it turns back into JSON.
  const readSchema = fromValue({ structValue: response.tools[names.indexOf("Read")].inputSchema });
  if (!readSchema.properties?.file_path) {
    throw new Error(`Read's input_schema has no file_path: ${JSON.stringify(readSchema)}`);
  }
  console.log(`OK listtools ${names.length} tools: ${names.join(", ")}`);
}

async function read(client, filePath, expect) {
  const response = await client.execute(client.toolUse("Read", { file_path: filePath }));
  expectAllowed(response, `Read ${filePath}`);
  const got = text(response.result);
  if (!got.includes(expect)) {
    throw new Error(`Read ${filePath}: result does not contain ${JSON.stringify(expect)}:\n${got}`);
  }
  console.log(`OK read ${filePath}: ${got.length} chars, first line ${JSON.stringify(firstLine(got))}`);
}

async function bash(client) {
  const response = await client.execute(client.toolUse("Bash", { command: "echo hello from node" }));
  expectAllowed(response, "Bash echo");
  const got = text(response.result).trim();
  if (got !== "hello from node") {
    throw new Error(`Bash echo: got ${JSON.stringify(got)}, want "hello from node"`);
  }
  const { sandboxed, exitCode, durationMs } = response.report;
  console.log(`OK bash "${got}" (sandboxed=${sandboxed}, exit ${exitCode}, ${durationMs} ms)`);
}

// The tool_use blocks of one assistant turn; results stream back in request order.
async function batch(client, filePath) {
  const toolUses = [
    client.toolUse("Bash", { command: "echo batch one" }),
    client.toolUse("Read", { file_path: filePath }),
    client.toolUse("LS", { path: path.dirname(filePath) }),
  ];
  const stream = client.stub.executeBatch({ toolUses }, client.options());
  let index = 0;
  for await (const response of stream) {
    const want = toolUses[index];
    if (!want) {
      throw new Error(`ExecuteBatch sent more results than the ${toolUses.length} calls`);
    }
    index += 1;
    if (response.result.toolUseId !== want.id) {
      throw new Error(
        `result ${index} answers ${response.result.toolUseId}, want ${want.id}: ` +
          "results must come in request order",
      );
    }
    expectAllowed(response, `result ${index} (${want.name})`);
    const line = JSON.stringify(firstLine(text(response.result)));
    console.log(`OK batch ${index}/${toolUses.length} ${want.name} ${want.id}: ${line}`);
  }
  if (index !== toolUses.length) {
    throw new Error(`ExecuteBatch ended after ${index} of ${toolUses.length} results`);
  }
}

// A call the policy wants a person to approve, then the same tool_use (same id, same input) again
// with the approval token, as a client does once the person said yes.
async function askThenApprove(client) {
  const toolUse = client.toolUse("Bash", { command: "git push --force origin main" });
  const first = await client.execute(toolUse);
  const { outcome, reasons, approvalToken } = first.decision;
  if (outcome !== "ASK") {
    throw new Error(`force push: decision ${outcome}, want ASK; reasons: ${JSON.stringify(reasons)}`);
  }
  if (!approvalToken) {
    throw new Error("force push: decision ASK came without an approval_token");
  }
  console.log(`OK ask ${toolUse.id}: ASK with an approval token; reason: ${firstLine(reasons.join("; "))}`);

  const second = await client.execute(toolUse, approvalToken);
  if (second.decision.outcome !== "ALLOW") {
    throw new Error(
      `approved force push: decision ${second.decision.outcome}, want ALLOW; ` +
        `reasons: ${JSON.stringify(second.decision.reasons)}`,
    );
  }
  // With no git repository in the workspace the push fails: what matters is that it ran.
  const { sandboxed, exitCode } = second.report;
  const line = JSON.stringify(firstLine(text(second.result)));
  console.log(`OK approve ${toolUse.id}: ALLOW, ran (sandboxed=${sandboxed}, exit ${exitCode}): ${line}`);
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
  const client = new Client(values.target, Number(values["timeout-ms"]));
  const steps = [
    ["listtools", () => listTools(client)],
    ["read", () => read(client, values.read, values.expect)],
    ["bash", () => bash(client)],
    ["batch", () => batch(client, values.read)],
    ["ask", () => askThenApprove(client)],
  ];
  try {
    for (const [name, run] of steps) {
      try {
        await run();
      } catch (error) {
        // gRPC errors carry a status name; ours already say what was wrong.
        const status = error.code !== undefined ? `${grpc.status[error.code]}: ` : "";
        console.error(`FAIL ${name}: ${status}${error.details ?? error.message}`);
        return 1;
      }
    }
  } finally {
    client.close();
  }
  console.log(`PASS node client: ${steps.length} steps against ${values.target}`);
  return 0;
}

process.exitCode = await main();
