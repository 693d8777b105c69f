#!/usr/bin/env bash
# Makes sure a Docker engine answers: does nothing when `docker info` works; otherwise installs
# Debian's docker.io when dockerd is missing, starts dockerd in the background and waits for it.
# Environment: DOCKERD_ARGS adds flags to dockerd (e.g. "--iptables=false" inside a container);
# DOCKER_WAIT_SECONDS (default 60) is how long to wait for it to answer; DOCKERD_LOG and
# DOCKERD_PIDFILE move dockerd's log and pid file.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=docker

WAIT_SECONDS=${DOCKER_WAIT_SECONDS:-60}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/tooljail-dockerd.log}
DOCKERD_PID=${DOCKERD_PIDFILE:-/var/run/docker.pid}

server_version() { docker version --format '{{.Server.Version}}' 2>/dev/null; }

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  log "Docker engine $(server_version) is running"
  exit 0
fi

# The CLI may be a standalone client (/usr/local/bin/docker) without the daemon, so both are checked;
# Debian's docker.io provides both.
if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  is_root || die "Docker is not installed; as root run: apt-get install -y docker.io (or see \
https://docs.docker.com/engine/install/), then start it and run this script again"
  "$REPO_ROOT/scripts/ensure-packages.sh" docker.io
  hash -r
fi

is_root || die "the Docker engine does not answer: if it is stopped, start it (sudo systemctl \
start docker, or run this script as root); if it runs, add your user to the 'docker' group"

dockerd_alive() {
  local pid
  pid=$(cat "$DOCKERD_PID" 2>/dev/null) || return 1
  [[ -n "$pid" ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]]
}

if dockerd_alive; then
  # Started (perhaps by another caller) but not answering yet: wait for it, never start a second.
  log "dockerd (pid $(cat "$DOCKERD_PID")) is starting; waiting for it"
  stuck_hint="dockerd (pid $(cat "$DOCKERD_PID")) runs but does not answer; check its log, or stop it \
and run this script again"
elif [[ -d /run/systemd/system ]] && systemctl cat docker.service >/dev/null 2>&1; then
  log "starting docker.service"
  systemctl start docker.service
  stuck_hint="docker.service did not answer; see: journalctl -u docker.service"
else
  # A pid file left by a dockerd that died makes the next one refuse to start when the pid has been
  # reused by another process.
  rm -f "$DOCKERD_PID"
  log "starting dockerd in the background (log: $DOCKERD_LOG)"
  # setsid: a Ctrl-C of this script (or of make) must not take the engine down with it.
  # Word splitting of DOCKERD_ARGS is wanted: it holds several flags.
  # shellcheck disable=SC2086
  setsid nohup dockerd --pidfile "$DOCKERD_PID" ${DOCKERD_ARGS:-} >>"$DOCKERD_LOG" 2>&1 </dev/null &
  started_pid=$!
  stuck_hint="dockerd did not answer; see $DOCKERD_LOG"
fi

start=$SECONDS
until docker info >/dev/null 2>&1; do
  if [[ -n "${started_pid:-}" ]] && ! kill -0 "$started_pid" 2>/dev/null; then
    log "dockerd exited during start-up; last lines of $DOCKERD_LOG:" >&2
    tail -n 20 "$DOCKERD_LOG" | sed 's/^/    /' >&2
    die "dockerd did not start; fix the error above (in a container, DOCKERD_ARGS=--iptables=false \
may help) and run this script again"
  fi
  if ((SECONDS - start >= WAIT_SECONDS)); then
    die "no answer within ${WAIT_SECONDS}s: $stuck_hint"
  fi
  sleep 1
done
log "Docker engine $(server_version) is running (ready after $((SECONDS - start))s)"
