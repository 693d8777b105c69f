# Shared helpers for the set-up scripts; source it, do not run it.
# shellcheck shell=bash

# Repository root, whatever the caller's working directory.
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Where the scripts keep built tools, caches and logs (gitignored).
export TOOLS_DIR="$REPO_ROOT/.tools"

log() { printf '[%s] %s\n' "${LOG_PREFIX:-setup}" "$*"; }
die() {
  printf '[%s] error: %s\n' "${LOG_PREFIX:-setup}" "$*" >&2
  exit 1
}

is_root() { [[ $(id -u) -eq 0 ]]; }

# The Python that can import our packages: the repo's venv when it exists, else the system one.
repo_python() {
  if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then
    echo "$REPO_ROOT/.venv/bin/python"
  else
    command -v python3 || die "python3 not found: install it (apt-get install python3) or create .venv"
  fi
}

# run_step DESCRIPTION LOGFILE CMD...
# Runs a long command with its output in LOGFILE, so CI logs stay readable: prints a line when it
# starts, a heartbeat with the log's last line every HEARTBEAT_SECONDS, and the elapsed time at the
# end. On failure it shows the tail of the log (the reason is almost always there).
run_step() {
  local desc=$1 logfile=$2
  shift 2
  mkdir -p "$(dirname "$logfile")"
  : >"$logfile"
  log "$desc: started (log: $logfile)"
  local start=$SECONDS rc=0
  # Job control puts the step in its own process group, so stop_step can end all of it (debootstrap
  # runs dpkg in a chroot; killing only the top process would leave those behind).
  set -m
  "$@" >"$logfile" 2>&1 &
  local pid=$!
  set +m
  RUN_STEP_PID=$pid
  local every=${HEARTBEAT_SECONDS:-20} waited=0 last
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if ((waited % every == 0)); then
      # Bytes that are not printable ASCII become '?' first: cut counts bytes, and cutting a
      # progress bar's multi-byte character in half printed invalid UTF-8 (a CI run saw it).
      last=$(tail -n 1 "$logfile" | LC_ALL=C tr -d '\r\n' | LC_ALL=C tr -c '[:print:]' '?' | cut -c1-120)
      log "  ... $desc: $((SECONDS - start))s: ${last:-(no output yet)}"
    fi
  done
  wait "$pid" || rc=$?
  RUN_STEP_PID=
  if ((rc != 0)); then
    log "$desc: FAILED after $((SECONDS - start))s (exit $rc); last lines of $logfile:" >&2
    tail -n 30 "$logfile" | sed 's/^/    /' >&2
    return "$rc"
  fi
  log "$desc: done in $((SECONDS - start))s"
}

# Ends the step run_step is running, if any (for EXIT traps: an interrupted build must not leave a
# debootstrap writing into a directory that is being removed).
stop_step() {
  if [[ -n "${RUN_STEP_PID:-}" ]] && kill -0 "$RUN_STEP_PID" 2>/dev/null; then
    kill -TERM -- "-$RUN_STEP_PID" 2>/dev/null || true
    wait "$RUN_STEP_PID" 2>/dev/null || true
  fi
  RUN_STEP_PID=
}

# Non-login root shells (sudo, some CI runners) may lack the sbin directories where dockerd,
# debootstrap and chroot live.
case ":$PATH:" in
  *:/usr/sbin:*) ;;
  *) PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" ;;
esac
