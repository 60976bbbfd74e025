#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; build/fuzz) and fuzzes
# each for FUZZ_SECONDS (default 60) with the limits every kvserve parser
# must live within: -rss_limit_mb=512 -malloc_limit_mb=512 (docs/fuzzing.md).
# New inputs go to build/fuzz/corpus/<target> (seeded from
# tests/fuzz/corpus/<target>), crashes and over-limit inputs to
# build/fuzz/artifacts/<target>/. Exits 1 when any target found one.
#   scripts/fuzz.sh [target ...]        (default: every tests/fuzz/fuzz_*.cc)
#   FUZZ_SECONDS=600 scripts/fuzz.sh connection frame
#   FUZZ_MERGE=1 scripts/fuzz.sh        also copy the FUZZ_KEEP (32) inputs adding the
#                                       most coverage into tests/fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${KVSERVE_JOBS:-$(nproc)}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cc; do targets+=("$(basename "$f" .cc | sed 's/^fuzz_//')"); done
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKVSERVE_FUZZ=ON -DKVSERVE_BUILD_TESTS=OFF -DKVSERVE_BUILD_BENCH=OFF -DKVSERVE_CUDA=OFF \
  "${launcher[@]}" >/dev/null
cmake --build build/fuzz -j "$JOBS" --target "${targets[@]/#/fuzz_}"
failed=()
for t in "${targets[@]}"; do
  corpus=build/fuzz/corpus/$t
  artifacts=build/fuzz/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "[fuzz] $t for ${SECONDS_EACH}s" >&2
  if ! ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0 \
      build/fuzz/tests/fuzz/fuzz_"$t" "$corpus" -max_total_time="$SECONDS_EACH" \
      -rss_limit_mb=512 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$artifacts"/ 2>build/fuzz/"$t".log; then
    failed+=("$t")
    tail -n 30 build/fuzz/"$t".log >&2
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)" build/fuzz/"$t".log >&2 || true
  if [ "${FUZZ_MERGE:-0}" = 1 ]; then
    # Not every new input: the few (FUZZ_KEEP, default 32) that add the
    # most coverage edges to the committed seeds (scripts/fuzz_select.py).
    merged=build/fuzz/merge/$t
    rm -rf "$merged" "$merged.ctl"
    mkdir -p "$merged"
    build/fuzz/tests/fuzz/fuzz_"$t" -merge=1 -merge_control_file="$merged.ctl" "$merged" \
      tests/fuzz/corpus/"$t" "$corpus" -rss_limit_mb=512 -malloc_limit_mb=512 >/dev/null 2>&1 || true
    scripts/fuzz_select.py "$merged.ctl" --seeds tests/fuzz/corpus/"$t" --keep "${FUZZ_KEEP:-32}" |
      while read -r f; do cp "$f" tests/fuzz/corpus/"$t"/; done
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[fuzz] findings in: ${failed[*]} (see build/fuzz/artifacts/)" >&2
  exit 1
fi
echo "[fuzz] no findings in: ${targets[*]}" >&2
