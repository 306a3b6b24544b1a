#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Counts the system calls the scheduler thread makes inside steady-state
# steps (issue 28's target: no mmap, munmap, madvise, brk or futex wait).
#
#   scripts/step-syscalls.sh [DRIVER] [STEPS]
#
# DRIVER is kvadmit-step-syscalls (bench/step_syscalls.c; default
# build/bench/bench/kvadmit-step-syscalls, built with
# `cmake --build build/bench --target kvadmit-step-syscalls`); STEPS is the
# window's length (default 10000). The driver runs BM_step_tail's load (1M
# waiting, two producers submitting and cancelling, a noisy host mapping and
# unmapping 64 MiB) and marks a window of steps with two write(2) calls to
# /dev/null; this script runs it under `strace -f` and counts, for the thread
# that wrote the markers, the traced calls between them. Between steps that
# thread only sleeps (clock_nanosleep) and reads clocks and getrusage, none
# of them traced, so every call counted comes from kva_step or the callbacks
# it runs. Traced: the calls that take the process's mmap lock (mmap, munmap,
# mremap, mprotect, madvise, brk), futex (split into waits and wakes) and
# sched_yield. Reports only: exit status 0 whatever the counts, 2 when strace
# is missing or the run failed. Needs strace (scripts/install-deps.sh).
set -euo pipefail
driver=${1:-build/bench/bench/kvadmit-step-syscalls}
steps=${2:-10000}
if ! command -v strace >/dev/null; then
  echo "step-syscalls: needs strace (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
if [ ! -x "$driver" ]; then
  echo "step-syscalls: no driver at $driver (cmake --build BUILD --target kvadmit-step-syscalls)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
calls=mmap,munmap,mremap,mprotect,madvise,brk,futex,sched_yield,write
# --seccomp-bpf: untraced calls do not stop the process, so the producers'
# and the noisy host's own pace is not strace's
if ! strace -f -qq --seccomp-bpf -e trace="$calls" -e signal=none -s 64 -o "$tmp/trace" \
    "$driver" "$steps" >"$tmp/out" 2>"$tmp/err"; then
  cat "$tmp/out" "$tmp/err" >&2
  echo "step-syscalls: the driver failed" >&2
  exit 2
fi
cat "$tmp/out"
awk -v steps="$steps" '
  /write\([0-9]+, "kvadmit-step-window-begin"/ { tid = $1; inside = 1; next }
  /write\([0-9]+, "kvadmit-step-window-end"/ { if ($1 == tid) { inside = 0; done = 1 }; next }
  inside && $1 == tid && $2 !~ /^<\.\.\./ {
    name = $2; sub(/\(.*/, "", name)
    if (name == "write") next
    if (name == "futex") name = ($0 ~ /FUTEX_WAKE/) ? "futex wake" : \
                                ($0 ~ /FUTEX_(WAIT|LOCK)/) ? "futex wait" : "futex other"
    n[name]++
    if (!(name in first)) first[name] = $0
  }
  END {
    if (!done) { print "step-syscalls: window markers not found" > "/dev/stderr"; exit 2 }
    printf "scheduler thread %s, %d steps: system calls inside the steps (target 0 each)\n", tid, steps
    split("mmap munmap mremap mprotect madvise brk sched_yield", order, " ")
    order[8] = "futex wait"; order[9] = "futex wake"; order[10] = "futex other"
    for (i = 1; i <= 10; i++) printf "  %-12s %d\n", order[i], n[order[i]]
    for (i = 1; i <= 10; i++)
      if (order[i] in first) printf "  first %s: %s\n", order[i], first[order[i]]
    print "(under strace each traced call adds two voluntary context switches to the getrusage line)"
  }' "$tmp/trace"
