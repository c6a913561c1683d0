"""Cosine scores of one query against a user's memory vectors.

Pure in-memory code. The turn scores against the columns of bot.memory.cache.memory_cache, which computes
its cosines the same way (one einsum over the user's matrix).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def cosine_scores(query: np.ndarray, ids: Sequence[int], matrix: np.ndarray) -> dict[int, float]:
    """Memory id -> cosine, for an L2-normalised query and L2-normalised rows, one per id.

    One matrix-vector product; keys and values are plain Python ints and floats.
    """
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise ValueError(f"matrix of shape {matrix.shape} does not hold one row per id ({len(ids)})")
    if not len(ids):
        return {}
    # Not `matrix @ query`: OpenBLAS runs that matrix-vector product on its thread pool from a
    # few thousand rows, and waking the pool cost 10-16 ms per call on a 2-core host (median,
    # 2 000 to 100 000 rows) against 0.05 ms at 3 000 rows on one thread. einsum's own loop
    # stays on the calling thread: 0.1 ms at 3 000 rows, 9 ms at 100 000 (bench/latency.py).
    similarities = np.einsum("ij,j->i", matrix, query.astype(matrix.dtype, copy=False))
    keys = ids.tolist() if isinstance(ids, np.ndarray) else ids
    return dict(zip(keys, similarities.tolist()))
