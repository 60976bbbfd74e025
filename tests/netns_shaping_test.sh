#!/usr/bin/env bash
# Checks link emulation end to end with real processes: two network
# namespaces joined by a veth pair, a `kvserve pool serve` in one and
# `kvserve pool bench` in the other.
#   1. Linux tc (tbf) shapes the client's egress to RATE_MBIT; the measured
#      put goodput must lie within [LOW, HIGH] x the tc rate.
#   2. tc removed, kvserve's own token bucket (--shape-gbps) shapes the
#      client; the measured goodput must lie within the same band.
# Exit 0 pass, 1 fail, 77 skip (not root, no netns/veth/tc support).
# Usage: tests/netns_shaping_test.sh [path/to/kvserve]   (about 10-15 s)
set -euo pipefail

KVSERVE=${1:-build/tools/kvserve/kvserve}
RATE_MBIT=${RATE_MBIT:-400}          # tc rate
SHAPE_GBPS=${SHAPE_GBPS:-0.3}        # token-bucket rate
MB=${MB:-24}                          # value size per round
LOW=${LOW:-0.70}
HIGH=${HIGH:-1.10}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces and tc)"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"
command -v tc >/dev/null || skip "iproute2 (tc) not installed"
[ -x "$KVSERVE" ] || { echo "FAIL: kvserve binary not found at $KVSERVE"; exit 1; }

TAG=$$
NS_SERVER=kvs-srv-$TAG
NS_CLIENT=kvs-cli-$TAG
VETH_SERVER=kvs$TAG-s
VETH_CLIENT=kvs$TAG-c
ADDR_SERVER=10.213.77.1
ADDR_CLIENT=10.213.77.2
PORT=7400
SERVER_PID=""

cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  ip netns del "$NS_SERVER" 2>/dev/null || true
  ip netns del "$NS_CLIENT" 2>/dev/null || true
}
trap cleanup EXIT

# shellcheck source=tests/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"
netns_pair "$NS_SERVER" "$NS_CLIENT" "$VETH_SERVER" "$VETH_CLIENT" "$ADDR_SERVER" "$ADDR_CLIENT" ||
  skip "cannot create network namespaces joined by a veth pair"

export KVSERVE_SECRET="netns-test-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
ip netns exec "$NS_SERVER" "$KVSERVE" pool serve --listen "$ADDR_SERVER:$PORT" \
  --budget-mb 512 --duration 120 &
SERVER_PID=$!
for _ in $(seq 1 50); do
  ip netns exec "$NS_CLIENT" bash -c "exec 3<>/dev/tcp/$ADDR_SERVER/$PORT" 2>/dev/null && break
  sleep 0.1
done

# The best of COUNT rounds: the link's capacity, least disturbed by CPU
# contention on a shared machine and by TCP slow start in the first round.
bench() {  # prints the best put goodput in Gbps
  ip netns exec "$NS_CLIENT" "$KVSERVE" pool bench --server "$ADDR_SERVER:$PORT" \
    --mb "$MB" --count "${COUNT:-4}" --json "$@" | tail -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["put_gbps_max"])'
}

check() {  # name measured target
  python3 - "$@" "$LOW" "$HIGH" <<'PY'
import sys
name, measured, target, low, high = sys.argv[1], *map(float, sys.argv[2:])
ratio = measured / target
ok = low <= ratio <= high
print(f"{name}: measured {measured:.3f} Gbps, target {target:.3f} Gbps, ratio {ratio:.2f} "
      f"(want {low}-{high}) {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

status=0
# 1. tc token bucket filter on the client's egress (the put direction).
tc -n "$NS_CLIENT" qdisc add dev "$VETH_CLIENT" root tbf rate "${RATE_MBIT}mbit" \
  burst 64kb latency 100ms || skip "tc tbf not supported"
TC_GBPS=$(python3 -c "print($RATE_MBIT/1000)")
MEASURED=$(bench)
check "tc tbf ${RATE_MBIT}mbit" "$MEASURED" "$TC_GBPS" || status=1
tc -n "$NS_CLIENT" qdisc del dev "$VETH_CLIENT" root

# 2. kvserve's sender-side token bucket, no tc.
MEASURED=$(bench --shape-gbps "$SHAPE_GBPS")
check "token bucket ${SHAPE_GBPS} Gbps" "$MEASURED" "$SHAPE_GBPS" || status=1

[ "$status" -eq 0 ] && echo "PASS" || echo "FAIL"
exit "$status"
