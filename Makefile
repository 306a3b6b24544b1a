# SPDX-License-Identifier: Apache-2.0
# Short commands over CMake. `make test` is the README's test command.
JOBS ?= $(shell nproc)
B := build
CMAKE_COMMON := -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
CTEST := ctest --output-on-failure --timeout 1200 -j$(JOBS)

.PHONY: all deps build run test test-rel test-asan test-tsan test-ubsan bench fuzz check-valgrind clean \
	fuzz-build test-fuzz verify check-fresh check-fresh-run

all: build

deps:
	@scripts/install-deps.sh

$(B)/rel/CMakeCache.txt:
	cmake -S . -B $(B)/rel -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_COMMON)

build: deps $(B)/rel/CMakeCache.txt
	cmake --build $(B)/rel -j$(JOBS)

# The demo: the agent-workload simulator, legacy vs wait policy. Installs and
# builds only what it needs; the build log goes to build/demo/build.log, the
# timeline's picture to build/demo/kvadmit-sim-timeline.svg. The sim_headline
# test reads the simulator's line below.
run:
	@scripts/install-deps.sh --demo
	@mkdir -p $(B)/demo
	@echo "make run: building the simulator (log: $(B)/demo/build.log) ..."
	@{ cmake -S . -B $(B)/demo -DCMAKE_BUILD_TYPE=Release -DKVADMIT_BUILD_TESTS=OFF \
	     -DKVADMIT_WITH_CUDA=OFF $(CMAKE_COMMON) && \
	   cmake --build $(B)/demo -j$(JOBS) --target kvadmit-sim; } > $(B)/demo/build.log 2>&1 || \
	  { tail -30 $(B)/demo/build.log; exit 1; }
	@echo
	@$(B)/demo/bench/kvadmit-sim --svg $(B)/demo/kvadmit-sim-timeline.svg $(SIM_ARGS)

test: deps
	$(MAKE) test-rel
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) test-ubsan
	$(MAKE) test-fuzz
	@echo "make test: all four builds passed"

test-rel:
	cmake -S . -B $(B)/rel -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_COMMON)
	cmake --build $(B)/rel -j$(JOBS)
	cd $(B)/rel && $(CTEST)

# Sanitizer builds use the system allocator so the sanitizer sees every allocation.
test-asan:
	cmake -S . -B $(B)/asan -DCMAKE_BUILD_TYPE=Debug -DKVADMIT_SANITIZE=address,undefined \
	  -DKVADMIT_WITH_JEMALLOC=OFF -DKVADMIT_WITH_CUDA=OFF -DKVADMIT_STRESS_SCALE=25 \
	  -DKVADMIT_FAULT_INJECTION=ON $(CMAKE_COMMON)
	cmake --build $(B)/asan -j$(JOBS)
	cd $(B)/asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(CTEST)

# UBSan alone over the system's malloc (16-byte blocks, unlike ASan's
# allocator): a struct with alignas members from a plain allocation is caught
# by the alignment check. The unit, scenario, conformance and fleet suites.
test-ubsan:
	cmake -S . -B $(B)/ubsan -DCMAKE_BUILD_TYPE=Debug -DKVADMIT_SANITIZE=undefined \
	  -DKVADMIT_WITH_JEMALLOC=OFF -DKVADMIT_WITH_CUDA=OFF -DKVADMIT_STRESS_SCALE=25 $(CMAKE_COMMON)
	cmake --build $(B)/ubsan -j$(JOBS)
	cd $(B)/ubsan && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(CTEST) -L 'unit|scenario|conformance|fleet'

test-tsan:
	cmake -S . -B $(B)/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVADMIT_SANITIZE=thread \
	  -DKVADMIT_WITH_JEMALLOC=OFF -DKVADMIT_WITH_CUDA=OFF -DKVADMIT_STRESS_SCALE=10 $(CMAKE_COMMON)
	cmake --build $(B)/tsan -j$(JOBS)
	cd $(B)/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" $(CTEST)

# Microbenchmarks (bench/README.md): Release build, the suite with repetitions,
# Google Benchmark JSON, the target table in bench/README.md, SVG plots.
# The timeout turns a stall into a failure instead of a hung run.
BENCH_ARGS ?= --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.1
BENCH_TIMEOUT ?= 1800
bench: deps
	cmake -S . -B $(B)/bench -DCMAKE_BUILD_TYPE=Release $(CMAKE_COMMON)
	cmake --build $(B)/bench -j$(JOBS) --target kvadmit-bench
	timeout $(BENCH_TIMEOUT) $(B)/bench/bench/kvadmit-bench $(BENCH_ARGS) \
	  --benchmark_out=$(B)/bench/results.json --benchmark_out_format=json
	@# a complete run replaces docs/bench/results.json, the table and the plots;
	@# a filtered one only prints its rows
	python3 bench/report.py $(B)/bench/results.json --publish docs/bench/results.json \
	  --readme bench/README.md --plots docs/bench
	@# the fleet directory (fleet/, when libzmq and msgpack-c are there): events/s, bytes/block
	if [ -x $(B)/bench/bench/kvadmit-fleet-bench ] || \
	   cmake --build $(B)/bench -j$(JOBS) --target kvadmit-fleet-bench 2>/dev/null; then \
	  $(B)/bench/bench/kvadmit-fleet-bench | tee docs/bench/fleet.txt; fi
	@# kva_fleet_score: latency under load, ingest with and without it
	if [ -x $(B)/bench/bench/kvadmit-fleet-score-bench ] || \
	   cmake --build $(B)/bench -j$(JOBS) --target kvadmit-fleet-score-bench 2>/dev/null; then \
	  $(B)/bench/bench/kvadmit-fleet-score-bench | tee docs/bench/fleet_score.txt; fi
	@# the same against a hostile publisher: flooding, a storm of clears (1M entries)
	if [ -x $(B)/bench/bench/kvadmit-fleet-attack-bench ] || \
	   cmake --build $(B)/bench -j$(JOBS) --target kvadmit-fleet-attack-bench 2>/dev/null; then \
	  $(B)/bench/bench/kvadmit-fleet-attack-bench | tee docs/bench/fleet_attack.txt; fi

# libFuzzer targets (tests/fuzz/README.md): their own clang build with
# ASan+UBSan and allocation-failure injection. `make fuzz` replays the corpus
# and runs each target FUZZ_SECONDS from a fresh random seed, which it prints
# (FUZZ_SEED=N reuses one); test-fuzz (part of `make test`) is the CI-sized
# run, about a minute per target, seeded the same way.
FUZZ_SECONDS ?= 300
FUZZ_CI_SECONDS ?= 60
fuzz-build:
	CC=clang CXX=clang++ cmake -S . -B $(B)/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DKVADMIT_BUILD_FUZZ=ON -DKVADMIT_FAULT_INJECTION=ON -DKVADMIT_WITH_CUDA=OFF \
	  -DKVADMIT_WITH_JEMALLOC=OFF -DKVADMIT_BUILD_TESTS=OFF -DKVADMIT_BUILD_BENCH=OFF $(CMAKE_COMMON)
	cmake --build $(B)/fuzz -j$(JOBS) --target fuzz_engine fuzz_differential fuzz_lockfree fuzz_config fuzz_fleet_wire \
	  fuzz_fleet_seq fuzz_fleet_index

fuzz: fuzz-build
	tests/fuzz/run.sh $(B)/fuzz $(FUZZ_SECONDS)

test-fuzz: fuzz-build
	tests/fuzz/run.sh $(B)/fuzz $(FUZZ_CI_SECONDS)

# Unit, scenario and (shortened) stress suites under valgrind memcheck, in a
# build without jemalloc or sanitizers; every test binary runs through
# valgrind as its CTest emulator (about 40 s on two cores). Not part of
# `make test`: one stress test assumes native thread scheduling (see
# tests/fuzz/README.md).
VG_SPACE := $(subst ,, )
VALGRIND := valgrind --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect,possible \
  --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes --num-callers=30 --fair-sched=yes \
  --suppressions=$(CURDIR)/tests/valgrind.supp
check-valgrind:
	cmake -S . -B $(B)/valgrind -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVADMIT_WITH_JEMALLOC=OFF \
	  -DKVADMIT_WITH_CUDA=OFF -DKVADMIT_BUILD_BENCH=OFF -DKVADMIT_STRESS_SCALE=5 \
	  "-DCMAKE_CROSSCOMPILING_EMULATOR=$(subst $(VG_SPACE),;,$(strip $(VALGRIND)))" $(CMAKE_COMMON)
	cmake --build $(B)/valgrind -j$(JOBS)
	cd $(B)/valgrind && $(CTEST)

# Spin models of the cross-thread protocols with larger bounds than make
# test's (docs/model-checking.md).
verify: deps
	tests/model/check.sh --verify

# The two commands above in a minimal Debian 12 root built from the archive
# (root only; about 2 min for the root, then the commands from scratch):
# what a machine without this one's extra packages would do.
check-fresh:
	scripts/check-fresh-debian.sh run test

check-fresh-run:
	scripts/check-fresh-debian.sh run

clean:
	rm -rf $(B)
