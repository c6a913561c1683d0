"""The six passes of the selection (docs/design.md, "Read path"), on plain data."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.memory.model import Memory
from bot.memory.reference.selection import (
    FALLBACK_THRESHOLD,
    TYPE_QUOTAS,
    Selected,
    select,
)
from tests.lanes import examples

NOW = datetime(2025, 8, 19, 12, 0, tzinfo=UTC)
RELEVANT = 0.6
IRRELEVANT = 0.1


def mem(memory_id: int, **fields: object) -> Memory:
    values: dict[str, object] = {
        "id": memory_id,
        "user_id": "u1",
        "text": f"souvenir {memory_id}",
        "type": "fact",
        "scope": "story",
        "pinned": False,
        "confidence": 0.9,
        "created_at": NOW - timedelta(days=30),
        "updated_at": NOW - timedelta(minutes=memory_id),
        "story_id": "s1",
    }
    values.update(fields)
    return Memory(**values)  # type: ignore[arg-type]


def reasons(selected: list[Selected]) -> Counter[str]:
    return Counter(s.reason for s in selected)


def ids(selected: list[Selected]) -> list[int]:
    return [s.memory.id for s in selected]


def test_26_pinned_and_10_relevant_globals_do_not_give_24_pinned() -> None:
    pinned = [mem(i, pinned=True) for i in range(1, 27)]
    globals_ = [mem(i, scope="global") for i in range(27, 37)]
    scores = {m.id: RELEVANT for m in globals_}

    selected = select(pinned + globals_, scores, now=NOW)

    # reserve = min(round(24 * 0.25), 10 candidates) = 6; pinned get 24 - 6.
    assert reasons(selected) == {"pinned": 18, "global": 6}
    assert ids(selected)[:18] == list(range(1, 19))


def test_relevant_story_memories_get_the_semantic_pass_past_pinned() -> None:
    pinned = [mem(i, pinned=True) for i in range(1, 27)]
    relevant = [mem(i) for i in range(27, 37)]
    scores = {m.id: RELEVANT for m in relevant}

    selected = select(pinned + relevant, scores, now=NOW)

    assert reasons(selected) == {"pinned": 18, "semantic": 6}


def test_19_rules_take_no_slot() -> None:
    rules = [mem(i, type="rule", pinned=True, scope="global") for i in range(1, 20)]
    others = [mem(i, type=("fact", "preference", "promise", "episode")[i % 4]) for i in range(20, 60)]

    selected = select(rules + others, now=NOW)

    assert len(selected) == 24
    assert all(s.memory.type != "rule" for s in selected)


def test_two_globals_reserve_only_two_slots() -> None:
    pinned = [mem(i, pinned=True) for i in range(1, 31)]
    globals_ = [mem(31, scope="global"), mem(32, scope="global")]

    selected = select(pinned + globals_, now=NOW)

    assert reasons(selected) == {"pinned": 22, "global": 2}
    assert {31, 32} <= set(ids(selected))


def test_no_global_or_semantic_candidate_still_freezes_nothing() -> None:
    pinned = [mem(i, pinned=True) for i in range(1, 31)]

    selected = select(pinned, now=NOW)

    # The reserve is bounded by zero real candidates: no slot is held back for nobody.
    assert reasons(selected) == {"pinned": 24}


def test_type_quotas_then_backfill_by_rank() -> None:
    memories = [
        mem(i, type=memory_type)
        for memory_type, first in (("fact", 1), ("preference", 101), ("promise", 201), ("episode", 301))
        for i in range(first, first + 20)
    ]

    selected = select(memories, now=NOW)

    quota = [s for s in selected if s.reason == "type_quota"]
    assert Counter(s.memory.type for s in quota) == TYPE_QUOTAS
    # The four slots the quotas leave go to the best-ranked remaining: facts come first.
    backfill = [s for s in selected if s.reason == "backfill"]
    assert [s.memory.id for s in backfill] == [7, 8, 9, 10]


def test_type_quota_counts_what_is_already_selected() -> None:
    pinned_facts = [mem(i, pinned=True) for i in range(1, 5)]
    facts = [mem(i) for i in range(5, 25)]
    episodes = [mem(i, type="episode") for i in range(25, 45)]

    selected = select(pinned_facts + facts + episodes, limit=24, now=NOW)

    quota = [s for s in selected if s.reason == "type_quota"]
    assert Counter(s.memory.type for s in quota) == {"fact": 6 - 4, "episode": 5}


def test_semantic_pass_takes_every_slot_left_by_best_score() -> None:
    """No quota or backfill slot goes to a memory below the threshold while one above it waits
    (on LoCoMo's questions the two quota slots cost recall against plain cosine top-24)."""
    memories = [mem(i) for i in range(1, 41)] + [mem(i, type="episode") for i in range(41, 51)]
    scores = {m.id: 0.33 + m.id / 100 for m in memories if m.id <= 40}

    selected = select(memories, scores, now=NOW)

    assert reasons(selected) == {"semantic": 24}
    assert ids(selected) == list(range(40, 40 - 24, -1))
    # The bound it had (16) still holds when asked: then the episodes' quota comes in.
    bounded = select(memories, scores, now=NOW, semantic_slots=16)
    assert reasons(bounded) == {"semantic": 16, "type_quota": 5, "backfill": 3}


def test_threshold_is_inclusive_and_configurable() -> None:
    memories = [mem(1), mem(2), mem(3)]
    scores = {1: 0.32, 2: 0.3199, 3: 0.75}

    assert reasons(select(memories, scores, now=NOW)) == {"semantic": 2, "type_quota": 1}
    assert {s.memory.id: s.reason for s in select(memories, scores, threshold=0.8, now=NOW)} == {
        1: "type_quota",
        2: "type_quota",
        3: "type_quota",
    }


def test_expired_memories_are_not_candidates() -> None:
    memories = [
        mem(1, expires_at=NOW - timedelta(hours=1)),
        mem(2, expires_at=NOW),
        mem(3, expires_at=NOW + timedelta(seconds=1)),
        mem(4),
    ]

    assert sorted(ids(select(memories, {1: 0.9, 2: 0.9}, now=NOW))) == [3, 4]


def test_now_defaults_to_the_current_time() -> None:
    past = datetime.now(UTC) - timedelta(minutes=1)
    future = datetime.now(UTC) + timedelta(days=1)

    selected = select([mem(1, expires_at=past), mem(2, expires_at=future)])

    assert ids(selected) == [2]


def test_fewer_candidates_than_limit_are_all_selected() -> None:
    memories = [
        mem(1, pinned=True),
        mem(2, scope="global"),
        mem(3, type="episode"),
        mem(4, type="promise", scope="global"),
        mem(5, type="rule"),
    ]

    selected = select(memories, {3: RELEVANT}, now=NOW)

    assert {s.memory.id: s.reason for s in selected} == {
        1: "pinned",
        2: "global",
        4: "global",
        3: "semantic",
    }


def test_every_reason_in_one_turn() -> None:
    memories = (
        [mem(i, pinned=True) for i in range(1, 21)]
        + [mem(i, scope="global", type="preference") for i in range(21, 29)]
        + [mem(i, type="episode") for i in range(29, 33)]
        + [mem(i, type="promise") for i in range(33, 36)]
        + [mem(i) for i in range(36, 46)]
    )
    scores = {29: RELEVANT, 30: RELEVANT, 36: IRRELEVANT}

    selected = select(memories, scores, now=NOW, limit=40)

    # reserve = min(10, 8 unpinned globals + 2 relevant) = 10: 30 pinned slots, all 20 taken.
    assert reasons(selected) == {
        "pinned": 20,
        "global": 8,
        "semantic": 2,
        "type_quota": 5,
        "backfill": 5,
    }
    by_reason = {s.memory.id: s.reason for s in selected}
    assert {i for i, r in by_reason.items() if r == "semantic"} == {29, 30}
    # Facts and preferences are over quota already; promises get 3, episodes 5 - 2 semantic.
    assert {i for i, r in by_reason.items() if r == "type_quota"} == {33, 34, 35, 31, 32}
    assert [s.memory.id for s in selected if s.reason == "backfill"] == [36, 37, 38, 39, 40]


def test_backfill_reason_when_quotas_are_full() -> None:
    memories = [mem(i) for i in range(1, 11)]

    selected = select(memories, limit=8, now=NOW)

    assert [s.reason for s in selected] == ["type_quota"] * 6 + ["backfill"] * 2


def test_global_pass_prefers_recalled_globals_then_rank() -> None:
    globals_ = [mem(i, scope="global", confidence=0.9 + i / 1000) for i in range(1, 11)]
    scores = {3: 0.40, 7: 0.90, 9: 0.20}

    selected = select(globals_, scores, limit=4, now=NOW)

    # quarter of 4 = 1 global slot: the best recalled one, not the best-ranked one (10).
    assert selected[0] == Selected(globals_[6], "global", 0.90)
    assert selected[1] == Selected(globals_[2], "semantic", 0.40)


def test_rank_orders_type_then_confidence_then_recency_then_id() -> None:
    memories = [
        mem(1, type="episode", confidence=0.99),
        mem(2, confidence=0.95, updated_at=NOW - timedelta(days=2)),
        mem(3, confidence=0.95, updated_at=NOW - timedelta(days=1)),
        mem(4, confidence=0.95, updated_at=NOW - timedelta(days=1)),
        mem(5, confidence=0.97, updated_at=NOW - timedelta(days=9)),
        mem(8, type="preference", confidence=1.0),
    ]

    selected = select(memories, now=NOW)

    assert ids(selected) == [5, 3, 4, 2, 8, 1]


def test_rank_puts_story_specific_before_global_whatever_the_type() -> None:
    memories = [
        mem(1, pinned=True, scope="global", confidence=1.0),
        mem(2, pinned=True, type="episode"),
        mem(3, pinned=True, confidence=0.5),
    ]

    selected = select(memories, now=NOW)

    assert [(s.memory.id, s.reason) for s in selected] == [
        (3, "pinned"),
        (2, "pinned"),
        (1, "pinned"),
    ]


def test_scores_are_carried_whatever_the_reason() -> None:
    memories = [mem(1, pinned=True), mem(2), mem(3)]
    scores = {1: 0.05, 2: 0.7}

    selected = {s.memory.id: s for s in select(memories, scores, now=NOW)}

    assert selected[1] == Selected(memories[0], "pinned", 0.05)
    assert selected[2] == Selected(memories[1], "semantic", 0.7)
    assert selected[3].score is None
    assert all(type(s.score) is float for s in selected.values() if s.score is not None)


def test_scores_of_non_candidates_are_ignored() -> None:
    selected = select([mem(1)], {99: 0.9}, now=NOW)

    assert selected == [Selected(mem(1), "type_quota", None)]


def test_limit_zero_selects_nothing() -> None:
    assert select([mem(1, pinned=True)], {1: 0.9}, limit=0, now=NOW) == []


# --- Against a reference: the passes written the obvious way, full sorts, no shortcuts. ---

RANKED = ("fact", "preference", "promise", "episode")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def reference_select(
    memories: list[Memory], scores: dict[int, float], limit: int, now: datetime, semantic_slots: int | None = None
) -> list[tuple[int, str]]:
    candidates = [m for m in memories if m.type != "rule" and not m.is_expired(now)]

    def rank(m: Memory) -> tuple[object, ...]:
        micros = (m.updated_at - EPOCH) // timedelta(microseconds=1)
        not_story = m.scope != "story"
        return (not m.pinned, not_story, RANKED.index(m.type), -m.confidence, -micros, m.id)

    ordered = sorted(candidates, key=rank)
    eligible = [m for m in candidates if scores.get(m.id, -1.0) >= FALLBACK_THRESHOLD]
    eligible_ids = {m.id for m in eligible}
    by_score = sorted(eligible, key=lambda m: (-scores[m.id], rank(m)))
    out: list[tuple[int, str]] = []
    taken: set[int] = set()

    def run(pool: list[Memory], reason: str, budget: int) -> None:
        count = 0
        for m in pool:
            if count >= budget or len(out) >= limit:
                return
            if m.id not in taken:
                out.append((m.id, reason))
                taken.add(m.id)
                count += 1

    quarter = round(limit * 0.25)
    reserve_pool = [m for m in candidates if not m.pinned and (m.scope == "global" or m.id in eligible_ids)]
    reserve = min(max(1, quarter), len(reserve_pool))
    run([m for m in ordered if m.pinned], "pinned", limit - reserve)
    globals_first = [m for m in by_score if m.scope == "global"]
    run(globals_first + [m for m in ordered if m.scope == "global"], "global", quarter)
    run(by_score, "semantic", limit if semantic_slots is None else semantic_slots)
    type_of = {m.id: m.type for m in candidates}
    for memory_type in RANKED:
        already = sum(1 for memory_id, _ in out if type_of[memory_id] == memory_type)
        same_type = [m for m in ordered if m.type == memory_type]
        run(same_type, "type_quota", TYPE_QUOTAS[memory_type] - already)
    run(ordered, "backfill", limit)
    return out


@st.composite
def turns(draw: st.DrawFn) -> tuple[list[Memory], dict[int, float], int]:
    n = draw(st.integers(0, 70))
    memory_ids = draw(st.permutations(range(1, n + 1)))
    memories = []
    scores: dict[int, float] = {}
    for memory_id in memory_ids:
        memories.append(
            mem(
                memory_id,
                type=draw(st.sampled_from(("fact", "preference", "promise", "episode", "rule"))),
                scope=draw(st.sampled_from(("global", "story", "story"))),
                pinned=draw(st.booleans()),
                # Few distinct values, so that rank ties reach the id tie-breaker.
                confidence=draw(st.sampled_from((0.85, 0.9, 1.0))),
                updated_at=NOW - timedelta(hours=draw(st.integers(0, 3))),
                expires_at=draw(st.sampled_from((None, None, None, NOW, NOW + timedelta(days=1)))),
            )
        )
        score = draw(st.sampled_from((None, 0.1, FALLBACK_THRESHOLD, 0.5, 0.5, 0.9)))
        if score is not None:
            scores[memory_id] = score
    limit = draw(st.integers(0, 30))
    return memories, scores, limit


@settings(max_examples=examples(250), deadline=None)
@given(turns(), st.sampled_from((None, None, 16)))
def test_matches_the_reference_passes(
    turn: tuple[list[Memory], dict[int, float], int], semantic_slots: int | None
) -> None:
    memories, scores, limit = turn

    selected = select(memories, scores, limit, now=NOW, semantic_slots=semantic_slots)

    expected = reference_select(memories, scores, limit, NOW, semantic_slots)
    assert [(s.memory.id, s.reason) for s in selected] == expected
    assert all(s.score == scores.get(s.memory.id) for s in selected)


@settings(max_examples=examples(100), deadline=None)
@given(turns(), st.randoms(use_true_random=False))
def test_same_input_in_any_order_same_output(
    turn: tuple[list[Memory], dict[int, float], int], rng: random.Random
) -> None:
    memories, scores, limit = turn
    shuffled = list(memories)
    rng.shuffle(shuffled)

    assert select(shuffled, scores, limit, now=NOW) == select(memories, scores, limit, now=NOW)


@settings(max_examples=examples(100), deadline=None)
@given(turns())
def test_never_more_than_limit_never_twice(turn: tuple[list[Memory], dict[int, float], int]) -> None:
    memories, scores, limit = turn

    selected = select(memories, scores, limit, now=NOW)

    served = ids(selected)
    assert len(served) == len(set(served))
    servable = [m for m in memories if m.type != "rule" and not m.is_expired(NOW)]
    assert len(served) == min(limit, len(servable))


def test_matches_the_reference_on_a_large_corpus() -> None:
    rng = random.Random(7)
    memories = [
        mem(
            memory_id,
            type=rng.choice(("fact", "preference", "promise", "episode", "rule")),
            scope=rng.choice(("global", "story")),
            pinned=rng.random() < 0.005,
            confidence=rng.choice((0.85, 0.9, 0.95, 1.0)),
            updated_at=NOW - timedelta(days=rng.randrange(60)),
            expires_at=rng.choice((None,) * 9 + (NOW - timedelta(days=1),)),
        )
        for memory_id in rng.sample(range(1, 10_000), 3_000)
    ]
    scores = {m.id: rng.uniform(-0.1, 0.45) for m in memories if rng.random() < 0.8}

    for limit in (24, 80, 200):
        selected = select(memories, scores, limit, now=NOW)

        expected = reference_select(memories, scores, limit, NOW)
        assert [(s.memory.id, s.reason) for s in selected] == expected
