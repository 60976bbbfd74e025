#!/usr/bin/env bash
# The CUDA backend's one-call run on the GPU machine (docs/cuda.md):
# consistency tests, compute-sanitizer on the test binary, and the H200
# benchmark, everything written under $OUT.
#
#   scripts/device_cuda.sh            # uses prebuilt binaries in build-cuda/carry if present,
#                                     # else configures and builds with -DKVSERVE_CUDA=ON here
#   KVSERVE_DEVICE_BUILD=1 scripts/device_cuda.sh   # always build on this machine
#
# Prebuilt binaries: on the development machine run scripts/device_cuda.sh --stage
# (builds test_cuda and kvserve_cuda_bench and copies them, stripped, with the
# shared libraries they need, into build-cuda/carry; pass that path as `carry`).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = "--stage" ]; then
  set -e
  cmake -S "$ROOT" -B "$ROOT/build-cuda" -G Ninja -DKVSERVE_CUDA=ON -DKVSERVE_BUILD_BENCH=OFF >/dev/null
  ninja -C "$ROOT/build-cuda" test_cuda kvserve_cuda_bench
  rm -rf "$ROOT/build-cuda/carry" && mkdir -p "$ROOT/build-cuda/carry/lib"
  for b in test_cuda kvserve_cuda_bench; do
    strip -o "$ROOT/build-cuda/carry/$b" "$ROOT/build-cuda/src/cuda/$b"
  done
  for lib in libzstd.so.1 liblz4.so.1 libxxhash.so.0; do
    cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" "$ROOT/build-cuda/carry/lib/"
  done
  du -sh "$ROOT/build-cuda/carry"
  exit 0
fi

OUT=${OUT:-/tmp/kvserve-cuda-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
BIN=""
if [ -z "${KVSERVE_DEVICE_BUILD:-}" ] && [ -x "$ROOT/build-cuda/carry/test_cuda" ]; then
  BIN="$ROOT/build-cuda/carry"
  export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
  echo "== using prebuilt binaries in build-cuda/carry"
else
  echo "== configure + build"
  BUILD=/tmp/kvserve-build-cuda
  if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DKVSERVE_CUDA=ON -DKVSERVE_BUILD_BENCH=OFF &&
     ninja -C "$BUILD" test_cuda kvserve_cuda_bench; then
    BIN="$BUILD/src/cuda"
  else
    echo "build failed"; exit 1
  fi
fi

status=0
echo "== consistency tests"
timeout "${KVSERVE_TEST_TIMEOUT:-170}" "$BIN/test_cuda" --gtest_output="xml:$OUT/test_cuda.xml" > "$OUT/test_cuda.txt" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |random profiles tested|Failure|differ|error" "$OUT/test_cuda.txt" | head -60

echo "== benchmark"
"$BIN/kvserve_cuda_bench" --tokens "${KVSERVE_BENCH_TOKENS:-1024,8192,32768}" --repeats "${KVSERVE_BENCH_REPEATS:-20}" \
  --out "$OUT/bench.md" 2> "$OUT/bench_progress.txt" || status=1
echo "== compute-sanitizer (memcheck) on test_cuda, ${KVSERVE_SANITIZER_PROFILES:-24} random profiles"
KVSERVE_CUDA_TEST_PROFILES=${KVSERVE_SANITIZER_PROFILES:-24} timeout "${KVSERVE_SANITIZER_TIMEOUT:-150}" \
  compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda" --gtest_filter='CudaDevice.*' \
  > "$OUT/sanitizer.txt" 2>&1
san=$?
echo "compute-sanitizer exit $san"; grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/sanitizer.txt" | head -20
[ $san -ne 0 ] && status=1

exit $status
