#!/usr/bin/env bash
# Builds .tools/client-venv: what mypy --strict needs to check the Python client with its
# adapters (pydantic-ai, the OpenAI Agents SDK) at the versions they are tested with, kept apart
# from the daemon's venv. Rebuilt only when requirements-adapters.lock changes.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=client-venv
cd "$REPO_ROOT"
lock=clients/python/requirements-adapters.lock
venv_dir="$TOOLS_DIR/client-venv"
stamp="$venv_dir/.installed-from-requirements-adapters.lock"
if cmp -s "$lock" "$stamp" 2>/dev/null; then
  exit 0
fi
log "building $venv_dir from $lock (pip, about 20 s)"
rm -rf "$venv_dir"
"${PYTHON:-python3}" -m venv "$venv_dir"
"$venv_dir/bin/pip" install -q --disable-pip-version-check -r "$lock"
cp "$lock" "$stamp"
log "done"
