"""Turns scored ahead, off their path: while a front end holds a message (a burst's wait), its
query texts are embedded and every memory of the person scored against them, so the turn embeds
nothing and reads its cache entry's matrix only for the memories changed meanwhile; a column is
kept in step with the entry by scoring again only the memories whose vector changed since.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from bot.memory.cache.entry import UserMemories

# Turns scored ahead, one per (user, story) whose message a front end holds (a burst's wait),
# and the bytes their columns may hold together (at 100,000 memories a turn's two columns are
# 800 KB): beside the cache's own budget, which does not count them.
COLUMNS_KEPT = 256
COLUMNS_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Column:
    """The cosines of every slot of one cache entry to one turn's query vectors (a row each),
    kept in step with the entry by scoring again only the slots whose vector changed since."""

    key: bytes
    vectors: np.ndarray
    entry: weakref.ReferenceType[UserMemories]
    layout: int
    changes: int
    rows: int
    values: np.ndarray

    def bring_up_to(self, entry: UserMemories) -> None:
        # The entry's change count as the pass starts, not as it ends: a write applied while a
        # thread runs the pass (bot/memory/read/off_loop.py) leaves its slots to the next pass.
        changes, rows = entry.changes, len(entry.rows)
        if rows > self.values.shape[1]:
            grown = np.zeros((self.values.shape[0], rows), dtype=np.float32)
            grown[:, : self.values.shape[1]] = self.values
            self.values = grown
        if not self.rows:
            # Every row as a view of the matrix: gathering them first copied it (150 MB at
            # 100,000 memories, 0.3-0.8 s of the event loop for each message held ahead).
            if rows:
                self.values[:, :rows] = np.einsum("ij,kj->ki", entry.matrix[:rows], self.vectors)
            self.changes, self.rows = changes, rows
            return
        stale = np.flatnonzero(entry.vector_stamp[:rows] > self.changes)
        stale = np.union1d(stale, np.arange(self.rows, rows))
        if stale.size:
            self.values[:, stale] = np.einsum("ij,kj->ki", entry.matrix[stale], self.vectors)
        self.changes, self.rows = changes, rows

    def cosines(self, entry: UserMemories, slots: np.ndarray) -> np.ndarray | None:
        """The candidates' cosines (a row per query vector), brought up to date, when the column
        was scored over this entry; None otherwise."""
        if self.entry() is not entry or self.layout != entry.layout:
            return None
        self.bring_up_to(entry)
        cosines = self.values[:, slots].astype(np.float64)
        cosines[:, ~entry.has_vector[slots]] = np.nan
        return cosines


class PreparedTurns:
    """The columns of the (user, story) pairs whose message a front end holds, the least
    recently prepared dropped first past COLUMNS_KEPT or COLUMNS_BYTES."""

    def __init__(self) -> None:
        self._columns: OrderedDict[tuple[str, str], Column] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._columns

    def held(self) -> list[tuple[tuple[str, str], Column]]:
        """The columns kept, least recently prepared first."""
        return list(self._columns.items())

    def matches(self, key: tuple[str, str], texts: bytes) -> bool:
        """Whether `key`'s turn was prepared for these query texts (`texts_key`)."""
        column = self._columns.get(key)
        return column is not None and column.key == texts

    def take(self, key: tuple[str, str], texts: bytes) -> Column | None:
        """`key`'s column if it was prepared for these query texts, used once: the next turn
        asks the embedder again."""
        if not self.matches(key, texts):
            return None
        return self._columns.pop(key)

    def keep(self, key: tuple[str, str], entry: UserMemories, texts: bytes, vectors: np.ndarray) -> None:
        """The column of `key`'s held turn (its query texts, their vectors) over `entry`."""
        column = Column(
            texts, vectors, weakref.ref(entry), entry.layout, entry.changes, 0,
            np.empty((vectors.shape[0], 0), dtype=np.float32),
        )  # fmt: skip
        column.bring_up_to(entry)
        self._columns[key] = column
        self._columns.move_to_end(key)
        self._trim()

    def _trim(self) -> None:
        """Within COLUMNS_KEPT and COLUMNS_BYTES, the least recently prepared dropped first; a
        column whose cache entry was evicted serves no turn and goes at once."""
        for key in [key for key, column in self._columns.items() if column.entry() is None]:
            del self._columns[key]
        held = sum(column.values.nbytes for column in self._columns.values())
        while self._columns and (len(self._columns) > COLUMNS_KEPT or held > COLUMNS_BYTES):
            _, dropped = self._columns.popitem(last=False)
            held -= dropped.values.nbytes
