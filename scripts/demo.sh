#!/usr/bin/env bash
# The main job: installs the build dependencies, builds kvserve (Release) and then
#   1. generates a synthetic Llama-3-8B-shaped KV cache (labelled synthetic),
#   2. compresses it with several presets and inspects one frame,
#   3. decompresses a frame and checks the round trip,
#   4. prints the eval table (CR, speed, error per preset),
#   5. prints the bench table (CR, encode/decode/round-trip GB/s vs memcpy),
#   6. the end-to-end demo: disaggregated serving with the shipped model
#      (models/kvs-qwen2-9m): a prefill worker and a decode worker process over
#      authenticated, rate-shaped TCP; raw, kivi-2, cachegen, the best static
#      profile and the kvserve controller across a bandwidth sweep, prefix-pool
#      hits vs recompute, and a mid-run bandwidth change (`kvserve e2e`).
# Idempotent; outputs go to build/demo/ (the e2e report: build/demo/e2e.md).
# Usage: scripts/demo.sh
# Environment: DEMO_TOKENS (default 1024), DEMO_PRESETS (comma-separated),
# DEMO_E2E_REQUESTS (default 2 per method and bandwidth).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${KVSERVE_JOBS:-$(nproc)}"
TOKENS="${DEMO_TOKENS:-1024}"
PRESETS="${DEMO_PRESETS:-none,kivi-2,kivi-4,cachegen,mixhq,duo,kvserve-h2r,kvserve-h4r}"
OUT=build/demo
step() { printf '\n[demo] %s\n' "$*" >&2; }

step "installing dependencies (scripts/setup.sh)"
scripts/setup.sh

step "building kvserve (build/release)"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$JOBS" --target kvserve
KV=build/release/tools/kvserve/kvserve
mkdir -p "$OUT"

step "1/6 synthetic KV cache: llama3-8b shape, ${TOKENS} tokens, bf16"
"$KV" synth --shape llama3-8b --tokens "$TOKENS" --dtype bf16 --seed 1 \
  -o "$OUT/kv.safetensors" --head-scores "$OUT/head_scores.json"

step "2/6 compressing with kivi-2, cachegen and kvserve-h2r"
for preset in kivi-2 cachegen kvserve-h2r; do
  "$KV" compress "$OUT/kv.safetensors" --profile "$preset" \
    --head-scores "$OUT/head_scores.json" -o "$OUT/kv.$preset.kvf"
done
"$KV" inspect "$OUT/kv.kvserve-h2r.kvf" --chunks 8 | head -n 30

step "3/6 decompressing the kivi-2 frame"
"$KV" decompress "$OUT/kv.kivi-2.kvf" -o "$OUT/kv.kivi-2.decoded.safetensors"

step "4/6 eval: compression ratio, speed and error per preset"
"$KV" eval "$OUT/kv.safetensors" --profile "$PRESETS" --head-scores "$OUT/head_scores.json" \
  --summary --repeat 2

step "5/6 bench: throughput against memcpy in the same run"
"$KV" bench --shape llama3-8b --tokens "$TOKENS" --dtype bf16 --repeat 3

step "6/6 end to end: prefill and decode workers over a shaped link (kvserve e2e)"
"$KV" e2e --requests "${DEMO_E2E_REQUESTS:-2}" --points 4 --markdown "$OUT/e2e.md" \
  --results "$OUT/e2e.json" --table-out "$OUT/e2e_profile_table.json" > /dev/null
scripts/plots.py e2e "$OUT/e2e.json" "$OUT/e2e_jct.svg" "$OUT/e2e_switch.svg"
sed -n '/^## Job completion time per bandwidth/,/^Mean KV-movement/p' "$OUT/e2e.md"

step "done; outputs in $OUT/"
