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
