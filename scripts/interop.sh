#!/usr/bin/env bash
# Builds the Go and Node client packages (clients/go, clients/node) and their examples, then runs
# against a live daemon that this script starts (temporary Unix socket and workspace, real OPA, real
# Docker) and stops: each example, and each package's own tests with their live part required
# (their restart test starts daemons of its own with scripts/serve-test-daemon.sh). Exits non-zero
# if a build, an example or a test failed. A second run reuses the Go build cache and node_modules.
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
# The Go client's generated code is committed: it must match proto/ as it is now.
clients/go/generate.sh --check
(cd clients/go && go vet ./... && unformatted=$(gofmt -l .) && [[ -z $unformatted ]]) ||
  die "clients/go: go vet or gofmt found problems (see above; gofmt -l lists: ${unformatted:-})"
go_client="$TOOLS_DIR/interop/tooljail-go-example"
(cd examples/go && CGO_ENABLED=0 go build -buildvcs=false -o "$go_client" .) ||
  die "go build of examples/go failed (see above)"
log "go client built ($go_client)"

# npm_ci DIR: npm ci always deletes node_modules; skip it while node_modules was installed from
# this very lockfile. --ignore-scripts: protobufjs's postinstall only checks versions, and the
# package needs no build step.
npm_ci() {
  local stamp=$1/node_modules/.installed-from-package-lock.json
  if ! cmp -s "$1/package-lock.json" "$stamp" 2>/dev/null; then
    log "npm ci in $1"
    (cd "$1" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
      die "npm ci in $1 failed (see above)"
    cp "$1/package-lock.json" "$stamp"
  fi
}
# The example links the package (file:); the package's own dependencies live in its folder.
npm_ci clients/node
npm_ci examples/node
log "node client ready (clients/node, examples/node, node $(node --version))"
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
  # A session's workspace filesystem stays mounted after the daemon stops (as in real use).
  if [[ -d $scratch ]]; then
    awk -v below="$(realpath "$scratch")/" 'index($5, below) == 1 { print $5 }' /proc/self/mountinfo |
      sort -r | while read -r point; do umount --lazy "$point" || true; done
  fi
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
# Sandboxes never run as root: a workspace of root's is the sandbox account's to write, through
# its group (each principal's default session runs as a uid of its own with that group).
if is_root; then chown -R tooljail-sandbox: "$workspace" && chmod -R g+w "$workspace"; fi
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

# The packages' tests: unit, and live against this daemon (required, never skipped).
export TOOLJAIL_TARGET="$target" TOOLJAIL_TEST_WORKSPACE="$workspace" TOOLJAIL_TEST_MARKER="$marker" \
  TOOLJAIL_TEST_SERVE="$REPO_ROOT/scripts/serve-test-daemon.sh" TOOLJAIL_TEST_REQUIRE_LIVE=1
run_client go-package bash -c 'cd clients/go && go test -count=1 -v ./...'
run_client node-package bash -c 'cd clients/node && npm test'

stop_daemon
trap - EXIT INT TERM
log "daemon stopped; total $((SECONDS - start))s"
log "summary: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
echo "interop: ${#passed[@]} passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
