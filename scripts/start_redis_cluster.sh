#!/usr/bin/env bash
# Starts a Redis Cluster for the kvserve KV pool on 127.0.0.1: 3 masters and
# 3 replicas (one per master), ports BASE..BASE+5, each node with its data,
# log, pid file and nodes.conf in DIR/<port>. The first start creates the
# cluster (redis-cli --cluster create ... --cluster-replicas 1); a later
# start on the same DIR restarts the nodes, which re-form the cluster from
# their nodes.conf (with --persist their data comes back from the AOF).
#   scripts/start_redis_cluster.sh [--base-port N] [--dir DIR] [--persist]
#                                  [--node-timeout MS] [--stop]
# --persist: appendonly yes, appendfsync always (nothing acknowledged is lost
# on a crash). --node-timeout: how long a master may be unreachable before
# its replica is promoted (cluster-node-timeout; default 2000 ms). Waits until
# every node reports cluster_state:ok and prints the seed addresses. --stop
# shuts every node of DIR down (SIGTERM, then SIGKILL after 5 s).
set -euo pipefail

BASE=7000
DIR=${KVSERVE_REDIS_CLUSTER_DIR:-/tmp/kvserve-redis-cluster}
PERSIST=0
NODE_TIMEOUT=2000
STOP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) BASE=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --persist) PERSIST=1; shift ;;
    --node-timeout) NODE_TIMEOUT=$2; shift 2 ;;
    --stop) STOP=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

command -v redis-server >/dev/null || { echo "redis-server not installed (scripts/setup.sh)" >&2; exit 1; }
command -v redis-cli >/dev/null || { echo "redis-cli not installed (scripts/setup.sh)" >&2; exit 1; }
PORTS=()
for i in 0 1 2 3 4 5; do PORTS+=($((BASE + i))); done

# SIGTERM to every node at once (each takes a moment to exit), then wait;
# SIGKILL what is left after 5 s.
stop_all() {
  local pids=()
  for p in "${PORTS[@]}"; do
    local pidfile="$DIR/$p/redis.pid"
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  done
  for p in "${PORTS[@]}"; do rm -f "$DIR/$p/redis.pid"; done
}

if [ "$STOP" -eq 1 ]; then
  stop_all
  echo "stopped the redis cluster in $DIR"
  exit 0
fi

up() {  # port: answers PING
  [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]
}

existing=1
for p in "${PORTS[@]}"; do
  mkdir -p "$DIR/$p"
  [ -s "$DIR/$p/nodes.conf" ] || existing=0
  if up "$p"; then echo "port $p is already in use" >&2; exit 1; fi
  ARGS=(--port "$p" --bind 127.0.0.1 --protected-mode yes --dir "$DIR/$p"
        --logfile "$DIR/$p/redis.log" --pidfile "$DIR/$p/redis.pid" --daemonize yes
        --cluster-enabled yes --cluster-config-file nodes.conf
        --cluster-node-timeout "$NODE_TIMEOUT" --save '' --shutdown-on-sigterm now)
  if [ "$PERSIST" -eq 1 ]; then
    ARGS+=(--appendonly yes --appendfsync always)
  else
    ARGS+=(--appendonly no)
  fi
  redis-server "${ARGS[@]}"
done
for p in "${PORTS[@]}"; do
  for _ in $(seq 1 100); do up "$p" && break; sleep 0.05; done
  up "$p" || { echo "redis node $p did not start; see $DIR/$p/redis.log" >&2; exit 1; }
done

if [ "$existing" -eq 0 ]; then
  NODES=()
  for p in "${PORTS[@]}"; do NODES+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${NODES[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 ||
    { cat "$DIR/create.log" >&2; echo "redis-cli --cluster create failed" >&2; exit 1; }
fi

# wait_for SECONDS CMD...: until CMD succeeds (every 50 ms).
wait_for() {
  local tries=$(($1 * 20))
  shift
  for _ in $(seq 1 "$tries"); do "$@" && return 0; sleep 0.05; done
  return 1
}
cluster_ok() {  # port: sees all 16384 slots assigned and state ok
  local info
  info=$(redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null || true)
  echo "$info" | grep -q "cluster_state:ok" && echo "$info" | grep -q "cluster_slots_ok:16384"
}
replica_synced() {  # port: not a replica, or one whose link to its master is up
  local repl
  repl=$(redis-cli -h 127.0.0.1 -p "$1" info replication 2>/dev/null | tr -d '\r')
  echo "$repl" | grep -q '^role:slave' || return 0
  echo "$repl" | grep -q "master_link_status:up"
}
for p in "${PORTS[@]}"; do
  wait_for 10 cluster_ok "$p" || { echo "node $p did not reach cluster_state:ok" >&2; exit 1; }
done
# An unsynced replica is not eligible to take over when its master fails.
for p in "${PORTS[@]}"; do
  wait_for 10 replica_synced "$p" || { echo "replica $p did not sync with its master" >&2; exit 1; }
done
SEEDS=$(printf '127.0.0.1:%s,' "${PORTS[@]}")
echo "redis cluster up (3 masters + 3 replicas, dir $DIR, persistence $([ $PERSIST -eq 1 ] && echo on || echo off))"
echo "seeds ${SEEDS%,}"
echo "stop with: $0 --base-port $BASE --dir $DIR --stop"
