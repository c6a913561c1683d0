"""A consolidated memory knows which member each part came from: deleting (or editing) the message
that alone said one member's fact undoes the consolidation and forgets (or corrects) that member,
as it would without the consolidation; /why, /history and /export say so. Through the engine on
real stores (SQLite and PostgreSQL), each fact told in its own message, reflected by the scripted
LLM over HTTP, consolidated by the job.
"""

from __future__ import annotations

import json
import re

import pytest

from bot.engine import Engine, Incoming
from bot.engine.memory_commands import MemoryCommands
from bot.presenting import answer, why_text
from tests.builders import make_engine
from tests.fakes.llm_server import LLMRequest

pytestmark = pytest.mark.both_stores

YEARS = (2017, 2018, 2019)
CONSOLIDATED = "Alice a visité Trieste en 2017, 2018 et 2019"


def said(year: int) -> str:
    return f"J'ai visité Trieste en {year}."


class Model:
    """Each message reflected into its member; the series consolidated; a correction of the
    edited message replaces the member it shows first."""

    def __init__(self) -> None:
        self.correction: str | None = None

    def __call__(self, request: LLMRequest) -> str:
        if request.json_schema is None:
            return "Noté."
        if "The series (" in request.last_user:
            return json.dumps({"text": CONSOLIDATED, "confidence": 0.95})
        if "It used to say" in request.last_user and self.correction is not None:
            known = request.last_user.split("Known memories", 1)[1]
            first = int(re.findall(r"^\[(\d+)\]", known, re.MULTILINE)[0])
            return json.dumps({"replace": [{"id": first, "text": self.correction}]})
        years = [y for y in YEARS if said(y) in request.last_user]
        return json.dumps(
            {
                "memories": [
                    {"text": f"Alice a visité Trieste en {y}", "type": "episode", "confidence": 0.95} for y in years
                ]
            }
        )


async def consolidated_season(engine: Engine) -> int:
    for year in YEARS:
        await engine.conversation.turn(Incoming(user_id="alice", user_name="Alice", text=said(year), story_id="c", place="dm",
                                   message_id=f"m{year}", swipes=False))  # fmt: skip
        await engine.operator.wait_reflections("alice")
    figures = await engine.operator.consolidate()
    assert figures.consolidated == 1, figures
    (memory,) = [m for m in await engine.memories.list("alice") if m.text == CONSOLIDATED]
    # A turn chooses it: /why shows it.
    await engine.conversation.turn(Incoming(user_id="alice", user_name="Alice", text="Tu te souviens de Trieste ?", story_id="c",
                               place="dm", message_id="q1", swipes=False))  # fmt: skip
    await engine.operator.wait_reflections("alice")
    why = await engine.memories.why("alice", "c")
    assert why is not None and any(s.id == memory.id for s in why.slots)
    return memory.id


async def test_deleting_the_message_that_alone_said_one_member_forgets_it_and_says_so(db, http, llm_server, tmp_path):
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path, settle_seconds=0)
    consolidated = await consolidated_season(engine)

    outcome = await engine.conversation.message_deleted("m2018")

    live = sorted(m.text for m in await engine.memories.list("alice"))
    assert live == ["Alice a visité Trieste en 2017", "Alice a visité Trieste en 2019"], live
    assert outcome.undone == [consolidated]
    # /why: the memory the turn chose is withdrawn, its text no longer shown.
    why = why_text(await engine.memories.why("alice", "c"))
    assert f"#{consolidated}" in why and "withdrawn since" in why and "2018" not in why
    # /history: the consolidation says what undid it.
    history = answer(await MemoryCommands(engine).history("alice"))
    assert "undone: a message it came from was deleted or edited" in history
    assert "your message was deleted" in history
    # /export: the consolidation, each member with the exchange it came from, and its fate.
    exported = await engine.privacy.export("alice")
    (record,) = exported["consolidations"]
    assert record["memory_id"] == consolidated and record["undone"] == "source"
    sources = {m["text"]: m["from_exchanges"] for m in record["members"]}
    assert all(len(s) == 1 for s in sources.values()) and len({s[0] for s in sources.values()}) == 3
    chosen = [s for t in exported["turns"] for s in t["selection"]["slots"] if s["id"] == consolidated]
    assert chosen and all(s["withdrawn"] and s["text"] == "" for s in chosen)


async def test_editing_the_message_that_alone_said_one_member_corrects_that_member(db, http, llm_server, tmp_path):
    model = Model()
    llm_server.handler = model
    engine = make_engine(db, http, llm_server, tmp_path, settle_seconds=0)
    consolidated = await consolidated_season(engine)

    model.correction = "Alice a visité Porto en 2018"
    assert await engine.conversation.message_edited("m2018", "J'ai visité Porto en 2018.") == "correction"
    await engine.operator.wait_reflections("alice")

    live = sorted(m.text for m in await engine.memories.list("alice"))
    assert live == [
        "Alice a visité Porto en 2018",
        "Alice a visité Trieste en 2017",
        "Alice a visité Trieste en 2019",
    ], live
    assert consolidated not in {m.id for m in await engine.memories.list("alice")}
    why = why_text(await engine.memories.why("alice", "c"))
    assert "withdrawn since" in why and CONSOLIDATED not in why
    history = answer(await MemoryCommands(engine).history("alice"))
    assert "undone: a message it came from was deleted or edited" in history and "your message was edited" in history
    (record,) = (await engine.privacy.export("alice"))["consolidations"]
    assert record["undone"] == "source"


async def test_a_message_that_said_one_member_among_others_leaves_the_consolidation(db, http, llm_server, tmp_path):
    """The control: a message whose fact another message also supports undoes nothing."""
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path, settle_seconds=0)
    consolidated = await consolidated_season(engine)
    # The question's exchange produced nothing: deleting it leaves every memory.
    outcome = await engine.conversation.message_deleted("q1")
    assert outcome.undone == [] and consolidated in {m.id for m in await engine.memories.list("alice")}
