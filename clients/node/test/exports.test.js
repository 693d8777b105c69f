// index.d.ts is hand-written: every runtime export must be declared there, and every declared
// value must exist at run time, so the types cannot drift from the code unnoticed.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as client from "@tooljail/client";

test("index.d.ts declares exactly the runtime exports", () => {
  const declarations = readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");
  const declared = [
    ...declarations.matchAll(/^export declare (?:const|function|class) (\w+)/gm),
  ].map((m) => m[1]);
  assert.deepEqual([...declared].sort(), Object.keys(client).sort());
});

test("the package is importable through its exports map only", async () => {
  await assert.rejects(import("@tooljail/client/src/client.js"), {
    code: "ERR_PACKAGE_PATH_NOT_EXPORTED",
  });
});
