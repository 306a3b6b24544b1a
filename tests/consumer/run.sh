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
#   components                    kvadmit, cuda, fleet, fleet_static: found as
#                                 built; unknown or unavailable ones refused
#                                 with a reason (libzmq.pc missing too)
#   a host's own URCU lookup      before (project/) and after (after/)
#                                 find_package(kvadmit): both still link
#   a plug-in embedding the archive   exports no kva_*, binds none of its
#                                 calls to the host's libkvadmit.so
#   dlopen by path                the installed CUDA and fleet libraries,
#                                 without LD_LIBRARY_PATH (RUNPATH $ORIGIN)
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

step "a plug-in embedding libkvadmit.a, loaded by a host linked with libkvadmit.so"
plugin=$work/cmake-build/static_plugin.so
if nm -D --defined-only "$plugin" | grep ' kva_'; then
  echo "static_plugin.so re-exports kvadmit's API from libkvadmit.a"; exit 1
fi
echo "static_plugin.so exports no kva_*"
LD_DEBUG=bindings LD_DEBUG_OUTPUT="$work/bindings" run plugin_host "$work/cmake-build/plugin_host" "$plugin"
if grep -h "static_plugin.so .* to .*libkvadmit" "$work"/bindings.*; then
  echo "the plug-in's calls bound to the host's libkvadmit.so"; exit 1
fi
echo "no call of the plug-in bound to libkvadmit.so"

step "find_package(kvadmit) before the host's own URCU lookup"
"$CMAKE" -S "$src/tests/consumer/after" -B "$work/after" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CC" > "$work/after.log" 2>&1 &&
  "$CMAKE" --build "$work/after" >> "$work/after.log" 2>&1 || { cat "$work/after.log"; exit 1; }
run host_qsbr_after "$work/after/host_qsbr_after"

step "dlopen by path of the installed libraries, without LD_LIBRARY_PATH (RUNPATH \$ORIGIN)"
so=${KVA_VERSION%.*}
# shellcheck disable=SC2046 # pkg-config output is a word list
$CC -std=c11 -Wall -Wextra -o "$work/dlopen_test" "$src/tests/package/dlopen_test.c" \
  $(pkg-config --cflags kvadmit) -ldl
readelf -d "$libdir/libkvadmit-cuda.so.$so" | grep -E 'RUNPATH|RPATH' || true
run "dlopen libkvadmit-cuda.so.$so" env -u LD_LIBRARY_PATH "$work/dlopen_test" cuda "$libdir/libkvadmit-cuda.so.$so"
if [ -e "$libdir/libkvadmit-fleet.so.$so" ]; then
  run "dlopen libkvadmit-fleet.so.$so" env -u LD_LIBRARY_PATH "$work/dlopen_test" fleet \
    "$libdir/libkvadmit-fleet.so.$so"
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
# The archives may hold GCC's link-time IR beside their code
# (cmake/optimization.cmake): another compiler, linking without it, must
# still find the code.
if command -v clang > /dev/null; then
  # shellcheck disable=SC2046
  clang -std=c11 -Wall -Wextra -Werror -static -o "$pc/c_static_clang" \
    "$src/tests/consumer/consumer.c" $(pkg-config --static --cflags --libs kvadmit) 2>&1 |
    grep -v "statically linked applications requires at runtime" || true
  [ -x "$pc/c_static_clang" ] || { echo "clang's static link of libkvadmit.a failed"; exit 1; }
  run "pkg-config c_static_clang" "$pc/c_static_clang"
else
  echo "no clang: the archive's link by another compiler is not checked"
fi

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

step "components"
fleet=0
[ -e "$libdir/libkvadmit-fleet.so" ] && fleet=1
cuda=0
case "${KVA_WITH_CUDA:-OFF}" in ON|on|1|TRUE|true) cuda=1 ;; esac
# request NAME WANT_FOUND MESSAGE_PATTERN COMPONENTS OPTIONAL: find_package
# with those (';'-separated) components, found must be WANT_FOUND and the
# output must match MESSAGE_PATTERN. The requests share a build directory
# ($reqdir): a reconfiguration is quicker than a fresh one.
reqdir=$work/components
request() {
  local out
  out=$("$CMAKE" -S "$src/tests/consumer/version" -B "$reqdir" -DKVA_REQUEST=0.2 \
    "-DKVA_COMPONENTS=$4" "-DKVA_OPTIONAL=$5" -DCMAKE_PREFIX_PATH="$prefix" 2>&1 |
    grep 'kvadmit-request\|kvadmit-message\|kvadmit:') || true
  echo "[$1: components '$4', optional '$5'] $out"
  case "$out" in
    *"found=$2"*) ;;
    *) echo "components $1: expected found=$2"; exit 1 ;;
  esac
  case "$out" in
    *$3*) ;;
    *) echo "components $1: expected a message matching '$3'"; exit 1 ;;
  esac
}
request core 1 "kvadmit=1" "kvadmit" ""
request cuda $cuda "cuda=$cuda" "cuda" ""
request fleet $fleet "fleet_static=$fleet" "fleet;fleet_static" ""
request unknown 0 "no such component" "kvadmit;nosuch" ""
request optional 1 "fleet=$fleet" "" "nosuch;fleet"
if [ "$fleet" = 1 ]; then
  # libzmq's .pc missing: liburcu's only on the pkg-config path.
  mkdir -p "$work/pc-nozmq"
  for m in liburcu liburcu-common liburcu-memb liburcu-cds; do
    f="$(pkg-config --variable=pcfiledir "$m" 2>/dev/null || true)/$m.pc"
    if [ -e "$f" ]; then ln -sf "$f" "$work/pc-nozmq/"; fi
  done
  reqdir=$work/components-nozmq
  PKG_CONFIG_LIBDIR=$work/pc-nozmq PKG_CONFIG_PATH= request nozmq 0 "libzmq.pc" "fleet_static" ""
  PKG_CONFIG_LIBDIR=$work/pc-nozmq PKG_CONFIG_PATH= request nozmq-shared 1 "fleet=1" "kvadmit;fleet" ""
fi

echo
echo "consumer: all builds ran"
