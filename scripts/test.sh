#!/usr/bin/env bash
# Installs the build dependencies, builds kvserve and runs every test:
#   1. all unit and cross-cutting tests (ctest) in build/release;
#   2. an ASan + UBSan build in build/asan running the core, transforms,
#      quantizers, codecs, pipeline and io tests;
#   3. the fuzz corpus replay (tests/fuzz/replay.sh), when present.
# Idempotent: reruns reuse the build directories. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${KVSERVE_JOBS:-$(nproc)}"
step() { printf '\n[test] %s\n' "$*" >&2; }

step "installing dependencies (scripts/setup.sh)"
scripts/setup.sh

step "configuring and building build/release"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$JOBS"

step "running all tests (ctest)"
ctest --test-dir build/release -j2 --output-on-failure

# Sanitizer build: the areas whose code parses untrusted bytes or does the
# bit-level work. Add an area here to sanitize its tests too.
ASAN_AREAS=(core transforms quantizers codecs pipeline io)
step "configuring and building build/asan (ASan + UBSan)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_SANITIZE=ON \
  -DKVSERVE_BUILD_BENCH=OFF >/dev/null
targets=()
for area in "${ASAN_AREAS[@]}"; do
  if ninja -C build/asan -t query "test_${area}" >/dev/null 2>&1; then targets+=("test_${area}"); fi
done
if [ ${#targets[@]} -eq 0 ]; then echo "[test] no sanitizer test targets found" >&2; exit 1; fi
cmake --build build/asan -j "$JOBS" --target "${targets[@]}"
label_regex="^($(IFS='|'; echo "${ASAN_AREAS[*]}"))\$"
step "running sanitizer tests: ${targets[*]}"
ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  ctest --test-dir build/asan -j2 --output-on-failure -L "$label_regex"

# ---- HOOK: fuzz corpus replay (tests/fuzz/, owned by the decoder fuzz targets) ----
# tests/fuzz/replay.sh builds the fuzz targets and replays the checked-in
# corpus; it must exit non-zero on any crash, hang or sanitizer report.
if [ -x tests/fuzz/replay.sh ]; then
  step "replaying the fuzz corpus (tests/fuzz/replay.sh)"
  tests/fuzz/replay.sh
elif [ -f tests/fuzz/replay.sh ]; then
  step "replaying the fuzz corpus (tests/fuzz/replay.sh)"
  bash tests/fuzz/replay.sh
else
  step "no tests/fuzz/replay.sh yet: fuzz corpus replay skipped"
fi
# ---- end HOOK ----

step "all tests passed"
