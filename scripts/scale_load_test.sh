#!/usr/bin/env bash
# The 2 x 2 load test of N x M serving in network namespaces, written to
# docs/scale_load.md (generated: do not edit by hand).
#
# Five namespaces: the router (K concurrent clients), prefill workers p0 and
# p1, decode workers d0 and d1. Each prefill worker reaches each decode worker
# over its own veth pair whose prefill-side egress (the KV direction) is
# shaped with tc tbf to a different rate (RATES_MBIT: p0-d0 p0-d1 p1-d0
# p1-d1); the router reaches the prefill workers over unshaped veths. Run
# twice with the same requests:
#   * 2 x 2: the router over p0 and p1, each over d0 and d1;
#   * one pair: the router over p0 alone, p0 over d0 alone (its p0-d0 link).
# Reports throughput (requests/s) and JCT p50 / p90 / p99 of each, from
# `kvserve router --concurrency K --json`.
#   sudo scripts/scale_load_test.sh [path/to/kvserve]
# Env: RATES_MBIT ("100 25 50 200"), CLIENTS (4), REQUESTS (32), PROMPT (256),
# NEW_TOKENS (8), TRANSPORT (tcp | ucx: UCX's tcp transport on the veths),
# OUT (docs/scale_load.md).
set -euo pipefail
cd "$(dirname "$0")/.."
KVSERVE=$(realpath "${1:-build/release/tools/kvserve/kvserve}")
read -r -a RATES <<<"${RATES_MBIT:-100 25 50 200}"
CLIENTS=${CLIENTS:-4}
REQUESTS=${REQUESTS:-32}
PROMPT=${PROMPT:-256}
NEW_TOKENS=${NEW_TOKENS:-8}
TRANSPORT=${TRANSPORT:-tcp}
OUT=${OUT:-docs/scale_load.md}
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces, tc)" >&2; exit 77; }
[ -x "$KVSERVE" ] || { echo "kvserve binary not found at $KVSERVE" >&2; exit 1; }
[ "${#RATES[@]}" -eq 4 ] || { echo "RATES_MBIT needs 4 rates" >&2; exit 2; }
# shellcheck source=tests/netns_lib.sh
. tests/netns_lib.sh

TAG=$$
DIR=$(mktemp -d /tmp/kvserve-scale-XXXXXX)
NS=(kvsl-r-$TAG kvsl-p0-$TAG kvsl-p1-$TAG kvsl-d0-$TAG kvsl-d1-$TAG)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
for ns in "${NS[@]}"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ns_of() { case "$1" in r) echo "${NS[0]}" ;; p0) echo "${NS[1]}" ;; p1) echo "${NS[2]}" ;; d0) echo "${NS[3]}" ;; d1) echo "${NS[4]}" ;; esac; }

# link A B SUBNET RATE: veth A<->B, A gets .1, B .2 of 10.214.SUBNET.0/30;
# RATE (Mbit/s, 0 = unshaped) on A's egress. Records the device names.
declare -A DEV ADDR
link() {
  local a=$1 b=$2 net=$3 rate=$4
  local da="s$TAG$net-a" db="s$TAG$net-b"
  ip link add "$da" type veth peer name "$db"
  ip link set "$da" netns "$(ns_of "$a")"
  ip link set "$db" netns "$(ns_of "$b")"
  ip -n "$(ns_of "$a")" addr add "10.214.$net.1/30" dev "$da"
  ip -n "$(ns_of "$b")" addr add "10.214.$net.2/30" dev "$db"
  ip -n "$(ns_of "$a")" link set "$da" up
  ip -n "$(ns_of "$b")" link set "$db" up
  if [ "$rate" -gt 0 ]; then
    tc -n "$(ns_of "$a")" qdisc add dev "$da" root tbf rate "${rate}mbit" burst "$(tbf_burst "$rate")" \
      latency 100ms
  fi
  DEV[$a-$b]=$da; DEV[$b-$a]=$db
  ADDR[$a-$b]=10.214.$net.2   # how A reaches B
  ADDR[$b-$a]=10.214.$net.1
}
link p0 d0 1 "${RATES[0]}"
link p0 d1 2 "${RATES[1]}"
link p1 d0 3 "${RATES[2]}"
link p1 d1 4 "${RATES[3]}"
link r p0 10 0
link r p1 11 0

export KVSERVE_SECRET="scale-load-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
ucx_flags() {  # host: UCX on its veths only (shared memory would bypass the links)
  [ "$TRANSPORT" = ucx ] || { echo "--transport tcp"; return; }
  local devs=""
  for key in "${!DEV[@]}"; do
    [ "${key%%-*}" = "$1" ] && devs="$devs${devs:+,}${DEV[$key]}"
  done
  echo "--transport ucx --ucx-tls tcp --ucx-devices $devs"
}
# start_decode NAME, start_prefill NAME "DECODE ADDRESSES"
start_decode() {
  # shellcheck disable=SC2046
  ip netns exec "$(ns_of "$1")" "$KVSERVE" serve --role decode --listen 0.0.0.0:7700 --threads 1 \
    --address-file "$DIR/$1.addr" --duration 900 $(ucx_flags "$1") >/dev/null 2>"$DIR/$1.log" &
  PIDS+=($!)
  wait_file "$DIR/$1.addr" 600 || { cat "$DIR/$1.log"; exit 1; }
}
start_prefill() {
  # shellcheck disable=SC2046
  ip netns exec "$(ns_of "$1")" "$KVSERVE" serve --role prefill --listen "${ADDR[r-$1]}:7800" \
    --decode "$2" --threads 1 --address-file "$DIR/$1.addr" --duration 900 \
    $(ucx_flags "$1") >/dev/null 2>"$DIR/$1.log" &
  PIDS+=($!)
  wait_file "$DIR/$1.addr" 600 || { cat "$DIR/$1.log"; exit 1; }
}
stop_all() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  rm -f "$DIR"/*.addr
}
run_router() {  # label prefill-addresses
  # shellcheck disable=SC2046
  ip netns exec "$(ns_of r)" "$KVSERVE" router --prefill "$2" -n "$REQUESTS" -k "$CLIENTS" \
    --prompt-tokens "$PROMPT" --new-tokens "$NEW_TOKENS" --quality-min 0.97 --seed 7 --json \
    --summary "$DIR/$1.summary.json" $(ucx_flags r) >"$DIR/$1.jsonl" 2>"$DIR/$1.router.log" ||
    { tail -5 "$DIR/$1.router.log"; echo "router run $1 failed" >&2; exit 1; }
}

echo "[scale] 2 x 2" >&2
start_decode d0
start_decode d1
start_prefill p0 "${ADDR[p0-d0]}:7700,${ADDR[p0-d1]}:7700"
start_prefill p1 "${ADDR[p1-d0]}:7700,${ADDR[p1-d1]}:7700"
run_router grid "${ADDR[r-p0]}:7800,${ADDR[r-p1]}:7800"
stop_all
echo "[scale] one pair" >&2
start_decode d0
start_prefill p0 "${ADDR[p0-d0]}:7700"
run_router pair "${ADDR[r-p0]}:7800"
stop_all

LOAD_END=$(cut -d" " -f1-3 /proc/loadavg)
MACHINE="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores (load average $LOAD_START at the start, $LOAD_END at the end: the host is shared), Linux $(uname -r)"
python3 - "$DIR" "$OUT" "$MACHINE" "${RATES[*]}" "$CLIENTS" "$REQUESTS" "$PROMPT" "$NEW_TOKENS" "$TRANSPORT" <<'PY'
import collections, json, sys
d, out, machine, rates, clients, requests, prompt, new_tokens, transport = sys.argv[1:]
r = rates.split()
def load(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    return rows, json.load(open(f"{d}/{name}.summary.json"))
lines = ["# N x M serving: the 2 x 2 load test", "",
         "Generated by `scripts/scale_load_test.sh` (do not edit by hand). One run on " + machine + ";",
         f"transport {transport}; the fallback random-weight model (8 layers, 16 KiB of f32 KV per token,",
         f"`kvserve serve` picks it when models/ is empty); {requests} requests of {prompt} prompt tokens and",
         f"{new_tokens} new tokens from {clients} concurrent clients (`kvserve router -k {clients}`), adaptive",
         "profile with quality floor 0.97; every worker runs with one model thread.", "",
         "Links (tc tbf on the prefill side of each veth pair, the KV direction):", "",
         "| | d0 | d1 |", "|---|---:|---:|",
         f"| p0 | {r[0]} Mbit/s | {r[1]} Mbit/s |", f"| p1 | {r[2]} Mbit/s | {r[3]} Mbit/s |", "",
         "| setup | requests | failed | throughput (req/s) | JCT p50 (ms) | JCT p90 (ms) | JCT p99 (ms) | JCT mean (ms) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
results = {}
for name, label in [("pair", "one pair: p0 over d0"), ("grid", "2 x 2: p0, p1 over d0, d1")]:
    rows, s = load(name)
    results[name] = s
    lines.append(f"| {label} | {s['requests']} | {s['failed']} | {s['throughput_rps']:.2f} | "
                 f"{s['jct_p50_s']*1e3:.0f} | {s['jct_p90_s']*1e3:.0f} | {s['jct_p99_s']*1e3:.0f} | "
                 f"{s['jct_mean_s']*1e3:.0f} |")
g, p = results["grid"], results["pair"]
lines += ["", f"2 x 2 vs one pair: throughput {g['throughput_rps']/p['throughput_rps']:.2f}x, "
          f"JCT p50 {g['jct_p50_s']/p['jct_p50_s']:.2f}x, p99 {g['jct_p99_s']/p['jct_p99_s']:.2f}x.", ""]
for name, label in [("grid", "2 x 2"), ("pair", "one pair")]:
    rows, _ = load(name)
    workers = collections.Counter(x["worker"] for x in rows)
    profiles = collections.Counter(x["profile"] for x in rows)
    lines.append(f"{label}: requests per prefill worker " +
                 ", ".join(f"p{w}: {n}" for w, n in sorted(workers.items())) + "; profiles " +
                 ", ".join(f"`{k}` x{n}" for k, n in profiles.most_common()) + ".")
    lines.append("")
lines += ["Command: `sudo scripts/scale_load_test.sh build/release/tools/kvserve/kvserve`.", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
