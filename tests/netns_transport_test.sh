#!/usr/bin/env bash
# Our TCP and UCX (its tcp transport on a veth) between two network
# namespaces, with real processes (`kvserve transport serve` in one,
# `kvserve transport bench` in the other):
#   1. goodput tracking: tc tbf shapes the sender's egress to RATE1_MBIT; the
#      bandwidth estimator fed by the transfers must read within [LOW, HIGH]
#      x the rate; the rate changes to RATE2_MBIT mid-run and the estimate
#      must follow within two frames;
#   2. loss (and delay): tc netem loss 1% + delay 5 ms where the kernel has
#      sch_netem, else 1% random drops with nftables (numgen) and no delay
#      (said so); every frame must still arrive intact (the receiver checks
#      each message's checksum and the frame's record count);
#   3. link down: `ip link set ... down` mid-transfer; the sender must fail
#      with a clear error (timeout or unavailable) instead of hanging;
#   4. peer killed: the receiver is SIGKILLed mid-transfer; the sender must
#      fail with Unavailable (detected, not an idle timeout).
# Exit 0 pass, 1 fail, 77 skip (not root, or no netns/veth/tc).
#   tests/netns_transport_test.sh [path/to/kvserve]          (about 30 s)
set -euo pipefail

KVSERVE=${1:-build/release/tools/kvserve/kvserve}
RATE1_MBIT=${RATE1_MBIT:-200}
RATE2_MBIT=${RATE2_MBIT:-50}
LOW=${LOW:-0.6}
HIGH=${HIGH:-1.2}
TRANSPORTS=${TRANSPORTS:-"tcp ucx"}

skip() { echo "SKIP: $*"; exit 77; }
# shellcheck source=tests/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"
netns_test_require "$KVSERVE"
KVSERVE=$(realpath "$KVSERVE")

netns_names kvnt
ADDR_S=10.213.78.1
ADDR_C=10.213.78.2
DIR=$(mktemp -d /tmp/kvserve-netns-transport-XXXXXX)
SERVER_PID=""
BENCH_PID=""
cleanup() {
  [ -n "$BENCH_PID" ] && kill "$BENCH_PID" 2>/dev/null || true
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  ip netns del "$NS_S" 2>/dev/null || true
  ip netns del "$NS_C" 2>/dev/null || true
  nft delete table inet "kvnt$$" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

netns_pair "$NS_S" "$NS_C" "$VETH_S" "$VETH_C" "$ADDR_S" "$ADDR_C" ||
  skip "cannot create network namespaces joined by a veth pair"
tc -n "$NS_C" qdisc add dev "$VETH_C" root tbf rate "${RATE1_MBIT}mbit" burst 64kb latency 100ms ||
  skip "tc tbf not supported"
tc -n "$NS_C" qdisc del dev "$VETH_C" root

export KVSERVE_SECRET="netns-transport-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
status=0
fail() { echo "FAIL: $*"; status=1; }

flags() {  # transport side -> kvserve flags (UCX on the veth only: shm would bypass it)
  if [ "$1" = ucx ]; then
    echo "--transport ucx --ucx-tls tcp --ucx-devices $([ "$2" = s ] && echo "$VETH_S" || echo "$VETH_C")"
  else
    echo "--transport tcp"
  fi
}

start_server() {  # transport
  rm -f "$DIR/addr"
  # shellcheck disable=SC2046
  ip netns exec "$NS_S" "$KVSERVE" transport serve --listen "$ADDR_S:7600" --address-file "$DIR/addr" \
    --duration 120 --timeout 5 $(flags "$1" s) >/dev/null 2>"$DIR/server.log" &
  SERVER_PID=$!
  wait_file "$DIR/addr" || { cat "$DIR/server.log"; echo "FAIL: frame sink did not start"; exit 1; }
}
stop_server() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
bench() {  # transport out-file args...  (in the background; BENCH_PID)
  local t=$1 out=$2
  shift 2
  : >"$out"
  # shellcheck disable=SC2046
  ip netns exec "$NS_C" "$KVSERVE" transport bench --server "$ADDR_S:7600" $(flags "$t" c) \
    --per-frame "$@" >"$out" 2>"$out.err" &
  BENCH_PID=$!
}
wait_lines() {  # file n: waits (<= 60 s) until the file has n lines or the bench ended
  for _ in $(seq 1 600); do
    [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    kill -0 "$BENCH_PID" 2>/dev/null || return 0
    sleep 0.1
  done
}
field() {  # file line field
  sed -n "${2}p" "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['$3'])"
}

# expect_failure NAME FILE PATTERN: the bench (BENCH_PID) must exit non-zero
# with an error matching PATTERN in FILE.err.
expect_failure() {
  if wait "$BENCH_PID"; then
    fail "$1: the transfer 'succeeded'"
  elif grep -qiE "$3" "$2.err"; then
    echo "  $1: $(grep -oiE "($3).*" "$2.err" | head -1 | cut -c1-120)"
  else
    cat "$2.err"; fail "$1: unclear error (want $3)"
  fi
  BENCH_PID=""
}

for t in $TRANSPORTS; do
  echo "== $t"
  # 1. Goodput tracking across a rate change.
  start_server "$t"
  tc -n "$NS_C" qdisc add dev "$VETH_C" root tbf rate "${RATE1_MBIT}mbit" burst 64kb latency 100ms
  bench "$t" "$DIR/track.jsonl" --sizes-mb 2 --count 8 --warmup 0 --record-kb 256
  wait_lines "$DIR/track.jsonl" 4
  tc -n "$NS_C" qdisc change dev "$VETH_C" root tbf rate "${RATE2_MBIT}mbit" burst 64kb latency 100ms
  if wait "$BENCH_PID"; then
    in_band "$t estimate at ${RATE1_MBIT}mbit" "$(field "$DIR/track.jsonl" 4 estimate_gbps)" \
      "$(python3 -c "print($RATE1_MBIT/1000)")" || fail "$t: estimate does not track ${RATE1_MBIT}mbit"
    in_band "$t estimate after the change to ${RATE2_MBIT}mbit" \
      "$(field "$DIR/track.jsonl" 8 estimate_gbps)" "$(python3 -c "print($RATE2_MBIT/1000)")" ||
      fail "$t: estimate does not follow the change to ${RATE2_MBIT}mbit"
  else
    cat "$DIR/track.jsonl.err"; fail "$t: transfers failed on a shaped link"
  fi
  BENCH_PID=""
  tc -n "$NS_C" qdisc del dev "$VETH_C" root

  # 2. Loss (and delay where netem exists): frames still arrive intact.
  if tc -n "$NS_C" qdisc add dev "$VETH_C" root netem loss 1% delay 5ms 2>/dev/null; then
    impaired="netem loss 1% delay 5ms"
  elif command -v nft >/dev/null && nft add table inet "kvnt$$" 2>/dev/null &&
       ip netns exec "$NS_C" nft add table inet kvnt &&
       ip netns exec "$NS_C" nft add chain inet kvnt out '{ type filter hook output priority 0; }' &&
       ip netns exec "$NS_C" nft add rule inet kvnt out oifname "$VETH_C" numgen random mod 100 '<' 1 drop; then
    impaired="nftables 1% random drops (SKIP delay: this kernel has no sch_netem)"
  else
    impaired=""
    echo "  SKIP loss/delay: neither tc netem nor nftables is available"
  fi
  if [ -n "$impaired" ]; then
    bench "$t" "$DIR/loss.jsonl" --sizes-mb 4 --count 3 --warmup 0 --timeout 20
    if wait "$BENCH_PID" && [ "$(wc -l <"$DIR/loss.jsonl")" -eq 3 ]; then
      echo "  $t under $impaired: 3 frames delivered intact"
    else
      cat "$DIR/loss.jsonl" "$DIR/loss.jsonl.err"; fail "$t: frames lost under $impaired"
    fi
    BENCH_PID=""
    tc -n "$NS_C" qdisc del dev "$VETH_C" root 2>/dev/null || true
    ip netns exec "$NS_C" nft delete table inet kvnt 2>/dev/null || true
  fi

  # 3. Link down mid-transfer: a clear error, no hang.
  tc -n "$NS_C" qdisc add dev "$VETH_C" root tbf rate 100mbit burst 64kb latency 100ms
  bench "$t" "$DIR/down.jsonl" --sizes-mb 8 --count 50 --warmup 0 --timeout 3
  wait_lines "$DIR/down.jsonl" 1
  ip -n "$NS_C" link set "$VETH_C" down
  expect_failure "$t link down" "$DIR/down.jsonl" "timeout|unavailable"
  ip -n "$NS_C" link set "$VETH_C" up
  tc -n "$NS_C" qdisc del dev "$VETH_C" root
  stop_server

  # 4. Receiver killed mid-transfer: detected as Unavailable, not a timeout.
  start_server "$t"
  tc -n "$NS_C" qdisc add dev "$VETH_C" root tbf rate 100mbit burst 64kb latency 100ms
  bench "$t" "$DIR/kill.jsonl" --sizes-mb 8 --count 50 --warmup 0 --timeout 30
  wait_lines "$DIR/kill.jsonl" 1
  kill -9 "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  expect_failure "$t peer killed" "$DIR/kill.jsonl" "unavailable"
  tc -n "$NS_C" qdisc del dev "$VETH_C" root
done

[ "$status" -eq 0 ] && echo "PASS" || echo "FAIL"
exit "$status"
