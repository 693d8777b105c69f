#!/usr/bin/env bash
# Runs the reliability suite (tests/reliability) in its long variants: more fuzz cases (10,000),
# longer fault loads, more symlink races, 5,000 load calls. Prints the summary table at the end
# (scenario, attempts, survived, lost). Exits non-zero if any scenario lost an attempt outside the
# known bugs the suite marks xfail.
#
# Needs what `make setup` installs (the venv, OPA, Docker and the sandbox image) and root (a small
# tmpfs is mounted for the disk-full scenario). Extra arguments go to pytest (e.g. -k fuzz).
#
# The Docker-engine scenario stops and restarts a private dockerd of its own (own socket, data and
# exec root, no bridge), never the machine's engine.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=chaos
cd "$REPO_ROOT"

pytest=.venv/bin/pytest
[[ -x "$pytest" ]] || die "$pytest not found: run 'make setup' first"

export TOOLJAIL_CHAOS=1
log "running tests/reliability with the long case counts (this takes a while)"
# -p no:cacheprovider: a chaos run must not change what the next `make test` selects first.
exec "$pytest" tests/reliability -p no:cacheprovider -rfEsxX "$@"
