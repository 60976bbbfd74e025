#!/usr/bin/env bash
# `kvserve inspect` and `kvserve decompress` on hostile frames (valid
# headers declaring up to 2^31 records / 128 GiB, with no or few records
# behind them; tests/fuzz/corpus/frame/hostile-*.kvsf, written by
# fuzz_make_corpus) under a 256 MiB address-space limit: each must fail with
# a clear error (exit 1), never abort on an allocation (docs/format.md §7).
#   tests/decoder_memory_cli_test.sh path/to/kvserve
set -uo pipefail
KVSERVE=${1:?usage: $0 path/to/kvserve}
DIR="$(cd "$(dirname "$0")" && pwd)/fuzz/corpus/frame"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail=0
for f in "$DIR"/hostile-*.kvsf; do
  for cmd in inspect decompress; do
    args=("$cmd" "$f")
    [ "$cmd" = decompress ] && args+=(-o "$OUT/out.kvf" --threads 1)
    (ulimit -v 262144; exec "$KVSERVE" "${args[@]}") >/dev/null 2>"$OUT/err"
    rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q "error: corruption" "$OUT/err"; then
      echo "FAIL: kvserve $cmd $(basename "$f"): exit $rc: $(tail -c 300 "$OUT/err")" >&2
      fail=1
    else
      echo "ok: kvserve $cmd $(basename "$f"): $(tail -c 160 "$OUT/err")"
    fi
  done
done
[ ! -e "$OUT/out.kvf" ] || { echo "FAIL: decompress wrote an output" >&2; fail=1; }
exit $fail
