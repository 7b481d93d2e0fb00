# SPDX-License-Identifier: Apache-2.0
"""The hand-written stub of the extension module matches the module itself."""

import subprocess
import sys

from conftest import REPO_ROOT


def test_stub_matches_the_extension_module():
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "ucall._ucall"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_ships_its_typing_marker():
    assert (REPO_ROOT / "python" / "ucall" / "py.typed").is_file()


def test_package_passes_mypy_strict():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "python/ucall"], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
