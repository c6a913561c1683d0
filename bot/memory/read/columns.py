"""The conversation's cosines prepared off a turn's path: after a reply (or while a burst waits),
the story's next conversation window is embedded and every memory of the person scored against
it, so the turn reads its cache entry's matrix once, for its message; a column is kept in step
with the entry by scoring again only the memories whose vector changed since.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from bot.memory.cache.entry import UserMemories

# Conversation columns kept, one per (user, story) that was answered lately, and the bytes
# they may hold together (at 100,000 memories a column is 400 KB): beside the cache's own
# budget, which does not count them.
COLUMNS_KEPT = 256
COLUMNS_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Column:
    """The cosines of every slot of one cache entry to one conversation vector, kept in step
    with the entry by scoring again only the slots whose vector changed since."""

    window: bytes
    vector: np.ndarray
    entry: weakref.ReferenceType[UserMemories]
    layout: int
    changes: int
    rows: int
    values: np.ndarray

    def bring_up_to(self, entry: UserMemories) -> None:
        rows = len(entry.rows)
        if rows > self.values.size:
            self.values = np.concatenate([self.values, np.zeros(rows - self.values.size, dtype=np.float32)])
        stale = np.flatnonzero(entry.vector_stamp[:rows] > self.changes) if self.rows else np.arange(rows)
        stale = np.union1d(stale, np.arange(self.rows, rows))
        if stale.size:
            self.values[stale] = np.einsum("ij,j->i", entry.matrix[stale], self.vector)
        self.changes, self.rows = entry.changes, rows


class ConversationColumns:
    """The columns of the (user, story) pairs answered lately, the least recently prepared
    dropped first past COLUMNS_KEPT or COLUMNS_BYTES."""

    def __init__(self) -> None:
        self._columns: OrderedDict[tuple[str, str], Column] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._columns

    def held(self) -> list[tuple[tuple[str, str], Column]]:
        """The columns kept, least recently prepared first."""
        return list(self._columns.items())

    def keep(self, key: tuple[str, str], entry: UserMemories, window: bytes, vector: np.ndarray) -> None:
        """The column of `key`'s next conversation (its window's lines, their vector) over `entry`."""
        column = Column(window, vector, weakref.ref(entry), entry.layout, entry.changes, 0, np.empty(0, dtype=np.float32))
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

    def cosines(
        self, entry: UserMemories, slots: np.ndarray, window: bytes, key: tuple[str, str]
    ) -> np.ndarray | None:
        """The candidates' cosines to the conversation from the column prepared after the last
        reply, when it is this turn's conversation over this entry; None otherwise."""
        column = self._columns.get(key)
        if (
            column is None
            or column.window != window
            or column.entry() is not entry
            or column.layout != entry.layout
        ):
            return None
        column.bring_up_to(entry)
        cosines = column.values[slots].astype(np.float64)
        cosines[~entry.has_vector[slots]] = np.nan
        return cosines
