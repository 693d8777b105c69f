#!/usr/bin/env bash
# Creates the account sandboxes run as (sandbox.user, default tooljail-sandbox) when it is missing:
# no login, no home, its own group, a regular uid (useradd picks one >= UID_MIN, 1000 on Debian),
# so it is never root and never a system account. Idempotent.
# Usage: scripts/ensure-sandbox-user.sh [NAME]
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=sandbox-user

name=${1:-tooljail-sandbox}
if id -u "$name" >/dev/null 2>&1; then
  log "account $name exists (uid $(id -u "$name"), gid $(id -g "$name"))"
  exit 0
fi
is_root || die "the sandbox account $name is missing; as root: useradd --user-group --no-create-home --shell /usr/sbin/nologin $name"
useradd --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
  --comment "tooljail sandboxes" "$name"
log "created account $name (uid $(id -u "$name"), gid $(id -g "$name"))"
