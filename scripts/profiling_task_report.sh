#!/usr/bin/env bash
# Regenerates the task-quality part of docs/profiling.md (the analog of the
# paper's Table 1 from the real evaluator) and, when missing, the task profile
# tables configs/profiles/<model>-<workload>.json and <model>-unified.json.
#
#   scripts/profiling_task_report.sh [--research] [BUILD_DIR]
#   scripts/profiling_task_report.sh --render-only   (the document again from the
#     recorded tables and docs/results/profiling/*.json: neither stage runs)
#
#   stage 1 (only for missing tables, or all with --research): `kvserve profile`
#     per profiling workload and for the unified mix: Bayesian search, quality
#     floor Q, budget B, SEARCH_N samples (seed 0) per evaluation (per-workload
#     tables: again at each stricter floor of MORE_FLOORS, so they also hold
#     the best rows for requests with those floors); the search's
#     Pareto rows are then scored on HOLDOUT_N held-out samples (disjoint from
#     the search's) and the tables carry the lower end of that 95% interval.
#     Every evaluation is stored in $DB, so an interrupted run resumes and
#     nothing is paid twice.
#   stage 2: `kvserve quality` on every workload (the unseen ones too), on N
#     samples of the held-out pool (--holdout-of SEARCH_N: none the searches
#     scored), for the max-CR feasible profile of its own table, of the unified
#     table, of the nearest profiling workload's table (unseen workloads),
#     kivi-2 and cachegen, and that table's other rows meeting the floor (the
#     rows a request with a higher floor is served from: the target compares
#     kivi-2 with the table's best row at kivi-2's quality); then
#     scripts/render_profiling_task.py splices the table into docs/profiling.md
#     between the task markers.
#
# Environment: MODEL (models/kvs-qwen2-9m), N (100: comparison samples per
# workload), SEARCH_N (N: samples per search evaluation), HOLDOUT_N (N:
# held-out samples per table row), Q (0.97), B (80),
# PROFILING ("qa math code prose"), UNSEEN ("multihop:qa unseen:prose
# qa-hard:qa multihop-hard:qa code-hard:code", each workload:nearest profiling
# workload), DB (.cache/kvserve-profile/<model>.db), NICE (10),
# REUSE_BASELINES (0; 1 keeps docs/results/profiling/<w>.baselines.json),
# MORE_FLOORS ("0.99 0.995"; "" = Q only),
# CODEC_KV_TOKENS (0: all tokens of the median-length sample; duo's CR
# depends on the context length, so a prefix would understate it).
# Prefills are cached under .cache/kvserve-quality (shared with
# scripts/quality_report.sh: same samples and seed).
set -euo pipefail
cd "$(dirname "$0")/.."
research=0
render_only=0
if [[ "${1:-}" == "--research" ]]; then research=1; shift; fi
if [[ "${1:-}" == "--render-only" ]]; then render_only=1; shift; fi
build="${1:-build/release}"
kvserve="$build/tools/kvserve/kvserve"
[[ -x "$kvserve" ]] || { echo "build $kvserve first (cmake --build $build --target kvserve)" >&2; exit 1; }
MODEL=${MODEL:-models/kvs-qwen2-9m}
N=${N:-100}                  # samples per workload in the stage-2 comparison
SEARCH_N=${SEARCH_N:-$N}     # samples per workload and evaluation in the searches
HOLDOUT_N=${HOLDOUT_N:-$N}   # held-out samples per table row (disjoint from the search's)
Q=${Q:-0.97}
B=${B:-80}
MORE_FLOORS=${MORE_FLOORS-0.99 0.995}
PROFILING=${PROFILING:-"qa math code prose"}
UNSEEN=${UNSEEN:-"multihop:qa unseen:prose qa-hard:qa multihop-hard:qa code-hard:code"}
name=$(basename "$MODEL")
DB=${DB:-.cache/kvserve-profile/$name.db}
NICE=${NICE:-10}
CODEC_KV_TOKENS=${CODEC_KV_TOKENS:-0}  # search CR/codec speed: first N tokens of one real KV (0 = all)
REUSE_BASELINES=${REUSE_BASELINES:-0}   # 1: keep existing kivi-2/cachegen reports
HEADS="$MODEL/head_scores.json"
results=docs/results/profiling
mkdir -p "$(dirname "$DB")" configs/profiles "$results"

if [[ $render_only == 0 ]]; then
# Stage 1: tables.
mix=$(echo $PROFILING | tr ' ' ',')
timings=""
for w in $PROFILING unified; do
  table="configs/profiles/$name-$w.json"
  if [[ $research == 1 || ! -f "$table" ]]; then
    echo "== profile $w (budget $B, $SEARCH_N samples, quality >= $Q)" >&2
    t0=$(date +%s)
    floors=()
    if [[ $w != unified && -n $MORE_FLOORS ]]; then floors=(--more-floors "$(echo $MORE_FLOORS | tr ' ' ',')"); fi
    nice -n "$NICE" "$kvserve" profile --model "$MODEL" --workload "$w" --mix "$mix" \
      --quality-min "$Q" "${floors[@]}" --budget "$B" --samples "$SEARCH_N" --sample-seed 0 --holdout-samples "$HOLDOUT_N" \
      --threads 1 --codec-kv-tokens "$CODEC_KV_TOKENS" \
      --head-scores "$HEADS" --db "$DB" --out "$table"
    timings+="${timings:+, }\"$w\": $(( $(date +%s) - t0 ))"
  fi
done

# Stage 2: measured comparison on every workload.
best() {  # best <table> <workload>: the max-CR row with quality[workload] >= Q
  python3 - "$1" "$2" "$Q" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); w = sys.argv[2]; q = float(sys.argv[3])
rows = [r for r in t["profiles"] if r.get("quality", {}).get(w, -1) >= q]
print(max(rows, key=lambda r: r["compression_ratio"])["spec"] if rows else "")
PY
}
others() {  # others <table> <workload> <specs...>: the rows with quality[workload] >= Q, less
  # <specs>, that beat every higher-CR row on quality (the table's CR-quality staircase; rows
  # that differ from one above only in codec speed add nothing to the comparison)
  python3 - "$@" "$Q" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); w = sys.argv[2]; skip = set(sys.argv[3:-1]); q = float(sys.argv[-1])
rows = sorted((r for r in t["profiles"] if r.get("quality", {}).get(w, -1) >= q),
              key=lambda r: -r["compression_ratio"])
best, keep = -1.0, []
for r in rows:
    if r["quality"][w] > best:
        best = r["quality"][w]
        if r["spec"] not in skip:
            keep.append(r["spec"])
print(" ".join(keep))
PY
}
measure() {  # measure <workload> <out.json> <profiles...>
  local w=$1 out=$2; shift 2
  local list raw; list=$(IFS=,; echo "$*"); raw=$(mktemp)
  # Per-sample scores (for the paired comparison with kivi-2), without the
  # predicted token ids.
  nice -n "$NICE" "$kvserve" quality -m "$MODEL" -w "$w" -p "$list" -n "$N" --seed 0 --holdout-of "$SEARCH_N" \
    --threads 1 --head-scores "$HEADS" --json --per-sample -q > "$raw"
  python3 scripts/render_profiling_task.py --strip "$raw" > "$out.tmp"
  rm -f "$raw"
  mv "$out.tmp" "$out"
}
unified=$(best "configs/profiles/$name-unified.json" unified)
manifest="$results/manifest.json"
echo "{\"model\": \"$MODEL\", \"search_seconds\": {$timings}, \"samples\": $N, \"search_samples\": $SEARCH_N, \"holdout_samples\": $HOLDOUT_N, \"codec_kv_tokens\": $CODEC_KV_TOKENS, \"quality_min\": $Q, \"more_floors\": \"$MORE_FLOORS\", \"budget\": $B, \"rows\": [" > "$manifest.tmp"
sep=""
pids=()
for pair in $(for w in $PROFILING; do echo "$w:$w:profiling"; done) \
            $(for p in $UNSEEN; do echo "$p:unseen"; done); do
  IFS=: read -r w near split <<< "$pair"
  aware=$(best "configs/profiles/$name-$near.json" "$near")
  echo "== compare on $w ($split; profile of $near)" >&2
  # One process per workload (single-threaded each), in parallel.
  measure "$w" "$results/$w.json" "$aware" "$unified" &
  pids+=($!)
  read -r -a rest <<< "$(others "configs/profiles/$name-$near.json" "$near" "$aware" "$unified")"
  rm -f "$results/$w.rows.json"
  if [[ ${#rest[@]} -gt 0 ]]; then
    measure "$w" "$results/$w.rows.json" "${rest[@]}" &
    pids+=($!)
  fi
  if [[ $REUSE_BASELINES != 1 || ! -f "$results/$w.baselines.json" ]]; then
    measure "$w" "$results/$w.baselines.json" kivi-2 cachegen &
    pids+=($!)
  fi
  echo "$sep{\"workload\": \"$w\", \"split\": \"$split\", \"aware\": \"$aware\", \"aware_from\": \"$near\", \"unified\": \"$unified\", \"table_rows\": ${#rest[@]}}" >> "$manifest.tmp"
  sep=","
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "]}" >> "$manifest.tmp"
mv "$manifest.tmp" "$manifest"

fi  # render_only

fragment="$(mktemp)"
python3 scripts/render_profiling_task.py --results "$results" --tables configs/profiles \
  > "$fragment"
machine="Machine: $(nproc) cores, $(uname -m), load average $(cut -d' ' -f1 /proc/loadavg) at report time; $(date -u +%Y-%m-%d)."
if [[ $render_only == 1 ]]; then  # the comparison's machine line, as the document records it
  machine=$(sed -n '/BEGIN GENERATED: scripts\/profiling_task_report.sh/,/END GENERATED: task/p' docs/profiling.md |
            grep '^Machine: ' || echo "$machine")
fi
{
  echo
  echo "$machine"
} >> "$fragment"
python3 - "$fragment" <<'PY'
import sys, re
doc = open("docs/profiling.md").read()
body = open(sys.argv[1]).read()
begin, end = "<!-- BEGIN GENERATED: scripts/profiling_task_report.sh -->", "<!-- END GENERATED: task -->"
if begin not in doc:
    sys.exit("docs/profiling.md has no task markers")
pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
doc = pattern.sub(lambda m: begin + "\n" + body + "\n" + end, doc)
open("docs/profiling.md", "w").write(doc)
PY
rm -f "$fragment"
echo "updated docs/profiling.md (task section), $results/*.json" >&2
