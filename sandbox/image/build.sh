#!/usr/bin/env bash
# Builds the sandbox image locally, without any container registry: debootstrap a minimal Debian
# bookworm root filesystem from the machine's own apt mirror, then `docker import` it.
#
# The tag comes from the recipe's content (python3 -m sandbox.image tag), so a second run with an
# unchanged recipe finds the image and does nothing; `tooljail-sandbox:latest` points at it too.
#
# Usage: sandbox/image/build.sh              debootstrap + docker import (needs root)
#        sandbox/image/build.sh --dockerfile docker build from debian:bookworm-slim (needs a registry)
# Environment: SANDBOX_DEBIAN_MIRROR overrides the mirror read from the apt sources.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../../scripts/lib.sh"
export LOG_PREFIX=image

SUITE=bookworm
RECIPE_DIR="$REPO_ROOT/sandbox/image"
IMAGE_ENV_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

builder=debootstrap
case "${1:-}" in
  "") ;;
  --dockerfile) builder=dockerfile ;;
  *) die "unknown option '$1'; usage: $0 [--dockerfile]" ;;
esac

# The package list without comments and blank lines, one name per line.
packages() { sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$RECIPE_DIR/packages.txt"; }

# The first bookworm mirror of the machine's apt configuration (deb822 and one-line formats).
debian_mirror() {
  if [[ -n "${SANDBOX_DEBIAN_MIRROR:-}" ]]; then
    echo "$SANDBOX_DEBIAN_MIRROR"
    return
  fi
  local files=()
  shopt -s nullglob
  files=(/etc/apt/sources.list.d/*.sources)
  shopt -u nullglob
  local found=""
  if ((${#files[@]})); then
    # Paragraph mode: one stanza per record; the security suite (bookworm-security) does not match.
    found=$(awk -v suite="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; suites = ""; uris = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^[[:space:]]*#/) continue
          key = tolower(line); sub(/:.*/, "", key)
          value = line; sub(/^[^:]*:[[:space:]]*/, "", value)
          if (key == "types") types = " " value " "
          else if (key == "suites") suites = " " value " "
          else if (key == "uris") uris = value
          else if (key == "enabled") enabled = tolower(value)
        }
        if (enabled != "no" && types ~ / deb / && suites ~ (" " suite " ") && uris != "") {
          split(uris, u, /[[:space:]]+/); print u[1]; exit
        }
      }' "${files[@]}")
  fi
  if [[ -n "$found" ]]; then
    echo "$found"
    return
  fi
  shopt -s nullglob
  files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list)
  shopt -u nullglob
  if ((${#files[@]})); then
    awk -v suite="$SUITE" '$1 == "deb" {
        sub(/\[[^]]*\][[:space:]]*/, "")
        if ($3 == suite) { print $2; exit }
      }' "${files[@]}"
  fi
}

# Unmounts anything debootstrap left mounted (an interrupted run leaves /proc, /sys inside), then
# removes the directory without ever crossing into a mount.
remove_rootfs() {
  local dir=$1 mnt
  [[ -d "$dir" ]] || return 0
  while read -r mnt; do
    umount -l "$mnt" 2>/dev/null || true
  done < <(awk -v d="$dir" 'index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
  rm -rf --one-file-system "$dir"
}

# Removes what a sandbox never needs (apt caches, docs, man pages, logs) and host details that
# debootstrap copied in (the host's hostname and resolv.conf; Docker provides its own at run time).
slim_rootfs() {
  local root=$1
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian \
    "$root"/usr/share/locale/* "$root"/var/log/*
  # Keep the copyright files: the licences must ship with the binaries.
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  : >"$root/etc/resolv.conf"
  echo sandbox >"$root/etc/hostname"
  # Same as Debian's slim images: later apt installs inside a derived image stay small too.
  cat >"$root/etc/dpkg/dpkg.cfg.d/tooljail-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
}

import_rootfs() {
  local root=$1 tag=$2 hash=$3
  tar --numeric-owner -C "$root" -c . | docker import \
    --change "ENV PATH=$IMAGE_ENV_PATH" \
    --change "ENV LANG=C.UTF-8" \
    --change "ENV HOME=/tmp" \
    --change "WORKDIR /" \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL io.tooljail.recipe=$hash" \
    - "$tag"
}

build_with_debootstrap() {
  local tag=$1 hash=$2
  is_root || die "debootstrap needs root: run 'sudo $0', or '$0 --dockerfile' if a registry is reachable"
  command -v debootstrap >/dev/null || "$REPO_ROOT/scripts/ensure-packages.sh" debootstrap
  local mirror
  mirror=$(debian_mirror)
  [[ -n "$mirror" ]] || die "no Debian $SUITE mirror found in /etc/apt/sources.list{,.d/}; \
set SANDBOX_DEBIAN_MIRROR=http://<mirror>/debian"
  local include
  include=$(packages | paste -sd, -)

  ROOTFS=$(mktemp -d "${TMPDIR:-/var/tmp}/tooljail-rootfs.XXXXXX")
  trap 'stop_step; remove_rootfs "$ROOTFS"' EXIT
  trap 'exit 130' INT TERM
  # The cache keeps the downloaded .debs: a rebuild after a recipe change downloads only what changed.
  mkdir -p "$TOOLS_DIR/cache/debootstrap"
  log "debootstrap $SUITE from $mirror with: ${include//,/ }"
  log "this downloads and installs ~150 packages and takes a few minutes"
  run_step "debootstrap" "$TOOLS_DIR/logs/debootstrap.log" \
    debootstrap --variant=minbase --include="$include" \
    --cache-dir="$TOOLS_DIR/cache/debootstrap" "$SUITE" "$ROOTFS" "$mirror"
  slim_rootfs "$ROOTFS"
  log "root filesystem: $(du -sh --one-file-system "$ROOTFS" | cut -f1)"
  run_step "docker import as $tag" "$TOOLS_DIR/logs/docker-import.log" \
    import_rootfs "$ROOTFS" "$tag" "$hash"
}

build_with_dockerfile() {
  local tag=$1 hash=$2
  run_step "docker build as $tag" "$TOOLS_DIR/logs/docker-build.log" \
    docker build --build-arg "RECIPE_HASH=$hash" -t "$tag" -f "$RECIPE_DIR/Dockerfile" "$RECIPE_DIR"
}

main() {
  local py tag hash latest
  py=$(repo_python)
  tag=$(cd "$REPO_ROOT" && "$py" -m sandbox.image tag) || die "could not compute the image tag"
  hash=$(cd "$REPO_ROOT" && "$py" -m sandbox.image hash)
  latest="${tag%%:*}:latest"
  docker info >/dev/null 2>&1 || die "the Docker engine does not answer; run scripts/ensure-docker.sh"

  # One build at a time: a second caller waits, then finds the image already built.
  mkdir -p "$TOOLS_DIR"
  exec 9>"$TOOLS_DIR/image-build.lock"
  if ! flock -n 9; then
    log "another image build is running; waiting for it"
    flock 9
  fi

  if docker image inspect "$tag" >/dev/null 2>&1; then
    docker tag "$tag" "$latest"
    log "$tag is up to date"
    return 0
  fi
  log "building $tag (recipe changed or image missing) with $builder"
  local start=$SECONDS
  "build_with_$builder" "$tag" "$hash"
  # A broken image must not sit under the content tag, or the next run would call it up to date.
  if ! docker run --rm --network none "$tag" python3 -c 'import json' >/dev/null; then
    docker rmi "$tag" >/dev/null || true
    die "the new image cannot run python3 with json; see the logs in $TOOLS_DIR/logs"
  fi
  docker tag "$tag" "$latest"
  local size
  size=$(docker image inspect -f '{{.Size}}' "$tag")
  log "built $tag (also $latest), $((size / 1024 / 1024)) MiB, in $((SECONDS - start))s"
}

main
