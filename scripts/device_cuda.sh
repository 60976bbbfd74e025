#!/usr/bin/env bash
# The CUDA backend's one-call run on the GPU machine (docs/cuda.md):
# consistency tests, the H200 benchmark (with per-stage rows and roofline
# columns), the torch.compile KIVI-2 reference (bench/torch_kivi_reference.py)
# in the same run, and compute-sanitizer memcheck on the test binary;
# everything written under $OUT.
#
#   scripts/device_cuda.sh            # uses prebuilt binaries in build-cuda/carry if present,
#                                     # else configures and builds with -DKVSERVE_CUDA=ON here
#   KVSERVE_DEVICE_BUILD=1 scripts/device_cuda.sh   # always build on this machine
#
# Prebuilt binaries: on the development machine run scripts/device_cuda.sh --stage
# (builds test_cuda and kvserve_cuda_bench in build/release, or build-cuda when
# that does not exist, and copies them, stripped, with the shared libraries
# they need, into build-cuda/carry; pass that path as `carry`).
#
# Knobs: KVSERVE_BENCH_TOKENS (1024,8192,32768), KVSERVE_BENCH_REPEATS (20),
# KVSERVE_SANITIZER=0 skips memcheck, KVSERVE_DUMP_DIR (/tmp/kvserve-dump)
# receives the 8K-token cache (cache-8k.bf16) and the rANS input symbols of
# KVSERVE_DUMP_PROFILE (kvserve-htok, the best rANS profile) for it
# (rans-symbols-8k.u8, with a .sizes file of u32 segment lengths), and
# KVSERVE_EXTRA_BENCH, if set, is run last with that directory as its
# argument (another codec measured on the same bytes; docs/cuda.md).
# KVSERVE_NCU=PRESETS profiles one encode and decode of those presets
# with Nsight Compute (ncu.txt).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = "--stage" ]; then
  set -e
  BUILD="$ROOT/build/release"
  if [ ! -f "$BUILD/build.ninja" ]; then
    BUILD="$ROOT/build-cuda"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_CUDA=ON -DKVSERVE_BUILD_BENCH=OFF >/dev/null
  fi
  ninja -C "$BUILD" test_cuda kvserve_cuda_bench
  rm -rf "$ROOT/build-cuda/carry" && mkdir -p "$ROOT/build-cuda/carry/lib"
  for b in test_cuda kvserve_cuda_bench; do
    strip -o "$ROOT/build-cuda/carry/$b" "$BUILD/src/cuda/$b"
  done
  # Every shared library they load beyond the C and C++ runtimes (zstd, lz4,
  # xxhash, fmt, libcrypto, UCX, numa: the GPU image has none of Debian's).
  for b in test_cuda kvserve_cuda_bench; do
    ldd "$BUILD/src/cuda/$b" | awk '$3 ~ /^\// {print $3}' |
      grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt)\.so' |
      while read -r path; do cp -L "$path" "$ROOT/build-cuda/carry/lib/"; done
  done
  du -sh "$ROOT/build-cuda/carry"
  exit 0
fi

OUT=${OUT:-/tmp/kvserve-cuda-out}
DUMP=${KVSERVE_DUMP_DIR:-/tmp/kvserve-dump}
mkdir -p "$OUT" "$DUMP"
exec > >(tee "$OUT/log.txt") 2>&1
echo "== machine"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv || true
BIN=""
if [ -z "${KVSERVE_DEVICE_BUILD:-}" ] && [ -x "$ROOT/build-cuda/carry/test_cuda" ]; then
  BIN="$ROOT/build-cuda/carry"
  export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
  echo "== using prebuilt binaries in build-cuda/carry"
else
  echo "== configure + build"
  BUILD=/tmp/kvserve-build-cuda
  if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_CUDA=ON -DKVSERVE_BUILD_BENCH=OFF &&
     ninja -C "$BUILD" test_cuda kvserve_cuda_bench; then
    BIN="$BUILD/src/cuda"
  else
    echo "build failed"; exit 1
  fi
fi

status=0
echo "== consistency tests"
timeout "${KVSERVE_TEST_TIMEOUT:-240}" "$BIN/test_cuda" > "$OUT/test_cuda.txt" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |random profiles tested|Failure|differ|error" "$OUT/test_cuda.txt" | head -60

echo "== benchmark"
"$BIN/kvserve_cuda_bench" --tokens "${KVSERVE_BENCH_TOKENS:-1024,8192,32768}" --repeats "${KVSERVE_BENCH_REPEATS:-20}" \
  --dump-cache "$DUMP/cache-8k.bf16" --dump-symbols "$DUMP/rans-symbols-8k.u8" \
  --dump-profile "${KVSERVE_DUMP_PROFILE:-kvserve-htok}" \
  --out "$OUT/bench.md" 2> "$OUT/bench_progress.txt" || status=1
grep -E "^\| (d2d-copy|none|kivi-2|kivi-4|duo|mixhq|kvserve-htok|kvserve-h2r) \|" "$OUT/bench.md" | head -30

echo "== torch.compile reference (bench/torch_kivi_reference.py)"
PYTHONUNBUFFERED=1 timeout 300 python3 "$ROOT/bench/torch_kivi_reference.py" --tokens "${KVSERVE_BENCH_TOKENS:-1024,8192,32768}" \
  --repeats "${KVSERVE_BENCH_REPEATS:-20}" --out "$OUT/torch_reference.json" || status=1

if [ -n "${KVSERVE_NCU:-}" ]; then
  echo "== Nsight Compute: one encode and one decode of ${KVSERVE_NCU} at 8K tokens"
  timeout 300 ncu --clock-control none --kernel-name regex:'Tiles|Warps|RawSpans|RawWindows|Rans|Record' --print-details all \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section MemoryWorkloadAnalysis_Tables \
    "$BIN/kvserve_cuda_bench" --tokens 8192 --repeats 0 --presets "$KVSERVE_NCU" --no-verify --no-stages \
    > "$OUT/ncu.txt" 2>&1 || echo "ncu exit $?"
  grep -E "^  [A-Za-z].*\(|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Stall" "$OUT/ncu.txt" | head -80
  echo "== local memory instructions per kernel (cuobjdump)"
  cuobjdump -sass "$BIN/kvserve_cuda_bench" 2>/dev/null | awk '/Function :/ {f=$3} /LDL|STL/ {n[f]++} END {for (k in n) print n[k], k}' | sort -rn | head -20
fi

if [ "${KVSERVE_SANITIZER:-1}" != "0" ]; then
  echo "== compute-sanitizer (memcheck) on test_cuda, ${KVSERVE_SANITIZER_PROFILES:-24} random profiles"
  KVSERVE_CUDA_TEST_PROFILES=${KVSERVE_SANITIZER_PROFILES:-24} timeout "${KVSERVE_SANITIZER_TIMEOUT:-150}" \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda" --gtest_filter='CudaDevice.*' \
    > "$OUT/sanitizer.txt" 2>&1
  san=$?
  echo "compute-sanitizer exit $san"; grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/sanitizer.txt" | head -20
  [ $san -ne 0 ] && status=1
fi

if [ -n "${KVSERVE_EXTRA_BENCH:-}" ]; then
  echo "== extra benchmark on the dumped bytes: $KVSERVE_EXTRA_BENCH"
  timeout "${KVSERVE_EXTRA_TIMEOUT:-300}" bash -c "$KVSERVE_EXTRA_BENCH \"$DUMP\"" > "$OUT/extra_bench.txt" 2>&1 || status=1
  tail -5 "$OUT/extra_bench.txt"
fi

exit $status
