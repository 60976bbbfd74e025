#!/usr/bin/env bash
# The serve commands as real processes: a decode worker, a prefill worker
# and the router, over authenticated TCP on localhost, with the shipped
# model (or $KVSERVE_TEST_MODEL). Checks every request completes (router exit
# 0, one JSON line per request), that a router without the secret is refused
# (exit 1), that the prefill worker's default profile table is the model's
# measured one, and that with no model to find the serve command fails
# rather than making one up (unless --model random asks for it), and that a
# decode worker refuses a pool of its own (--pool memory).
#   tests/serve_cli_test.sh path/to/kvserve
set -euo pipefail
KVSERVE=$(realpath "${1:?usage: serve_cli_test.sh path/to/kvserve}")
source "$(dirname "$0")/serve_lib.sh"
serve_scratch serve-cli
export KVSERVE_SECRET=serve-cli-test-secret
"$KVSERVE" serve --role decode --model "${KVSERVE_TEST_MODEL:-}" --listen 127.0.0.1:0 \
  --address-file "$DIR/decode.addr" --threads 1 --duration 120 >/dev/null 2>"$DIR/decode.log" &
PIDS+=($!)
for _ in $(seq 1 600); do [ -s "$DIR/decode.addr" ] && break; sleep 0.1; done
[ -s "$DIR/decode.addr" ] || { cat "$DIR/decode.log"; echo "decode worker did not start"; exit 1; }
"$KVSERVE" serve --role prefill --model "${KVSERVE_TEST_MODEL:-}" --listen 127.0.0.1:0 \
  --decode "$(cat "$DIR/decode.addr")" --address-file "$DIR/prefill.addr" --threads 1 \
  --pool memory --shape-gbps 1 --duration 120 >/dev/null 2>"$DIR/prefill.log" &
PIDS+=($!)
for _ in $(seq 1 600); do [ -s "$DIR/prefill.addr" ] && break; sleep 0.1; done
[ -s "$DIR/prefill.addr" ] || { cat "$DIR/prefill.log"; echo "prefill worker did not start"; exit 1; }
PREFILL=$(cat "$DIR/prefill.addr")
"$KVSERVE" router --prefill "$PREFILL" --model "${KVSERVE_TEST_MODEL:-}" -n 4 --prompt-tokens 64 \
  --new-tokens 4 --quality-min 0.99 --repeat-fraction 0.5 --json >"$DIR/router.json" 2>"$DIR/router.log" ||
  { cat "$DIR/router.log"; echo "router failed"; exit 1; }
[ "$(wc -l <"$DIR/router.json")" -eq 4 ] || { cat "$DIR/router.json"; echo "expected 4 results"; exit 1; }
# A decode worker's pool is the prefill workers' shared one: its own memory pool is refused.
if "$KVSERVE" serve --role decode --model "${KVSERVE_TEST_MODEL:-}" --listen 127.0.0.1:0 --threads 1 \
     --pool memory --duration 1 >/dev/null 2>"$DIR/decode-memory.log"; then
  echo "a decode worker took a pool of its own"; exit 1
fi
grep -q "shared pool" "$DIR/decode-memory.log" || { cat "$DIR/decode-memory.log"; exit 1; }
if KVSERVE_SECRET=wrong "$KVSERVE" router --prefill "$PREFILL" --model "${KVSERVE_TEST_MODEL:-}" -n 1 \
     --prompt-tokens 8 >/dev/null 2>"$DIR/intruder.log"; then
  echo "a router without the secret was served"; exit 1
fi
grep -q "permission" "$DIR/intruder.log" || { cat "$DIR/intruder.log"; echo "no clear refusal"; exit 1; }
if [ -z "${KVSERVE_TEST_MODEL:-}" ]; then
  grep -q "profile table configs/profiles/.*-unified.json (measured" "$DIR/prefill.log" ||
    { cat "$DIR/prefill.log"; echo "the default table is not the model's measured one"; exit 1; }
fi
# No model under ./models and no --model: an error that says what to pass.
# $DIR/empty is a data directory (it has the marker file, so the build
# tree's source directory is not used instead) without models or tables.
mkdir -p "$DIR/empty/configs"
cp "$(dirname "$0")/../configs/strategy_space.json" "$DIR/empty/configs/"
if (cd "$DIR/empty" && "$KVSERVE" serve --role decode --duration 1 >/dev/null 2>"$DIR/nomodel.log"); then
  echo "serve ran without a model"; exit 1
fi
grep -q -- "--model random" "$DIR/nomodel.log" || { cat "$DIR/nomodel.log"; echo "unclear error"; exit 1; }
(cd "$DIR/empty" && TMPDIR="$DIR" "$KVSERVE" serve --role decode --model random --duration 0.5 \
   --listen 127.0.0.1:0 >/dev/null 2>"$DIR/random.log") ||
  { cat "$DIR/random.log"; echo "--model random did not start"; exit 1; }
# e2e on a model with no measured table: an error naming --table, not the
# example table's made-up numbers.
if (cd "$DIR/empty" && TMPDIR="$DIR" "$KVSERVE" e2e --model random --requests 1 \
     >/dev/null 2>"$DIR/e2e.log"); then
  echo "e2e ran without a measured table"; exit 1
fi
grep -q -- "--table" "$DIR/e2e.log" || { cat "$DIR/e2e.log"; echo "unclear e2e error"; exit 1; }
echo "serve CLI: 4 requests served, intruder refused, measured default table, no made-up model or table"
