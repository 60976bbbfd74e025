#!/usr/bin/env bash
# A trace replay that loses a prefill worker: a decode worker and two
# prefill workers as real processes (the shipped model, or
# $KVSERVE_TEST_MODEL), `kvserve replay` of the first seconds of a trace
# through both, and the second prefill worker SIGKILLed once the replay has
# started (before the trace's second burst of arrivals). Checks that every
# request is answered (replay exit 0, one ok record per request of the
# window) and that the replay's summary counts the requests re-routed away
# from the dead worker (at least one).
#   tests/replay_kill_test.sh path/to/kvserve path/to/trace.jsonl
# Exits 77 (skipped) when the trace is not there.
set -euo pipefail
KVSERVE=$(realpath "${1:?usage: replay_kill_test.sh path/to/kvserve path/to/trace.jsonl}")
TRACE=${2:?usage: replay_kill_test.sh path/to/kvserve path/to/trace.jsonl}
[ -f "$TRACE" ] || { echo "no trace at $TRACE: skipped"; exit 77; }
source "$(dirname "$0")/serve_lib.sh"
serve_scratch replay-kill
export KVSERVE_SECRET=replay-kill-test-secret
MODEL=(--model "${KVSERVE_TEST_MODEL:-}")

# Starts `kvserve serve` with the given arguments; waits for its address.
serve() {
  local name=$1
  shift
  "$KVSERVE" serve "${MODEL[@]}" --listen 127.0.0.1:0 --address-file "$DIR/$name.addr" --threads 1 \
    --duration 300 "$@" >/dev/null 2>"$DIR/$name.log" &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$DIR/$name.addr" ] && return 0; sleep 0.1; done
  cat "$DIR/$name.log"
  echo "$name did not start"
  exit 1
}
serve decode --role decode
serve prefill-a --role prefill --decode "$(cat "$DIR/decode.addr")"
serve prefill-b --role prefill --decode "$(cat "$DIR/decode.addr")"
KILLED=${PIDS[2]}

# The trace's first 7 s (arrivals in bursts 3 s apart), prompts capped at
# 128 tokens, 4 generated tokens each.
"$KVSERVE" replay --trace "$TRACE" "${MODEL[@]}" \
  --prefill "$(cat "$DIR/prefill-a.addr"),$(cat "$DIR/prefill-b.addr")" \
  --window-seconds 7 --max-requests 24 --max-prompt-tokens 128 --max-output-tokens 4 --no-pool \
  --out-json "$DIR/replay.json" >/dev/null 2>"$DIR/replay.log" &
REPLAY=$!
PIDS+=("$REPLAY")
for _ in $(seq 1 600); do grep -qs "requests of" "$DIR/replay.log" && break; sleep 0.05; done
grep -q "requests of" "$DIR/replay.log" || { cat "$DIR/replay.log"; echo "the replay did not start"; exit 1; }
sleep 1
kill -9 "$KILLED"
if ! wait "$REPLAY"; then
  cat "$DIR/replay.log"
  echo "the replay lost or failed requests after a prefill worker was killed"
  exit 1
fi
python3 - "$DIR/replay.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
records, summary = report["records"], report["summary"]
failed = [r for r in records if not r.get("ok")]
assert len(records) == 24, f"{len(records)} records for 24 requests"
assert not failed, f"failed requests: {failed[:3]}"
rerouted = summary["rerouted"]
assert rerouted >= 1, f"no request was re-routed away from the killed worker: {summary}"
print(f"replay with a killed prefill worker: 24 of 24 requests answered, {rerouted} re-routed")
EOF
