#!/usr/bin/env bash
# Generates the Python client's protobuf/gRPC modules from proto/ into
# clients/python/src/tooljail/_proto (never edit them), anchored in the client's package.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=clients/python/src/tooljail/_proto
rm -rf "$out" && mkdir -p "$out/tooljail/v1"
bin=$(dirname "$py")
"$py" -m grpc_tools.protoc -I proto --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-mypy="$bin/protoc-gen-mypy" --mypy_out="$out" \
  --plugin=protoc-gen-mypy_grpc="$bin/protoc-gen-mypy_grpc" --mypy_grpc_out="$out" \
  proto/tooljail/v1/*.proto
sed -i 's/^from tooljail\.v1 import/from tooljail._proto.tooljail.v1 import/;s/^import tooljail\.v1\.\(.*\)$/import tooljail._proto.tooljail.v1.\1/' \
  "$out"/tooljail/v1/*.py "$out"/tooljail/v1/*.pyi
touch "$out/__init__.py" "$out/tooljail/__init__.py" "$out/tooljail/v1/__init__.py"
