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


def test_async_calls_type_check_as_coroutines(tmp_path):
    # What users write: a call awaited, gathered, or handed to create_task (which takes
    # coroutines only); the types say so, as they did when calls were `async def`.
    usage = tmp_path / "usage.py"
    usage.write_text(
        "import asyncio\n"
        "from ucall.client import AsyncClient, Response\n\n\n"
        "async def main(client: AsyncClient) -> list[Response]:\n"
        "    task: asyncio.Task[Response] = asyncio.create_task(client.sum(1, 2))\n"
        "    first: Response = await client.call('sum', 1, 2)\n"
        "    return [await task, first, *await asyncio.gather(client.sum(1, 2), client.sum(2, 3))]\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(usage)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
