// The client's own behaviour (retries, order checks, deadlines, cancellation, the token) against
// an in-process gRPC server that stands in for the daemon and misbehaves on purpose: no daemon,
// no Docker, a real channel over a temporary Unix socket.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, beforeEach, test } from "node:test";

import grpc from "@grpc/grpc-js";

import {
  CancelledError,
  Client,
  DeadlineExceededError,
  InternalError,
  InvalidArgumentError,
  UnavailableError,
} from "@tooljail/client";

import { services } from "../src/proto.js";
import { fromStruct } from "../src/struct.js";

// What the fake daemon saw, and how it misbehaves next; reset before each test.
let seen;
let behaviour;

function answer(toolUse, text = "ok") {
  return {
    result: { toolUseId: toolUse.id, content: [{ text: { text } }], isError: false },
    decision: { outcome: "ALLOW" },
    report: {},
  };
}

function failure(code, details) {
  return Object.assign(new Error(details), { code, details });
}

const executor = {
  execute(call, callback) {
    seen.push({ id: call.request.toolUse.id, input: fromStruct(call.request.toolUse.input) });
    seen.authorization = call.metadata.get("authorization");
    const status = behaviour.failures?.shift();
    if (status) callback(failure(status, `fake ${grpc.status[status]}`));
    else if (behaviour.hang) {
      // Answers too late; the timer is dropped once the client gave up.
      const late = setTimeout(() => callback(null, answer(call.request.toolUse)), 5_000);
      call.on("cancelled", () => clearTimeout(late));
    }
    else callback(null, answer(call.request.toolUse));
  },
  executeBatch(call) {
    const uses = call.request.toolUses;
    seen.push(uses.map((use) => use.id));
    const order = behaviour.batchOrder ?? uses.map((_, index) => index);
    for (const index of order) call.write(answer(uses[index]));
    call.end();
  },
  executeStream(call) {
    const use = call.request.toolUse;
    let n = 0;
    const timer = setInterval(
      () => call.write({ progress: { toolUseId: use.id, output: `chunk ${++n}\n` } }),
      20,
    );
    call.on("cancelled", () => {
      clearInterval(timer);
      seen.push("cancelled");
    });
  },
};

let server;
let dir;
let target;

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "tj-fake-"));
  target = `unix://${path.join(dir, "fake.sock")}`;
  server = new grpc.Server();
  server.addService(services().Executor.service, executor);
  await new Promise((resolve, reject) =>
    server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (error) =>
      error ? reject(error) : resolve(),
    ),
  );
});

after(() => {
  server.forceShutdown();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  seen = [];
  behaviour = {};
});

function client(options = {}) {
  return new Client({ target, env: {}, timeoutMs: 10_000, ...options });
}

test("UNAVAILABLE is retried with the same tool_use id and input", async () => {
  behaviour.failures = [grpc.status.UNAVAILABLE, grpc.status.UNAVAILABLE];
  const jail = client();
  try {
    const result = await jail.execute({ name: "Bash", input: { command: "echo hi" } });
    assert.equal(seen.length, 3);
    assert.ok(
      seen.every((call) => call.id === result.toolUseId),
      JSON.stringify(seen),
    );
    assert.ok(seen.every((call) => call.input.command === "echo hi"));
    assert.match(result.toolUseId, /^toolu_[0-9a-f]{24}$/);
  } finally {
    jail.close();
  }
});

test("retries are bounded: retries 0 sends once, the client default three times", async () => {
  const jail = client();
  try {
    behaviour.failures = [grpc.status.UNAVAILABLE];
    await assert.rejects(jail.execute({ name: "LS" }, { retries: 0 }), UnavailableError);
    assert.equal(seen.length, 1);
    seen.length = 0;
    behaviour.failures = Array(5).fill(grpc.status.UNAVAILABLE);
    await assert.rejects(jail.execute({ name: "LS" }), UnavailableError);
    assert.equal(seen.length, 3);
    await assert.rejects(jail.execute({ name: "LS" }, { retries: -1 }), TypeError);
  } finally {
    jail.close();
  }
});

test("other statuses are not retried", async () => {
  behaviour.failures = [grpc.status.INVALID_ARGUMENT];
  const jail = client();
  try {
    await assert.rejects(jail.execute({ name: "LS" }), InvalidArgumentError);
    assert.equal(seen.length, 1);
  } finally {
    jail.close();
  }
});

test("a batch answered out of request order is refused", async () => {
  const jail = client();
  try {
    const uses = [{ name: "LS" }, { name: "Read" }, { name: "Glob" }];
    assert.equal((await jail.executeBatch(uses)).length, 3);
    behaviour.batchOrder = [1, 0, 2];
    await assert.rejects(jail.executeBatch(uses), (error) => {
      assert.ok(error instanceof InternalError, String(error));
      assert.match(error.details, /result 1 answers .*request order/);
      return true;
    });
    behaviour.batchOrder = [0, 1];
    await assert.rejects(jail.executeBatch(uses), /ended after 2 of 3 results/);
    assert.deepEqual(await jail.executeBatch([{ type: "text", text: "no calls" }]), []);
  } finally {
    jail.close();
  }
});

test("the token goes out as authorization: Bearer", async () => {
  const jail = client({ token: "s3cret" });
  try {
    await jail.execute({ name: "LS" });
    assert.deepEqual(seen.authorization, ["Bearer s3cret"]);
  } finally {
    jail.close();
  }
  const anonymous = client();
  try {
    await anonymous.execute({ name: "LS" });
    assert.deepEqual(seen.authorization, []);
  } finally {
    anonymous.close();
  }
});

test("a call past its deadline is a DeadlineExceededError", async () => {
  behaviour.hang = true;
  const jail = client();
  try {
    await assert.rejects(jail.execute({ name: "LS" }, { timeoutMs: 200 }), DeadlineExceededError);
  } finally {
    jail.close();
  }
});

test("leaving a stream early cancels the call on the server", async () => {
  const jail = client();
  try {
    let chunks = 0;
    for await (const event of jail.stream({ name: "Bash", input: { command: "yes" } })) {
      assert.equal(event.type, "progress");
      if (++chunks === 3) break;
    }
    for (let i = 0; i < 50 && !seen.includes("cancelled"); i += 1)
      await new Promise((r) => setTimeout(r, 20));
    assert.ok(seen.includes("cancelled"), "the server saw the cancellation");
  } finally {
    jail.close();
  }
});

test("aborting a stream's signal ends it with a CancelledError", async () => {
  const jail = client();
  const controller = new AbortController();
  try {
    await assert.rejects(async () => {
      for await (const event of jail.stream({ name: "Bash" }, { signal: controller.signal })) {
        if (event.type === "progress") controller.abort();
      }
    }, CancelledError);
  } finally {
    jail.close();
  }
});
