#!/usr/bin/env bash
# Regenerates the task-quality ground truth of docs/profiling.md: every
# configuration of configs/strategy_space_reduced.json scored by the real
# evaluator (`kvserve profile --generate-ground-truth` with the shipped
# model) on each workload of WORKLOADS, then the ablation over 10 seeds on
# those ground truths (`kvserve profile --report`), spliced into
# docs/profiling.md between its task-ground-truth markers.
#
#   scripts/profiling_task_ground_truth.sh [--regenerate] [BUILD_DIR]
#
# A ground truth file is only generated when missing (or with --regenerate).
# Generation goes through the results database $DB, so an interrupted run
# resumes where it stopped and a later search on the same samples pays for
# nothing twice. Needs the eval sets (scripts/data/build_all.sh; run here if
# missing). 1-1.5 hours per workload on 2 cores (325 configurations of 100
# samples each, 10-15 s apiece; 5,144 s measured with other jobs beside it;
# prefills cached under .cache/kvserve-quality).
#
# Environment: MODEL (models/kvs-qwen2-9m), WORKLOADS ("multihop-hard"),
# SPACE (configs/strategy_space_reduced.json), N (100: samples per
# evaluation, seed 0), Q (0.97), B (80), SEEDS (10), THREADS (0: all cores),
# DB (.cache/kvserve-profile/<model>.db), CODEC_KV_TOKENS (512).
set -euo pipefail
cd "$(dirname "$0")/.."
regenerate=0
if [[ "${1:-}" == "--regenerate" ]]; then regenerate=1; shift; fi
build="${1:-build/release}"
kvserve="$build/tools/kvserve/kvserve"
[[ -x "$kvserve" ]] || { echo "build $kvserve first (cmake --build $build --target kvserve)" >&2; exit 1; }
MODEL=${MODEL:-models/kvs-qwen2-9m}
WORKLOADS=${WORKLOADS:-multihop-hard}
SPACE=${SPACE:-configs/strategy_space_reduced.json}
N=${N:-100}
Q=${Q:-0.97}
B=${B:-80}
SEEDS=${SEEDS:-10}
THREADS=${THREADS:-0}
CODEC_KV_TOKENS=${CODEC_KV_TOKENS:-512}
name=$(basename "$MODEL")
DB=${DB:-.cache/kvserve-profile/$name.db}
mkdir -p "$(dirname "$DB")" configs/ground_truth
for w in $WORKLOADS; do
  [[ -f "data/eval/$w.jsonl" ]] || scripts/data/build_all.sh
done

truths=()
for w in $WORKLOADS; do
  gt="configs/ground_truth/$name-$w.json"
  if [[ $regenerate == 1 || ! -f "$gt" ]]; then
    start=$(date +%s)
    "$kvserve" profile --model "$MODEL" --workload "$w" --space "$SPACE" --samples "$N" \
      --sample-seed 0 --quality-min "$Q" --threads "$THREADS" --codec-kv-tokens "$CODEC_KV_TOKENS" \
      --db "$DB" --generate-ground-truth "$gt"
    echo "[ground truth] $w: $(( $(date +%s) - start )) s wall" >&2
  fi
  truths+=(--ground-truth "$gt")
done

fragment="$(mktemp)"
trap 'rm -f "$fragment"' EXIT
"$kvserve" profile --report "$fragment" --quality-min "$Q" --budget "$B" --seeds "$SEEDS" "${truths[@]}"
{
  echo
  echo "Machine: $(nproc) cores, $(uname -m), load average $(cut -d' ' -f1 /proc/loadavg) at report time; $(date -u +%Y-%m-%d)."
  echo "Command: \`scripts/profiling_task_ground_truth.sh\` (WORKLOADS=\"$WORKLOADS\", N=$N, B=$B, SEEDS=$SEEDS)."
} >> "$fragment"
python3 - "$fragment" <<'PY'
import re, sys
doc = open("docs/profiling.md").read()
body = open(sys.argv[1]).read()
begin = "<!-- BEGIN GENERATED: scripts/profiling_task_ground_truth.sh -->"
end = "<!-- END GENERATED: task ground truth -->"
if begin not in doc:
    sys.exit("docs/profiling.md has no task ground truth markers")
pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
open("docs/profiling.md", "w").write(pattern.sub(lambda m: begin + "\n" + body + "\n" + end, doc))
PY
echo "updated docs/profiling.md (task ground truth: ${WORKLOADS})"
