# Shell helpers for the network-namespace tests and benchmarks (sourced).

# netns_pair NS_A NS_B DEV_A DEV_B ADDR_A ADDR_B: two namespaces joined by a
# veth pair (DEV_A in NS_A with ADDR_A/30, DEV_B in NS_B with ADDR_B/30),
# every interface up. Returns non-zero when namespaces or veth are missing.
netns_pair() {
  local ns_a=$1 ns_b=$2 dev_a=$3 dev_b=$4 addr_a=$5 addr_b=$6
  ip netns add "$ns_a" 2>/dev/null || return 1
  ip netns add "$ns_b" 2>/dev/null || return 1
  ip link add "$dev_a" type veth peer name "$dev_b" 2>/dev/null || return 2
  ip link set "$dev_a" netns "$ns_a"
  ip link set "$dev_b" netns "$ns_b"
  ip -n "$ns_a" addr add "$addr_a/30" dev "$dev_a"
  ip -n "$ns_b" addr add "$addr_b/30" dev "$dev_b"
  ip -n "$ns_a" link set lo up
  ip -n "$ns_b" link set lo up
  ip -n "$ns_a" link set "$dev_a" up
  ip -n "$ns_b" link set "$dev_b" up
}

# tbf_burst RATE_MBIT: a token-bucket depth (bytes) of >= 2 ms at the rate
# (a 1 kHz timer tick) and >= 64 KiB.
tbf_burst() {
  local burst=$(($1 * 1000000 / 8 / 500))
  [ "$burst" -ge 65536 ] || burst=65536
  echo "$burst"
}

# wait_file FILE [TENTHS]: waits until FILE is non-empty (default 10 s).
wait_file() {
  for _ in $(seq 1 "${2:-100}"); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}

# netns_test_require KVSERVE: the netns tests' preconditions. Exits 77
# (skip) unless this is root with iproute2's ip and tc; exits 1 when the
# kvserve binary KVSERVE is missing.
netns_test_require() {
  local why=""
  if [ "$(id -u)" -ne 0 ]; then why="needs root (network namespaces and tc)"
  elif ! command -v ip >/dev/null; then why="iproute2 (ip) not installed"
  elif ! command -v tc >/dev/null; then why="iproute2 (tc) not installed"
  fi
  [ -z "$why" ] || { echo "SKIP: $why"; exit 77; }
  [ -x "$1" ] || { echo "FAIL: kvserve binary not found at $1"; exit 1; }
}

# netns_names PREFIX: sets NS_S, NS_C (server and client namespaces) and
# VETH_S, VETH_C (their veth ends), unique to this shell ($$). PREFIX of at
# most 4 characters keeps the veth names within 15.
netns_names() {
  NS_S=$1-s-$$
  NS_C=$1-c-$$
  VETH_S=$1$$-s
  VETH_C=$1$$-c
}

# in_band NAME MEASURED TARGET [LOW [HIGH]]: prints MEASURED against TARGET
# (Gbps) and their ratio; returns 0 when LOW <= ratio <= HIGH (default: the
# caller's $LOW and $HIGH).
in_band() {
  python3 - "$1" "$2" "$3" "${4:-$LOW}" "${5:-$HIGH}" <<'PY'
import sys
name, measured, target, low, high = sys.argv[1], *map(float, sys.argv[2:])
ratio = measured / target
ok = low <= ratio <= high
print(f"  {name}: measured {measured:.3f} Gbps vs target {target:.3f} Gbps, ratio {ratio:.2f} "
      f"(want {low}-{high}) {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}
