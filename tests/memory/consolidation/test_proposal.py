"""Consolidation of series: the code's checks on what the model proposes (pure), and the job
through the engine on real stores (SQLite and PostgreSQL), with the scripted LLM over HTTP.

Nothing of a member may be lost: every carrier token and name of every member must be
recoverable from what is live after a run, or the series is untouched."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from bot.engine import Engine, Incoming
from bot.i18n import use_locale
from bot.memory.consolidation.proposal import Proposal, check_proposal
from bot.memory.model import Memory, NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.presenting import history_text, stats_text
from tests.builders import make_engine
from tests.fakes.llm_server import LLMRequest

pytestmark = pytest.mark.both_stores

NOW = datetime(2026, 3, 1, tzinfo=UTC)
YEARS = [2012, 2013, 2015, *range(2017, 2026)]


def mem(i: int, text: str) -> Memory:
    return Memory(id=i, user_id="u", text=text, type="fact", scope="global", pinned=False, confidence=0.9,
                  created_at=NOW, updated_at=NOW)  # fmt: skip


TRIESTE = [mem(i, f"Alice a visité Trieste en {y}") for i, y in enumerate(YEARS, 1)]


def check(text: str, members: list[Memory] = TRIESTE) -> str | None:
    refusal = check_proposal(members, Proposal(text, 0.95), character_name="Écho", user_name="Alice")
    return None if refusal is None else refusal.reason


def test_a_text_that_spells_out_or_ranges_every_year_is_accepted() -> None:
    assert check("Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025") is None
    assert check("Alice a visité Trieste en 2012, 2013, 2015 et 2017–2025") is None
    assert check("Alice a visité Trieste 12 fois : en 2012, 2013, 2015, puis de 2017 à 2025") is None
    every = [mem(i, f"Alice a visité Trieste en {y}") for i, y in enumerate(range(2012, 2026), 1)]
    assert check("Alice visite Trieste chaque année depuis 2012 (2012–2025)", every) is None
    english = [mem(i, f"Alice visited Trieste in {y}") for i, y in enumerate(range(2017, 2022), 1)]
    assert check("Alice visited Trieste every year from 2017 to 2021", english) is None


def test_a_lost_year_an_invented_year_or_a_range_over_a_gap_is_refused() -> None:
    assert check("Alice a visité Trieste en 2012, 2013 et de 2017 à 2025") == "carrier_lost"
    assert check("Alice visite Trieste chaque année depuis 2012") == "carrier_lost"
    # 2014 and 2016 are in no member: the range would invent two visits.
    assert check("Alice a visité Trieste de 2012 à 2025") == "range_claims_more"
    assert check("Alice a visité Trieste en 2011, 2012, 2013, 2015 et de 2017 à 2025") == "carrier_invented"
    # "2015 et 2017" is a list, not a range: 2016 is not claimed, and 2018-2025 are lost.
    assert check("Alice a visité Trieste en 2012, 2013, 2015 et 2017") == "carrier_lost"


def test_a_lost_name_another_language_a_flipped_negation_or_another_subject_is_refused() -> None:
    assert check("Alice a visité Porto en 2012, 2013, 2015 et de 2017 à 2025") == "name_lost"
    assert check("Alice a visité Trieste et Porto en 2012, 2013, 2015 et de 2017 à 2025") == "name_invented"
    assert check("Alice visited Trieste in 2012, 2013, 2015 and from 2017 to 2025") == "language"
    assert check("Alice n'a pas visité Trieste en 2012, 2013, 2015 ni de 2017 à 2025") == "negation_flipped"
    assert check("Écho a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025") == "not_about_user"
    low = check_proposal(TRIESTE, Proposal("Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025", 0.5),
                         character_name="Écho")  # fmt: skip
    assert low is not None and low.reason == "low_confidence"


# --- the job, through the engine ---------------------------------------------------------------


def consolidating(text_for: dict[str, str]):  # type: ignore[no-untyped-def]
    """A scripted model: the consolidation call answers from `text_for` (keyed by a word of the
    series), every other structured call `{}`, prose an echo."""

    def handler(request: LLMRequest) -> str:
        if "series" in request.last_user and request.json_schema is not None:
            for word, text in text_for.items():
                if word in request.last_user:
                    return json.dumps({"text": text, "confidence": 0.95})
            return json.dumps({"text": "rien", "confidence": 0.95})
        return "{}" if request.json_schema is not None else "D'accord."

    return handler


async def season(engine: Engine, store: MemoryStore) -> None:
    """Alice spoke lately (the job looks at recent speakers) and holds two series and a fact."""
    await engine.conversation.turn(
        Incoming(user_id="alice", user_name="Alice", text="Salut", story_id="c", place="dm", message_id="m1")
    )
    await engine.operator.wait_reflections("alice")
    for y in YEARS:
        await store.add("alice", NewMemory(text=f"Alice a visité Trieste en {y}"))
    for d in ("lundi", "mardi", "jeudi"):
        await store.add("alice", NewMemory(text=f"Alice joue au tennis le {d}"))
    await store.add("alice", NewMemory(text="Alice aime le thé vert"))


async def test_an_accepted_consolidation_replaces_the_series_and_one_restore_brings_it_back(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    await season(engine, store)
    before = {m.id: m.text for m in await engine.memories.list("alice")}
    llm_server.handler = consolidating({
        "Trieste": "Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025",
        "tennis": "Alice joue au tennis le lundi et le jeudi",  # mardi lost: refused
    })  # fmt: skip

    figures = await engine.operator.consolidate()

    assert (figures.series_found, figures.consolidated, dict(figures.refused)) == (2, 1, {"carrier_lost": 1})
    live = {m.id: m.text for m in await engine.memories.list("alice")}
    [new_id] = [i for i, t in live.items() if "2017 à 2025" in t]
    assert not any("Trieste en 20" in t and i != new_id for i, t in live.items())
    assert sum("tennis" in t for t in live.values()) == 3  # the refused series stays as it is
    [c] = await engine.memories.consolidations("alice")
    assert c.memory_id == new_id and sorted(m for m, _ in c.members) == sorted(
        i for i, t in before.items() if "Trieste" in t
    )
    entries, removals = await engine.memories.history("alice")
    with use_locale("fr"):
        shown = history_text(entries, removals, [c])
    assert f"consolidé dans #{new_id}" in shown and "2017 à 2025" in shown
    stats = await engine.memories.stats("alice")
    assert (stats.consolidations, stats.consolidated_members) == (1, len(YEARS))
    assert f"Series consolidated: 1, holding {len(YEARS)}" in stats_text(stats)

    # A refused series is not asked again until it changes; an applied one is gone.
    calls = len(llm_server.chats)
    again = await engine.operator.consolidate()
    assert (again.series_found, again.llm_calls, len(llm_server.chats)) == (1, 0, calls)

    await engine.memories.restore("alice", c.history_id)
    assert {m.id: m.text for m in await engine.memories.list("alice")} == before
    [undone] = await engine.memories.consolidations("alice")
    assert undone.undone

    # Undone by the user: not consolidated again (nor asked) until the series changes.
    calls = len(llm_server.chats)
    again = await engine.operator.consolidate()
    assert (again.consolidated, again.llm_calls, len(llm_server.chats)) == (0, 0, calls)
    await store.add("alice", NewMemory(text="Alice a visité Trieste en 2026"))
    llm_server.handler = consolidating({"Trieste": "Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2026"})
    assert (await engine.operator.consolidate()).consolidated == 1


async def test_a_member_edited_while_the_model_answers_leaves_the_series_as_it_is(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    await season(engine, store)
    trieste = [m for m in await engine.memories.list("alice") if "Trieste" in m.text]
    answer = consolidating({"Trieste": "Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025"})

    async def edit_then_answer(request: LLMRequest) -> str:
        if "Trieste" in request.last_user:
            await engine.memories.edit("alice", trieste[4].id, "Alice a visité Trieste en 2018 avec Marc")
        return answer(request)

    llm_server.handler = edit_then_answer
    figures = await engine.operator.consolidate()
    assert figures.consolidated == 0 and figures.refused["changed"] == 1
    assert sum("Trieste" in m.text for m in await engine.memories.list("alice")) == len(YEARS)
    assert await engine.memories.consolidations("alice") == []


async def test_an_erase_meanwhile_writes_nothing_back(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    await season(engine, store)
    answer = consolidating({"Trieste": "Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025"})
    erased: list[object] = []

    async def erase_then_answer(request: LLMRequest) -> str:
        if "Trieste" in request.last_user and not erased:
            # The erase cancels the job's model call (no lock is held across it); whichever of the
            # two ends first, nothing of Alice is written back.
            erased.append(asyncio.ensure_future(engine.privacy.erase("alice")))
        return answer(request)

    llm_server.handler = erase_then_answer
    await engine.operator.consolidate()
    await asyncio.wait_for(asyncio.gather(*erased), 10)
    assert await engine.memories.list("alice") == []
    assert await engine.memories.consolidations("alice") == []


async def test_the_selection_caps_a_series_in_a_turn_and_why_says_it(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    await season(engine, store)
    llm_server.handler = consolidating({})
    result = await engine.conversation.turn(
        Incoming(user_id="alice", user_name="Alice", text="On part où ?", story_id="c", place="dm", message_id="m2")
    )
    slots = result.selection.slots
    assert sum("Trieste" in s.text for s in slots) == 3
    assert all(s.series == len(YEARS) for s in slots if "Trieste" in s.text)
    assert any("thé vert" in s.text for s in slots)
    why = await engine.memories.why("alice", "c")
    assert why is not None and [s.series for s in why.slots] == [s.series for s in slots]


def test_history_tells_an_undone_consolidation_from_a_forgotten_one() -> None:
    from bot.memory.stores.consolidations import Consolidation

    members = [(1, "Alice a visité Trieste en 2012"), (2, "Alice a visité Trieste en 2013")]
    at = datetime(2026, 3, 1, tzinfo=UTC)
    undone = Consolidation(9, members, at, True, 5)
    forgotten = Consolidation(10, members, at, False, 7)
    live = Consolidation(11, members, at, False, 8, text="Alice a visité Trieste en 2012 et 2013")
    shown = history_text([], [], [undone, forgotten, live])
    assert "undone, the memories are back — /restore 5" in shown
    assert "#10, forgotten since — /restore 7" in shown
    assert "#11 “Alice a visité Trieste en 2012 et 2013” — /restore 8 undoes it" in shown
