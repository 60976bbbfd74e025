#!/usr/bin/env bash
# Compares kvserve's C++ runtime with Hugging Face transformers on every
# shipped model (models/*/reference/, written on the GPU machine by
# tools/train/check_hf.py) and prints the relative logit errors that
# docs/model-card.md records. Builds build/release's test_runtime_hf first.
#   scripts/check_runtime_vs_hf.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target test_runtime_hf >/dev/null
"$BUILD/src/runtime/test_runtime_hf"
