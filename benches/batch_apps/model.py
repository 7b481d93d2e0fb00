# SPDX-License-Identifier: Apache-2.0
"""The model of the batching benchmark: a 3-layer MLP, 1,024 wide, float32, weights from
a fixed seed; one input is 1,024 floats, the answer the index of the largest output.
Shared by every server of benches/batching.py so that all run the same arithmetic."""

from __future__ import annotations

import numpy as np

WIDTH = 1024
LAYERS = 3
SEED = 2024

_rng = np.random.default_rng(SEED)
# Scaled so that activations keep their size from layer to layer.
WEIGHTS = [(_rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32) for _ in range(LAYERS)]


def forward(x: np.ndarray) -> np.ndarray:
    """The outputs for a batch of inputs, shape (n, 1024)."""
    h = np.asarray(x, dtype=np.float32)
    for i, w in enumerate(WEIGHTS):
        h = h @ w
        if i < LAYERS - 1:
            np.maximum(h, 0, out=h)
    return h


def classify(x: np.ndarray) -> np.ndarray:
    """The index of the largest output for each input of a batch."""
    return forward(x).argmax(axis=1)


def blas_threads() -> str:
    """The BLAS libraries numpy uses and their threads (threadpoolctl), for the report."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl missing)"
    pools = [f"{p.get('internal_api')} {p.get('num_threads')} thread(s) ({p.get('architecture')})" for p in threadpool_info()]
    return ", ".join(pools) or "none found"
