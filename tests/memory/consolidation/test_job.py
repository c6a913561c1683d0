"""The consolidation job against what a hostile model and a person do, through the engine on real
stores (SQLite and PostgreSQL) and the scripted LLM over HTTP:

- a rewrite that keeps every carrier and changes the rest is refused: the series stays as it is;
- one person's bad answer (a "…" that NFKC stores as "...", past 500 characters) is logged,
  counted and skipped: the people after are consolidated, and the model is not asked again;
- `/erase-me` never waits for a consolidation's model call: it cancels it, the job goes on;
- a consolidation the user undid is never redone, however many consolidations came after it
  (the decision read a window of the newest 200 archived members).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.engine import Engine
from bot.memory.model import NewMemory
from bot.memory.stores.memory_store import MemoryStore
from tests.builders import make_engine
from tests.fakes.llm_server import LLMRequest
from tests.memory.consolidation.test_proposal import YEARS, season

pytestmark = pytest.mark.both_stores

TRIESTE = "Alice a visité Trieste en 2012, 2013, 2015 et de 2017 à 2025"


def is_consolidation(request: LLMRequest) -> bool:
    return "The series (" in request.last_user and request.json_schema is not None


def answering(answers: dict[str, str]):  # type: ignore[no-untyped-def]
    """Consolidations answered from `answers` (keyed by a word of the series), other calls `{}`."""

    async def handler(request: LLMRequest) -> str:
        if is_consolidation(request):
            for word, text in answers.items():
                if word in request.last_user:
                    return json.dumps({"text": text, "confidence": 0.95})
            return json.dumps({"text": "rien", "confidence": 0.95})
        return "{}" if request.json_schema is not None else "D'accord."

    return handler


async def two_people(engine: Engine, store: MemoryStore) -> None:
    """Alice (her season) and Bob, who both spoke lately, each with a series of years."""
    await season(engine, store)
    from bot.engine import Incoming

    await engine.conversation.turn(
        Incoming(user_id="bob", user_name="Bob", text="Salut", story_id="c", place="dm", message_id="b1")
    )
    await engine.operator.wait_reflections("bob")
    for y in (2019, 2020, 2021):
        await store.add("bob", NewMemory(text=f"Bob a visité Porto en {y}"))


def consolidation_calls(llm_server, word: str) -> int:  # type: ignore[no-untyped-def]
    return sum(is_consolidation(r) and word in r.last_user for r in llm_server.chats)


async def test_a_rewrite_that_keeps_the_carriers_and_changes_the_fact_leaves_the_series(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    await season(engine, store)
    before = sorted(m.text for m in await engine.memories.list("alice"))
    llm_server.handler = answering({"Trieste": TRIESTE.replace("a visité", "a été arrêtée à")})
    figures = await engine.operator.consolidate()
    assert figures.consolidated == 0 and figures.refused["word_lost"] == 1, figures
    assert sorted(m.text for m in await engine.memories.list("alice")) == before


async def test_one_person_s_unstorable_answer_is_skipped_and_the_next_person_is_consolidated(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    await two_people(engine, store)
    # 500 characters as the model wrote them; 3 more for each "…" once stored (NFKC: "...").
    padded = TRIESTE + " " + "…" * (500 - len(TRIESTE) - 1)
    assert len(padded) == 500
    llm_server.handler = answering({"Trieste": padded, "Porto": "Bob a visité Porto en 2019, 2020 et 2021"})
    figures = await engine.operator.consolidate()
    assert figures.refused["unstorable"] == 1, figures
    assert any(m.text == "Bob a visité Porto en 2019, 2020 et 2021" for m in await engine.memories.list("bob"))
    assert sum("Trieste" in m.text for m in await engine.memories.list("alice")) == len(YEARS)
    # Not asked again: the refusal is remembered until a member changes.
    asked = consolidation_calls(llm_server, "Trieste")
    await engine.operator.consolidate()
    assert consolidation_calls(llm_server, "Trieste") == asked


async def test_an_erase_cancels_a_consolidation_s_model_call_instead_of_waiting_for_it(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path, reflection_timeout_seconds=300)
    await two_people(engine, store)
    asked, never = asyncio.Event(), asyncio.Event()
    porto = answering({"Porto": "Bob a visité Porto en 2019, 2020 et 2021"})

    async def handler(request: LLMRequest) -> str:
        if is_consolidation(request) and "Trieste" in request.last_user:
            asked.set()
            await never.wait()  # a model that takes its whole timeout (300 s)
        return await porto(request)

    llm_server.handler = handler
    job = asyncio.create_task(engine.operator.consolidate())
    await asyncio.wait_for(asked.wait(), 10)
    # The erase does not wait for the model: it is done within seconds.
    await asyncio.wait_for(engine.privacy.erase_person("alice"), 5)
    figures = await asyncio.wait_for(job, 10)
    assert await engine.memories.list("alice") == [] and await engine.memories.consolidations("alice") == []
    # The job went on with the next person.
    assert figures.consolidated == 1
    assert any("2019, 2020 et 2021" in m.text for m in await engine.memories.list("bob"))
    never.set()


async def test_a_consolidation_the_user_undid_is_never_redone_however_many_came_after(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path, consolidation_series_per_run=10)
    await season(engine, store)
    llm_server.handler = answering({"Trieste": TRIESTE})
    assert (await engine.operator.consolidate()).consolidated == 1
    (trieste,) = await engine.memories.consolidations("alice")
    await engine.memories.restore("alice", trieste.history_id)
    # 201 newer members consolidated after it: more than the window the decision read.
    for km in range(1, 202):
        await store.add("alice", NewMemory(text=f"Alice a couru {km} km au parc"))
    llm_server.handler = answering({"couru": "Alice a couru de 1 à 201 km au parc", "Trieste": TRIESTE})
    figures = await engine.operator.consolidate()
    assert figures.consolidated == 1
    asked = consolidation_calls(llm_server, "Trieste")
    again = await engine.operator.consolidate()
    assert consolidation_calls(llm_server, "Trieste") == asked and again.consolidated == 0
    assert sum("Trieste en 20" in m.text for m in await engine.memories.list("alice")) == len(YEARS)
    undone = [c for c in await engine.memories.consolidations("alice") if c.undone]
    assert [c.memory_id for c in undone] == [trieste.memory_id]


async def test_a_reflection_waiting_for_its_model_holds_no_lock_the_consolidation_waits_for(
    db, http, llm_server, tmp_path, store, store_kind
):
    """The same rule on the other side: a reflection's model call holds no per-user lock either,
    so the consolidation (and an erase) never waits for it. On PostgreSQL the worker's claim on
    the user is a connection's advisory lock, tried and never waited for: the run passes the user
    by (next run); in one SQLite process the claim is shared and the series is consolidated.
    Two places for the model: with one, the consolidation's call would wait for the model itself
    (the reflection holding it), which is the budget's rule, not a lock."""
    from bot.engine import Incoming

    engine = make_engine(db, http, llm_server, tmp_path, reflection_timeout_seconds=300, llm_concurrency=2)
    await season(engine, store)
    asked, never = asyncio.Event(), asyncio.Event()
    trieste = answering({"Trieste": TRIESTE})

    async def handler(request: LLMRequest) -> str:
        if request.json_schema is not None and not is_consolidation(request):
            asked.set()
            await never.wait()  # the reflection's model takes its whole timeout
        return await trieste(request)

    llm_server.handler = handler
    await engine.conversation.turn(
        Incoming(user_id="alice", user_name="Alice", text="Encore un voyage", story_id="c", place="dm", message_id="m2")
    )
    engine.operator.schedule_reflection("alice")
    await asyncio.wait_for(asked.wait(), 10)
    figures = await asyncio.wait_for(engine.operator.consolidate(), 5)
    if store_kind == "sqlite":
        assert figures.consolidated == 1, figures
    else:
        assert figures.llm_calls == 0, figures
    await asyncio.wait_for(engine.privacy.erase_person("alice"), 5)
    never.set()
