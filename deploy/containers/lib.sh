# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this
# Shared by build-image.sh and cluster.sh (sourced, not run).
#
# - ensure_host_packages: podman, runc and debootstrap from Debian with apt-get (first step
#   of both scripts; fast when they are present).
# - write_containers_conf: podman reads $CONTAINERS_CONF, written by us: the runc runtime
#   (crun fails on this kind of machine) and explicit nofile/nproc ulimits. The limits are
#   capped at this shell's hard limits: runc cannot raise them (on this machine even root
#   lacks CAP_SYS_RESOURCE, hard nofile 20000) and fails with "error setting rlimit";
#   nproc at 32768 too, the hard limit podman's conmon/runc run with here. Without
#   explicit limits podman asks for nofile 1048576 and runc fails the same way.
# - apt_uri SUITE: the Debian archive this machine's apt already uses (never a hard-coded
#   host name), for debootstrap and the image's own apt sources.

CONTAINERS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$CONTAINERS_DIR/../.." && pwd)
STATE_ROOT=${STRATA_CONTAINERS_STATE:-/run/strata-containers}
export CONTAINERS_CONF=$STATE_ROOT/containers.conf
IMAGE_DEFAULT=localhost/strata:latest

log() { printf '%s: %s\n' "$LOG_TAG" "$*" >&2; }
die() { log "$*"; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "run as root (apt-get, debootstrap and rootful podman with static IPs)"
}

min_limit() { # WANT HARD: the smaller, "unlimited" counting as infinite
  if [ "$2" = unlimited ] || [ "$1" -le "$2" ]; then echo "$1"; else echo "$2"; fi
}

write_containers_conf() {
  local nofile nproc
  nofile=$(min_limit 1048576 "$(ulimit -Hn)")
  nproc=$(min_limit 32768 "$(ulimit -Hu)")
  mkdir -p "$STATE_ROOT"
  cat >"$CONTAINERS_CONF.tmp" <<CONF
# Written by deploy/containers/lib.sh; podman reads it through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
# crun fails to start containers on this kind of machine.
runtime = "runc"
# No systemd as PID 1 needed: cgroupfs and file events work everywhere.
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"
}

ensure_host_packages() {
  local p missing=()
  for p in podman runc debootstrap curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The URI of the first enabled deb822 stanza or one-line entry that serves SUITE (e.g.
# bookworm = the machine's Debian mirror, bookworm-security = its security archive).
apt_uri() {
  local suite=$1 f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk -v want="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " want " ") && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit
        }
        types = ""; suites = ""; uris = ""; enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { key = tolower($1); $1 = ""; sub(/^ +/, "") }
      key == "types:" { types = $0 } key == "suites:" { suites = $0 }
      key == "uris:" { uris = $0 } key == "enabled:" { enabled = tolower($0) }
      END { if (!found) flush() }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return 0; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk -v want="$suite" '$1 == "deb" {
        for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { u = $i; s = $(i + 1); break }
        if (s == want) { print u; exit } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return 0; }
  done
  return 1
}
