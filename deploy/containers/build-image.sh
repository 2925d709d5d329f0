#!/usr/bin/env bash
# Builds the Strata container image locally, without any registry. Root only.
#
#   deploy/containers/build-image.sh [--tag localhost/strata:latest] [--build-dir DIR]
#                                    [--work-dir DIR] [--fresh-base]
#
# Steps:
#   1. podman, runc, debootstrap from Debian (apt-get), if missing;
#   2. a release build of stratad and strata (meson, --build-dir, default build/container);
#   3. a Debian bookworm root filesystem from debootstrap (minbase) off the mirror this
#      machine's apt uses; kept as WORK/bookworm-minbase.tar so later builds skip it
#      (--fresh-base redoes it);
#   4. in a copy of it: apt sources for bookworm and bookworm-backports on the same mirror,
#      then the runtime packages of the two binaries - found from their `ldd` with
#      `dpkg -S` and pinned to the versions installed here (libraft0 0.22 comes from
#      backports, as deploy/install-deps.sh arranges) - plus curl for probes from inside;
#   5. /usr/local/bin/stratad and /usr/local/bin/strata copied in, /var/lib/strata made;
#   6. `podman import` of the tree as TAG, entry point stratad.
# WORK (default build/container-image) holds the base tarball and the scratch tree.
set -euo pipefail
LOG_TAG=build-image # used by lib.sh's log()
# shellcheck source-path=SCRIPTDIR disable=SC2034
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TAG=$IMAGE_DEFAULT
BUILD_DIR=$REPO/build/container
WORK_DIR=$REPO/build/container-image
FRESH_BASE=0
SUITE=bookworm

usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 64; }

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --tag) TAG=${2:?}; shift 2 ;;
      --build-dir) BUILD_DIR=${2:?}; shift 2 ;;
      --work-dir) WORK_DIR=${2:?}; shift 2 ;;
      --fresh-base) FRESH_BASE=1; shift ;;
      -h|--help) usage ;;
      *) log "unknown argument $1"; usage ;;
    esac
  done
}

build_binaries() {
  bash "$REPO/deploy/install-deps.sh"
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    meson setup "$BUILD_DIR" "$REPO" --buildtype=release -Dtests=false -Dbench=false >/dev/null
  fi
  ninja -C "$BUILD_DIR" -j2 node/stratad node/cli/strata >/dev/null
  STRATAD=$BUILD_DIR/node/stratad
  STRATA=$BUILD_DIR/node/cli/strata
  log "built $STRATAD and $STRATA"
}

# The Debian package that owns a shared library path.
# usrmerge: dpkg may know a library under /lib or /usr/lib, so both are tried.
owner_of() {
  local path=$1 alt pkg
  case "$path" in /usr/*) alt=${path#/usr} ;; *) alt=/usr$path ;; esac
  pkg=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$alt" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null) ||
    die "no Debian package owns $path (needed by stratad)"
  echo "${pkg%%:*}"
}

# Every package the binaries link against, except libc6 (in every Debian root). libraft0
# is pinned to the version installed here: bookworm has 0.15, Strata needs the 0.22 of
# bookworm-backports; the others are whatever bookworm serves (same ABI).
runtime_packages() {
  local so
  ldd "$STRATAD" "$STRATA" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    while read -r so; do owner_of "$so"; done | grep -vx 'libc6' | sort -u |
    while read -r p; do
      case "$p" in libraft*) dpkg-query -W -f='${Package}=${Version}\n' "$p" ;; *) echo "$p" ;; esac
    done
}

make_base() {
  local base=$WORK_DIR/$SUITE-minbase.tar tree=$WORK_DIR/base
  if [ "$FRESH_BASE" = 0 ] && [ -s "$base" ]; then
    log "reusing $base"
    return
  fi
  log "debootstrap $SUITE from $MIRROR (a few minutes)"
  rm -rf "$tree"
  debootstrap --variant=minbase "$SUITE" "$tree" "$MIRROR" >"$WORK_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK_DIR/debootstrap.log" >&2; die "debootstrap failed (log: $WORK_DIR/debootstrap.log)"; }
  tar -C "$tree" --numeric-owner -cf "$base.tmp" .
  mv "$base.tmp" "$base"
  rm -rf "$tree"
}

ROOTFS=""
cleanup() {
  [ -n "$ROOTFS" ] || return 0
  umount "$ROOTFS/proc" 2>/dev/null || true
  rm -rf "$ROOTFS"
}

write_sources() {
  rm -f "$ROOTFS/etc/apt/sources.list"
  cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates $SUITE-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  if [ -n "$SECURITY" ]; then
    cat >>"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SRC

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  # Small image: no documentation, no recommends.
  cat >"$ROOTFS/etc/apt/apt.conf.d/90strata" <<'CONF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
CONF
}

fill_rootfs() {
  ROOTFS=$WORK_DIR/rootfs
  rm -rf "$ROOTFS"
  mkdir -p "$ROOTFS"
  tar -C "$ROOTFS" --numeric-owner -xf "$WORK_DIR/$SUITE-minbase.tar"
  write_sources
  cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
  mount -t proc proc "$ROOTFS/proc"
  local pkgs
  pkgs=$(runtime_packages) # a failure inside aborts here, not in a process substitution
  [ -n "$pkgs" ] || die "found no runtime packages for the binaries"
  # shellcheck disable=SC2206 # package names have no blanks
  pkgs=($pkgs)
  log "runtime packages: ${pkgs[*]}"
  chroot "$ROOTFS" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # (apt's "Can not write log (Is /dev/pts mounted?)" is harmless: no terminal in the chroot)
  chroot "$ROOTFS" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" curl >/dev/null
  chroot "$ROOTFS" apt-get clean
  umount "$ROOTFS/proc"
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/*
  : >"$ROOTFS/etc/resolv.conf" # podman provides its own
  install -m 0755 "$STRATAD" "$STRATA" "$ROOTFS/usr/local/bin/"
  mkdir -p "$ROOTFS/var/lib/strata"
  # The binaries must find every library inside the image.
  if chroot "$ROOTFS" ldd /usr/local/bin/stratad /usr/local/bin/strata | grep -q 'not found'; then
    chroot "$ROOTFS" ldd /usr/local/bin/stratad /usr/local/bin/strata >&2
    die "a library is missing in the image"
  fi
}

import_image() {
  log "podman import as $TAG"
  local old; old=$(podman image inspect -f '{{.Id}}' "$TAG" 2>/dev/null || true)
  tar -C "$ROOTFS" --numeric-owner -c . |
    podman import \
      --change 'ENTRYPOINT ["/usr/local/bin/stratad"]' \
      --change 'WORKDIR /var/lib/strata' \
      --change 'EXPOSE 8000' --change 'EXPOSE 7000' \
      --change "LABEL strata.version=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)" \
      - "$TAG" >/dev/null
  # The previous build, now untagged; kept only while a container still uses it.
  if [ -n "$old" ] && [ "$old" != "$(podman image inspect -f '{{.Id}}' "$TAG")" ]; then
    podman rmi "$old" >/dev/null 2>&1 || true
  fi
  podman image ls "$TAG" >&2
}

main() {
  parse_args "$@"
  need_root
  ensure_host_packages
  write_containers_conf
  MIRROR=$(apt_uri "$SUITE") || die "no Debian $SUITE mirror in /etc/apt/sources.list*"
  SECURITY=$(apt_uri "$SUITE-security") || SECURITY=""
  mkdir -p "$WORK_DIR"
  trap cleanup EXIT
  build_binaries
  make_base
  fill_rootfs
  import_image
  log "done: podman run --rm $TAG --help"
}

main "$@"
