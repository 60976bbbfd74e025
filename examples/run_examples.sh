#!/usr/bin/env bash
# Runs examples/kv_receiver and examples/kv_sender against each other over
# TCP on localhost: with the lossless profile the receiver's KV digest must
# equal the sender's; with kivi-2 the frame must be smaller than the KV.
# Usage: run_examples.sh BUILD_DIR (where kv_sender and kv_receiver are)
set -euo pipefail
bin=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/kvserve-examples.XXXXXX)
receiver_pid=
cleanup() {
  if [ -n "$receiver_pid" ]; then kill "$receiver_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

for profile in none kivi-2; do
  rm -f "$work/address"
  "$bin/kv_receiver" "$work/address" >"$work/receiver.out" 2>&1 &
  receiver_pid=$!
  for _ in $(seq 100); do [ -s "$work/address" ] && break; sleep 0.05; done
  [ -s "$work/address" ] || { echo "kv_receiver did not start" >&2; cat "$work/receiver.out" >&2; exit 1; }
  "$bin/kv_sender" "$(cat "$work/address")" --profile "$profile" --tokens 1000 >"$work/sender.out"
  wait "$receiver_pid"
  receiver_pid=
  cat "$work/sender.out" "$work/receiver.out"
  sent=$(sed -n 's/^digest //p' "$work/sender.out")
  got=$(sed -n 's/^digest //p' "$work/receiver.out")
  if [ "$profile" = none ] && [ "$sent" != "$got" ]; then
    echo "the receiver's KV differs from the sender's ($got != $sent)" >&2; exit 1
  fi
  if [ "$profile" = kivi-2 ]; then
    ratio=$(sed -n 's/.*(\([0-9.]*\)x).*/\1/p' "$work/sender.out")
    awk -v r="$ratio" 'BEGIN { exit !(r > 2) }' || { echo "kivi-2 did not compress (${ratio}x)" >&2; exit 1; }
  fi
done
echo "examples ok"
