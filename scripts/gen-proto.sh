#!/usr/bin/env bash
# Generates the Python protobuf/gRPC modules from proto/ into daemon/_generated (never edit them).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=daemon/_generated
rm -rf "$out" && mkdir -p "$out/tooljail/v1"
bin=$(dirname "$py")
# mypy-protobuf writes typed stubs for the messages and the gRPC service (mypy --strict needs them).
"$py" -m grpc_tools.protoc -I proto --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-mypy="$bin/protoc-gen-mypy" --mypy_out="$out" \
  --plugin=protoc-gen-mypy_grpc="$bin/protoc-gen-mypy_grpc" --mypy_grpc_out="$out" \
  proto/tooljail/v1/*.proto
# protoc writes absolute imports ("from tooljail.v1 import ..."); anchor them in our package.
sed -i 's/^from tooljail\.v1 import/from daemon._generated.tooljail.v1 import/;s/^import tooljail\.v1\.\(.*\)$/import daemon._generated.tooljail.v1.\1/' \
  "$out"/tooljail/v1/*.py "$out"/tooljail/v1/*.pyi
touch "$out/__init__.py" "$out/tooljail/__init__.py" "$out/tooljail/v1/__init__.py"
