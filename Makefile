# tooljail — `make run` starts the daemon, `make test` passes the whole suite; both set up what is
# missing first (venv, OPA build, Docker engine, sandbox image), idempotently.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
OPA := .tools/bin/opa
GENERATED := daemon/_generated/tooljail/v1/executor_pb2.py
LISTEN ?= unix:///run/tooljail/tooljail.sock
WORKSPACE ?= $(CURDIR)/.tooljail/workspace
PYTEST_ARGS ?=

.PHONY: help setup venv lock proto opa helpers sandbox-user grpcurl packages docker image run test lint typecheck policy-test \
        interop buf go-gen install bench bench-smoke chaos service-test \
        pytest unit integration bench-sandbox fmt clean

help: ## show the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  make %-14s %s\n", $$1, $$2}'

setup: venv proto opa grpcurl packages helpers sandbox-user docker image ## install everything that is missing (idempotent)

venv: $(VENV)/.installed ## the Python virtualenv with tooljail and its dev tools

$(VENV)/.installed: pyproject.toml requirements.lock clients/python/pyproject.toml
	@echo "==> Python virtualenv ($(VENV)) and packages (pinned and hashed: requirements.lock)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
	@# The client commands (tooljail call, tools, mcp...) speak to the daemon through the client.
	@$(BIN)/pip install -q --disable-pip-version-check --no-deps -e . -e clients/python
	@touch $@

lock: venv ## regenerate requirements.lock (hashed) from pyproject.toml's ranges, newest that fit
	@$(BIN)/uv pip compile pyproject.toml --extra dev --extra mcp --generate-hashes \
	  --no-emit-package tooljail-client \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_28 --upgrade \
	  --no-header --quiet -o requirements.lock
	@echo "requirements.lock regenerated; make setup installs exactly it"

proto: $(GENERATED) ## generate the Python gRPC code from proto/

$(GENERATED): proto/tooljail/v1/executor.proto scripts/gen-proto.sh $(VENV)/.installed
	@echo "==> generating gRPC code from proto/ (the daemon's, and the Python client's; the Node client's copy)"
	@scripts/gen-proto.sh
	@scripts/gen-client-proto.sh
	@install -D -m 0644 proto/tooljail/v1/executor.proto clients/node/proto/tooljail/v1/executor.proto

opa: ## build the pinned OPA from source into .tools/bin
	@scripts/build-opa.sh

GRPCURL_VERSION := v1.9.4
grpcurl: .tools/bin/grpcurl ## build grpcurl (for the README tour) into .tools/bin

.tools/bin/grpcurl:
	@echo "==> building grpcurl $(GRPCURL_VERSION) with go install (about a minute)"
	@PATH="$$PATH:/usr/local/go/bin" GOBIN=$(CURDIR)/.tools/bin CGO_ENABLED=0 \
	  go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

packages: ## Debian packages the tools need (ripgrep, debootstrap, btrfs-progs)
	@scripts/ensure-packages.sh ripgrep debootstrap btrfs-progs

LANDLOCK_HELPER := .tools/bin/tooljail-landlock
helpers: $(LANDLOCK_HELPER) ## build the Landlock wrapper host-side searches run in

$(LANDLOCK_HELPER): daemon/host/landlock.c
	@echo "==> building $@"
	@mkdir -p $(@D)
	@$${CC:-cc} -O2 -Wall -Wextra -Werror -o $@ $<

sandbox-user: ## the account sandboxes run as (tooljail-sandbox), when it is missing
	@scripts/ensure-sandbox-user.sh

docker: ## make sure a Docker engine answers (installs and starts dockerd when root)
	@scripts/ensure-docker.sh

image: docker venv ## build the sandbox image locally (only when its recipe changed)
	@sandbox/image/build.sh

run: setup ## run the daemon (LISTEN=..., WORKSPACE=... to override)
	@# The daemon makes a missing workspace itself, for the sandbox account and its group; one
	@# left by an older version belongs to root, which sandboxes never run as, or lacks the
	@# group's write, through which each principal's default session (a uid of its own) writes.
	@if [ -d "$(WORKSPACE)" ] && [ "$$(id -u)" = 0 ]; then \
	  if [ "$$(stat -c %u "$(WORKSPACE)")" = 0 ]; then chown tooljail-sandbox: "$(WORKSPACE)"; fi; \
	  if [ "$$(stat -c %G "$(WORKSPACE)")" = tooljail-sandbox ] && \
	    [ -z "$$(find "$(WORKSPACE)" -maxdepth 0 -perm -g+w)" ]; then chmod -R g+w "$(WORKSPACE)"; fi; \
	fi
	@echo "==> tooljail serve --listen $(LISTEN) --workspace $(WORKSPACE)"
	@# On a developer's machine the Unix socket's principal ("local") is the admin, named here.
	@TOOLJAIL_STATE_DIR="$${TOOLJAIL_STATE_DIR:-$(CURDIR)/.tooljail/state}" \
	  TOOLJAIL_AUTH__ADMIN_PRINCIPALS="$${TOOLJAIL_AUTH__ADMIN_PRINCIPALS:-[\"local\"]}" \
	  exec $(BIN)/tooljail serve --listen "$(LISTEN)" --workspace "$(WORKSPACE)"

test: setup lint typecheck policy-test buf pytest bench-smoke ## everything CI runs (interop runs inside pytest)

lint: venv ## ruff lint and format check, and the import contracts (pyproject.toml)
	@echo "==> ruff"
	@$(BIN)/ruff check daemon sandbox tests bench clients/python/src
	@$(BIN)/ruff format --check daemon sandbox tests bench clients/python/src
	@echo "==> import contracts"
	@$(BIN)/lint-imports --no-cache | tail -n 7

fmt: venv ## format the code
	@$(BIN)/ruff format daemon sandbox tests bench
	@$(BIN)/ruff check --fix daemon sandbox tests bench

typecheck: venv proto ## mypy --strict (the daemon, and the Python client with its adapters on its own)
	@echo "==> mypy --strict"
	@$(BIN)/mypy
	@scripts/client-typecheck-venv.sh
	@cd clients/python/src && ../../../$(BIN)/mypy --strict --python-executable ../../../.tools/client-venv/bin/python \
	  tooljail --exclude 'tooljail/_proto/.*\.py$$'

# The input JSON schema lives beside the policies: the type checker's, not data to load.
OPA_LOAD := --ignore input.schema.json

# A test's time limit: the default 5 s is met in a fraction of a second on a quiet machine, not
# always beside a loaded test suite (CI saw one ERROR, a time-out, while an attacker round ran).
OPA_TEST_TIMEOUT ?= 120s

policy-test: opa ## opa fmt, opa check --strict against the input schema, opa test with coverage >= 90%
	@echo "==> opa fmt / check / test"
	@$(OPA) fmt --list --fail policies
	@$(OPA) check --strict --schema policies/input.schema.json $(OPA_LOAD) policies
	@$(OPA) test --timeout $(OPA_TEST_TIMEOUT) --coverage --threshold 90 $(OPA_LOAD) policies > /dev/null
	@mkdir -p .tools/logs; status=0; $(OPA) test --timeout $(OPA_TEST_TIMEOUT) -v $(OPA_LOAD) policies \
	  > .tools/logs/opa-test.log || status=$$?; \
	  grep -E ': (FAIL|ERROR)' .tools/logs/opa-test.log || true; \
	  tail -n 3 .tools/logs/opa-test.log; exit $$status

# Two workers, each taking whole files (a file's fixtures stay in one process): most integration
# tests wait on Docker or a child process, so two halve the wall time on two cores.
PYTEST_WORKERS ?= 2
pytest: setup ## the pytest suite (unit and integration, real OPA and Docker), on PYTEST_WORKERS
	@echo "==> pytest ($(PYTEST_WORKERS) workers)"
	@$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

unit: venv proto helpers ## only the unit tests (no Docker, no OPA)
	@$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: setup ## only the integration tests
	@$(BIN)/pytest tests/integration $(PYTEST_ARGS)

interop: setup ## build the Go and Node example clients and run them against a live daemon
	@scripts/interop.sh

buf: ## buf lint, and buf breaking against the last released proto (proto/released)
	@echo "==> buf lint / breaking"
	@scripts/buf-check.sh

go-gen: ## regenerate the Go client's code from proto/ (clients/go)
	@clients/go/generate.sh

service-test: setup ## only the service tests: the shipped unit under a real systemd (in make test too)
	@$(BIN)/pytest tests/service -ra $(PYTEST_ARGS)

chaos: setup ## long reliability variants (fuzzing, loads, faults; a private dockerd is stopped)
	@scripts/chaos.sh

bench: setup ## the published benchmark (~6 min): bench/results/latest.{json,md} and plots
	@$(BIN)/python -m bench.bench --profile

bench-smoke: setup ## every benchmark part for about a second; fails only on errors, never on speed
	@echo "==> bench smoke"
	@$(BIN)/python -m bench.bench --smoke

bench-sandbox: setup ## sandbox benchmark: warm pool vs cold vs docker run, churn, output flood
	@$(BIN)/python -m bench.sandbox_bench --sustained 60 --flood

PREFIX ?= /usr/local
DESTDIR ?=
install: opa ## install into PREFIX (default /usr/local); DESTDIR=... stages it for a package
	@scripts/install.sh PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)"

clean: ## remove the venv and build outputs (keeps the sandbox image)
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache examples/node/node_modules clients/node/node_modules
