// What the live tests read from the environment, and how they skip: without TOOLJAIL_TARGET
// they are skipped, unless TOOLJAIL_TEST_REQUIRE_LIVE=1 says a live run was expected (CI,
// interop), which turns every missing variable into a failure.
//
//   TOOLJAIL_TARGET             the daemon under test (unix:///path or host:port)
//   TOOLJAIL_TOKEN              its bearer token, if it wants one
//   TOOLJAIL_TEST_WORKSPACE     the daemon's default workspace (as given to `serve --workspace`)
//   TOOLJAIL_TEST_MARKER        a string the file $TOOLJAIL_TEST_WORKSPACE/note.txt contains
//   TOOLJAIL_TEST_SERVE         `CMD SOCKET WORKSPACE STATE_DIR` runs a daemon in the foreground
//                               (the restart test starts and kills its own; split on spaces)
//   TOOLJAIL_TEST_REQUIRE_LIVE  1: fail rather than skip when any of the above is missing

import assert from "node:assert/strict";
import { test } from "node:test";

export const env = process.env;
export const REQUIRE_LIVE = env.TOOLJAIL_TEST_REQUIRE_LIVE === "1";

/**
 * The `skip` option for live tests needing `names`: false when all are set; otherwise a reason
 * to skip, or (under TOOLJAIL_TEST_REQUIRE_LIVE=1) false plus a failing test saying what is missing.
 */
export function liveSkip(what, names) {
  const missing = names.filter((name) => !env[name]);
  if (missing.length === 0) return false;
  if (REQUIRE_LIVE) {
    test(`${what}: the environment names a live daemon`, () => {
      assert.fail(
        `TOOLJAIL_TEST_REQUIRE_LIVE=1 but ${missing.join(", ")} ${missing.length > 1 ? "are" : "is"} not set`,
      );
    });
    return "the environment is incomplete (failed above)";
  }
  return `${missing.join(", ")} not set`;
}
