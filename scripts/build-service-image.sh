#!/usr/bin/env bash
# Builds the image the service tests boot a real systemd in (tests/service/): Debian bookworm with
# systemd as PID 1 and what `make install` and the installed daemon need (Python 3.11 with venv, a
# C compiler for the Landlock wrapper, make, git and ripgrep for the tools, /bin/kill for the
# unit's ExecReload). No registry: debootstrap from the machine's own apt mirror, then
# `docker import`, as the sandbox image is built (sandbox/image/build.sh).
#
# The tag is the content hash of this file (the recipe is all here), so a second run with an
# unchanged recipe finds the image and returns at once; `tooljail-service:latest` points at it.
# No Docker CLI inside: the daemon talks to the host's engine through the Docker SDK.
#
#   scripts/build-service-image.sh          build when missing (needs root), then print the tag
#   scripts/build-service-image.sh --tag    only print the tag this recipe builds
#
# Environment: SERVICE_DEBIAN_MIRROR overrides the mirror read from the apt configuration.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export LOG_PREFIX=service-image

SUITE=bookworm
REPOSITORY=tooljail-service
RECIPE=$REPO_ROOT/scripts/build-service-image.sh
IMAGE_ENV_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Recommends are not installed (debootstrap never does), so each need is named:
#   systemd systemd-sysv dbus   PID 1, /sbin/init, and the bus systemctl and logind use
#   procps                      /bin/kill, which the unit's ExecReload runs
#   python3 python3-venv        install.sh's virtualenv (bookworm's Python is 3.11)
#   gcc libc6-dev make          make install, and the Landlock wrapper it compiles
#   git ripgrep ca-certificates the policy revision, Grep, and TLS for pip
PACKAGES=(
  systemd systemd-sysv dbus procps
  python3 python3-venv
  gcc libc6-dev make
  git ripgrep ca-certificates
)

recipe_hash() { sha256sum "$RECIPE" | cut -c1-64; }
image_tag() { echo "$REPOSITORY:$(recipe_hash | cut -c1-12)"; }

# The first mirror apt itself reads for $SUITE (apt parses both source formats for us).
debian_mirror() {
  if [[ -n "${SERVICE_DEBIAN_MIRROR:-}" ]]; then
    echo "$SERVICE_DEBIAN_MIRROR"
    return
  fi
  apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' |
    awk -v suite="$SUITE" '$2 == suite && $3 == "deb" { print $1; exit }'
}

# Unmounts what an interrupted debootstrap left mounted inside, then removes the directory
# without crossing into a mount.
remove_rootfs() {
  local dir=$1 mnt
  [[ -n "$dir" && -d "$dir" ]] || return 0
  while read -r mnt; do
    umount -l "$mnt" 2>/dev/null || true
  done < <(awk -v d="$dir" 'index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
  rm -rf --one-file-system "$dir"
}

# What a container boot needs that debootstrap does not give.
prepare_rootfs() {
  local root=$1
  # Each container gets its own machine id at boot (an empty file: systemd makes a transient one).
  : >"$root/etc/machine-id"
  rm -f "$root/var/lib/dbus/machine-id"
  # Docker provides these at run time; debootstrap copied the build host's.
  : >"$root/etc/resolv.conf"
  echo tooljail-service >"$root/etc/hostname"
  # multi-user, not graphical: nothing here draws on a screen.
  ln -sfn /lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
  # Space only: no apt lists, caches, manuals or translations (copyright files stay).
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
    "$root"/var/lib/apt/lists/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/var/log/*.log
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
}

import_rootfs() {
  local root=$1 tag=$2 hash=$3
  # container=docker tells systemd where it runs (it then skips what needs a real machine).
  # This engine's import takes no STOPSIGNAL: `docker run --stop-signal SIGRTMIN+3` asks systemd
  # to shut down cleanly.
  tar --numeric-owner -C "$root" -c . | docker import \
    --change "ENV PATH=$IMAGE_ENV_PATH" \
    --change "ENV LANG=C.UTF-8" \
    --change "ENV container=docker" \
    --change 'CMD ["/sbin/init"]' \
    --change "LABEL io.tooljail.recipe=$hash" \
    - "$tag"
}

build() {
  local tag=$1 hash=$2 mirror include
  is_root || die "debootstrap needs root: run 'sudo $0'"
  command -v debootstrap >/dev/null || "$REPO_ROOT/scripts/ensure-packages.sh" debootstrap
  mirror=$(debian_mirror)
  [[ -n "$mirror" ]] || die "no Debian $SUITE mirror in the apt configuration; \
set SERVICE_DEBIAN_MIRROR=http://<mirror>/debian"
  include=$(
    IFS=,
    echo "${PACKAGES[*]}"
  )
  ROOTFS=$(mktemp -d "${TMPDIR:-/var/tmp}/tooljail-service-rootfs.XXXXXX")
  trap 'stop_step; remove_rootfs "$ROOTFS"' EXIT
  trap 'exit 130' INT TERM
  # The sandbox image's cache: the packages both images share are downloaded once. The build
  # lock (held by the caller) keeps two debootstraps from writing into it at once.
  mkdir -p "$TOOLS_DIR/cache/debootstrap"
  log "debootstrap $SUITE from $mirror with: ${PACKAGES[*]}"
  log "a first build downloads about 200 packages and takes a few minutes"
  run_step "debootstrap" "$TOOLS_DIR/logs/service-debootstrap.log" \
    debootstrap --variant=minbase --include="$include" \
    --cache-dir="$TOOLS_DIR/cache/debootstrap" "$SUITE" "$ROOTFS" "$mirror"
  prepare_rootfs "$ROOTFS"
  log "root filesystem: $(du -sh --one-file-system "$ROOTFS" | cut -f1)"
  run_step "docker import as $tag" "$TOOLS_DIR/logs/service-import.log" \
    import_rootfs "$ROOTFS" "$tag" "$hash"
  remove_rootfs "$ROOTFS"
  trap - EXIT
}

main() {
  local tag hash
  tag=$(image_tag)
  hash=$(recipe_hash)
  # Progress goes to stderr; stdout carries only the tag, for the test harness.
  exec 3>&1 1>&2
  case "${1:-}" in
    --tag)
      echo "$tag" >&3
      return 0
      ;;
    "") ;;
    *) die "unknown option '$1'; usage: $0 [--tag]" ;;
  esac
  docker info >/dev/null 2>&1 || die "the Docker engine does not answer; run scripts/ensure-docker.sh"

  # One image build at a time on this machine (shared with sandbox/image/build.sh): a second
  # caller waits, then finds the image built.
  mkdir -p "$TOOLS_DIR"
  exec 9>"$TOOLS_DIR/image-build.lock"
  if ! flock -n 9; then
    log "another image build is running; waiting for it"
    flock 9
  fi
  if docker image inspect "$tag" >/dev/null 2>&1; then
    docker tag "$tag" "$REPOSITORY:latest"
    log "$tag is up to date"
    echo "$tag" >&3
    return 0
  fi
  log "building $tag (recipe changed or image missing)"
  local start=$SECONDS
  build "$tag" "$hash"
  # A broken image must not sit under the content tag, or the next run would call it up to date.
  if ! docker run --rm --network none --entrypoint /bin/sh "$tag" -c \
    'test -x /lib/systemd/systemd && test -x /bin/kill && python3 -c "import venv, ensurepip" && cc --version' \
    >/dev/null; then
    docker rmi "$tag" >/dev/null || true
    die "the new image lacks systemd, kill, python3 with venv or cc; see $TOOLS_DIR/logs"
  fi
  docker tag "$tag" "$REPOSITORY:latest"
  local size
  size=$(docker image inspect -f '{{.Size}}' "$tag")
  log "built $tag (also $REPOSITORY:latest), $((size / 1024 / 1024)) MiB, in $((SECONDS - start))s"
  echo "$tag" >&3
}

main "$@"
