#!/usr/bin/env bash
# Builds the Go and Node example clients and runs both against a live daemon that this script starts
# (temporary Unix socket and workspace, real OPA, real Docker) and stops. Exits non-zero if a build
# or a client failed. A second run reuses the Go build cache and node_modules.
#
# Needs what `make setup` installs (the venv with tooljail, OPA, Docker and the sandbox image), Go
# and Node.js 20+ with npm. Logs: .tools/logs/interop-*.log.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=interop
cd "$REPO_ROOT"
logs="$TOOLS_DIR/logs"
mkdir -p "$logs" "$TOOLS_DIR/interop"

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  PATH="$PATH:/usr/local/go/bin"
fi
command -v go >/dev/null || die "go not found: install Go (https://go.dev/doc/install) or put it on PATH"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  die "node/npm not found: install Node.js 20+ (apt-get install nodejs npm)"
fi
python=.venv/bin/python
[[ -x "$python" ]] || die "$python not found: run 'make setup' first"

# --- build -----------------------------------------------------------------------------------------
start=$SECONDS
# The Go example's generated code is committed: it must match proto/ as it is now.
examples/go/generate.sh --check
go_client="$TOOLS_DIR/interop/tooljail-go-example"
(cd examples/go && CGO_ENABLED=0 go build -buildvcs=false -o "$go_client" .) ||
  die "go build of examples/go failed (see above)"
log "go client built ($go_client)"

# npm ci always deletes node_modules; skip it while node_modules was installed from this very lockfile.
stamp=examples/node/node_modules/.installed-from-package-lock.json
if ! cmp -s examples/node/package-lock.json "$stamp" 2>/dev/null; then
  log "npm ci in examples/node"
  # --ignore-scripts: protobufjs's postinstall only checks versions; the clients need no build step.
  (cd examples/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
    die "npm ci in examples/node failed (see above)"
  cp examples/node/package-lock.json "$stamp"
fi
log "node client ready (examples/node, node $(node --version))"
log "builds done in $((SECONDS - start))s"

# --- daemon ----------------------------------------------------------------------------------------
# A short path: a Unix socket path must stay under about 100 bytes.
scratch=$(mktemp -d /tmp/tj-interop.XXXXXX)
daemon_pid=
daemon_log="$logs/interop-daemon.log"
stop_daemon() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    # SIGTERM: the daemon drains, removes its containers and stops its OPA; give it the time to.
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 300); do
      kill -0 "$daemon_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$daemon_pid" 2>/dev/null; then
      log "daemon $daemon_pid did not stop within 30s of SIGTERM: killing it" >&2
      kill -KILL "$daemon_pid" 2>/dev/null || true
    fi
    wait "$daemon_pid" 2>/dev/null || true
  fi
  daemon_pid=
  rm -rf "$scratch"
}
trap stop_daemon EXIT
# Ctrl-C or a kill: exit through the EXIT trap, so the daemon is stopped rather than left behind.
trap 'exit 130' INT
trap 'exit 143' TERM

workspace="$scratch/ws"
mkdir -p "$workspace"
note="$workspace/note.txt"
marker="tooljail interop marker $$"
printf '%s\nsecond line\n' "$marker" >"$note"
# Sandboxes never run as root: a workspace of root's is the sandbox account's to write.
if is_root; then chown -R tooljail-sandbox: "$workspace"; fi
socket="$scratch/tj.sock"
target="unix://$socket"

# `python -m daemon.cli` is the `tooljail` command run from this checkout (cwd on sys.path), so the
# daemon under test is this tree's code whatever the venv's install points at.
TOOLJAIL_STATE_DIR="$scratch/state" TOOLJAIL_AUDIT_LOG="$scratch/audit.jsonl" \
  "$python" -m daemon.cli serve --listen "$target" --workspace "$workspace" >"$daemon_log" 2>&1 &
daemon_pid=$!
log "daemon started (pid $daemon_pid, $target, log ${daemon_log#"$REPO_ROOT"/})"

daemon_died() {
  log "the daemon exited before it served; last lines of $daemon_log:" >&2
  tail -n 20 "$daemon_log" | sed 's/^/    /' >&2
  exit 1
}
for _ in $(seq 600); do
  [[ -S "$socket" ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || daemon_died
  sleep 0.1
done
[[ -S "$socket" ]] || die "no socket at $socket after 60s; see $daemon_log"
# The socket is bound before the services are ready: wait for the health service to say SERVING.
"$python" - "$target" <<'EOF' || die "the daemon never reported SERVING; see $daemon_log"
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

target = "unix:" + sys.argv[1].removeprefix("unix://")
deadline = time.monotonic() + 60
with grpc.insecure_channel(target) as channel:
    health = health_pb2_grpc.HealthStub(channel)
    while time.monotonic() < deadline:
        try:
            reply = health.Check(health_pb2.HealthCheckRequest(), timeout=2)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                sys.exit(0)
        except grpc.RpcError:
            pass
        time.sleep(0.1)
sys.exit(1)
EOF
log "daemon serving"

# --- clients ---------------------------------------------------------------------------------------
passed=()
failed=()
run_client() {
  local name=$1
  shift
  local client_start=$SECONDS
  echo "--- $name client"
  if "$@" 2>&1 | tee "$logs/interop-$name.log"; then
    passed+=("$name")
    log "$name client: PASS in $((SECONDS - client_start))s"
  else
    failed+=("$name")
    log "$name client: FAIL (output above, also in .tools/logs/interop-$name.log)" >&2
  fi
}
run_client go "$go_client" -target "$target" -read "$note" -expect "$marker"
run_client node node examples/node/client.js --target "$target" --read "$note" --expect "$marker"

stop_daemon
trap - EXIT INT TERM
log "daemon stopped; total $((SECONDS - start))s"
log "summary: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
echo "interop: ${#passed[@]} passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
