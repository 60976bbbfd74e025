#!/usr/bin/env bash
# Regenerates docs/quality.md: the task quality of the baseline and kvserve
# compression profiles on every workload, measured through the real PD path
# (prefill -> wire dtype -> encode -> decode -> import -> teacher-forced
# scoring) by `kvserve quality`, relative to `none` on the same samples; then
# the issue-4 speed benchmark (one profile, one workload, 100 samples, cached
# prefill).
#
#   scripts/quality_report.sh                  # all workloads, 100 samples each
#   N=40 WORKLOADS="qa code" scripts/quality_report.sh
#   WORKLOADS="qa-hard" BENCH=0 scripts/quality_report.sh   # one workload, benchmark kept
#
# The document is rendered from every workload's report in docs/results/quality,
# so a run of some workloads keeps the others' recorded reports.
#
# Needs the eval sets (scripts/data/build_all.sh; run here if missing) and
# builds build/release's kvserve. Prefills are cached under .cache/ (the first
# run of a workload pays them: ~1-4 s per sample on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
MODEL=${MODEL:-models/kvs-qwen2-9m}
N=${N:-100}
WORKLOADS=${WORKLOADS:-"qa math code prose multihop unseen qa-hard multihop-hard code-hard"}
BENCH=${BENCH:-1}  # 0: keep the recorded evaluator-speed benchmark
PROFILES=${PROFILES:-"none,kivi-2,kivi-4,cachegen,duo,mixhq,kvserve-h2r,kvserve-hmix,kvserve-htok"}
RESULTS=docs/results/quality
PY=/usr/bin/python3

[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target kvserve >/dev/null
KV="$BUILD/tools/kvserve/kvserve"
for w in $WORKLOADS; do [ -f "data/eval/$w.jsonl" ] || { scripts/data/build_all.sh; break; }; done
mkdir -p "$RESULTS"

# Per-head retrieval scores (mixhq, duo, kvserve-hmix) from a training-split calibration prompt.
HEADS="$MODEL/head_scores.json"
if [ ! -f "$HEADS" ]; then
  mkdir -p data/calib
  $PY scripts/data/make_calibration.py data/calib/retrieval.txt
  "$KV" head-scores -m "$MODEL" --prompt-file data/calib/retrieval.txt -o "$HEADS"
fi

for w in $WORKLOADS; do
  echo "== $w: $PROFILES ($N samples)" >&2
  "$KV" quality -m "$MODEL" -w "$w" -p "$PROFILES" -n "$N" --head-scores "$HEADS" --json \
    > "$RESULTS/$w.json.tmp"
  mv "$RESULTS/$w.json.tmp" "$RESULTS/$w.json"
done

# Benchmark (issue 4): one profile on one workload, 100 samples, prefill cached by the run above.
if [ "$BENCH" = 1 ]; then
echo "== benchmark: kivi-2 on qa, 100 samples, cached prefill" >&2
T0=$(date +%s.%N)
"$KV" quality -m "$MODEL" -w qa -p kivi-2 -n 100 --json -q > "$RESULTS/bench_qa_kivi2.json"
T1=$(date +%s.%N)
$PY - "$RESULTS/bench.json" "$T0" "$T1" "$KV quality -m $MODEL -w qa -p kivi-2 -n 100 --json -q" <<'PYEOF'
import json, os, sys
out, t0, t1, cmd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
json.dump({"command": cmd, "wall_seconds": round(t1 - t0, 2), "cores": os.cpu_count(),
           "load_average": open("/proc/loadavg").read().split()[:3]}, open(out, "w"), indent=1)
PYEOF
fi

$PY scripts/render_quality.py --model "$MODEL" --results "$RESULTS" --samples "$N" > docs/quality.md
echo "wrote docs/quality.md" >&2
