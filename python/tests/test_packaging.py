# SPDX-License-Identifier: Apache-2.0
"""The package's own metadata: pyproject.toml's version is the library's
(CMake's project(VERSION)), and py.typed ships beside the modules (the pip
install itself: tests/check_pip_install.sh, ctest -R python_pip_install)."""
import os
import tomllib

import kvadmit

HERE = os.path.dirname(os.path.abspath(__file__))


def test_pyproject_version_is_the_library_version():
    with open(os.path.join(HERE, "..", "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    assert meta["project"]["version"] == kvadmit.version_string()
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["kvadmit"]
    assert os.path.exists(os.path.join(os.path.dirname(kvadmit.__file__), "py.typed"))
