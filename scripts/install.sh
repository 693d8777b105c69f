#!/usr/bin/env bash
# Installs tooljail into a prefix (what `make install PREFIX=...` runs). Idempotent: running it
# again upgrades in place.
#
#   scripts/install.sh [PREFIX=/usr/local] [DESTDIR=/staging/root]
#
# PREFIX and DESTDIR may also come from the environment. DESTDIR stages the files for a package:
# everything lands under $DESTDIR$PREFIX but refers to $PREFIX, where it will live.
#
# Layout under $PREFIX:
#   lib/tooljail/                    a virtualenv with tooljail and its dependencies
#   lib/tooljail/bin/opa             the OPA binary the managed policy server runs
#   lib/tooljail/bin/tooljail-landlock  the wrapper that confines host-side searches (Landlock)
#   bin/tooljail                     -> ../lib/tooljail/bin/tooljail
#   share/tooljail/policies/         the Rego policies (with their tests: reloads run them)
#   share/tooljail/tooljail.toml.example   a config pointing at the two above
#   share/doc/tooljail/operations.md running it as a service, safely
#   lib/systemd/system/tooljail.service
#
# Needs: python3 >= 3.11 with venv, the OPA build (`make opa`), PyPI for the dependencies.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=install

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0"; }

for arg in "$@"; do
  case $arg in
    PREFIX=*) PREFIX=${arg#PREFIX=} ;;
    DESTDIR=*) DESTDIR=${arg#DESTDIR=} ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown argument '$arg'; usage: scripts/install.sh [PREFIX=/usr/local] [DESTDIR=/staging]" ;;
  esac
done
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX%/}
DESTDIR=${DESTDIR%/}
[[ $PREFIX == /?* ]] || die "PREFIX must be an absolute directory other than / (got '${PREFIX:-/}')"
[[ -z $DESTDIR || $DESTDIR == /* ]] || die "DESTDIR must be an absolute path (got '$DESTDIR')"
# Both are substituted into files with sed and written into shebangs.
[[ $PREFIX$DESTDIR != *[[:space:]\|\&\\]* ]] || die "PREFIX and DESTDIR must not contain spaces, |, & or \\"

ROOT=$DESTDIR$PREFIX
VENV=$ROOT/lib/tooljail
SHARE=$ROOT/share/tooljail
PYTHON=${PYTHON:-python3}
OPA_BIN=$TOOLS_DIR/bin/opa

command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11 or newer (apt-get install python3 python3-venv)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  die "$PYTHON is $("$PYTHON" -V 2>&1); tooljail needs 3.11 or newer (set PYTHON=/path/to/python3.11)"
[[ -x $OPA_BIN ]] || die "$OPA_BIN is missing: run 'make opa' first (make install does)"
[[ -f $REPO_ROOT/policies/data.json ]] || die "$REPO_ROOT/policies is incomplete: restore it from git"

log "installing into $ROOT${DESTDIR:+ (for $PREFIX)}"

# --- the virtualenv ------------------------------------------------------------------------------
# Reused when it still runs (an upgrade keeps the dependencies already there); recreated when the
# Python it was made from is gone.
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  log "creating the virtualenv $VENV"
  mkdir -p "$VENV"
  "$PYTHON" -m venv --clear "$VENV" || die "python -m venv failed: install the venv module (apt-get install python3-venv)"
fi

# pip builds from a copy, so the source tree gets no build/ or egg-info of its own.
src=$(mktemp -d)
trap 'stop_step; rm -rf "$src"' EXIT
tar -C "$REPO_ROOT" --exclude=__pycache__ --exclude='*.egg-info' --exclude=build -cf - \
  pyproject.toml README.md daemon sandbox clients/python | tar -C "$src" -xf -

pip_args=(install --disable-pip-version-check --no-input --upgrade)
# Bytecode compiled under DESTDIR would name the staging paths in tracebacks; the packager
# compiles at the final place (python -m compileall) or lets Python skip it.
[[ -z $DESTDIR ]] || pip_args+=(--no-compile)
# A local directory is always reinstalled, so the same version number with new code is picked up;
# dependencies are upgraded only when the new requirements ask for it.
# The client commands (tooljail call, tools, mcp...) speak to the daemon through the Python client.
run_step "pip install tooljail, its client and their dependencies" "$TOOLS_DIR/logs/install-pip.log" \
  "$VENV/bin/python" -m pip "${pip_args[@]}" "$src" "$src/clients/python"

# --- OPA, the Landlock wrapper, the policies, the config example, the docs, the unit ---------------
install -D -m 0755 "$OPA_BIN" "$VENV/bin/opa"
# Beside the interpreter, where the daemon looks for it: host-side searches refuse to run without.
command -v "${CC:-cc}" >/dev/null || die "a C compiler (cc) is needed to build tooljail-landlock: apt-get install gcc"
"${CC:-cc}" -O2 -Wall -Wextra -Werror -o "$VENV/bin/tooljail-landlock" "$REPO_ROOT/daemon/host/landlock.c"

# Replaced as a whole, so a policy file removed from the source does not linger.
mkdir -p "$SHARE"
rm -rf "$SHARE/policies.new"
cp -R "$REPO_ROOT/policies" "$SHARE/policies.new"
find "$SHARE/policies.new" -name '.*' -prune -exec rm -rf {} +
chmod -R u=rwX,go=rX "$SHARE/policies.new"
rm -rf "$SHARE/policies"
mv "$SHARE/policies.new" "$SHARE/policies"

render() { sed "s|@PREFIX@|$PREFIX|g" "$1"; }
render "$REPO_ROOT/packaging/tooljail.toml.example" >"$SHARE/tooljail.toml.example.tmp"
install -m 0644 "$SHARE/tooljail.toml.example.tmp" "$SHARE/tooljail.toml.example"
rm -f "$SHARE/tooljail.toml.example.tmp"
install -D -m 0644 "$REPO_ROOT/docs/operations.md" "$ROOT/share/doc/tooljail/operations.md"
mkdir -p "$ROOT/lib/systemd/system"
render "$REPO_ROOT/packaging/systemd/tooljail.service" >"$ROOT/lib/systemd/system/tooljail.service.tmp"
install -m 0644 "$ROOT/lib/systemd/system/tooljail.service.tmp" "$ROOT/lib/systemd/system/tooljail.service"
rm -f "$ROOT/lib/systemd/system/tooljail.service.tmp"

# The service's account and /etc/tooljail, as a package declares them (systemd-sysusers and
# systemd-tmpfiles apply them; docs/operations.md).
install -D -m 0644 "$REPO_ROOT/packaging/systemd/tooljail.sysusers" "$ROOT/lib/sysusers.d/tooljail.conf"
install -D -m 0644 "$REPO_ROOT/packaging/systemd/tooljail.tmpfiles" "$ROOT/lib/tmpfiles.d/tooljail.conf"

mkdir -p "$ROOT/bin"
ln -sfn ../lib/tooljail/bin/tooljail "$ROOT/bin/tooljail"

# --- DESTDIR: the venv must name $PREFIX, where it will run ---------------------------------------
if [[ -n $DESTDIR ]]; then
  grep -rlIF -- "$ROOT" "$VENV/bin" "$VENV/pyvenv.cfg" | while IFS= read -r file; do
    sed -i "s|$ROOT|$PREFIX|g" "$file"
  done
  # venv's own pip was byte-compiled at the staging path.
  find "$VENV" -name __pycache__ -type d -prune -exec rm -rf {} +
fi

# The venv's python is a link to the system one, so this works before the files reach $PREFIX.
# -B: no bytecode from this check (under DESTDIR it would name the staging paths).
"$VENV/bin/python" -B -c 'import daemon.cli, sandbox.executor' ||
  die "the installed tooljail does not import; see the messages above"

log "installed tooljail into $ROOT"
cat <<EOF
Next steps (as root, on the machine that runs it; docs/operations.md explains each):
  systemd-sysusers $PREFIX/lib/sysusers.d/tooljail.conf
  useradd --user-group --no-create-home --shell /usr/sbin/nologin tooljail-sandbox
  usermod -aG tooljail-sandbox tooljail
  systemd-tmpfiles --create $PREFIX/lib/tmpfiles.d/tooljail.conf
  install -m 0640 -g tooljail $PREFIX/share/tooljail/tooljail.toml.example /etc/tooljail/tooljail.toml
  make image                  # from the source tree: the sandbox image this release expects
  systemctl daemon-reload && systemctl enable --now tooljail
EOF
if [[ $PREFIX != /usr && $PREFIX != /usr/local ]]; then
  echo "  ($PREFIX/lib/systemd/system is not on systemd's search path:"
  echo "   systemctl link $PREFIX/lib/systemd/system/tooljail.service)"
fi
