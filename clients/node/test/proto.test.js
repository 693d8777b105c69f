// The package ships its own copy of the wire contract: it must be the repository's, byte for
// byte (`npm run sync-proto` copies it), and it must load with every RPC the client calls.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { PROTO_DIR, VERSION } from "@tooljail/client";

import { PROTO_FILE, services } from "../src/proto.js";

const REPO_PROTO = new URL("../../../proto/", import.meta.url);

test("proto/ is an identical copy of the repository's proto/ (npm run sync-proto)", () => {
  const shipped = readFileSync(`${PROTO_DIR}/${PROTO_FILE}`, "utf8");
  const source = readFileSync(new URL(PROTO_FILE, REPO_PROTO), "utf8");
  assert.ok(shipped === source, "clients/node/proto differs from proto/: run `npm run sync-proto`");
});

test("the package version is the wire contract's (proto/VERSION)", () => {
  const contract = readFileSync(new URL("VERSION", REPO_PROTO), "utf8").trim();
  const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(manifest.version, contract);
  assert.equal(VERSION, contract);
});

test("the shipped proto loads with the RPCs the client calls", () => {
  const { Executor, Admin } = services();
  const executor = Object.keys(Executor.service);
  for (const rpc of [
    "ListTools",
    "Execute",
    "ExecuteBatch",
    "ExecuteStream",
    "ExecuteBatchStream",
    "OpenSession",
    "CloseSession",
  ]) {
    assert.ok(executor.includes(rpc), `Executor.${rpc} missing: ${executor}`);
  }
  const admin = Object.keys(Admin.service);
  for (const rpc of [
    "Status",
    "SetSessionMode",
    "ListGrants",
    "ReloadPolicies",
    "ListPendingApprovals",
    "Approve",
    "Deny",
  ]) {
    assert.ok(admin.includes(rpc), `Admin.${rpc} missing: ${admin}`);
  }
});
