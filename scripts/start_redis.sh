#!/usr/bin/env bash
# Starts a redis-server for the kvserve KV pool, bound to 127.0.0.1 only,
# with its data and log in a directory of its own.
#   scripts/start_redis.sh [--port N] [--dir DIR] [--persist] [--stop]
# --persist turns on appendonly persistence (appendfsync everysec) so pool
# contents survive a restart; without it nothing is written to disk.
# Prints the port and the pid file. --stop shuts the server of DIR down.
# Exits 3 when another process already listens on the port (the server
# answering there is not the one started here): pick another port.
set -euo pipefail

PORT=6379
DIR=${KVSERVE_REDIS_DIR:-/tmp/kvserve-redis}
PERSIST=0
STOP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --persist) PERSIST=1; shift ;;
    --stop) STOP=1; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

command -v redis-server >/dev/null || { echo "redis-server not installed (scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$DIR"
PIDFILE="$DIR/redis.pid"

if [ "$STOP" -eq 1 ]; then
  # The pid is read once: redis removes its pid file as it exits, so a
  # second read after the kill can fail (and set -e would end the script).
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "stopped redis in $DIR"
  else
    echo "no running redis in $DIR"
  fi
  exit 0
fi

ARGS=(--port "$PORT" --bind 127.0.0.1 --protected-mode yes --dir "$DIR"
      --logfile "$DIR/redis.log" --pidfile "$PIDFILE" --daemonize yes --save '')
if [ "$PERSIST" -eq 1 ]; then
  ARGS+=(--appendonly yes --appendfsync everysec)
else
  ARGS+=(--appendonly no)
fi
redis-server "${ARGS[@]}"
for _ in $(seq 1 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    # Something listens: make sure it is this server, not another process
    # that had the port (its process_id must be the one in our pid file).
    for _ in $(seq 1 20); do [ -s "$PIDFILE" ] && break; sleep 0.05; done
    ours=$(cat "$PIDFILE" 2>/dev/null || true)
    theirs=$( (timeout 2 redis-cli -p "$PORT" info server 2>/dev/null || true) | tr -d '\r' |
              sed -n 's/^process_id://p')
    if [ -z "$ours" ] || [ "$ours" != "$theirs" ]; then
      echo "port $PORT is in use by another process (see $DIR/redis.log)" >&2
      exit 3
    fi
    echo "redis listening on 127.0.0.1:$PORT (dir $DIR, persistence $([ $PERSIST -eq 1 ] && echo on || echo off))"
    echo "pid file $PIDFILE; stop with: $0 --dir $DIR --stop"
    exit 0
  fi
  sleep 0.1
done
echo "redis did not start; see $DIR/redis.log" >&2
exit 1
