# SPDX-License-Identifier: Apache-2.0
"""The installed wheel as a user meets it: run by packaging/dist_test.sh with a fresh
virtual environment's Python, outside the checkout, with no Rust toolchain on the path.

Imports ucall from the environment (not the checkout), serves the README's server and
calls it over HTTP, raw TCP and WebSocket, through ucall.testing.TestClient, with headers
through ucall.auth, with a numpy array (when the numpy extra is installed), and with the
`ucall` command. Prints "ok: ..." for each and exits non-zero on the first failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import ucall
from ucall import Server, auth
from ucall.client import Client
from ucall.testing import TestClient

checkout = os.environ.get("UCALL_CHECKOUT", "")
assert checkout and not ucall.__file__.startswith(checkout), f"ucall comes from the checkout: {ucall.__file__}"
for tool in ("cargo", "rustc"):
    assert shutil.which(tool) is None, f"{tool} is on the path: the test must run without Rust"
print(f"ok: ucall {ucall.__version__} from {os.path.dirname(ucall.__file__)} on Python {sys.version.split()[0]}")

server = Server(port=0)


@server
def sum(a: int, b: int) -> int:
    return a + b


with server:
    for url in (f"http://127.0.0.1:{server.port}/", f"tcp://127.0.0.1:{server.port}", f"ws://127.0.0.1:{server.port}/"):
        with Client(url) as client:
            assert client.sum(a=1, b=2).json == 3, url
        print(f"ok: {url.split(':')[0]}")
    scripts = sysconfig.get_path("scripts")
    command = [os.path.join(scripts, "ucall"), "call", "sum", "a=1", "b=2", "-p", str(server.port), "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith("3"), (done.stdout, done.stderr)
    print("ok: the ucall command")

with TestClient(server) as client:
    assert client.sum(a=1, b=2).json == 3
print("ok: ucall.testing.TestClient")

guarded = Server(port=0)
guarded.middleware(ucall.auth.api_key("s3cret"))
guarded.route(sum)
with TestClient(guarded, headers={"X-API-Key": "s3cret"}) as client:
    assert client.sum(1, 2).json == 3
with TestClient(guarded, transport="ws", headers={"X-API-Key": "s3cret"}) as client:
    assert client.sum(1, 2).json == 3
assert auth.api_key is ucall.auth.api_key
print("ok: headers through ucall.auth")

try:
    import numpy
except ImportError:
    numpy = None
if numpy is not None:
    tensors = Server(port=0)

    @tensors
    def double(x: numpy.ndarray) -> numpy.ndarray:
        return x * 2

    with TestClient(tensors) as client:
        result = client.double(x=numpy.arange(6, dtype=numpy.float32).reshape(2, 3)).numpy
    assert result.shape == (2, 3) and result.dtype == numpy.float32 and result[1, 2] == 10, result
    print(f"ok: the numpy extra (numpy {numpy.__version__})")

if "--serve" in sys.argv:
    # For the other front ends' tests: serve sum until stdin closes, after saying where.
    shared = Server(port=0, host="127.0.0.1")
    shared.route(sum)
    with shared:
        print(f"serving {shared.port}", flush=True)
        sys.stdin.read()
