#!/usr/bin/env bash
# Installs the given Debian packages, only those that are missing (apt-get update at most once).
# Usage: scripts/ensure-packages.sh PACKAGE...
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=packages

(($# > 0)) || die "usage: $0 PACKAGE... (Debian package names to install when missing)"

missing=()
for pkg in "$@"; do
  # "install ok installed" is dpkg's status of a fully installed package (not removed, not half-set).
  if [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true) != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  log "already installed: $*"
  exit 0
fi

if ! is_root; then
  die "missing packages: ${missing[*]}; run as root: apt-get install -y ${missing[*]}"
fi

export DEBIAN_FRONTEND=noninteractive
run_step "apt-get update" "$TOOLS_DIR/logs/apt-update.log" apt-get update
run_step "installing ${missing[*]}" "$TOOLS_DIR/logs/apt-install.log" \
  apt-get install -y --no-install-recommends "${missing[@]}"
