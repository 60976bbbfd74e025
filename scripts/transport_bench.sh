#!/usr/bin/env bash
# Goodput of layer-streamed KV frames over our TCP and over UCX, in one run,
# written to docs/transport_bench.md (generated: do not edit by hand).
#   1. Unshaped loopback (127.0.0.1, no namespaces): TCP; UCX with its
#      default transports (shared memory and cma between the two processes);
#      UCX restricted to its tcp transport, beside ucx_perftest's ucp_am_bw
#      over the same UCX tcp transport (what UCX's tcp moves without kvserve).
#   2. Shaped links: two network namespaces joined by a veth pair whose
#      egress is shaped with tc tbf at each of RATES_MBIT; TCP vs UCX over its
#      tcp transport on the veth (shared memory would bypass the link).
# Each cell is the median over the rounds of the median over the frames of a
# round (loopback: LOOPBACK_ROUNDS x LOOPBACK_COUNT; shaped links: ROUNDS x
# COUNT) of `kvserve transport bench` against a `kvserve transport serve` in
# another process (frame bytes over Begin-to-acknowledgement seconds, records
# of 1 MiB), after WARMUP unmeasured frames of each size on the same
# connection: the goodput of a kept connection, as between serving workers
# (the first frames of a new connection are slow over either transport). The
# transports alternate round by round so that they share the machine's load.
#   scripts/transport_bench.sh [path/to/kvserve]     (needs root for part 2)
# Loopback gets more rounds and frames: its cells swing with the load of a
# shared machine by more than the transports differ (docs/transport.md §9),
# where a shaped link's rate holds every cell at the link's.
# Env: SIZES_MB (1,2,4,8,16,32,64), LOOPBACK_ROUNDS (15), LOOPBACK_COUNT (20),
# ROUNDS (7), COUNT (5), WARMUP (2), RATES_MBIT ("1000 4000"),
# OUT (docs/transport_bench.md).
set -euo pipefail
cd "$(dirname "$0")/.."
KVSERVE=$(realpath "${1:-build/release/tools/kvserve/kvserve}")
SIZES_MB=${SIZES_MB:-1,2,4,8,16,32,64}
LOOPBACK_ROUNDS=${LOOPBACK_ROUNDS:-15}
LOOPBACK_COUNT=${LOOPBACK_COUNT:-20}
ROUNDS=${ROUNDS:-7}
COUNT=${COUNT:-5}
WARMUP=${WARMUP:-2}
RATES_MBIT=${RATES_MBIT:-"1000 4000"}
OUT=${OUT:-docs/transport_bench.md}
[ -x "$KVSERVE" ] || { echo "kvserve binary not found at $KVSERVE" >&2; exit 1; }
# shellcheck source=tests/netns_lib.sh
. tests/netns_lib.sh
DIR=$(mktemp -d /tmp/kvserve-transport-bench-XXXXXX)
netns_names kvtb
ADDR_S=10.213.79.1
ADDR_C=10.213.79.2
export KVSERVE_SECRET="transport-bench-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
# The transport commands do no BLAS: keep OpenBLAS from starting its
# threads, which spin (sched_yield) for ~0.1 s after process start and
# would take a core from every short measurement on a 2-core machine.
export OPENBLAS_NUM_THREADS=1
cleanup() {
  stop_all
  ip netns del "$NS_S" 2>/dev/null || true
  ip netns del "$NS_C" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)

# start LABEL "PREFIX" LISTEN "FLAGS": a frame sink kept up for the run.
declare -A ADDRESS
PIDS=()
start() {
  local label=$1 prefix=$2 listen=$3 flags=$4
  rm -f "$DIR/addr"
  # shellcheck disable=SC2086
  $prefix "$KVSERVE" transport serve --listen "$listen" --address-file "$DIR/addr" \
    --duration 1200 $flags >/dev/null 2>"$DIR/serve-${label//\//-}.log" &
  PIDS+=($!)
  wait_file "$DIR/addr" || { cat "$DIR/serve-${label//\//-}.log" >&2; echo "frame sink did not start" >&2; exit 1; }
  ADDRESS[$label]=$(cat "$DIR/addr")
}
stop_all() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
# rounds N C "LABEL|PREFIX|FLAGS" ...: N rounds, each sending WARMUP + C
# frames of every size over one connection per transport, the transports in
# turn, so that all of them see the same load of this shared machine.
rounds() {
  local n=$1 c=$2
  shift 2
  for round in $(seq 1 "$n"); do
    for spec in "$@"; do
      IFS='|' read -r label prefix flags <<<"$spec"
      # shellcheck disable=SC2086
      $prefix "$KVSERVE" transport bench --server "${ADDRESS[$label]}" --sizes-mb "$SIZES_MB" \
        --count "$c" --warmup "$WARMUP" --json $flags | sed "s|^{|{\"label\":\"$label\",\"round\":$round,|" \
        >>"$DIR/results.jsonl"
    done
  done
}

# ucx_perftest ucp_am_bw over UCX's tcp transport, per size (MB/s -> Gbps).
perftest() {  # LABEL PREFIX_S PREFIX_C SERVER_ADDR EXTRA_ENV
  local label=$1 sprefix=$2 cprefix=$3 addr=$4 envs=$5
  command -v ucx_perftest >/dev/null || return 0
  for mb in ${SIZES_MB//,/ }; do
    local bytes=$((mb * 1048576)) iters=$((256 / mb + 4)) port=$((13000 + RANDOM % 2000))
    # shellcheck disable=SC2086
    env $envs $sprefix ucx_perftest -t ucp_am_bw -s "$bytes" -n "$iters" -p "$port" >/dev/null 2>&1 &
    local spid=$!
    sleep 0.5
    local line
    # shellcheck disable=SC2086
    line=$(env $envs $cprefix ucx_perftest "$addr" -t ucp_am_bw -s "$bytes" -n "$iters" -p "$port" 2>/dev/null |
      grep '^Final:' || true)
    wait "$spid" 2>/dev/null || true
    [ -n "$line" ] || continue
    local mbps
    mbps=$(echo "$line" | awk '{print $(NF-2)}')
    echo "{\"label\":\"$label\",\"frame_mib\":$mb,\"gbps_median\":$(python3 -c "print($mbps*1048576*8/1e9)")}" \
      >>"$DIR/results.jsonl"
  done
}

: >"$DIR/results.jsonl"
echo "[bench] unshaped loopback" >&2
start "loopback/tcp" "" 127.0.0.1:0 "--transport tcp"
start "loopback/ucx" "" 127.0.0.1:0 "--transport ucx"
start "loopback/ucx-tcp" "" 127.0.0.1:0 "--transport ucx --ucx-tls tcp"
rounds "$LOOPBACK_ROUNDS" "$LOOPBACK_COUNT" "loopback/tcp||--transport tcp" "loopback/ucx||--transport ucx" \
  "loopback/ucx-tcp||--transport ucx --ucx-tls tcp"
stop_all
perftest "loopback/perftest-tcp" "" "" 127.0.0.1 "UCX_TLS=tcp"

SHAPED="no"
if [ "$(id -u)" -eq 0 ] && netns_pair "$NS_S" "$NS_C" "$VETH_S" "$VETH_C" "$ADDR_S" "$ADDR_C"; then
  SHAPED="yes"
  for rate in $RATES_MBIT; do
    echo "[bench] tc tbf ${rate}mbit" >&2
    tc -n "$NS_C" qdisc replace dev "$VETH_C" root tbf rate "${rate}mbit" burst "$(tbf_burst "$rate")" \
      latency 100ms
    start "tbf${rate}/tcp" "ip netns exec $NS_S" "$ADDR_S:7500" "--transport tcp"
    start "tbf${rate}/ucx-tcp" "ip netns exec $NS_S" "$ADDR_S:7501" \
      "--transport ucx --ucx-tls tcp --ucx-devices $VETH_S"
    rounds "$ROUNDS" "$COUNT" "tbf${rate}/tcp|ip netns exec $NS_C|--transport tcp" \
      "tbf${rate}/ucx-tcp|ip netns exec $NS_C|--transport ucx --ucx-tls tcp --ucx-devices $VETH_C"
    stop_all
  done
else
  echo "[bench] shaped links skipped: needs root and network namespaces" >&2
fi

LOAD_END=$(cut -d" " -f1-3 /proc/loadavg)
MACHINE="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores (load average $LOAD_START at the start, $LOAD_END at the end: the host is shared), $(free -g | awk '/Mem:/{print $2}') GiB RAM, Linux $(uname -r), UCX $(ucx_info -v | sed -n 's/^# Version //p')"
python3 - "$DIR/results.jsonl" "$OUT" "$MACHINE" "$ROUNDS" "$RATES_MBIT" "$SHAPED" "$COUNT" "$WARMUP" \
  "$LOOPBACK_ROUNDS" "$LOOPBACK_COUNT" <<'PY'
import json, statistics, sys
path, out, machine, rounds, rates, shaped, count, warmup, lrounds, lcount = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
samples = {}
for r in rows:
    samples.setdefault((r["label"], float(r["frame_mib"])), []).append(r["gbps_median"])
cell = {k: statistics.median(v) for k, v in samples.items()}
sizes = sorted({float(r["frame_mib"]) for r in rows})
def table(title, columns, ratio, note):
    out = [f"### {title}", "", note, "",
           "| frame | " + " | ".join(c[1] for c in columns) + f" | {ratio[2]} |",
           "|---:|" + "---:|" * (len(columns) + 1)]
    worst = None
    for mb in sizes:
        vals = [cell.get((c[0], mb)) for c in columns]
        num, den = cell.get((ratio[0], mb)), cell.get((ratio[1], mb))
        r = num / den if num and den else None
        if r is not None: worst = r if worst is None else min(worst, r)
        out.append(f"| {mb:g} MiB | " + " | ".join(f"{v:.2f}" if v else "-" for v in vals) +
                   f" | {r:.2f} |" if r is not None else " | - |")
    out += ["", f"Lowest {ratio[2]} over the sizes: **{worst:.2f}**." if worst else "", ""]
    return out
lines = ["# Transport goodput: UCX vs our TCP", "",
         "Generated by `scripts/transport_bench.sh` (do not edit by hand). One run on " + machine + ".",
         "Goodput = frame bytes / (FrameSender::Begin to the receiver's acknowledgement), Gbps",
         "(1e9 bit/s): the median over the rounds of the median over the frames of a round",
         f"(loopback: {lrounds} rounds of {lcount} frames; shaped links: {rounds} rounds of {count}",
         f"frames); in each round every transport in turn sends, per size, {warmup} unmeasured and",
         "then the measured frames over one connection (the goodput of a kept connection, as between serving",
         "workers), so the transports share the load of this shared machine; records of 1 MiB;",
         "sender and receiver are separate `kvserve transport` processes. ucx_perftest runs after",
         "the rounds.", ""]
lines += table("Unshaped loopback (127.0.0.1)",
               [("loopback/tcp", "TCP Gbps"), ("loopback/ucx", "UCX (default: sm, cma) Gbps"),
                ("loopback/ucx-tcp", "UCX tcp transport Gbps"),
                ("loopback/perftest-tcp", "ucx_perftest ucp_am_bw, UCX tcp Gbps")],
               ("loopback/ucx", "loopback/tcp", "UCX / TCP"),
               "UCX with its default transports picks shared memory (posix) for messages and cma "
               "(process_vm_readv) for rendezvous between the two processes. The UCX-tcp columns "
               "restrict UCX to its tcp transport: kvserve's UCX path beside UCX's own benchmark "
               "over the same transport (what UCX's tcp moves without kvserve on top).")
if shaped == "yes":
    for rate in rates.split():
        lines += table(f"Shaped link: veth between two network namespaces, tc tbf {rate} Mbit/s",
                       [(f"tbf{rate}/tcp", "TCP Gbps"), (f"tbf{rate}/ucx-tcp", "UCX (tcp transport) Gbps")],
                       (f"tbf{rate}/ucx-tcp", f"tbf{rate}/tcp", "UCX / TCP"),
                       f"Link rate {int(rate)/1000:g} Gbps. UCX is restricted to its tcp transport on "
                       "the veth (`--ucx-tls tcp --ucx-devices <veth>`): shared memory between the "
                       "namespaces of one host would bypass the shaped link.")
else:
    lines += ["Shaped links were not measured in this run (needs root and network namespaces).", ""]
lines += ["Command: `sudo scripts/transport_bench.sh build/release/tools/kvserve/kvserve`.", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
