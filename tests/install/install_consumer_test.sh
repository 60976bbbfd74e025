#!/usr/bin/env bash
# The installed package, used as a serving team would (docs/install.md):
#   1. `cmake --install` of the build tree into a fresh prefix;
#   2. the consumer project tests/install/ configured with find_package(kvserve)
#      against that prefix, linked shared and static, run;
#   3. the same consumer compiled with `pkg-config --cflags --libs kvserve`, run;
#   4. examples/ built as a standalone project against the prefix, and its
#      sender/receiver pair run;
#   5. the installed `kvserve` run from a directory outside the repository;
#   6. `cpack -G DEB`: the Debian package holds the library, headers and
#      package files.
# Usage: install_consumer_test.sh BUILD_DIR SOURCE_DIR [CMAKE]
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${3:-cmake}
work=$(mktemp -d /tmp/kvserve-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
step() { printf '[install_consumer] %s\n' "$*"; }
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libkvserve.so' -print -quit)")
[ -n "$libdir" ] && [ "$libdir" != . ] || { echo "no libkvserve.so installed" >&2; exit 1; }
for f in "$libdir/libkvserve.a" "$prefix/include/kvserve/version.h" "$prefix/include/kvserve/codec.h" \
         "$libdir/cmake/kvserve/kvserveConfig.cmake" "$libdir/cmake/kvserve/kvserveConfigVersion.cmake" \
         "$libdir/pkgconfig/kvserve.pc" "$prefix/bin/kvserve"; do
  [ -e "$f" ] || { echo "missing from the install: $f" >&2; exit 1; }
done
# Only the public headers, one library (no area archives), nothing of src/.
if find "$prefix" -name 'libkvserve_*' | grep -q .; then
  echo "an internal area library was installed" >&2; exit 1
fi
if find "$prefix/include" -type d | grep -v "^$prefix/include\(/kvserve\)\?$" | grep -q .; then
  echo "headers outside include/kvserve/ were installed" >&2; exit 1
fi

step "find_package(kvserve): tests/install/ linked shared and static"
"$cmake" -S "$src/tests/install" -B "$work/consumer" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$work/consumer" >/dev/null
"$work/consumer/consumer_shared"
"$work/consumer/consumer_static"
if ldd "$work/consumer/consumer_static" | grep -q libkvserve; then
  echo "consumer_static links libkvserve.so" >&2; exit 1
fi

step "pkg-config --cflags --libs kvserve"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists --print-errors kvserve
[ "$(pkg-config --modversion kvserve)" = "$(sed -n 's/^#define KVSERVE_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/kvserve/version.h")" ]
# shellcheck disable=SC2046
c++ -std=c++20 -O1 "$src/tests/install/consumer.cc" -o "$work/consumer_pc" $(pkg-config --cflags --libs kvserve)
LD_LIBRARY_PATH="$libdir" "$work/consumer_pc"

step "examples/ as a standalone project"
"$cmake" -S "$src/examples" -B "$work/examples" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$work/examples" >/dev/null
"$src/examples/run_examples.sh" "$work/examples"

step "the installed kvserve from outside the repository"
# generate with no --model loads the shipped model from <prefix>/share/kvserve;
# a --data-dir without the data files is a clear error, not a crash.
(cd "$work" && env -u KVSERVE_DATA_DIR "$prefix/bin/kvserve" --version \
  && env -u KVSERVE_DATA_DIR "$prefix/bin/kvserve" generate --prompt-ids 1,2,3 -n 2 --threads 1 \
  && ! env -u KVSERVE_DATA_DIR "$prefix/bin/kvserve" --data-dir "$work" generate --prompt-ids 1 \
       2>"$work/data_dir.err" \
  && grep -q "is not a kvserve data directory" "$work/data_dir.err")

if command -v cpack >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
  step "cpack -G DEB"
  (cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/deb" >/dev/null)
  deb=$(find "$work/deb" -maxdepth 1 -name '*.deb' -print -quit)
  [ -n "$deb" ] || { echo "cpack wrote no .deb" >&2; exit 1; }
  contents=$(dpkg-deb -c "$deb")
  for f in libkvserve.so libkvserve.a include/kvserve/codec.h kvserveConfig.cmake kvserve.pc bin/kvserve; do
    grep -q "$f" <<<"$contents" || { echo "the Debian package lacks $f" >&2; exit 1; }
  done
  dpkg-deb -f "$deb" Package Version Depends
fi
step "ok"
