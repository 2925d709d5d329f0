#!/usr/bin/env bash
# Installs every Debian package that Strata's build, tests and benchmarks need.
# Idempotent and fast when everything is present. Enables bookworm-backports (for
# libraft 0.22) by reusing the Debian mirror already configured on this machine:
# no host name is written here.
set -euo pipefail

PACKAGES=(
  build-essential meson ninja-build pkg-config
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler
  liblz4-dev libxxhash-dev libcmocka-dev libssl-dev libjansson-dev libhttp-parser-dev
  clang libclang-rt-14-dev
  awscli python3-boto3 python3-pytest python3-xxhash wrk curl procps iproute2
  libnetfilter-queue-dev iptables iputils-ping
)
BACKPORTS_PACKAGES=(libraft-dev)
# Only the benchmarks need these; STRATA_BENCH_DEPS=1 installs them too.
BENCH_PACKAGES=(librocksdb-dev etcd-server etcd-client gnuplot-nox)
# dynalite (the benchmark peer) comes from npm; Debian's npm only where none is present.
command -v npm >/dev/null 2>&1 || BENCH_PACKAGES+=(nodejs npm)

log() { printf 'install-deps: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  log "run as root (it calls apt-get)"; exit 1
fi
export DEBIAN_FRONTEND=noninteractive

# The first Debian archive URI already configured (deb822 or one-line format).
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/ {for (i=2;i<=NF;i++) if ($i !~ /security/) {print $i; exit}}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1=="deb" && $0 !~ /security/ && $0 ~ /bookworm/ {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
}

enable_backports() {
  local list=/etc/apt/sources.list.d/strata-backports.sources
  if grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    return 1
  fi
  local mirror; mirror=$(debian_mirror)
  if [ -z "$mirror" ]; then log "no Debian mirror found in apt sources"; exit 1; fi
  log "enabling bookworm-backports from $mirror"
  cat >"$list" <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  return 0
}

wanted=("${PACKAGES[@]}" "${BACKPORTS_PACKAGES[@]}")
if [ "${STRATA_BENCH_DEPS:-0}" = 1 ]; then wanted+=("${BENCH_PACKAGES[@]}"); fi

missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# libraft must be 0.22 (bookworm's 0.15 has a commit-rule safety bug).
raft_ver=$(dpkg-query -W -f='${Version}' libraft-dev 2>/dev/null || true)
case "$raft_ver" in 0.2[2-9]*|0.[3-9]*) ;; *) missing+=(libraft-dev) ;; esac

if [ ${#missing[@]} -eq 0 ]; then log "all packages present"; exit 0; fi

enable_backports || true
log "installing: ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
apt-get install -y -qq --no-install-recommends -t bookworm-backports "${BACKPORTS_PACKAGES[@]}" >/dev/null
if [ "${STRATA_BENCH_DEPS:-0}" = 1 ]; then
  apt-get install -y -qq --no-install-recommends "${BENCH_PACKAGES[@]}" >/dev/null
fi
raft_ver=$(dpkg-query -W -f='${Version}' libraft-dev)
case "$raft_ver" in 0.2[2-9]*|0.[3-9]*) ;; *) log "libraft-dev is $raft_ver, need >= 0.22"; exit 1 ;; esac
log "done (libraft $raft_ver)"
