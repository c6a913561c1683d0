"""Cosine scores of one query against a user's memory vectors, and the cache of those vectors.

Pure in-memory code: the store reads vectors from SQLite and fills the cache; SQLite stays the
only truth, and anything here can be dropped and rebuilt.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

DEFAULT_MAX_USERS = 256
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
# Invalidation stamps kept per cached user: loads in flight are a handful of users at a time,
# so a few times the cached users is plenty before the oldest stamps fold into one floor.
STAMPS_PER_USER = 4


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


class VectorCache:
    """Per-user (ids, matrix) of one embedding model, least recently used users evicted first.

    Bounded by users and by bytes of vectors: one user with 100 000 memories of 384 floats
    weighs 150 MB, as much as 300 users of 300 memories. A matrix larger than the whole byte
    budget is not kept (the store reads it from SQLite each turn). The cache keeps the arrays it
    is given and marks the matrix read-only, since every later turn of that user reads it.

    A reader loads from SQLite between `get` and `put`, and an invalidation may land in that
    gap (the indexer stored vectors, a write changed a memory): the matrix it loaded is then
    already stale. So a reader takes `generation(user)` before loading and passes it to `put`,
    which keeps nothing if the user was invalidated since.
    """

    def __init__(self, max_users: int = DEFAULT_MAX_USERS, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_users < 1 or max_bytes < 1:
            raise ValueError("a vector cache needs room for at least one user and one byte")
        self._max_users = max_users
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[str, tuple[str, tuple[int, ...], np.ndarray]] = OrderedDict()
        # A user's generation is a stamp of one counter that every invalidation advances: the
        # count at their last invalidation. Only the most recent stamps are kept; a user whose
        # stamp was dropped reads `_floor`, the newest dropped stamp, which may refuse a put
        # that was safe (one more load next turn) but never accepts a stale one. Without the
        # bound, every user ever invalidated would stay here.
        self._invalidations = 0
        self._stamps: OrderedDict[str, int] = OrderedDict()
        self._max_stamps = STAMPS_PER_USER * max_users
        self._floor = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def generation(self, user_id: str) -> int:
        """The user's generation, to take before loading their vectors and give to `put`.

        It never decreases, and changes at each invalidation of that user and at `clear`.
        """
        return self._stamps.get(user_id, self._floor)

    def get(self, user_id: str, model: str) -> tuple[tuple[int, ...], np.ndarray] | None:
        """The user's (ids, matrix) if cached for this model, else None."""
        entry = self._entries.get(user_id)
        if entry is None or entry[0] != model:
            return None
        self._entries.move_to_end(user_id)
        return entry[1], entry[2]

    def put(
        self,
        user_id: str,
        model: str,
        ids: Sequence[int],
        matrix: np.ndarray,
        *,
        generation: int | None = None,
    ) -> bool:
        """Cache the user's vectors; returns whether they were kept.

        With `generation` (from `generation(user_id)` before the load), nothing is kept if the
        user was invalidated since: what was loaded may predate that change.
        """
        if matrix.ndim != 2 or matrix.shape[0] != len(ids):
            raise ValueError(f"matrix of shape {matrix.shape} does not hold one row per id ({len(ids)})")
        if generation is not None and self.generation(user_id) != generation:
            return False
        self._drop(user_id)
        if matrix.nbytes > self._max_bytes:
            return False
        matrix.setflags(write=False)
        kept_ids = tuple(ids.tolist()) if isinstance(ids, np.ndarray) else tuple(ids)
        self._entries[user_id] = (model, kept_ids, matrix)
        self._bytes += matrix.nbytes
        while len(self._entries) > self._max_users or self._bytes > self._max_bytes:
            _, (_, _, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
        return True

    def invalidate(self, user_id: str) -> None:
        """Forget the user's vectors, and refuse any put of a load that started before now."""
        self._drop(user_id)
        self._invalidations += 1
        self._stamps[user_id] = self._invalidations
        self._stamps.move_to_end(user_id)
        if len(self._stamps) > self._max_stamps:
            _, self._floor = self._stamps.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
        self._invalidations += 1
        self._stamps.clear()
        self._floor = self._invalidations

    def _drop(self, user_id: str) -> None:
        entry = self._entries.pop(user_id, None)
        if entry is not None:
            self._bytes -= entry[2].nbytes
