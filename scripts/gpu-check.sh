#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CUDA importer's device checks, in one prepared run for a machine with an
# NVIDIA GPU: builds a Release tree with CUDA on (sm_90: H100/H200; override
# with CUDA_ARCH=...), runs the importer tests and the cuda_import benchmark,
# and prints their results. Google Benchmark is not needed (the bench suite
# stays off); liburcu, cmocka, cmake and the CUDA toolkit are.
#
#   scripts/gpu-check.sh            build into build/gpu, run everything
#   KVA_GPU_BUILD=dir scripts/gpu-check.sh   another build folder
#   KVA_GPU_NOBUILD=1 ...           run what is already built there
#   OUT=dir ...                     also leave the logs in dir
#
# Exit status: 0 when the CUDA tests passed, 77 when they were skipped (no
# usable device), 1 on a build or test failure. The benchmark never fails the
# run: it prints its numbers and whether the targets were met.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${KVA_GPU_BUILD:-build/gpu}
ARCH=${CUDA_ARCH:-90}
LOGS=${OUT:-$B/gpu-check-logs}
mkdir -p "$LOGS"
JOBS=$(nproc 2>/dev/null || echo 4)
say() { printf '\n== %s\n' "$*"; }

say "device"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
		--format=csv,noheader 2>&1 | tee "$LOGS/device.txt"
else
	echo "nvidia-smi not found" | tee "$LOGS/device.txt"
fi

if [ "${KVA_GPU_NOBUILD:-0}" != 1 ]; then
	say "build: $B (Release, CUDA on, arch $ARCH)"
	if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
		export PATH=/usr/local/cuda/bin:$PATH
	fi
	if ! pkg-config --exists liburcu-memb liburcu-cds cmocka 2>/dev/null; then
		scripts/install-deps.sh >"$LOGS/deps.txt" 2>&1 || echo "(install-deps failed: see $LOGS/deps.txt)"
	fi
	if ! { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKVADMIT_WITH_CUDA=ON \
		-DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DKVADMIT_BUILD_TESTS=ON -DKVADMIT_BUILD_BENCH=OFF \
		>"$LOGS/configure.txt" 2>&1 &&
		cmake --build "$B" -j"$JOBS" --target test_cuda_importer test_cpu_importer \
			test_cuda_completion kvadmit-cuda-import-bench >"$LOGS/build.txt" 2>&1; }; then
		echo "build FAILED; last lines:"
		tail -30 "$LOGS/configure.txt" "$LOGS/build.txt" 2>/dev/null
		exit 1
	fi
	echo "built"
fi

say "tests (ctest -R 'importer|completion')"
(cd "$B" && timeout 900 ctest -R 'importer|completion' --output-on-failure) 2>&1 | tee "$LOGS/ctest.txt" | tail -15

# Its last test launches a kernel that faults (a sticky error) while import
# jobs are in flight: every job must still be reported and the importer go
# dead (the completion state machine of cuda/completion.h on a device).
say "test_cuda_importer, verbose"
timeout 600 "$B/tests/test_cuda_importer" 2>&1 | tee "$LOGS/test_cuda_importer.txt"
rc_test=${PIPESTATUS[0]}

say "cuda_import benchmark (host-function completion)"
timeout 600 "$B/kvadmit-cuda-import-bench" --reps 5 2>&1 | tee "$LOGS/bench_hostfunc.txt"
rc_bench=${PIPESTATUS[0]}
if [ "$rc_bench" = 0 ]; then
	say "cuda_import benchmark (event completion, 64 KiB pages row is the target)"
	timeout 600 "$B/kvadmit-cuda-import-bench" --reps 3 --completion event 2>&1 |
		tee "$LOGS/bench_event.txt"
fi

say "CPU importer figures (same machine)"
timeout 300 "$B/kvadmit-cuda-import-bench" --cpu --total-mib 512 --reps 3 2>&1 |
	tee "$LOGS/bench_cpu.txt"

say "summary"
echo "test_cuda_importer exit: $rc_test (0 passed, 77 skipped)"
echo "cuda_import bench exit:  $rc_bench (0 ran, 77 skipped)"
grep -h "^targets:" "$LOGS"/bench_*.txt 2>/dev/null
echo "logs: $LOGS"
case "$rc_test" in
0) exit 0 ;;
77) exit 77 ;;
*) exit 1 ;;
esac
