#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# python/README.md's install path, checked: a virtual environment made with
# `python3 -m venv --system-site-packages`, the C library installed into its
# prefix (`cmake --install BUILD --prefix VENV`), the package installed with
# Debian's pip (`pip install --no-build-isolation ./python`, no index), and
# then, outside the source tree and with no KVADMIT_* variable, the package
# finds the installed libkvadmit and libkvadmit-cuda, ships py.typed, and runs
# the vLLM-style example.
#   check_pip_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$w/venv"
cmake --install "$build" --prefix "$w/venv" > "$w/install.log"
cp -r "$src/python" "$w/python"  # pip builds in the tree: keep the checkout clean
rm -rf "$w/python/build" "$w/python"/*.egg-info
"$w/venv/bin/pip" install -q --no-index --no-build-isolation "$w/python"
rm -rf "$w/python"  # nothing may come from the copy
cd "$w"
env -u KVADMIT_LIBRARY -u KVADMIT_CUDA_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH \
  "$w/venv/bin/python" - "$w/venv" <<'PY'
import os, sys
venv = sys.argv[1]
import kvadmit
from kvadmit._process import cuda_library
assert kvadmit.__file__.startswith(os.path.join(venv, "lib")), kvadmit.__file__
assert os.path.realpath(kvadmit.library_path).startswith(venv), kvadmit.library_path
assert os.path.exists(os.path.join(os.path.dirname(kvadmit.__file__), "py.typed"))
cuda = cuda_library()
assert cuda is not None and os.path.realpath(cuda).startswith(venv), cuda
assert isinstance(kvadmit.cuda_importer_supported(), bool)
with kvadmit.Engine(total_pages=64) as e:
    h = e.submit(1, 16)
    assert e.step(1).admissions[0].handle == h
print("pip install: ok,", kvadmit.library_path, cuda, kvadmit.cuda_importer_supported())
PY
# a copy: beside it there is no source tree for its sys.path line to find
mkdir "$w/ex" && cp "$src/python/examples/vllm_style_scheduler.py" "$w/ex/"
env -u KVADMIT_LIBRARY -u PYTHONPATH "$w/venv/bin/python" "$w/ex/vllm_style_scheduler.py" | tail -n 2
