// A daemon killed in the middle of a call, started again over the same state: the client sees
// UNAVAILABLE, and resending the same tool_use (same id, same input) runs it once more (the
// killed run never answered), after which a resend is answered from memory.
//
// Needs TOOLJAIL_TEST_SERVE: `$TOOLJAIL_TEST_SERVE SOCKET WORKSPACE STATE_DIR` runs a daemon in
// the foreground (it must exec it, so that its pid is the daemon's) listening on unix://SOCKET.

import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
} from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, describe, it } from "node:test";

import { Client, UnavailableError, newToolUseId } from "@tooljail/client";

import { env, liveSkip } from "./live-env.js";

const skip = liveSkip("the restart test", ["TOOLJAIL_TEST_SERVE"]);

// One daemon process, in a process group of its own (so that a SIGKILL takes its OPA along).
class Daemon {
  constructor(dir) {
    this.socket = path.join(dir, "tj.sock");
    this.workspace = path.join(dir, "ws");
    this.state = path.join(dir, "state");
    this.log = path.join(dir, "daemon.log");
    this.process = null;
    this.exit = null;
  }

  start() {
    const [command, ...args] = env.TOOLJAIL_TEST_SERVE.trim().split(/\s+/);
    const log = openSync(this.log, "a");
    try {
      this.process = spawn(command, [...args, this.socket, this.workspace, this.state], {
        detached: true,
        stdio: ["ignore", log, log],
      });
    } finally {
      closeSync(log);
    }
    this.exit = new Promise((resolve) =>
      this.process.once("exit", (code, signal) => resolve({ code, signal })),
    );
    this.exited = false;
    this.exit.then(() => (this.exited = true));
  }

  killGroup(signal) {
    try {
      process.kill(-this.process.pid, signal);
    } catch (error) {
      if (error.code !== "ESRCH") throw error;
    }
  }

  // SIGTERM (the daemon drains and removes its containers), SIGKILL to the group after 30 s.
  async stop() {
    if (!this.process || this.exited) return this.exit;
    this.process.kill("SIGTERM");
    const timer = setTimeout(() => this.killGroup("SIGKILL"), 30_000);
    try {
      return await this.exit;
    } finally {
      clearTimeout(timer);
    }
  }

  tail() {
    return existsSync(this.log)
      ? readFileSync(this.log, "utf8").split("\n").slice(-15).join("\n")
      : "(no log)";
  }

  // Until ListTools answers through `jail` (the channel reconnects by itself).
  async serving(jail) {
    const deadline = Date.now() + 90_000;
    for (;;) {
      if (this.exited) assert.fail(`the daemon exited before it served:\n${this.tail()}`);
      try {
        await jail.listTools({ timeoutMs: 2_000 });
        return;
      } catch (error) {
        if (Date.now() > deadline)
          assert.fail(`the daemon did not serve within 90 s (${error.message}):\n${this.tail()}`);
      }
      await sleep(200);
    }
  }
}

function lines(file) {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean).length : 0;
}

describe("a daemon restart in the middle of a call", { skip, timeout: 300_000 }, () => {
  // A short path: a Unix socket's must stay under about 100 bytes.
  const dir = skip ? "" : mkdtempSync("/tmp/tjn-");
  const daemon = new Daemon(dir);
  after(async () => {
    await daemon.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("fails UNAVAILABLE, then the same tool_use runs once more, then replays", async () => {
    mkdirSync(daemon.workspace);
    // Sandboxes never run as root: a workspace of root's is the sandbox account's to write,
    // through its group (each principal's default session runs as a uid of its own).
    if (process.getuid?.() === 0) {
      execFileSync("chown", ["tooljail-sandbox:", daemon.workspace]);
      execFileSync("chmod", ["770", daemon.workspace]);
    }
    const count = path.join(daemon.workspace, "count.txt");
    const jail = new Client({
      target: `unix://${daemon.socket}`,
      env: {},
      timeoutMs: 60_000,
      // Reconnect quickly once the daemon is back (gRPC's default backoff grows to 2 minutes).
      channelOptions: {
        "grpc.initial_reconnect_backoff_ms": 100,
        "grpc.max_reconnect_backoff_ms": 1_000,
      },
    });
    try {
      daemon.start();
      await daemon.serving(jail);

      const use = {
        id: newToolUseId(),
        name: "Bash",
        input: { command: "echo ran >> count.txt; sleep 3" },
      };
      const cut = jail.execute(use, { retries: 0 });
      cut.catch(() => {}); // awaited below, once the daemon is dead
      const deadline = Date.now() + 60_000;
      while (lines(count) < 1) {
        if (Date.now() > deadline || daemon.exited)
          assert.fail(`the command never started:\n${daemon.tail()}`);
        await sleep(20);
      }
      daemon.killGroup("SIGKILL");
      await assert.rejects(cut, UnavailableError);
      assert.equal((await daemon.exit).signal, "SIGKILL");
      assert.equal(lines(count), 1);

      daemon.start(); // the same state dir and socket: the same instance
      await daemon.serving(jail);
      const rerun = await jail.execute(use, { retries: 0 });
      assert.equal(rerun.decision.outcome, "ALLOW", rerun.text);
      assert.equal(rerun.toolUseId, use.id);
      assert.equal(rerun.report.replayed, false, "the killed run never answered: it runs again");
      assert.equal(rerun.report.exitCode, 0, rerun.text);
      assert.equal(lines(count), 2);

      const replay = await jail.execute(use, { retries: 0 });
      assert.equal(replay.report.replayed, true, "answered from memory");
      assert.equal(replay.text, rerun.text);
      assert.equal(lines(count), 2, "nothing ran again");
    } finally {
      jail.close();
    }
    const stopped = await daemon.stop();
    assert.equal(stopped.code, 0, `the daemon did not stop cleanly on SIGTERM:\n${daemon.tail()}`);
  });
});
