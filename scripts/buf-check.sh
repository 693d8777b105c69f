#!/usr/bin/env bash
# buf lint and buf breaking (against proto/released, the contract as last released) on proto/.
# buf comes from npm (@bufbuild/buf, a prebuilt binary in a registry package), installed at a pinned
# version under .tools/buf, never globally. Rules and their waivers: buf.yaml.
set -euo pipefail
BUF_VERSION=1.75.0

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=buf
cd "$REPO_ROOT"
buf="$TOOLS_DIR/buf/node_modules/.bin/buf"

if [[ ! -x "$buf" ]] || [[ $("$buf" --version 2>/dev/null) != "$BUF_VERSION" ]]; then
  command -v npm >/dev/null || die "npm not found: install Node.js 20+ (apt-get install nodejs npm)"
  log "installing @bufbuild/buf@$BUF_VERSION into ${TOOLS_DIR#"$REPO_ROOT"/}/buf"
  # --ignore-scripts: the binary comes in a per-platform optional dependency; nothing needs to run.
  npm install --prefix "$TOOLS_DIR/buf" --no-save --no-audit --no-fund --ignore-scripts \
    --loglevel=error "@bufbuild/buf@$BUF_VERSION" >/dev/null
  [[ $("$buf" --version) == "$BUF_VERSION" ]] || die "installed buf does not report $BUF_VERSION"
fi

failed=0
if "$buf" lint; then
  log "buf lint: ok"
else
  log "buf lint: FAILED (fix the names above, or waive a rule in buf.yaml and say why)" >&2
  failed=1
fi
if "$buf" breaking --against proto/released; then
  log "buf breaking against proto/released: ok"
else
  log "buf breaking: FAILED: the changes above break clients of the released contract; add new" \
    "fields or RPCs instead of renaming, renumbering or removing" >&2
  failed=1
fi
exit "$failed"
