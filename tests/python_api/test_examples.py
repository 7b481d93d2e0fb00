# SPDX-License-Identifier: Apache-2.0
"""Every example in examples/python runs and prints what it promises."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, once, serving

EXAMPLES = REPO_ROOT / "examples" / "python"
EXPECTED = {
    "demo.py": ['"result":3', '"result":"HI!HI!"', "-32602", "-32001", "42", "demo (Python): ok"],
    "client.py": ["by name: 3", "batch: 2 4", "error: -32602", "raw TCP: 42", "async: [0, 2, 4"],
    "rich_types.py": ["area: 7.0", "checksum: 6", "normalize: [[0.25, -1.0], [0.5, 0.125]]", "thumbnail: (16, 12)"],
    # A 1.6 MB array there and back as attachments, plain and TLS (and streamed back as
    # three frames), then as base64.
    "arrays.py": [
        *(
            f"{scheme}: float32 (400, 1000) equal: True, an attachment viewed in place: True,"
            " 3 streamed frames equal: True\n"
            for scheme in ("http", "tcp", "ws", "https", "tls", "wss")
        ),
        "json/base64: equal: True, an attachment viewed in place: False",
    ],
    "blocking_and_async.py": ["ping while 16 calls wait: pong", "8 blocking calls done, 8 async calls fetched"],
    # A real model on real data: at least 95 % right (it gets about 99 %), and batches formed.
    "digits.py": ["accuracy: ", "of 450 test images", "calls/s from 32 callers", "batched: 450 calls in"],
    # docs/operations.md, "Tracing": one trace, the second service's span under the first's.
    "tracing.py": [
        "checkout: ordered",
        "one trace across both services: True",
        "  customer clicks buy [INTERNAL]\n    checkout [SERVER] (UCall server on port ",
        "      reserve [SERVER] (UCall server on port ",
        "        check stock [INTERNAL]",
    ],
}


def test_every_example_is_covered():
    # sum_server.py and described_server.py run until signalled: test_server.py and
    # test_discover.py start and stop them.
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(EXPECTED) | {"sum_server.py", "described_server.py"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example(name, engine):
    env = dict(os.environ, UCALL_ENGINE=engine)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60, env=env, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stderr
    for fragment in EXPECTED[name]:
        assert fragment in result.stdout, (fragment, result.stdout)
    if name == "digits.py":
        accuracy = float(result.stdout.split("accuracy: ")[1].split()[0])
        batches = int(result.stdout.split("450 calls in ")[1].split()[0])
        assert accuracy >= 0.95, result.stdout
        assert batches < 450, f"32 callers' calls share batches: {result.stdout}"


def test_sum_server_runs_under_ucall_serve(engine):
    # Its own arguments are parsed only when it runs as a script, so importing it reads none.
    with serving(["-m", "ucall", "serve", "sum_server:server", "--port", "0"], engine, cwd=EXAMPLES) as (proc, port):
        assert once(port, "sum", [1, 2]) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
