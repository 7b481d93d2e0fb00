# SPDX-License-Identifier: Apache-2.0
"""The Ray Serve peer of benches/batching.py: the same model behind `@serve.batch`
(max_batch_size=32, batch_wait_timeout_s=0.005), answering the same JSON-RPC request
over Ray Serve's HTTP proxy on 127.0.0.1.

    benches/.venv-ray/bin/python benches/batch_apps/ray_app.py PORT
"""

from __future__ import annotations

import signal
import sys
import threading

import numpy as np
import ray
from model import blas_threads, classify
from ray import serve

PORT = int(sys.argv[1])


@serve.deployment(max_ongoing_requests=256)
class MLP:
    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def infer(self, inputs: list[np.ndarray]) -> list[int]:
        return classify(np.stack(inputs)).tolist()

    async def __call__(self, request):  # type: ignore[no-untyped-def]
        call = await request.json()
        x = np.asarray(call["params"]["x"], dtype=np.float32)
        return {"jsonrpc": "2.0", "id": call["id"], "result": await self.infer(x)}


if __name__ == "__main__":
    # The driver's environment (one BLAS thread) reaches the replica's worker process.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": PORT})
    serve.run(MLP.bind(), route_prefix="/", blocking=False)
    print(f"listening on {PORT}; {blas_threads()}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()
