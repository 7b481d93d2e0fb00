# SPDX-License-Identifier: Apache-2.0
"""examples/c/sum.c as a user meets it: `--help` prints its options and starts nothing, a
bad option is refused, a wrong param is named, and Ctrl-C stops it cleanly."""

from __future__ import annotations

import json
import re
import signal
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, once, once_error, server_process
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
    with server_process([str(sum_c), "--port", "0", "--engine", engine]) as (proc, port):
        # The start-up line of every UCall server (docs/operations.md).
        line = rf"ucall: listening on http://127\.0\.0\.1:{port} \(engine {engine}, 1 thread\)\n"
        assert re.fullmatch(line, proc.started), proc.started
        assert once(port, "sum", {"a": 1, "b": 2}) == 3
        for params, name in (({"a": "x", "b": 2}, "'a'"), ({"a": 1}, "'b'"), ([1.5, 2], "'a'")):
            error = once_error(port, "sum", params)
            assert error["code"] == -32602 and name in error["message"], error
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err


@pytest.fixture(scope="module")
def client_c(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code = (REPO_ROOT / "examples" / "c" / "client.c").read_text()
    return build_c(code, tmp_path_factory.mktemp("client_c"))


def test_client_c_sends_an_array_as_an_attachment_to_sum_c(sum_c: Path, client_c: Path, engine: str) -> None:
    """examples/c/client.c against examples/c/sum.c: scale(x) reads the float32 attachment
    as a pointer and length and answers the doubled array as one, over each transport."""
    with server_process([str(sum_c), "--port", "0", "--engine", engine]) as (proc, port):
        for scheme in ("http", "tcp", "ws"):
            result = subprocess.run(
                [str(client_c), f"{scheme}://127.0.0.1:{port}"], capture_output=True, text=True, timeout=30
            )
            assert result.returncode == 0, result.stderr
            assert result.stdout == (
                "sum(1, 2) = 3\nscale([1.5, -2, 0.25]) = [3, -4, 0.5] (float32, an attachment)\n"
            ), (scheme, result.stdout)
        # A plain JSON caller (curl) is told scale takes an attachment, by name.
        error = once_error(port, "scale", {"x": "AAA="})
        assert error["code"] == -32602 and "'x'" in error["message"], error
        # scale reads the dtype and shape: a 2x2 float32 comes back 2x2, float64 is refused.
        reply, section = scale_over_tcp(port, "float32", [2, 2], struct.pack("<4f", 1, 2, 3, 4))
        result = reply["result"]
        assert (result["dtype"], result["shape"]) == ("float32", [2, 2]), reply
        data = section[result["offset"] : result["offset"] + result["length"]]
        assert struct.unpack("<4f", data) == (2, 4, 6, 8)
        reply, _ = scale_over_tcp(port, "float64", [2], struct.pack("<2d", 1, 2))
        assert reply["error"]["code"] == -32602 and "float64" in reply["error"]["message"], reply
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0


def scale_over_tcp(port: int, dtype: str, shape: list[int], data: bytes) -> tuple[dict[str, Any], bytes]:
    """scale(x) as one raw TCP binary message (docs/wire.md §3.2): the reply's JSON and its
    attachment section (empty for a JSON text reply)."""
    placeholder = {"$ucall": "ndarray", "offset": 0, "length": len(data), "dtype": dtype, "shape": shape}
    text = json.dumps({"jsonrpc": "2.0", "method": "scale", "params": {"x": placeholder}, "id": 1}).encode()
    padded = text + bytes(-len(text) % 64)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack("<BBxxIQ", 0xC1, 1, len(text), len(padded) + len(data)) + padded + data)
        stream = sock.makefile("rb")
        first = stream.read(1)
        if first != b"\xc1":
            return json.loads(first + stream.readline()), b""
        _, json_length, body_length = struct.unpack("<BxxIQ", stream.read(15))
        body = stream.read(body_length)
        return json.loads(body[:json_length]), body[-(-json_length // 64) * 64 :]
