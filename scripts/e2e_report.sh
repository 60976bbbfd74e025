#!/usr/bin/env bash
# Regenerates docs/e2e.md, docs/e2e_profile_table.json, docs/results/e2e.json
# and the plots drawn from it (docs/e2e_jct.svg, docs/e2e_switch.svg) with the
# recorded configuration of the end-to-end benchmark (`kvserve e2e`, about
# 7 minutes on two cores; run it on an otherwise idle machine: the report
# records the load average).
#   scripts/e2e_report.sh [BUILD_DIR]       (default build/release)
# Env: REQUESTS (requests per method and bandwidth, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/release}"
kvserve="$build/tools/kvserve/kvserve"
[[ -x "$kvserve" ]] || { echo "build $kvserve first (ninja -C $build kvserve)" >&2; exit 1; }
"$kvserve" e2e --requests "${REQUESTS:-60}" --results docs/results/e2e.json \
  --markdown docs/e2e.md --table-out docs/e2e_profile_table.json > /dev/null
scripts/plots.py e2e docs/results/e2e.json docs/e2e_jct.svg docs/e2e_switch.svg
echo "updated docs/e2e.md, docs/e2e_profile_table.json, docs/results/e2e.json, docs/e2e_*.svg"
