#!/usr/bin/env bash
# Regenerates the measured part of docs/profiling.md: recorded ground truth
# (only when missing, or with --regenerate), the ablation over 10 seeds, the
# per-workload and unified profile tables, and the baseline comparison.
#
#   scripts/profiling_report.sh [--regenerate] [BUILD_DIR]
#
# Quality in everything this script produces is the reconstruction proxy of
# synthetic KV caches ("proxy: reconstruction SNR, not task accuracy") until
# the task evaluator (quality issue) lands.
set -euo pipefail
cd "$(dirname "$0")/.."
regenerate=0
if [[ "${1:-}" == "--regenerate" ]]; then regenerate=1; shift; fi
build="${1:-build}"
kvserve="$build/tools/kvserve/kvserve"
[[ -x "$kvserve" ]] || { echo "build $kvserve first (ninja -C $build kvserve)" >&2; exit 1; }

mkdir -p configs/ground_truth configs/profiles docs/results/plots
for w in synth-smooth synth-outlier; do
  gt="configs/ground_truth/$w.json"
  if [[ $regenerate == 1 || ! -f "$gt" ]]; then
    "$kvserve" profile --generate-ground-truth "$gt" --workload "$w" --quality-min 0.97
  fi
done

fragment="$(mktemp)"
"$kvserve" profile --report "$fragment" --quality-min 0.97 --budget 80 --seeds 10 \
  --ground-truth configs/ground_truth/synth-smooth.json \
  --ground-truth configs/ground_truth/synth-outlier.json \
  --tables-dir configs/profiles --unseen synth-unseen
{
  echo
  echo "Machine: $(nproc) cores, $(uname -m), load average $(cut -d' ' -f1 /proc/loadavg) at report time; $(date -u +%Y-%m-%d)."
} >> "$fragment"
"$kvserve" pareto configs/profiles/synth-smooth.json \
  --plot-data docs/results/plots/profiling_pareto.json > /dev/null
scripts/plots.py pareto docs/results/plots/profiling_pareto.json docs/profiling_pareto.svg > /dev/null

# Splice between the markers of docs/profiling.md.
python3 - "$fragment" <<'PY'
import sys, re
doc = open("docs/profiling.md").read()
body = open(sys.argv[1]).read()
begin, end = "<!-- BEGIN GENERATED: scripts/profiling_report.sh -->", "<!-- END GENERATED -->"
pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
doc = pattern.sub(lambda m: begin + "\n" + body + "\n" + end, doc)
open("docs/profiling.md", "w").write(doc)
PY
rm -f "$fragment"
echo "updated docs/profiling.md, configs/profiles/*.json, docs/results/plots/profiling_pareto.json, docs/profiling_pareto.svg"
