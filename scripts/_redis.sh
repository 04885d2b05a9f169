# Real Redis servers for the store tests (they start their own on loopback ports).
#   Sourced by scripts/test: ck_redis provides both servers before pytest starts and exports
#   CACHEKIT_REDIS7_SERVER and CACHEKIT_REDIS8_SERVER for tests/redis_servers.py, or says why it
#   cannot and returns 1 (scripts/test stops there: without them, about a hundred tests could not run).
#   The tests never install a server themselves.
#   Run: `bash scripts/_redis.sh redis8` prints the path of a Redis 8 server (finding or unpacking one
#   as below), or says why there is none and exits 1: `export CACHEKIT_REDIS8_SERVER=$(bash
#   scripts/_redis.sh redis8)` before running pytest by hand.
# Redis 7.x: CACHEKIT_REDIS7_SERVER, else the distribution's redis-server package (Debian 12 ships
# 7.0), installed when missing.
# Redis 8.x: CACHEKIT_REDIS8_SERVER, else the first that works:
#   1. a redis-server 8 or later on PATH;
#   2. one unpacked here before, in $CACHEKIT_REDIS8_HOME (default ~/.cache/cachekit/redis8);
#   3. the distribution's redis-server package when its version is 8 or later (Debian 13 and later);
#   4. on Debian 12, Debian 13's packages (the server and the libraries it needs, its C library
#      included) downloaded with apt and unpacked into $CACHEKIT_REDIS8_HOME, run through that C
#      library's own loader: nothing is installed on the system, the system's libc is left alone.
#      From the machine's own Debian mirror, or $CACHEKIT_REDIS8_MIRROR.

CK_REDIS_SH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_redis.sh

ck_redis_major() { "$1" --version 2>/dev/null | sed -n 's/.* v=\([0-9]*\)\..*/\1/p'; }

ck_redis_found() { if [ -n "$1" ]; then echo "found $1, $(ck_redis_major "$1").x"; else echo "none"; fi; }

ck_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Exports CACHEKIT_REDIS7_SERVER and CACHEKIT_REDIS8_SERVER, each checked to run and to be its major
# version; returns 1 (after saying why on stderr) when either cannot be had. Written with explicit
# returns: it is called as `ck_redis || exit 1`, where errexit does not apply.
ck_redis() {
  local redis7=${CACHEKIT_REDIS7_SERVER:-} redis8=${CACHEKIT_REDIS8_SERVER:-}
  if [ -z "$redis7" ] && ! command -v redis-server >/dev/null; then
    echo "== installing redis-server (the distribution's package)"
    { ck_sudo apt-get install -y -qq redis-server \
      || { ck_sudo apt-get update -qq && ck_sudo apt-get install -y -qq redis-server; }; } >/dev/null
    # The package starts a system service on 6379; the tests never use it.
    ck_sudo systemctl disable --now redis-server >/dev/null 2>&1 \
      || ck_sudo service redis-server stop >/dev/null 2>&1 || true
  fi
  [ -n "$redis7" ] || redis7=$(command -v redis-server || true)
  if [ -z "$redis7" ] || [ "$(ck_redis_major "$redis7")" != 7 ]; then
    echo "scripts/_redis.sh: no Redis 7 server for the tests ($(ck_redis_found "$redis7")): install" \
      "the distribution's redis-server 7.x (Debian 12: apt-get install redis-server) or point" \
      "CACHEKIT_REDIS7_SERVER at one" >&2
    return 1
  fi
  if [ -z "$redis8" ]; then
    # ck_redis8 says why on stderr when it finds none.
    redis8=$(ck_redis8) || return 1
  fi
  if [ "$(ck_redis_major "$redis8")" != 8 ]; then
    echo "scripts/_redis.sh: the Redis 8 server for the tests, $redis8, is not Redis 8.x" \
      "($(ck_redis_found "$redis8")): point CACHEKIT_REDIS8_SERVER at a redis-server 8.x" >&2
    return 1
  fi
  export CACHEKIT_REDIS7_SERVER=$redis7 CACHEKIT_REDIS8_SERVER=$redis8
  echo "== Redis servers: $redis7 ($(ck_redis_major "$redis7").x), $redis8 ($(ck_redis_major "$redis8").x)"
}

# Prints the path of a Redis 8 server on stdout (progress on stderr), or says why there is none on
# stderr and returns 1.
ck_redis8() {
  local found home candidate
  found=$(command -v redis-server || true)
  if [ -n "$found" ] && [ "$(ck_redis_major "$found")" -ge 8 ] 2>/dev/null; then
    echo "$found"; return 0
  fi
  home=${CACHEKIT_REDIS8_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/cachekit/redis8}
  if [ -x "$home/redis-server" ] && [ "$(ck_redis_major "$home/redis-server")" -ge 8 ] 2>/dev/null; then
    echo "$home/redis-server"; return 0
  fi
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    ck_redis8_none "no redis-server 8 on PATH ($(ck_redis_found "$found")) and no apt-get/dpkg-deb to get one"
    return 1
  fi
  candidate=$(apt-cache policy redis-server 2>/dev/null | sed -n 's/^ *Candidate: *\([0-9]*:\)\{0,1\}\([0-9]*\)\..*/\2/p')
  if [ "${candidate:-0}" -ge 8 ] 2>/dev/null; then
    echo "== installing redis-server $candidate.x (the distribution's package)" >&2
    ck_sudo apt-get install -y -qq redis-server >&2 && command -v redis-server && return 0
    ck_redis8_none "apt-get install redis-server (version $candidate) failed"
    return 1
  fi
  if ! grep -qs '^VERSION_CODENAME=bookworm$' /etc/os-release; then
    ck_redis8_none "no redis-server 8 on PATH ($(ck_redis_found "$found")), the distribution offers" \
      "${candidate:-none}.x, and Debian 13's packages are unpacked privately on Debian 12 only"
    return 1
  fi
  mkdir -p "$home" 2>/dev/null || { ck_redis8_none "cannot create $home (set CACHEKIT_REDIS8_HOME)"; return 1; }
  echo "== Redis 8: Debian 13's packages into $home (once; log: $home/unpack.log)" >&2
  # Another bash process, so that errexit holds inside it (it does not in a function called by `if`).
  if ! bash "$CK_REDIS_SH" unpack "$home" >"$home/unpack.log" 2>&1; then
    cat "$home/unpack.log" >&2
    ck_redis8_none "could not unpack Debian 13's Redis 8 into $home: $(tail -n 1 "$home/unpack.log")"
    return 1
  fi
  tail -n 1 "$home/unpack.log" >&2  # the server's version
  echo "$home/redis-server"
}

ck_redis8_none() {
  echo "scripts/_redis.sh: no Redis 8: $*. Put a redis-server 8 on PATH or point CACHEKIT_REDIS8_SERVER at one" >&2
}

# Debian 13's redis-tools (its redis-check-rdb is the Redis binary, which acts as the server under
# that name) and the libraries it needs, unpacked into $1. Run as `bash _redis.sh unpack DIR`.
ck_redis8_unpack() {
  local home=$1 uri src loader lib dep packages
  mkdir -p "$home"
  exec 9>"$home/.lock"
  flock 9  # one download at a time; a second caller finds the first one's result
  if [ -x "$home/redis-server" ] && [ "$(ck_redis_major "$home/redis-server")" -ge 8 ] 2>/dev/null; then
    return 0
  fi
  # CACHEKIT_REDIS8_MIRROR, else the machine's own Debian mirror as its apt sources name it (deb822
  # first, then one-line).
  uri=${CACHEKIT_REDIS8_MIRROR:-}
  [ -n "$uri" ] || uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n' \
    | grep -v -e security -e '^$' | head -n 1 || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  [ -n "$uri" ] || { echo "no Debian mirror found in the apt sources"; return 1; }
  rm -rf "$home/apt" "$home/root" "$home/redis-server"
  mkdir -p "$home/apt/lists/partial" "$home/apt/cache/archives/partial" "$home/apt/debs" "$home/root"
  src=$home/apt/trixie.sources
  printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    "$uri" /usr/share/keyrings/debian-archive-keyring.gpg >"$src"
  # apt with private sources, lists and cache, and no installed packages (an empty dpkg status: every
  # version comes from Debian 13's lists): the system's apt state is neither read nor written.
  local apt_opts=(
    -o "Dir::Etc::SourceList=$src" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::status=/dev/null
    -o "Dir::State::Lists=$home/apt/lists" -o "Dir::Cache=$home/apt/cache"
    -o Acquire::Languages=none -o APT::Sandbox::User=root -o Debug::NoLocking=1
  )
  apt-get "${apt_opts[@]}" update -qq
  # A failed download is only a warning to apt-get update: no lists is the error.
  compgen -G "$home/apt/lists/*_Packages*" >/dev/null || { echo "no Debian 13 package lists from $uri"; return 1; }
  # redis-tools and the shared libraries (Section: libs) it needs, followed through libraries only
  # (a dependency such as adduser is a system tool, not something the binary loads).
  local -A seen=([redis-tools]=1)
  local frontier=(redis-tools) fresh
  packages=(redis-tools)
  apt-cache "${apt_opts[@]}" show redis-tools >/dev/null || { echo "no redis-tools in Debian 13's lists"; return 1; }
  while [ ${#frontier[@]} -gt 0 ]; do
    fresh=()
    for dep in $(apt-cache "${apt_opts[@]}" depends --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${frontier[@]}" \
      | sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: \([^< ][^ ]*\).*/\2/p' | sort -u); do
      [ -n "${seen[$dep]:-}" ] || { seen[$dep]=1; fresh+=("$dep"); }
    done
    [ ${#fresh[@]} -gt 0 ] || break
    mapfile -t frontier < <(apt-cache "${apt_opts[@]}" show --no-all-versions "${fresh[@]}" \
      | awk '/^Package:/ { p = $2 } /^Section:/ && $2 == "libs" { print p }' | sort -u)
    packages+=("${frontier[@]}")
  done
  echo "   ${#packages[@]} packages: ${packages[*]}"
  (cd "$home/apt/debs" && apt-get "${apt_opts[@]}" download -qq "${packages[@]}")
  local deb
  for deb in "$home"/apt/debs/*.deb; do dpkg-deb -x "$deb" "$home/root"; done
  loader=$(ls "$home"/root/usr/lib/*-linux-gnu/ld-linux*.so.* 2>/dev/null | head -n 1 || true)
  [ -n "$loader" ] && [ -x "$home/root/usr/bin/redis-check-rdb" ] \
    || { echo "the unpacked packages hold no loader or no redis-check-rdb"; return 1; }
  lib=$(dirname "$loader")
  # Written under another name and renamed: a half-written wrapper is never found.
  printf '#!/bin/sh\nexec "%s" --library-path "%s" --argv0 redis-server "%s" "$@"\n' \
    "$loader" "$lib" "$home/root/usr/bin/redis-check-rdb" >"$home/redis-server.new"
  chmod +x "$home/redis-server.new"
  [ "$(ck_redis_major "$home/redis-server.new")" -ge 8 ] 2>/dev/null \
    || { echo "the unpacked server does not run: $("$home/redis-server.new" --version 2>&1 | tail -n 3)"; return 1; }
  mv "$home/redis-server.new" "$home/redis-server"
  rm -rf "$home/apt"  # the package lists and the .deb files are not needed any more
  "$home/redis-server" --version
}

# Run rather than sourced: `bash scripts/_redis.sh redis8`.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    redis8) set -uo pipefail; ck_redis8 ;;
    unpack) set -euo pipefail; ck_redis8_unpack "$2" ;;
    *) echo "usage: bash $0 redis8   (prints the path of a Redis 8 server)" >&2; exit 2 ;;
  esac
fi
