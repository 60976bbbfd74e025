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
# shellcheck source=tests/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"
netns_test_require "$KVSERVE"

netns_names kvs
ADDR_S=10.213.77.1
ADDR_C=10.213.77.2
PORT=7400
SERVER_PID=""

cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  ip netns del "$NS_S" 2>/dev/null || true
  ip netns del "$NS_C" 2>/dev/null || true
}
trap cleanup EXIT

netns_pair "$NS_S" "$NS_C" "$VETH_S" "$VETH_C" "$ADDR_S" "$ADDR_C" ||
  skip "cannot create network namespaces joined by a veth pair"

export KVSERVE_SECRET="netns-test-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
ip netns exec "$NS_S" "$KVSERVE" pool serve --listen "$ADDR_S:$PORT" \
  --budget-mb 512 --duration 120 &
SERVER_PID=$!
for _ in $(seq 1 50); do
  ip netns exec "$NS_C" bash -c "exec 3<>/dev/tcp/$ADDR_S/$PORT" 2>/dev/null && break
  sleep 0.1
done

# The best of COUNT rounds: the link's capacity, least disturbed by CPU
# contention on a shared machine and by TCP slow start in the first round.
bench() {  # prints the best put goodput in Gbps
  ip netns exec "$NS_C" "$KVSERVE" pool bench --server "$ADDR_S:$PORT" \
    --mb "$MB" --count "${COUNT:-4}" --json "$@" | tail -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["put_gbps_max"])'
}

status=0
# 1. tc token bucket filter on the client's egress (the put direction).
tc -n "$NS_C" qdisc add dev "$VETH_C" root tbf rate "${RATE_MBIT}mbit" \
  burst 64kb latency 100ms || skip "tc tbf not supported"
TC_GBPS=$(python3 -c "print($RATE_MBIT/1000)")
MEASURED=$(bench)
in_band "tc tbf ${RATE_MBIT}mbit" "$MEASURED" "$TC_GBPS" || status=1
tc -n "$NS_C" qdisc del dev "$VETH_C" root

# 2. kvserve's sender-side token bucket, no tc.
MEASURED=$(bench --shape-gbps "$SHAPE_GBPS")
in_band "token bucket ${SHAPE_GBPS} Gbps" "$MEASURED" "$SHAPE_GBPS" || status=1

[ "$status" -eq 0 ] && echo "PASS" || echo "FAIL"
exit "$status"
