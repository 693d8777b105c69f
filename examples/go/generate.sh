#!/usr/bin/env bash
# Generates the Go protobuf and gRPC code of the Go example from proto/ into examples/go/gen (committed,
# never hand-edited), with pinned plugins built by `go install` into .tools/bin.
#
#   examples/go/generate.sh           regenerate examples/go/gen
#   examples/go/generate.sh --check   fail when the committed code is not what proto/ generates now
set -euo pipefail
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GO_PACKAGE="example.com/tooljail/examples/go/gen/tooljail/v1;tooljailv1"

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../../scripts/lib.sh"
export LOG_PREFIX=go-gen
cd "$REPO_ROOT"

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  PATH="$PATH:/usr/local/go/bin"
fi
command -v go >/dev/null || die "go not found: install Go (https://go.dev/doc/install) or put it on PATH"

# ensure_plugin NAME VERSION PACKAGE: builds the plugin unless that version is already in .tools/bin.
ensure_plugin() {
  local name=$1 version=$2 package=$3 have
  have=$("$TOOLS_DIR/bin/$name" --version 2>/dev/null | awk '{ print $NF }') || true
  if [[ "v${have#v}" != "$version" ]]; then
    log "building $name $version with go install"
    GOBIN="$TOOLS_DIR/bin" CGO_ENABLED=0 go install "$package@$version"
  fi
}
ensure_plugin protoc-gen-go "$PROTOC_GEN_GO_VERSION" google.golang.org/protobuf/cmd/protoc-gen-go
ensure_plugin protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" google.golang.org/grpc/cmd/protoc-gen-go-grpc

python=$(repo_python)
"$python" -c 'import grpc_tools' 2>/dev/null ||
  die "grpc_tools not importable by $python: run 'make venv' (it installs grpcio-tools)"

# generate OUT: writes gen/tooljail/v1/*.go under OUT. The proto's own go_package names a module that
# does not exist; M maps the file to this example's module instead, so the proto stays untouched.
generate() {
  local out=$1 proto=tooljail/v1/executor.proto
  mkdir -p "$out"
  "$python" -m grpc_tools.protoc -I proto \
    --plugin=protoc-gen-go="$TOOLS_DIR/bin/protoc-gen-go" \
    --plugin=protoc-gen-go-grpc="$TOOLS_DIR/bin/protoc-gen-go-grpc" \
    --go_out="$out" --go_opt=paths=source_relative --go_opt="M$proto=$GO_PACKAGE" \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative --go-grpc_opt="M$proto=$GO_PACKAGE" \
    proto/tooljail/v1/*.proto
}

gen=examples/go/gen
if [[ "${1:-}" == "--check" ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  generate "$scratch"
  # The version lines in the header name the protoc that ran (it comes with grpcio-tools, whose
  # version may drift): a different protoc is not stale code.
  if ! diff -r -I '^//[[:space:]]*-\?[[:space:]]*protoc[[:space:]]\+v' "$gen" "$scratch" >"$scratch.diff" 2>&1; then
    head -n 40 "$scratch.diff" >&2
    (($(wc -l <"$scratch.diff") > 40)) && echo "    ... ($(wc -l <"$scratch.diff") lines of diff in all)" >&2
    rm -f "$scratch.diff"
    die "$gen is stale: proto/ changed since it was generated; run examples/go/generate.sh and commit"
  fi
  rm -f "$scratch.diff"
  log "$gen is up to date with proto/"
else
  rm -rf "$gen"
  generate "$gen"
  log "generated $(find "$gen" -name '*.go' | wc -l) files under $gen"
fi
