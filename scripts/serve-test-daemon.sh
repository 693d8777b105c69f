#!/usr/bin/env bash
# Runs this checkout's daemon in the foreground for the client tests that restart it (the Go,
# Node and Python clients' "daemon restart mid-call" tests, given as TOOLJAIL_TEST_SERVE):
#
#   scripts/serve-test-daemon.sh SOCKET WORKSPACE STATE_DIR
#
# It listens on unix://SOCKET with the default policy, real OPA and real Docker; state and audit
# go to STATE_DIR. The same SOCKET gives the same daemon instance, so a daemon started again
# after a kill removes its predecessor's containers. Stop it with SIGTERM (it drains).
set -euo pipefail
(($# == 3)) || { echo "usage: $0 SOCKET WORKSPACE STATE_DIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
socket=$1 workspace=$2 state=$3
mkdir -p "$state"
cd "$root"
TOOLJAIL_STATE_DIR="$state" TOOLJAIL_AUDIT_LOG="$state/audit.jsonl" \
  exec .venv/bin/python -m daemon.cli serve --listen "unix://$socket" --workspace "$workspace"
