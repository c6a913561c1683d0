"""The passes over a person's cache entry that a turn and a reflection make: the turn's scoring
(candidates, cosines, fusion, the selection's columns) and a reflection's nearest memories.

Each is a plain function of the entry that awaits nothing, so that bot/memory/read/off_loop.py
may run it in a thread for a large person; what it returns is its own (gathered copies, the
rows as a list), never a view a later write to the entry would change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from bot.errors import EmbeddingError
from bot.memory.cache.entry import UserMemories
from bot.memory.model import StoryId
from bot.memory.read.columns import Column
from bot.memory.read.conversation import Fused, fuse
from bot.memory.read.lexical import LexicalSearch, stand_in
from bot.memory.read.selection import Candidates, Negated, top_positions, turn_candidates
from bot.memory.stores.memories import MemoryRow


def cosines(entry: UserMemories, slots: np.ndarray, vectors: np.ndarray | None) -> np.ndarray:
    """Cosine per candidate slot, NaN without a vector (or without a query vector): one row per
    query vector when `vectors` is (k, d), one pass over the matrix."""
    shape = (vectors.shape[0], slots.size) if vectors is not None and vectors.ndim == 2 else (slots.size,)
    scores = np.full(shape, np.nan, dtype=np.float64)
    if vectors is None or not slots.size:
        return scores
    if entry.dim and entry.dim != vectors.shape[-1]:
        # Scoring nothing would pass for a healthy turn whose memories are all irrelevant.
        raise EmbeddingError(
            f"{entry.model}: the query vector has {vectors.shape[-1]} dimensions and the "
            f"stored ones {entry.dim}: the server's model changed under the same name"
        )
    has = entry.has_vector[slots]
    if has.all():
        # Every candidate has a vector (the usual turn): no mask to scatter through.
        found: np.ndarray = entry.scores(vectors, slots)[1].astype(np.float64)
        return found
    if has.any():
        _, found = entry.scores(vectors, slots[has])
        scores[..., has] = found
    return scores


def unscored(slots: np.ndarray) -> Fused:
    return Fused(np.full(slots.size, np.nan), np.zeros(slots.size, dtype=bool))


def held(rows: Sequence[MemoryRow | None], slot: int) -> MemoryRow:
    """The row of a candidate's slot as read before an await (a candidate's slot holds one)."""
    row = rows[slot]
    assert row is not None, f"slot {slot} holds no memory"
    return row


@dataclass(frozen=True, slots=True)
class ScoringPass:
    """A turn's candidates: their slots, fused scores and the selection's columns, and the
    embedding error that left them unscored, if one did; once `with_stand_ins` ran, the lexical
    stand-ins among them, or that a search must find them first (`needs_search`)."""

    slots: np.ndarray
    fused: Fused
    candidates: Candidates
    error: EmbeddingError | None
    lexical_ids: set[int] = field(default_factory=set)
    needs_search: bool = False

    def unscored(self) -> np.ndarray:
        """Ids of the candidates without a score."""
        ids: np.ndarray = self.candidates.ids[np.isnan(self.fused.scores)]
        return ids


def scoring_pass(
    entry: UserMemories,
    now: datetime,
    *,
    story_id: StoryId,
    place: str,
    share: bool,
    queries: np.ndarray | None,
    prepared: Column | None = None,
    slots: np.ndarray | None = None,
    live_rows: bool = False,
) -> ScoringPass:
    """The turn's candidates scored against its query vectors (`queries`, (k, d): the message's,
    then the message read in its conversation; None: no semantic scores), from the column
    prepared ahead when it was scored over this entry. `slots`: the candidates, when computed
    over the entry as it stands. `live_rows`: the columns build memories from the entry's rows,
    not a copy of them: only for a selection made within the same guarded pass."""
    if slots is None:
        slots = entry.candidates(now, story_id=story_id, place=place, share=share)
    error: EmbeddingError | None = None
    fused = unscored(slots)
    if queries is not None:
        found = None
        if prepared is not None and entry.dim == queries.shape[-1]:
            found = prepared.cosines(entry, slots)
        try:
            if found is None:
                found = cosines(entry, slots, queries)
            fused = fuse(found[0], found[1] if len(found) > 1 else None)
        except EmbeddingError as exc:
            error = exc
    rows = entry.rows if live_rows else None
    return ScoringPass(slots, fused, turn_candidates(entry, slots, fused.scores, rows), error)


def with_stand_ins(
    scored: ScoringPass, search: LexicalSearch, changes: int, threshold: float, *, exact: bool
) -> ScoringPass:
    """The pass with the lexical stand-ins `search` found for its unscored candidates: when
    `exact`, only if that search was made among exactly them at the entry's `changes` (else
    `needs_search`)."""
    missing = np.isnan(scored.fused.scores)
    if not missing.any():
        return scored
    if exact and not search.covers(scored.candidates.ids[missing], changes):
        return replace(scored, needs_search=True)
    fused, lexical_ids = stand_in(scored.fused, scored.candidates.ids, search.found, threshold)
    candidates = replace(scored.candidates, scores=fused.scores)
    return replace(scored, fused=fused, candidates=candidates, lexical_ids=lexical_ids, needs_search=False)


@dataclass(frozen=True, slots=True)
class Nearest:
    """A reflection's candidates and the memories nearest its text, with the rows as they were
    (the entry may catch up with a write while the lexical search runs)."""

    ids: np.ndarray
    ranked: list[int]
    recent: list[int]
    slot_of: dict[int, int]
    rows: list[MemoryRow | None]
    row_ids: np.ndarray
    is_candidate: np.ndarray
    error: EmbeddingError | None


def nearest(
    entry: UserMemories, now: datetime, vector: np.ndarray | None, *, story_id: StoryId, place: str, limit: int
) -> Nearest:
    """The `limit` best cosines to `vector` among the reflection's candidates (share=False),
    and enough of the most recently updated to fill `limit` whatever the lexical matches take."""
    slots = entry.candidates(now, story_id=story_id, place=place, share=False)
    error: EmbeddingError | None = None
    try:
        scores = cosines(entry, slots, vector)
    except EmbeddingError as exc:
        error = exc
        scores = np.full(slots.size, np.nan)
    ids = entry.ids[slots]
    scored = np.flatnonzero(~np.isnan(scores))
    best = top_positions(scored, (scores, Negated(ids)), limit)
    latest = top_positions(np.arange(slots.size), (entry.updated_us[slots], ids), 3 * limit)
    ranked: list[int] = ids[best].tolist()
    recent: list[int] = ids[latest].tolist()
    slot_of = dict(zip(ranked + recent, slots[best].tolist() + slots[latest].tolist()))
    # The candidates as a mask by slot: a dict of every candidate's row, and their ids sent as
    # JSON to the lexical search, held the loop 35 ms a reflection at 100,000.
    rows = list(entry.rows)
    row_ids = entry.ids[: len(rows)].copy()
    is_candidate = np.zeros(len(rows), dtype=bool)
    is_candidate[slots] = True
    return Nearest(ids, ranked, recent, slot_of, rows, row_ids, is_candidate, error)
