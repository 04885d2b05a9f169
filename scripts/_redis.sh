# Sourced by scripts/test: real Redis servers for the store tests (they start their own on loopback).
#   Redis 7.x: Debian's redis-server package, installed when missing.
#   Redis 8.x: the workplace tool shared/tools/redis8 beside this checkout (it installs one if needed).
# Exports CACHEKIT_REDIS7_SERVER / CACHEKIT_REDIS8_SERVER for tests/redis_servers.py.
ck_redis() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if ! command -v redis-server >/dev/null; then
    echo "== installing redis-server (Debian package)"
    { $sudo apt-get install -y -qq redis-server || { $sudo apt-get update -qq && $sudo apt-get install -y -qq redis-server; }; } >/dev/null
    # The package starts a system service on 6379; the tests never use it.
    $sudo systemctl disable --now redis-server >/dev/null 2>&1 || $sudo service redis-server stop >/dev/null 2>&1 || true
  fi
  export CACHEKIT_REDIS7_SERVER=${CACHEKIT_REDIS7_SERVER:-$(command -v redis-server)}
  if [ -z "${CACHEKIT_REDIS8_SERVER:-}" ]; then
    local tool
    for tool in "$ROOT/../shared/tools/redis8" "$ROOT/shared/tools/redis8" /work/shared/tools/redis8; do
      if [ -x "$tool" ]; then
        CACHEKIT_REDIS8_SERVER=$("$tool") && export CACHEKIT_REDIS8_SERVER
        break
      fi
    done
  fi
}
