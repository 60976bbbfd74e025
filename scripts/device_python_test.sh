#!/usr/bin/env bash
# Builds the kvserve Python module on the GPU machine and runs the Python
# tests there, including the transformers DynamicCache test
# (python/tests/test_hf.py) with the project's shipped model (models/*/ or
# $KVSERVE_HF_MODEL). Output goes to $OUT (log + hf_results.json).
#
# The GPU image has python3 (3.12, torch, transformers, pybind11), cmake and
# ninja, but not the Debian -dev packages the library links (zstd, lz4,
# xxhash, fmt, nlohmann-json, eigen, dlpack). Two steps:
#
#   here (Debian 12, once):   scripts/device_python_test.sh prepare
#       downloads those .deb files into .devdeps/ (ignored via .git/info/exclude)
#   device run:               bash scripts/device_python_test.sh     with carry [".devdeps"]
#       unpacks them under /tmp/devdeps (never into /), builds into
#       build-device/, runs the tests.
#
# Then it runs python/examples/profile_own_model.py (profiling from Python,
# output in $OUT/profile-qa; KVSERVE_PROFILE_EXAMPLE=0 skips it,
# KVSERVE_PROFILE_EXAMPLE_ARGS adds flags such as "--samples 100 --budget 20").
# KVSERVE_PD_BENCH_ARGS runs `bench/pd_sweep.py` with those flags
# (report in $OUT/e2e-gpu.md and .json).
# KVSERVE_DEVICE_TESTS="test_pd.PdGpuTest test_hf" runs only those tests;
# KVSERVE_DEVICE_UNITTEST=0 skips the unit tests, KVSERVE_CUDA_BENCH=0 the
# CUDA API benchmark, KVSERVE_DEVICE_CLI=0 the kvserve CLI build (then no C++
# comparison or policy check there): a run for the profiling example alone.
#
# If the C++ quality evaluator (`kvserve quality`) is built there and
# $KVSERVE_QUALITY_ARGS is set (e.g. "--workload qa --samples 50"), its
# result for the same profile is passed to the test, which then requires the
# two confidence intervals to overlap.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
DEBS=(libzstd-dev libzstd1 liblz4-dev liblz4-1 libxxhash-dev libxxhash0 libfmt-dev libfmt9
      nlohmann-json3-dev libeigen3-dev libdlpack-dev libcli11-dev libnlopt-dev libnlopt0
      libsqlite3-dev libsqlite3-0 libhiredis-dev libhiredis0.14 libssl-dev libssl3 libasio-dev
      libonig-dev libonig5 libicu-dev libicu72 libucx-dev libucx0 libnuma1 librdmacm1 libibverbs1
      libnlopt-cxx-dev libnlopt-cxx0 libgtest-dev libgmock-dev
      redis-server redis-tools libjemalloc2 liblzf1)

if [ "${1:-}" = "prepare" ]; then
  mkdir -p .devdeps
  grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
  (cd .devdeps && apt-get download "${DEBS[@]}")
  # libicu-dev's static libraries (42 MB unpacked) are never linked; without them the .deb is
  # 0.7 MB instead of 10 MB, and the tree plus .devdeps stays under the device's 64 MiB carry.
  for deb in .devdeps/libicu-dev_*.deb; do
    tmp=$(mktemp -d)
    dpkg-deb -R "$deb" "$tmp/x" && find "$tmp/x" -name '*.a' -delete &&
      dpkg-deb -Zxz -z9 -b "$tmp/x" "$deb" >/dev/null
    rm -rf "$tmp"
  done
  du -sh .devdeps
  exit 0
fi

OUT="${OUT:-$ROOT/out/device-python}"
mkdir -p "$OUT"
LOG="$OUT/python_device_test.log"
exec > >(tee "$LOG") 2>&1
PY="${PYTHON:-python3}"
# Each section is stamped with the seconds since the script started, so a
# log shows where a device call's time went.
section() { printf '== [%4ds] %s\n' "$SECONDS" "$*"; }
section "machine"; uname -a; nproc; nvidia-smi -L 2>/dev/null || true
"$PY" -c 'import sys, torch, numpy; print(sys.version); print("torch", torch.__version__, "cuda", torch.cuda.is_available()); print("numpy", numpy.__version__)'
"$PY" -c 'import transformers; print("transformers", transformers.__version__)' || echo "transformers: missing"

CMAKE_EXTRA=()
if [ -d .devdeps ] && ls .devdeps/*.deb >/dev/null 2>&1; then
  section "unpacking .devdeps into /tmp/devdeps"
  rm -rf /tmp/devdeps && mkdir -p /tmp/devdeps
  for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/devdeps || exit 1; done
  D=/tmp/devdeps/usr
  # The .pc files say prefix=/usr (and zstd's libdir lacks the multiarch dir).
  for pc in "$D"/lib/x86_64-linux-gnu/pkgconfig/*.pc "$D"/share/pkgconfig/*.pc; do
    [ -f "$pc" ] || continue
    sed -i -e "s|^prefix=/usr\$|prefix=$D|" \
           -e 's|^libdir=${exec_prefix}/lib$|libdir=${exec_prefix}/lib/x86_64-linux-gnu|' \
           -e "s|^includedir=/usr/include|includedir=$D/include|" \
           -e "s|^libdir=/usr/lib\$|libdir=$D/lib/x86_64-linux-gnu|" "$pc"
  done
  export PKG_CONFIG_PATH="$D/lib/x86_64-linux-gnu/pkgconfig:$D/share/pkgconfig"
  export LD_LIBRARY_PATH="$D/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$D;$D/lib/x86_64-linux-gnu/cmake;$D/share"
                "-DCMAKE_INCLUDE_PATH=$D/include" "-DCMAKE_LIBRARY_PATH=$D/lib/x86_64-linux-gnu")
fi
PYBIND11_DIR="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null || true)"
[ -n "$PYBIND11_DIR" ] && CMAKE_EXTRA+=("-Dpybind11_DIR=$PYBIND11_DIR")

section "build"
BUILD=build-device
# The CUDA codec's bindings where nvcc is present (kvserve.CudaEncoder ...).
NVCC="$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)"
[ -n "$NVCC" ] && CMAKE_EXTRA+=("-DKVSERVE_CUDA=ON" "-DCMAKE_CUDA_COMPILER=$NVCC")
# KVSERVE_DEVICE_CUDA_TESTS=1 also builds and runs the CUDA consistency,
# window and device-connector tests (test_cuda; KVSERVE_CUDA_TEST_FILTER is
# its --gtest_filter) in the same build.
CUDA_TESTS="${KVSERVE_DEVICE_CUDA_TESTS:-0}"
TESTS_FLAG=-DKVSERVE_BUILD_TESTS=OFF
[ "$CUDA_TESTS" = "1" ] && [ -n "$NVCC" ] && TESTS_FLAG=-DKVSERVE_BUILD_TESTS=ON
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_PYTHON=ON \
  "$TESTS_FLAG" -DKVSERVE_BUILD_BENCH=OFF -DPython3_EXECUTABLE="$(command -v "$PY")" \
  "${CMAKE_EXTRA[@]}" || { echo "cmake configure failed (run 'prepare' here and carry .devdeps)"; exit 1; }
TARGETS=(kvserve_python)
[ "$TESTS_FLAG" = "-DKVSERVE_BUILD_TESTS=ON" ] && TARGETS+=(test_cuda)
ninja -C "$BUILD" "${TARGETS[@]}" || exit 1
# What the extension exports (its entry point alone: see python/src/kvserve.map).
EXT="$(ls "$BUILD"/python/kvserve/_kvserve*.so | head -1)"
echo "extension exports: $(readelf --dyn-syms -W "$EXT" | awk 'NR > 3 && $7 != "UND" {print $5}' | sort | uniq -c | tr '\n' ' ')"
if [ "$TESTS_FLAG" = "-DKVSERVE_BUILD_TESTS=ON" ]; then
  section "CUDA tests (test_cuda ${KVSERVE_CUDA_TEST_FILTER:-*})"
  timeout "${KVSERVE_CUDA_TEST_TIMEOUT:-300}" "$BUILD/src/cuda/test_cuda" --gtest_filter="${KVSERVE_CUDA_TEST_FILTER:-*}" \
    > "$OUT/test_cuda.txt" 2>&1
  cuda_rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|tested|Failure|differ" "$OUT/test_cuda.txt" | head -80
  echo "test_cuda exit $cuda_rc"
fi
if [ "${KVSERVE_DEVICE_CLI:-1}" != "0" ]; then
  ninja -C "$BUILD" kvserve >/dev/null 2>&1 || echo "(kvserve CLI not built; no C++ quality reference)"
fi
export PYTHONPATH="$ROOT/$BUILD/python"
export KVSERVE_TEST_OUT="$OUT"

if [ -n "${KVSERVE_QUALITY_ARGS:-}" ] && [ -x "$BUILD/tools/kvserve/kvserve" ]; then
  MODEL="${KVSERVE_HF_MODEL:-$(dirname "$(ls models/*/config.json 2>/dev/null | head -1)")}"
  section "C++ quality reference: kvserve quality --model $MODEL --profile ${KVSERVE_HF_PROFILE:-kivi-4} $KVSERVE_QUALITY_ARGS"
  # Expected to print JSON with the relative quality and its 95% CI half-width.
  if "$BUILD/tools/kvserve/kvserve" quality --model "$MODEL" --profile "${KVSERVE_HF_PROFILE:-kivi-4}" \
       $KVSERVE_QUALITY_ARGS --json > "$OUT/cpp_quality.json"; then
    "$PY" - "$OUT/cpp_quality.json" "$OUT/quality_reference.json" <<'EOF'
import json, sys
q = json.load(open(sys.argv[1]))
mean = q.get("relative_quality", q.get("mean"))
ci = q.get("ci95", q.get("ci95_half_width"))
if isinstance(ci, list):
    ci = (ci[1] - ci[0]) / 2
json.dump({"mean": mean, "ci95": ci, "source": q}, open(sys.argv[2], "w"))
EOF
    export KVSERVE_QUALITY_REFERENCE="$OUT/quality_reference.json"
  fi
fi

rc=0
[ "${cuda_rc:-0}" = "0" ] || rc=1
if [ -n "${KVSERVE_DEVICE_TESTS:-}" ]; then
  section "python tests: $KVSERVE_DEVICE_TESTS"
  # shellcheck disable=SC2086  # a list of test names (modules, Class or Class.method)
  (cd python/tests && PYTHONUNBUFFERED=1 "$PY" -m unittest -v $KVSERVE_DEVICE_TESTS) || rc=1
elif [ "${KVSERVE_DEVICE_UNITTEST:-1}" != "0" ]; then
  section "python tests"
  PYTHONUNBUFFERED=1 "$PY" -m unittest discover -s python/tests -v || rc=1
fi
if [ -n "$NVCC" ] && [ "${KVSERVE_CUDA_BENCH:-1}" != "0" ]; then
  section "CUDA from Python vs the C++ device API (python/bench_cuda.py)"
  PYTHONUNBUFFERED=1 "$PY" python/bench_cuda.py --tokens "${KVSERVE_CUDA_BENCH_TOKENS:-8192}" \
    --out "$OUT/cuda_api_bench.json" | tee "$OUT/cuda_api_bench.txt" || rc=1
fi
# Profiling driven from Python with the transformers task evaluator on the
# shipped model (issue 20 item 4): the table it writes must load in
# `kvserve policy`; with the CLI built, the C++ evaluator scores the best
# profile and kivi-2 on the same samples for comparison (results.json).
if [ "${KVSERVE_PROFILE_EXAMPLE:-1}" != "0" ] && [ -f data/eval/qa.jsonl ] && "$PY" -c 'import transformers' 2>/dev/null; then
  section "profiling from Python (python/examples/profile_own_model.py)"
  CMP=()
  [ -x "$BUILD/tools/kvserve/kvserve" ] && CMP=(--compare-cli "$BUILD/tools/kvserve/kvserve")
  PYTHONUNBUFFERED=1 "$PY" python/examples/profile_own_model.py --out-dir "$OUT/profile-qa" \
    ${KVSERVE_PROFILE_EXAMPLE_ARGS:-} "${CMP[@]}" || rc=1
  if [ -x "$BUILD/tools/kvserve/kvserve" ] && [ -f "$OUT/profile-qa/table.json" ]; then
    "$BUILD/tools/kvserve/kvserve" policy "$OUT/profile-qa/table.json" --workload qa --quality-min 0.97 \
      | tee "$OUT/profile-qa/policy.txt" || rc=1
  fi
fi
# The prefill/decode sweep (bench/pd_sweep.py: the library's workers around
# the transformers engine) when KVSERVE_PD_BENCH_ARGS is set, e.g.
# "--model llama-8b-random --device cuda --prompt-tokens 8192 --gbps 25,5,0
#  --table configs/profiles/kvs-qwen2-9m-qa.json --workload qa
#  --baseline-quality docs/results/quality". Report in $OUT/e2e-gpu.md and
# .json (written after every point); KVSERVE_PD_BENCH_APPEND=FILE starts
# from an earlier call's JSON (copied to $OUT) and adds this call's points.
if [ -n "${KVSERVE_PD_BENCH_ARGS:-}" ]; then
  section "prefill/decode sweep (bench/pd_sweep.py)"
  APPEND=()
  if [ -n "${KVSERVE_PD_BENCH_APPEND:-}" ]; then
    cp "$KVSERVE_PD_BENCH_APPEND" "$OUT/e2e-gpu.json" && APPEND=(--append)
  fi
  # shellcheck disable=SC2086  # the knob is a list of flags
  PYTHONUNBUFFERED=1 "$PY" bench/pd_sweep.py $KVSERVE_PD_BENCH_ARGS --check "${APPEND[@]}" \
    --out-json "$OUT/e2e-gpu.json" --out-md "$OUT/e2e-gpu.md" || rc=1
fi
# The trace replay under load (bench/trace_gpu.py: two prefill workers and a
# batching decode worker on this GPU, `kvserve replay` of the shared trace)
# when KVSERVE_TRACE_BENCH_ARGS is set (needs the CLI: KVSERVE_DEVICE_CLI=1
# and ../shared's trace, carried as shared/ or given with --trace). Report
# in $OUT/trace-gpu.{json,md,png}; KVSERVE_TRACE_BENCH_APPEND=FILE starts
# from an earlier call's JSON and adds this call's points. The Redis run:
# "--pool-backend redis --redis-server /tmp/devdeps/usr/bin/redis-server"
# (redis-server is one of the carried .debs).
if [ -n "${KVSERVE_TRACE_BENCH_ARGS:-}" ]; then
  section "trace replay under load (bench/trace_gpu.py)"
  APPEND=()
  if [ -n "${KVSERVE_TRACE_BENCH_APPEND:-}" ]; then
    cp "$KVSERVE_TRACE_BENCH_APPEND" "$OUT/trace-gpu.json" && APPEND=(--append)
  fi
  # shellcheck disable=SC2086  # the knob is a list of flags
  PYTHONUNBUFFERED=1 "$PY" bench/trace_gpu.py --kvserve "$BUILD/tools/kvserve/kvserve" $KVSERVE_TRACE_BENCH_ARGS \
    "${APPEND[@]}" --out-json "$OUT/trace-gpu.json" --out-md "$OUT/trace-gpu.md" --plot "$OUT/trace-gpu.png" || rc=1
fi
section "exit $rc"
exit $rc
