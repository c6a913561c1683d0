"""The read path's lexical searches (SQLite FTS5, PostgreSQL full text: bot/memory/stores/vectors.py).

Stand-ins: memories without a vector (created since the last indexing tick, or every memory while
the embedder is down) get a match score instead of nothing.

Their score is bm25 mapped to [0, 1), not a cosine, so any match is eligible and they rank just
under every cosine-eligible memory. They are searched among the memories that need one only, so
that no other memory takes their places. A turn searches them while the model embeds its query
(`search`, `covers`): which memories lack a vector does not depend on the query's vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from bot.clients.storage import Database
from bot.memory.model import OwnerKey
from bot.memory.read.conversation import Fused
from bot.memory.stores.vectors import lexical_matches

LEXICAL_LIMIT = 16


@dataclass(frozen=True, slots=True)
class LexicalSearch:
    """A query's lexical matches among some memories, and the cache entry's change count when
    they were searched."""

    among: frozenset[int]
    changes: int
    found: dict[int, float]

    def covers(self, ids: np.ndarray, changes: int) -> bool:
        """Whether this search answers for exactly these memories as the entry stands now."""
        return self.changes == changes and len(self.among) == ids.size and self.among == frozenset(ids.tolist())


async def search(
    db: Database, user_id: OwnerKey, query: str, ids: np.ndarray, *, now: datetime, changes: int
) -> LexicalSearch:
    """The LEXICAL_LIMIT best lexical matches of `query` among the memories `ids`."""
    among = ids.tolist()
    found = await lexical_matches(db, user_id, query, LEXICAL_LIMIT, now=now, among=among) if among else {}
    return LexicalSearch(frozenset(among), changes, found)


def stand_in(fused: Fused, ids: np.ndarray, found: Mapping[int, float], threshold: float) -> tuple[Fused, set[int]]:
    """The fused scores with the matches among the unscored candidates (`ids`: the candidates'
    memory ids, in the scores' order) placed just under the eligible scores, and their ids."""
    scores = fused.scores.copy()
    if not found:
        return Fused(scores, fused.by_conversation), set()
    eligible = scores[scores >= threshold]
    floor = float(eligible.min()) if eligible.size else threshold + 1.0
    strengths = np.fromiter(found.values(), dtype=np.float64, count=len(found))
    matched = np.fromiter(found.keys(), dtype=np.int64, count=len(found))
    # Candidate ids are unique: each match is at most one position.
    at = np.flatnonzero(np.isin(ids, matched) & np.isnan(scores))
    order = np.argsort(matched)
    strength = strengths[order][np.searchsorted(matched[order], ids[at])]
    scores[at] = threshold + (floor - threshold) * 0.5 * strength
    return Fused(scores, fused.by_conversation), set(ids[at].tolist())


async def lexical_among(
    db: Database,
    user_id: OwnerKey,
    text: str,
    limit: int,
    candidate_slot: Callable[[int], int | None],
    ids: np.ndarray,
    *,
    now: datetime,
) -> dict[int, int]:
    """A reflection's `limit` best lexical neighbours among its candidates (`ids`), with their
    slots (`candidate_slot`: None for a memory that is not one): asked of the user's best four
    times as many first, every candidate's id sent only if too few."""
    wide = 4 * limit
    found = await lexical_matches(db, user_id, text, wide, now=now)
    kept = {i: slot for i in found if (slot := candidate_slot(i)) is not None}
    if len(kept) < limit and len(found) == wide:
        among = await lexical_matches(db, user_id, text, limit, now=now, among=ids.tolist())
        kept = {i: slot for i in among if (slot := candidate_slot(i)) is not None}
    return dict(list(kept.items())[:limit])
