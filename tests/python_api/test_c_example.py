# SPDX-License-Identifier: Apache-2.0
"""examples/c/sum.c as a user meets it: `--help` prints its options and starts nothing, a
bad option is refused, a wrong param is named, and Ctrl-C stops it cleanly."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, once, once_error
from test_doc_examples import build_c

pytestmark = pytest.mark.timeout(900)  # the first test builds libucall (debug)


@pytest.fixture(scope="module")
def sum_c(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code = (REPO_ROOT / "examples" / "c" / "sum.c").read_text()
    return build_c(code, tmp_path_factory.mktemp("sum_c"))


def test_help_prints_the_options_and_starts_no_server(sum_c: Path) -> None:
    for flag in ("--help", "-h"):
        result = subprocess.run([str(sum_c), flag], capture_output=True, text=True, timeout=10)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("usage: sum [--host H] [--port P]") and "listening" not in result.stdout


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--port"], "--port needs a value"),
        (["--nope", "1"], "unknown option --nope"),
        (["8545"], "unexpected argument"),
    ],
)
def test_bad_arguments_are_refused_with_the_usage(sum_c: Path, arguments: list[str], says: str) -> None:
    result = subprocess.run([str(sum_c), *arguments], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and says in result.stderr and "usage: sum" in result.stderr, result.stderr
    assert result.stdout == ""  # no server started


def test_a_wrong_param_is_named_and_ctrl_c_stops_it(sum_c: Path, engine: str) -> None:
    command = [str(sum_c), "--port", "0", "--engine", engine]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stderr.readline()
            # The start-up line of every UCall server (docs/operations.md).
            started = re.fullmatch(rf"ucall: listening on http://127\.0\.0\.1:(\d+) \(engine {engine}, 1 thread\)\n", line)
            assert started, line + proc.stderr.read()
            port = int(started.group(1))
            assert once(port, "sum", {"a": 1, "b": 2}) == 3
            for params, name in (({"a": "x", "b": 2}, "'a'"), ({"a": 1}, "'b'"), ([1.5, 2], "'a'")):
                error = once_error(port, "sum", params)
                assert error["code"] == -32602 and name in error["message"], error
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=15)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
