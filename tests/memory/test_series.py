"""Series of look-alike memories (bot/memory/series.py) and the selection's series step: a
series takes at most its slots in the 24, and `select_columns` makes the same choice as `select`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.memory.model import Memory
from bot.memory.read.selection import candidates_of, select_columns
from bot.memory.reference.selection import select
from bot.memory.series import find_series, frame, memory_key
from tests.lanes import examples

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW_US = (NOW - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def mem(memory_id: int, text: str, **fields: object) -> Memory:
    values: dict[str, object] = {
        "id": memory_id,
        "user_id": "u",
        "text": text,
        "type": "fact",
        "scope": "global",
        "pinned": False,
        "confidence": 0.9,
        "created_at": NOW - timedelta(days=30),
        "updated_at": NOW - timedelta(minutes=memory_id),
    }
    values.update(fields)
    return Memory(**values)  # type: ignore[arg-type]


def test_the_frame_sets_aside_years_months_days_and_numbers_but_not_names_or_negations() -> None:
    assert frame("Alice a visité Trieste en 2017.") == frame("Alice a visité Trieste en mai 2018")
    assert frame("Alice a visité Trieste en 2017") != frame("Alice a visité Porto en 2017")
    assert frame("Alice a visité Trieste en 2017") != frame("Alice n'a pas visité Trieste en 2019")
    assert frame("Alice a couru 10 km mardi") == frame("Alice a couru 12 km jeudi soir")
    assert frame("Alice aime le chocolat") == ""  # no carrier: dedup's business, not a series
    assert frame("m12") == frame("le 3") == ""  # carriers and grammar alone


def test_a_series_needs_its_members_of_one_kind_and_place_and_never_takes_pinned_or_dated_ones() -> None:
    years = [mem(i, f"Alice a visité Trieste en {2010 + i}") for i in range(1, 6)]
    pinned = mem(6, "Alice a visité Trieste en 2020", pinned=True)
    dated = mem(7, "Alice a visité Trieste en 2021", expires_at=NOW + timedelta(days=3))
    other_type = mem(8, "Alice a visité Trieste en 2022", type="episode")
    other_place = mem(9, "Alice a visité Trieste en 2023", place="guild:1")
    two = [mem(10, "Alice joue au tennis le lundi"), mem(11, "Alice joue au tennis le mardi")]
    found = find_series([*years, pinned, dated, other_type, other_place, *two], min_members=3)
    assert [[m.id for m in s.members] for s in found] == [[1, 2, 3, 4, 5]]
    assert memory_key(pinned) is None and memory_key(dated) is None
    assert find_series(two, min_members=2)[0].members == tuple(two)


def screenshot_week() -> tuple[list[Memory], dict[int, float]]:
    """bench/screenshots.py's case: visits score above everything else the person said."""
    trieste = [mem(i, f"Alice a visité Trieste en {2003 + i}") for i in range(1, 12)]
    porto = [mem(20 + i, f"Alice a visité Porto en {2003 + i}") for i in range(1, 12)]
    others = [mem(100 + i, text) for i, text in enumerate([
        "Alice aime les voyages en train", "Alice parle portugais", "Alice a peur de l'avion",
        "Alice travaille comme infirmière", "Alice préfère la mer à la montagne",
        "Alice a un chat nommé Pixel", "Alice économise pour un appartement",
        "Alice aime les pasteis de nata", "Alice lit des romans policiers",
        "Alice apprend la guitare", "Alice habite à Lyon", "Alice a une sœur, Jeanne",
    ])]  # fmt: skip
    scores = {m.id: 0.86 for m in trieste + porto} | {m.id: 0.82 for m in others}
    return trieste + porto + others, scores


def test_a_series_takes_at_most_its_slots_and_the_next_memories_fill_the_rest() -> None:
    memories, scores = screenshot_week()
    before = select(memories, scores, 24, threshold=0.80, now=NOW)
    assert sum("Trieste" in s.memory.text or "Porto" in s.memory.text for s in before) >= 20

    after = select(memories, scores, 24, threshold=0.80, now=NOW, series_slots=3)
    assert sum("Trieste" in s.memory.text for s in after) == 3
    assert sum("Porto" in s.memory.text for s in after) == 3
    assert {m.id for m in memories[22:]} <= {s.memory.id for s in after}  # every other fact served
    assert len(after) == 18  # 3 + 3 + 12 others: nothing more to serve
    # Kept members are the best placed (most recent of equal scores), and say what was cut.
    trieste = [s for s in after if "Trieste" in s.memory.text]
    assert [s.memory.id for s in trieste] == [1, 2, 3]
    assert all(s.series == 11 for s in trieste)
    assert all(s.series == 0 for s in after if s.memory.id >= 100)


def test_the_slots_a_capped_series_gives_back_go_to_the_next_memories_by_meaning() -> None:
    """A series above the facts that matter, and memories the message does not recall beneath
    them: the slots the series gives back go to the facts, not to a quota or to recency."""
    visits = [mem(i, f"Alice a visité Trieste en {2003 + i}") for i in range(1, 16)]
    words = (
        "abricot banane cerise datte figue goyave kiwi litchi mangue nectarine olive papaye poire pomme prune "
        "raisin citron orange ananas melon pastèque fraise framboise myrtille cassis groseille mûre noix "
        "noisette amande"
    ).split()
    facts = [mem(100 + i, f"Alice aime la {word}", type="preference") for i, word in enumerate(words)]
    unrelated = [mem(200 + i, f"Alice a rangé le {word}", type="episode") for i, word in enumerate(words[:12])]
    scores = {m.id: 0.9 for m in visits} | {m.id: 0.86 - m.id / 10_000 for m in facts}
    scores |= {m.id: 0.5 for m in unrelated}

    chosen = select([*visits, *facts, *unrelated], scores, 24, threshold=0.80, now=NOW, series_slots=3)

    assert [s.memory.id for s in chosen if s.memory.id < 100] == [1, 2, 3]
    assert [s.memory.id for s in chosen if s.memory.id >= 100] == [m.id for m in facts[:21]]
    assert {s.reason for s in chosen} <= {"global", "semantic"}


def test_without_series_slots_the_selection_is_unchanged() -> None:
    memories, scores = screenshot_week()
    plain = select(memories, scores, 24, threshold=0.80, now=NOW)
    assert all(s.series == 0 for s in plain)
    wide = select(memories, scores, 24, threshold=0.80, now=NOW, series_slots=24)
    assert [(s.memory.id, s.reason) for s in wide] == [(s.memory.id, s.reason) for s in plain]


FRAMES = [
    "Alice a visité Trieste en {}",
    "Alice court {} km le dimanche",
    "Alice a vu Marc {} fois",
    "Alice aime le thé {}",
]


@st.composite
def series_turns(draw: st.DrawFn) -> tuple[list[Memory], dict[int, float], int, int]:
    n = draw(st.integers(0, 80))
    memories, scores = [], {}
    for memory_id in range(1, n + 1):
        template = draw(st.sampled_from(FRAMES))
        memories.append(
            mem(
                memory_id,
                template.format(draw(st.integers(1, 3000))),
                type=draw(st.sampled_from(["fact", "fact", "episode"])),
                scope=draw(st.sampled_from(["global", "story"])),
                story_id="s",
                pinned=draw(st.booleans()) and draw(st.booleans()),
                confidence=draw(st.sampled_from([0.9, 1.0])),
                updated_at=NOW - timedelta(hours=draw(st.integers(0, 3))),
            )
        )
        score = draw(st.one_of(st.none(), st.sampled_from([0.5, 0.81, 0.85, 0.9])))
        if score is not None:
            scores[memory_id] = score
    return memories, scores, draw(st.sampled_from([5, 24])), draw(st.integers(1, 4))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(series_turns())
def test_columns_make_the_same_capped_choice_and_no_series_goes_over(
    turn: tuple[list[Memory], dict[int, float], int, int],
) -> None:
    memories, scores, limit, slots = turn
    expected = select(memories, scores, limit, threshold=0.80, now=NOW, series_slots=slots)
    got = select_columns(candidates_of(memories, scores), limit, threshold=0.80, now_us=NOW_US, series_slots=slots)
    assert [(s.memory.id, s.reason, s.score, s.series) for s in got] == [
        (s.memory.id, s.reason, s.score, s.series) for s in expected
    ]
    placed: dict[object, int] = {}
    for s in got:
        key = memory_key(s.memory)
        if key is not None:
            placed[key] = placed.get(key, 0) + 1
    assert all(count <= slots for count in placed.values())
    # A slot is left empty only when no memory is left to fill it.
    served = {s.memory.id for s in got}
    if len(got) < limit:
        rest = [m for m in memories if m.id not in served and not m.pinned]
        keys = {memory_key(s.memory) for s in got}
        assert all(memory_key(m) in keys and memory_key(m) is not None for m in rest)


def test_a_series_of_hundreds_ranked_above_everything_still_leaves_the_rest_their_slots() -> None:
    # One run a day for a year and a half, each scored above what else the person said: the
    # series step must find its members rounds ahead, not a turn's worth per round.
    runs = [mem(1000 + i, f"Alice a couru {5 + i % 17} km le {1 + i % 28} mars", type="episode") for i in range(1, 501)]
    others = screenshot_week()[0][22:]
    scores = {m.id: 0.9 - m.id * 1e-5 for m in runs} | {m.id: 0.82 for m in others}
    for chosen in (
        select(runs + others, scores, 24, threshold=0.80, now=NOW, series_slots=3),
        select_columns(candidates_of(runs + others, scores), 24, threshold=0.80, now_us=NOW_US, series_slots=3),
    ):
        assert [s.memory.id for s in chosen if s.memory.type == "episode"] == [1001, 1002, 1003]
        assert {m.id for m in others} <= {s.memory.id for s in chosen}
        assert chosen[0].series > 24  # /why: at least that many look-alikes were set aside
