#!/usr/bin/env bash
# A Redis server on 127.0.0.1 for the shared-limiter tests (simlab.runtime.shared), with no persistence.
# Installs Debian's redis-server when it is missing, starts one server on SIMLAB_REDIS_PORT (default 6390) unless
# one already answers there, and prints the URL to use (export it as SIMLAB_TEST_REDIS).
#   scripts/ensure-redis.sh          start (idempotent) and print the URL
#   scripts/ensure-redis.sh stop     stop the server this script started on that port
set -euo pipefail
PORT="${SIMLAB_REDIS_PORT:-6390}"
URL="redis://127.0.0.1:${PORT}/0"
DIR="${TMPDIR:-/tmp}/simlab-redis-${PORT}"

ready() { command -v redis-cli >/dev/null && redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null | grep -qx PONG; }

if [ "${1:-start}" = stop ]; then
  if [ -f "$DIR/redis.pid" ]; then
    kill "$(cat "$DIR/redis.pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do ready || break; sleep 0.1; done
    rm -f "$DIR/redis.pid"
  fi
  exit 0
fi

if ! ready; then
  if ! command -v redis-server >/dev/null; then
    echo "ensure-redis: installing redis-server" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
  fi
  mkdir -p "$DIR"
  # Loopback only, no RDB snapshots, no AOF: a scratch server whose contents die with it.
  redis-server --bind 127.0.0.1 --port "$PORT" --protected-mode yes --save "" --appendonly no \
    --daemonize yes --pidfile "$DIR/redis.pid" --dir "$DIR" --logfile "$DIR/redis.log" >&2
  for _ in $(seq 1 100); do ready && break; sleep 0.1; done
  ready || { echo "ensure-redis: the server did not come up (see $DIR/redis.log)" >&2; exit 1; }
fi
echo "$URL"
