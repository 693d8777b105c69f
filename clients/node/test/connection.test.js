// Where the client connects, from options, then the environment, then the default socket.

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import {
  CancelledError,
  Client,
  DEFAULT_TARGET,
  UnavailableError,
  resolveConnection,
} from "@tooljail/client";

test("options first, then TOOLJAIL_TARGET and TOOLJAIL_TOKEN, then the default socket", () => {
  const env = { TOOLJAIL_TARGET: "unix:///tmp/env.sock", TOOLJAIL_TOKEN: "from-env" };
  assert.deepEqual(resolveConnection({ target: "127.0.0.1:50051", token: "t" }, env), {
    target: "127.0.0.1:50051",
    token: "t",
    tls: false,
  });
  assert.deepEqual(resolveConnection({}, env), {
    target: "unix:///tmp/env.sock",
    token: "from-env",
    tls: false,
  });
  assert.deepEqual(resolveConnection({}, {}), { target: DEFAULT_TARGET, token: "", tls: false });
  assert.equal(DEFAULT_TARGET, "unix:///run/tooljail/tooljail.sock");
});

test("unix://relative (two slashes) is rewritten so the path is not taken as a host", () => {
  assert.equal(resolveConnection({ target: "unix://run/tj.sock" }, {}).target, "unix:run/tj.sock");
  assert.equal(
    resolveConnection({ target: "unix:///run/tj.sock" }, {}).target,
    "unix:///run/tj.sock",
  );
});

test("TLS files are read from paths; cert and key go together", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "tj-tls-"));
  writeFileSync(path.join(dir, "ca.pem"), "CA");
  const tlsOptions = {
    ca: path.join(dir, "ca.pem"),
    cert: Buffer.from("C"),
    key: Buffer.from("K"),
  };
  const { tls } = resolveConnection({ tls: tlsOptions }, {});
  assert.equal(tls.ca.toString(), "CA");
  assert.equal(tls.cert.toString(), "C");
  assert.throws(
    () => resolveConnection({ tls: { cert: Buffer.from("C") } }, {}),
    /both tls.cert and tls.key/,
  );
  assert.deepEqual(resolveConnection({ tls: true }, {}).tls, {
    ca: undefined,
    cert: undefined,
    key: undefined,
  });
});

test("Client.fromEnv reads the given environment only", () => {
  const client = Client.fromEnv({ TOOLJAIL_TARGET: "unix:///tmp/from-env.sock" });
  try {
    assert.equal(client.target, "unix:///tmp/from-env.sock");
  } finally {
    client.close();
  }
});

test("a daemon that is not there is an UnavailableError, after the retries", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "tj-none-"));
  const client = new Client({ target: `unix://${path.join(dir, "absent.sock")}`, timeoutMs: 5000 });
  try {
    const started = Date.now();
    await assert.rejects(
      client.execute({ name: "LS", input: { path: "/" } }, { retries: 1 }),
      UnavailableError,
    );
    assert.ok(Date.now() - started >= 450, "one retry, after a pause of 0.5 s");
    await assert.rejects(
      client.listTools(),
      (error) => error instanceof UnavailableError && error.code === 14,
    );
  } finally {
    client.close();
  }
});

test("an aborted signal cancels the call", async () => {
  const client = new Client({ target: "unix:///nonexistent/tj.sock" });
  try {
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(
      client.execute({ name: "LS" }, { signal: controller.signal }),
      CancelledError,
    );
  } finally {
    client.close();
  }
});

test("a token is never sent in clear off this machine", () => {
  for (const target of ["daemon.example.org:50051", "10.0.0.5:50051", "dns:///daemon.example.org:443"]) {
    assert.throws(() => resolveConnection({ target, token: "s3cret-token" }, {}), /in clear/);
    assert.equal(resolveConnection({ target, token: "" }, {}).token, "");
    assert.throws(
      () => resolveConnection({ target }, { TOOLJAIL_TOKEN: "s3cret-token" }),
      (error) => /in clear/.test(error.message) && !error.message.includes("s3cret-token"),
    );
  }
  for (const target of ["127.0.0.1:50051", "localhost:50051", "[::1]:50051", "unix:///run/t.sock"]) {
    assert.equal(resolveConnection({ target, token: "s3cret-token" }, {}).token, "s3cret-token");
  }
});
