#!/usr/bin/env bash
# Builds the pinned Open Policy Agent from source into .tools/bin/opa (no binary download needed:
# only the Go module proxy). Does nothing when that version is already there.
set -euo pipefail
OPA_VERSION=1.22.3

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=opa
opa="$TOOLS_DIR/bin/opa"

# The version the binary reports ("Version: 1.22.3"), empty when there is none.
opa_version() { "$opa" version 2>/dev/null | awk '$1 == "Version:" { print $2 }'; }

if [[ -x "$opa" ]] && [[ $(opa_version) == "$OPA_VERSION" ]]; then
  log "opa $OPA_VERSION is up to date ($opa)"
  exit 0
fi

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  PATH="$PATH:/usr/local/go/bin"
fi
command -v go >/dev/null || die "go not found: install Go (https://go.dev/doc/install) or put it on PATH"

mkdir -p "$TOOLS_DIR/bin"
log "building opa $OPA_VERSION with $(go version | awk '{ print $3 }'); a first build takes a few minutes"
run_step "go install opa@v$OPA_VERSION" "$TOOLS_DIR/logs/opa-build.log" \
  env CGO_ENABLED=0 GOBIN="$TOOLS_DIR/bin" GOFLAGS=-buildvcs=false \
  go install "github.com/open-policy-agent/opa@v$OPA_VERSION"

built=$(opa_version)
[[ "$built" == "$OPA_VERSION" ]] || die "built opa reports version '$built', expected $OPA_VERSION"
log "opa $OPA_VERSION installed at $opa"
