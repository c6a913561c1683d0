"""Which memories enter the context this turn: six passes, as a pure function.

The passes, the reserve and the quotas, and the measures behind them: docs/design.md,
"Read path".

Every candidate of one user in one story comes in; at most `limit` come out, each with the
reason it is there (shown by `/why`) and its cosine when it has one.

Rank order, used wherever the passes say "by rank": pinned first, story-specific before global,
type (fact, preference, promise, episode), confidence desc, recency (updated_at) desc, id asc.

Speed: a user may hold 100 000 memories, so each candidate is touched once, by a cheap loop
that drops rules and expired memories and files the rest into one of 16 lists, one per value
of the categorical part of the rank (pinned, story, type). Concatenated in order, those lists
are the rank order once each is sorted by (confidence desc, recency desc, id asc). A list is
only sorted when a pass first reaches it, and only its head is kept: a pass stops at its
budget or at `limit`, and every memory it walks past is selected (by it or before it), so no
pass ever reads more than `limit` entries of one list.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import chain
from operator import attrgetter

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
    UNPINNED_GLOBAL_LISTS,
    UNPINNED_OFFSET,
    UNPINNED_STORY_LISTS,
    Reason,
    Selected,
)
from bot.memory.model import USER_MEMORY_TYPES, Memory, utcnow
from bot.memory.series import cap_series

_BY_ID = attrgetter("id")
_BY_CONFIDENCE_RECENCY = attrgetter("confidence", "updated_at")


@dataclass(slots=True)
class _Scored:
    """A semantic-eligible candidate: its cosine and its rank list, for ordering by score."""

    memory: Memory
    score: float
    rank_list: int


def select(
    memories: Iterable[Memory],
    semantic_scores: Mapping[int, float] | None = None,
    limit: int = DEFAULT_LIMIT,
    *,
    threshold: float = FALLBACK_THRESHOLD,
    now: datetime | None = None,
    series_slots: int | None = None,
    semantic_slots: int | None = None,
) -> list[Selected]:
    """Choose at most `limit` memories, in the order they were chosen.

    `memories` are every candidate of one user in one story, ids unique. `rule` memories are
    skipped (the caller serves them outside the budget), so are expired ones. A memory is
    semantic-eligible when `semantic_scores` gives it a cosine >= `threshold`; without scores
    (degraded turn, memory not yet indexed) the deterministic passes still fill the slots.
    With `series_slots`, a series (bot/memory/series.py) gets at most that many slots, its
    best-placed members, and the next memories take the rest. `semantic_slots` bounds the
    semantic pass (None: every slot the pinned and global passes leave; the bound of 16 it had
    is what bench/recall_public.py compares with).
    """
    if series_slots is None:
        return _select(memories, semantic_scores, limit, threshold=threshold, now=now, semantic_slots=semantic_slots)
    pool = list(memories)
    now = utcnow() if now is None else now  # one instant for every round
    eligible = {i: score for i, score in (semantic_scores or {}).items() if score >= threshold}

    def without(excluded: frozenset[int]) -> list[Memory]:
        return [m for m in pool if m.id not in excluded]

    def by_score(excluded: frozenset[int], depth: int) -> list[Memory]:
        return list(_by_score(_file(without(excluded), eligible, now)[1], depth))

    chosen, cut = cap_series(
        lambda excluded, depth: _select(
            without(excluded), semantic_scores, depth, threshold=threshold, now=now, semantic_slots=semantic_slots
        ),
        by_score,
        series_slots,
        limit,
    )
    return [replace(s, series=cut[s.memory.id]) if s.memory.id in cut else s for s in chosen]


def _select(
    memories: Iterable[Memory],
    semantic_scores: Mapping[int, float] | None,
    limit: int,
    *,
    threshold: float,
    now: datetime | None,
    semantic_slots: int | None = None,
) -> list[Selected]:
    if limit <= 0:
        return []
    scores = semantic_scores or {}
    now = utcnow() if now is None else now
    eligible = {memory_id: score for memory_id, score in scores.items() if score >= threshold}
    lists, eligible_entries = _file(memories, eligible, now)
    candidates = _RankLists(lists, depth=limit)

    chosen = _Chosen(limit, scores)

    # 1. Reserve a quarter for global and semantic memories, but only as many slots as there
    #    are such candidates outside the pinned ones: two globals freeze at most two slots.
    reserve_candidates = candidates.size(UNPINNED_GLOBAL_LISTS) + sum(
        1 for entry in eligible_entries if entry.rank_list in UNPINNED_STORY_LISTS
    )
    quarter = round(limit * GLOBAL_CONTEXT_SHARE)
    reserve = min(max(1, quarter), reserve_candidates)

    # 2. Pinned memories, up to what the reserve leaves.
    chosen.take(candidates.ranked(PINNED_LISTS), "pinned", limit - reserve)

    # 3. Global memories, up to their quarter. The ones the query recalls come first, by
    #    cosine; below the threshold a cosine is not evidence of relevance, so the rest follow
    #    in rank order, which is also what serves a global memory not yet indexed.
    eligible_globals = [e for e in eligible_entries if e.rank_list in GLOBAL_LISTS]
    chosen.take(
        chain(_by_score(eligible_globals, limit), candidates.ranked(GLOBAL_LISTS)),
        "global",
        quarter,
    )

    # 4. What the message read in its conversation recalls, by score: every slot left, so that
    #    no memory below the threshold (a quota's or the backfill's) takes the place of one above
    #    it, and the slots a capped series gives back go to the next memories by meaning.
    chosen.take(_by_score(eligible_entries, limit), "semantic", limit if semantic_slots is None else semantic_slots)

    # 5. Per-type quota, counting what earlier passes already gave each type: only when the
    #    eligible memories ran out (few memories, or no scores: a degraded turn).
    for memory_type in USER_MEMORY_TYPES:
        type_index = TYPE_INDEX[memory_type]
        chosen.take(
            candidates.ranked(range(type_index, LISTS, TYPES)),
            "type_quota",
            TYPE_QUOTAS[memory_type] - chosen.count_of_type(memory_type),
        )

    # 6. Backfill by rank.
    chosen.take(candidates.ranked(ALL_LISTS), "backfill", limit)
    return chosen.selected


def _file(
    memories: Iterable[Memory], eligible: Mapping[int, float], now: datetime
) -> tuple[list[list[Memory]], list[_Scored]]:
    """Drop what is not a candidate and file the rest by rank list: the one loop over all."""
    lists: list[list[Memory]] = [[] for _ in range(LISTS)]
    eligible_entries: list[_Scored] = []
    # Bound lookups and no method call per memory: this loop is most of the cost at 100 000.
    type_index_of = TYPE_INDEX.get
    eligible_score = eligible.get
    for memory in memories:
        type_index = type_index_of(memory.type)
        if type_index is None:
            continue
        expires_at = memory.expires_at
        if expires_at is not None and expires_at <= now:
            continue
        rank_list = type_index if memory.scope == "story" else type_index + GLOBAL_OFFSET
        if not memory.pinned:
            rank_list += UNPINNED_OFFSET
        lists[rank_list].append(memory)
        score = eligible_score(memory.id)
        if score is not None:
            eligible_entries.append(_Scored(memory, score, rank_list))
    return lists, eligible_entries


class _RankLists:
    """The candidates split by (pinned, story, type), each list sorted on first use."""

    def __init__(self, lists: list[list[Memory]], depth: int):
        self._depth = depth
        self._lists = lists
        self._sorted = [False] * len(lists)

    def size(self, rank_lists: Sequence[int]) -> int:
        return sum(len(self._lists[n]) for n in rank_lists)

    def ranked(self, rank_lists: Iterable[int]) -> Iterator[Memory]:
        for n in rank_lists:
            if not self._sorted[n]:
                self._lists[n] = _head_by_confidence_recency(self._lists[n], self._depth)
                self._sorted[n] = True
            yield from self._lists[n]


def _head_by_confidence_recency(memories: list[Memory], depth: int) -> list[Memory]:
    """The first `depth` memories by (confidence desc, updated_at desc, id asc).

    Both sorts and nlargest are stable, so sorting by id first makes id the tie-breaker.
    """
    memories.sort(key=_BY_ID)
    if len(memories) > depth:
        return heapq.nlargest(depth, memories, key=_BY_CONFIDENCE_RECENCY)
    memories.sort(key=_BY_CONFIDENCE_RECENCY, reverse=True)
    return memories


def _by_score(entries: list[_Scored], depth: int) -> Iterator[Memory]:
    """The first `depth` entries by cosine desc, then rank; sorted only when first drawn."""
    if len(entries) > depth:
        cutoff = heapq.nlargest(depth, (entry.score for entry in entries))[-1]
        entries = [entry for entry in entries if entry.score >= cutoff]
    else:
        entries = list(entries)
    # Stable sorts, least significant key first.
    entries.sort(key=lambda entry: entry.memory.id)
    entries.sort(key=lambda entry: _BY_CONFIDENCE_RECENCY(entry.memory), reverse=True)
    entries.sort(key=attrgetter("rank_list"))
    entries.sort(key=attrgetter("score"), reverse=True)
    for entry in entries[:depth]:
        yield entry.memory


class _Chosen:
    def __init__(self, limit: int, scores: Mapping[int, float]):
        self._limit = limit
        self._scores = scores
        self._ids: set[int] = set()
        self._types: Counter[str] = Counter()
        self.selected: list[Selected] = []

    def count_of_type(self, memory_type: str) -> int:
        return self._types[memory_type]

    def take(self, memories: Iterable[Memory], reason: Reason, budget: int) -> None:
        """Select memories in the given order, skipping chosen ones, up to `budget` or `limit`.

        Stops before drawing another memory once done, so rank lists past that point are
        never sorted.
        """
        budget = min(budget, self._limit - len(self.selected))
        if budget <= 0:
            return
        taken = 0
        for memory in memories:
            if memory.id in self._ids:
                continue
            score = self._scores.get(memory.id)
            self.selected.append(Selected(memory, reason, None if score is None else float(score)))
            self._ids.add(memory.id)
            self._types[memory.type] += 1
            taken += 1
            if taken >= budget:
                return
