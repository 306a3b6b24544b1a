#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that what the documentation names exists in the tree.

    check_docs.py [REPO] [--doc FILE ...]

Reads README.md, CONTRIBUTING.md, SECURITY.md, CHANGELOG.md, docs/**/*.md
and every other README.md / CATALOGUE.md in the tree, and checks:

  paths       a code span that looks like a repository path (has a '/' or a
              source extension) names a tracked file or folder, by its path
              from the top, from the document's folder, or (a bare file name)
              as the last part of some tracked path;
  API names   every kva_* / kvf_* / KVA_* / KVF_* word occurs in a source file;
  bare names  a code span `name()` or `snake_name` that is not an API name
              occurs in a source file or a system header kvadmit includes
              (liburcu, CUDA, libc): docs/model-checking.md named functions
              that had been renamed;
  targets     `make X` names a Makefile target; `kvadmit::X` a CMake target;
  flags       a --flag in a code span occurs in a source, script or build
              file (or is one of the external tools' flags listed below);
  benchmarks  BM_name/ARGS names a benchmark that is registered.

CHANGELOG.md is history: names that were renamed away stay there, so only
its paths, targets and flags are checked. The conformance catalogue and the
simulator's README discuss the upstream projects' code: their bare names and
upstream paths are not ours to check.

Prints each miss as FILE:LINE: what; exit status 1 when there is one.
--doc checks only the files given (paths from REPO): the test
docs_names_planted runs it on tests/docs/planted.md, whose every line
names something that does not exist, to show that each check can fail.
A span can be exempted with a trailing HTML comment on its line:
<!-- docs-check: not-a-name -->, for text that only looks like a name.
"""
import os
import re
import subprocess
import sys

ARGS = sys.argv[1:]
ONLY = []
if "--doc" in ARGS:
    ONLY = ARGS[ARGS.index("--doc") + 1:]
    ARGS = ARGS[:ARGS.index("--doc")]
TOP = os.path.abspath(ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), "..", ".."))

# Flags of tools kvadmit does not define (apt, cmake, ctest, Google
# Benchmark, gcc, valgrind, strace, python, git).
EXTERNAL_FLAGS = {
    "--no-install-recommends", "--output-on-failure", "--build", "--target", "--prefix", "--install",
    "--config", "--parallel", "--preset", "--test-dir", "--oneline", "--cflags", "--libs",
    "--static", "--modversion", "--leak-check", "--show-leak-kinds", "--track-origins",
    "--error-exitcode", "--suppressions", "--fair-sched", "--num-callers", "--help", "--version",
    "--variant", "--mode", "--exclude-libs", "--no-undefined", "--version-script", "--as-needed",
    "--benchmark_filter", "--benchmark_min_time", "--benchmark_repetitions",
    "--benchmark_out", "--benchmark_out_format", "--benchmark_report_aggregates_only",
    "--benchmark_format", "--benchmark_list_tests", "--benchmark_enable_random_interleaving",
    "--kv-events-config",  # vLLM's
}
# Names of other projects' APIs that no header installed here declares
# (cffi's internals, CUDA's headers and libraries where no toolkit is).
EXTERNAL_NAMES = {"ffi_call", "_cffi_backend", "libcudart_static", "driver_types.h",
                  "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h"}
# Files that exist only in a build or an installation, named in the docs.
GENERATED = {"kvadmit/version.h", "include/kvadmit/version.h", "kvadmitConfigVersion.cmake",
             "kvadmitConfig.cmake", "kvadmit.map", "compile_commands.json", "results.json"}
INSTALLED_PREFIXES = ("lib/", "share/", "bin/", "lib64/")
UPSTREAM_PREFIXES = ("vllm/", "lmcache/", "tests/v1/", "local-inference-lab/", "sglang/",
                     "mooncake-store/", "docs/source/")
UPSTREAM_DOCS = ("tests/conformance/CATALOGUE.md", "bench/sim/README.md")
SOURCE_EXT = (".c", ".h", ".cu", ".py", ".sh", ".cmake", ".txt", ".pml", ".in", ".gp", ".json",
              ".svg", ".md", ".map", ".supp", ".dict", ".options", ".toml", ".cfg", ".yml")
SYSTEM_HEADER_DIRS = ["/usr/include/x86_64-linux-gnu/urcu", "/usr/include/urcu", "/usr/local/cuda/include",
                      "/usr/include/jemalloc", "/usr/include/zmq.h", "/usr/include/msgpack",
                      "/usr/include/cmocka.h", "/usr/include/x86_64-linux-gnu/sys",
                      "/usr/include/stdatomic.h", "/usr/include/pthread.h"]


def git(*args):
    return subprocess.run(["git", "-C", TOP, *args], check=True, capture_output=True,
                          text=True).stdout


def tracked():
    try:
        files = git("ls-files", "--cached", "--others", "--exclude-standard").splitlines()
    except (subprocess.CalledProcessError, FileNotFoundError):
        files = []
        for root, dirs, names in os.walk(TOP):
            dirs[:] = [d for d in dirs if d not in (".git", "build")]
            files += [os.path.relpath(os.path.join(root, n), TOP) for n in names]
    return [f for f in files if os.path.exists(os.path.join(TOP, f))]


FILES = tracked()
FILESET = set(FILES)
DIRS = {os.path.dirname(f) for f in FILES}
for d in list(DIRS):
    while d:
        DIRS.add(d)
        d = os.path.dirname(d)
BASENAMES = {os.path.basename(f) for f in FILES} | {os.path.basename(d) for d in DIRS}
STEMS = {os.path.splitext(b)[0] for b in BASENAMES}
SOURCES = [f for f in FILES if not f.endswith((".md", ".svg", ".json")) and "/corpus/" not in f
           and "/regress/" not in f]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


CODE_TEXT = "\n".join(read(os.path.join(TOP, f)) for f in SOURCES)
CODE_WORDS = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", CODE_TEXT))
CODE_FLAGS = set(re.findall(r"--[a-z][a-z0-9_-]*", CODE_TEXT))


def system_words():
    words = set()
    for p in SYSTEM_HEADER_DIRS:
        paths = []
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                paths += [os.path.join(root, n) for n in names if n.endswith(".h")]
        elif os.path.isfile(p):
            paths.append(p)
        for q in paths:
            words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", read(q)))
    return words


SYSTEM_WORDS = system_words()
MAKE_TARGETS = set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", read(os.path.join(TOP, "Makefile")),
                              re.M))
CMAKE_TEXT = "\n".join(read(os.path.join(TOP, f)) for f in FILES
                       if f.endswith(("CMakeLists.txt", ".cmake", ".cmake.in")))
CMAKE_TARGETS = set(re.findall(r"kvadmit::([A-Za-z0-9_]+)", CMAKE_TEXT)) | set(
    re.findall(r"EXPORT_NAME\s+([A-Za-z0-9_]+)", CMAKE_TEXT))


def docs():
    out = ["README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md"]
    out += [f for f in FILES if f.endswith(".md") and (f.startswith("docs/") or
            os.path.basename(f) in ("README.md", "CATALOGUE.md"))]
    return sorted({f for f in out if f in FILESET})


def path_like(span):
    if " " in span or span.startswith(("-", "$", "<", "http", "/", "~", "PREFIX", "build/", "$(")):
        return False
    if any(c in span for c in "*{}<>=|:,;()'\"\\") or span.endswith("/…"):
        return False
    if "/" in span:
        return bool(re.match(r"^[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*/?$", span))
    return span.endswith(SOURCE_EXT) and re.match(r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*$", span) is not None


def path_exists(span, docdir):
    s = span.rstrip("/")
    if s in GENERATED or s in EXTERNAL_NAMES or span.startswith(INSTALLED_PREFIXES):
        return True
    forms = [s]  # installed include paths name their source too
    if s.startswith("kvadmit/lockfree"):
        forms.append("lockfree" + s[len("kvadmit/lockfree"):])
    elif s.startswith("kvadmit/"):
        forms.append("include/" + s)
    for f in forms:
        for base in ("", docdir):
            p = os.path.normpath(os.path.join(base, f))
            # a module named without its extension: lockfree/slab, docs/design
            if any(q in FILESET or q in DIRS for q in (p, p + ".c", p + ".h", p + ".md", p + ".py")):
                return True
    if "/" not in s:
        return s in BASENAMES
    # a path inside a folder that is named from somewhere below the top
    return any(f.endswith("/" + s) for f in FILES) or any(d.endswith("/" + s) for d in DIRS)


API_RE = re.compile(r"\b(kv[af]_[a-z0-9_]*[a-z0-9]|KV[AF]_[A-Z0-9_]*[A-Z0-9])\b(?![*_])")
BARE_RE = re.compile(r"^([a-z_][a-z0-9]*_[a-z0-9_]+)(\(\))?$")


def name_exists(name):
    if name in CODE_WORDS or name in SYSTEM_WORDS or name in STEMS or name in EXTERNAL_NAMES:
        return True
    # built by formatting: "%s_p50_us" names step_p50_us
    parts = name.split("_")
    return any("%s_" + "_".join(parts[i:]) in CODE_TEXT for i in range(1, len(parts)))


def check(doc):
    misses = []
    upstream = doc in UPSTREAM_DOCS
    history = doc == "CHANGELOG.md"
    text = read(os.path.join(TOP, doc))
    docdir = os.path.dirname(doc)
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if "docs-check: not-a-name" in line or "<!--" in line and "results:" in line:
            continue
        where = f"{doc}:{n}"
        for m in ([] if history else API_RE.finditer(line)):
            name = m.group(1)
            if name not in CODE_WORDS:
                misses.append(f"{where}: {name} is in no source file")
        spans = [line.strip()] if fenced else re.findall(r"`([^`]+)`", line)
        for span in spans:
            if fenced:
                mk = re.match(r"^make\s+([A-Za-z0-9_.-]+)", span)
                if mk and mk.group(1) not in MAKE_TARGETS and "=" not in mk.group(1):
                    misses.append(f"{where}: make {mk.group(1)}: no such Makefile target")
                continue
            for mk in re.finditer(r"(?:^|\s)make\s+([A-Za-z][A-Za-z0-9_.-]*)", span):
                if mk.group(1) not in MAKE_TARGETS:
                    misses.append(f"{where}: make {mk.group(1)}: no such Makefile target")
            for ct in re.finditer(r"kvadmit::([A-Za-z0-9_]+)", span):
                if ct.group(1) not in CMAKE_TARGETS:
                    misses.append(f"{where}: kvadmit::{ct.group(1)}: no such CMake target")
            for fl in re.finditer(r"(?<![A-Za-z0-9_-])(--[a-z][a-z0-9_-]*)", span):
                flag = fl.group(1)
                if flag not in CODE_FLAGS and flag not in EXTERNAL_FLAGS:
                    misses.append(f"{where}: {flag}: no source, script or build file has it")
            bench = re.match(r"^(BM_[A-Za-z0-9_]+)(/.*)?$", span)
            if bench:
                if bench.group(1) not in CODE_WORDS:
                    misses.append(f"{where}: {bench.group(1)}: no such benchmark")
                continue
            if span.startswith(("kva_", "kvf_")):
                continue  # API names are checked above; kva_grow/preempt is shorthand
            if span.startswith(UPSTREAM_PREFIXES) or upstream and "/" not in span:
                continue
            if path_like(span) and not path_exists(span, docdir):
                misses.append(f"{where}: {span}: no such file or folder")
            bm = BARE_RE.match(span)
            if bm and not history and not name_exists(bm.group(1)):
                misses.append(f"{where}: {bm.group(1)}: in no source file or system header")
    return misses


def main():
    misses = []
    checked = ONLY or docs()
    for d in checked:
        misses += check(d)
    for m in misses:
        print(m)
    print(f"check_docs: {len(checked)} documents, {len(misses)} names that do not exist")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
