#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages kvadmit needs, only those that are missing.
# Does nothing (and needs no root) when everything is present.
#   scripts/install-deps.sh           everything the tests, fuzzers and benchmarks use
#   scripts/install-deps.sh --demo    only what `make run` (the simulator) needs
set -euo pipefail
if [ "${1:-}" = "--demo" ]; then
  shift
  # g++: the project's languages are C and C++ (the benchmark wrapper), so
  # CMake's configure step looks for both even when only C is built.
  # libc6-dev: gcc only recommends it, and --no-install-recommends skips it.
  pkgs=(cmake make pkg-config gcc g++ libc6-dev liburcu-dev libjemalloc-dev "$@")
else
  # libclang-rt-14-dev: the fuzzer and sanitizer runtimes, which clang only
  # recommends.
  pkgs=(cmake make pkg-config gcc g++ libc6-dev clang libclang-rt-14-dev liburcu-dev libjemalloc-dev libcmocka-dev
        libbenchmark-dev gnuplot-nox valgrind python3 python3-prometheus-client
        python3-cffi python3-pytest python3-dev python3-mypy python3-venv python3-pip
        python3-setuptools spin strace
        libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack "$@")
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y --no-install-recommends "${missing[@]}" ||
  { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends "${missing[@]}"; }
