# SPDX-License-Identifier: Apache-2.0
"""The UCall server of benches/batching.py: the model unbatched (`mlp`) and as a batch
procedure (`mlp_batched`, max_size=32, max_wait_ms=5).

    python benches/batch_apps/ucall_app.py PORT
"""

from __future__ import annotations

import sys

import numpy as np
from model import blas_threads, classify

from ucall import Server

server = Server(port=int(sys.argv[1]), quiet=True)


@server
def mlp(x: np.ndarray) -> int:
    return int(classify(x[None, :])[0])


@server.batch(max_size=32, max_wait_ms=5)
def mlp_batched(x: np.ndarray) -> np.ndarray:
    return classify(x)


@server
def stats() -> dict:
    return {"batch": server.batch_stats(), "blas": blas_threads()}


if __name__ == "__main__":
    server.run(ready=lambda s: print(f"listening on {s.port}", flush=True))
