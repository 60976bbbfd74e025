#!/usr/bin/env bash
# The main job, for now a codec demo on a generated KV cache: installs the
# build dependencies, builds kvserve (Release) and then
#   1. generates a synthetic Llama-3-8B-shaped KV cache (labelled synthetic),
#   2. compresses it with several presets and inspects one frame,
#   3. decompresses a frame and checks the round trip,
#   4. prints the eval table (CR, speed, error per preset),
#   5. prints the bench table (CR, encode/decode/round-trip GB/s vs memcpy).
# Idempotent; outputs go to build/demo/. Usage: scripts/demo.sh
# Environment: DEMO_TOKENS (default 1024), DEMO_PRESETS (comma-separated).
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

step "1/5 synthetic KV cache: llama3-8b shape, ${TOKENS} tokens, bf16"
"$KV" synth --shape llama3-8b --tokens "$TOKENS" --dtype bf16 --seed 1 \
  -o "$OUT/kv.safetensors" --head-scores "$OUT/head_scores.json"

step "2/5 compressing with kivi-2, cachegen and kvserve-h2r"
for preset in kivi-2 cachegen kvserve-h2r; do
  "$KV" compress "$OUT/kv.safetensors" --profile "$preset" \
    --head-scores "$OUT/head_scores.json" -o "$OUT/kv.$preset.kvf"
done
"$KV" inspect "$OUT/kv.kvserve-h2r.kvf" --chunks 8 | head -n 30

step "3/5 decompressing the kivi-2 frame"
"$KV" decompress "$OUT/kv.kivi-2.kvf" -o "$OUT/kv.kivi-2.decoded.safetensors"

step "4/5 eval: compression ratio, speed and error per preset"
"$KV" eval "$OUT/kv.safetensors" --profile "$PRESETS" --head-scores "$OUT/head_scores.json" \
  --summary --repeat 2

step "5/5 bench: throughput against memcpy in the same run"
"$KV" bench --shape llama3-8b --tokens "$TOKENS" --dtype bf16 --repeat 3

step "done; outputs in $OUT/"
