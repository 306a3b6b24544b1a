#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Consumer test (ctest package_consumer): installs the build to a temporary
# prefix and builds hosts against the installation only, then runs them:
#   find_package(kvadmit CONFIG)  C and C++, shared and static, the CUDA
#                                 library, kvadmit::lockfree, examples/*.c and
#                                 the README example (project/CMakeLists.txt)
#   pkg-config kvadmit            C and C++, shared and static (--static, -static)
#   pkg-config kvadmit-cuda       shared
#   version requests              0.2 and 0.2.0 accepted, 0.1 and 0.3 refused
# Usage: run.sh BUILD_DIR SOURCE_DIR, with CMAKE, CC, CXX, KVA_SANITIZE,
# KVA_EXAMPLES (comma-separated), KVA_README_EXAMPLE and KVA_VERSION in the
# environment (tests/package/CMakeLists.txt sets them).
set -euo pipefail
build=$1 src=$2
CMAKE=${CMAKE:-cmake} CC=${CC:-cc} CXX=${CXX:-c++}

# A sanitizer build's libraries need every consumer compiled and linked with
# the same sanitizer, and a fully static link cannot carry the sanitizer
# runtimes: what would be tested is the sanitizer set-up, not the package.
# The rel build runs this test; here it is skipped.
if [ -n "${KVA_SANITIZE:-}" ]; then
  echo "skipped: sanitizer build (${KVA_SANITIZE})"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvadmit-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

step() { printf '\n== %s\n' "$*"; }

step "cmake --install $build --prefix $prefix"
"$CMAKE" --install "$build" --prefix "$prefix" > "$work/install.log"
(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort)

libdir=$(dirname "$(find "$prefix" -name kvadmit.pc -path '*/pkgconfig/*')")
libdir=${libdir%/pkgconfig}
export PKG_CONFIG_PATH=$libdir/pkgconfig
run() { printf -- '-- %s: ' "$1"; shift; "$@"; }

step "find_package(kvadmit CONFIG): C, C++; shared, static; CUDA library; lockfree; examples"
IFS=, read -r -a examples <<< "${KVA_EXAMPLES:-}"
"$CMAKE" -S "$src/tests/consumer/project" -B "$work/cmake-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  "-DKVA_EXAMPLES=$(IFS=';'; echo "${examples[*]}")" -DKVA_README_EXAMPLE="${KVA_README_EXAMPLE:-}" \
  > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
grep -- '-- kvadmit ' "$work/configure.log"
"$CMAKE" --build "$work/cmake-build" -j2 > "$work/build.log" || { cat "$work/build.log"; exit 1; }
for p in $(cat "$work/cmake-build/programs.txt"); do
  run "$p" "$work/cmake-build/$p"
done
# Shared consumers must not pick up the build tree's libraries.
if ldd "$work/cmake-build/c_shared" | grep -q "$build"; then
  echo "c_shared resolves libkvadmit from the build tree"; exit 1
fi
ldd "$work/cmake-build/c_shared" | grep kvadmit
if ldd "$work/cmake-build/c_static" | grep -q kvadmit; then
  echo "c_static depends on a shared kvadmit"; exit 1
fi

step "pkg-config kvadmit $(pkg-config --modversion kvadmit)"
echo "cflags: $(pkg-config --cflags kvadmit)"
echo "libs: $(pkg-config --libs kvadmit)"
echo "static libs: $(pkg-config --static --libs kvadmit)"
pc=$work/pkgconfig-build
mkdir -p "$pc"
rpath="-Wl,-rpath,$libdir"
# shellcheck disable=SC2046 # pkg-config output is a word list
{
  $CC -std=c11 -Wall -Wextra -Werror -o "$pc/c_shared" "$src/tests/consumer/consumer.c" \
    $(pkg-config --cflags --libs kvadmit) -lpthread "$rpath"
  $CXX -std=c++17 -Wall -Wextra -Werror -o "$pc/cxx_shared" "$src/tests/consumer/consumer.cc" \
    $(pkg-config --cflags --libs kvadmit) -lpthread "$rpath"
  # Static: the whole program static, so -lkvadmit cannot pick the .so.
  $CC -std=c11 -Wall -Wextra -Werror -static -o "$pc/c_static" "$src/tests/consumer/consumer.c" \
    $(pkg-config --static --cflags --libs kvadmit)
  $CXX -std=c++17 -Wall -Wextra -Werror -static -o "$pc/cxx_static" "$src/tests/consumer/consumer.cc" \
    $(pkg-config --static --cflags --libs kvadmit)
  $CC -std=c11 -Wall -Wextra -Werror -o "$pc/cuda_shared" "$src/tests/consumer/cuda_consumer.c" \
    $(pkg-config --cflags --libs kvadmit-cuda) "$rpath"
} 2>&1 | grep -v "statically linked applications requires at runtime" || true
for p in c_shared cxx_shared c_static cxx_static cuda_shared; do
  [ -x "$pc/$p" ] || { echo "pkg-config build of $p failed"; exit 1; }
  run "pkg-config $p" "$pc/$p"
done
if ldd "$pc/c_static" > /dev/null 2>&1; then echo "pkg-config c_static is not static"; exit 1; fi

step "version requests (SameMinorVersion)"
for req in 0.2 0.2.0 0.1 0.3 1.0; do
  out=$("$CMAKE" -S "$src/tests/consumer/version" -B "$work/version-$req" -DKVA_REQUEST=$req \
    -DCMAKE_PREFIX_PATH="$prefix" 2>&1 | grep 'kvadmit-request') || true
  echo "$out"
  case "$req" in
    0.2|0.2.0) want=1 ;;
    *) want=0 ;;
  esac
  case "$out" in
    *found=1*) got=1 ;;
    *) got=0 ;;
  esac
  [ "$got" = "$want" ] || { echo "request $req: found=$got, expected $want"; exit 1; }
done
echo
echo "consumer: all builds ran"
