"""Property: whatever the series, the model's proposal and what the user does while the model
answers (pin a member, edit one), every carrier token of every member stays recoverable from the
live memories, or the series is untouched. Real SQLite file, the scripted LLM over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bot.clients.db import SQLiteDatabase
from bot.memory.carriers import carrier_tokens, dedup_text
from bot.memory.model import NewMemory, utcnow
from bot.memory.stores.exchanges import save_exchange
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.text import words
from tests.builders import http_client, make_engine
from tests.fakes.llm_server import FakeLLMServer, LLMRequest
from tests.lanes import examples

TEMPLATES = {
    "year": ("Alice a visité Trieste en {}", st.integers(1990, 2030)),
    "km": ("Alice a couru {} km au parc", st.integers(2, 60)),
    "day": ("Alice joue au tennis le {}", st.sampled_from("lundi mardi mercredi jeudi vendredi samedi dimanche".split())),
    "month": ("Alice est allée à Porto en {} 2019", st.sampled_from("janvier mars avril juin juillet octobre décembre".split())),
}  # fmt: skip
_RANGE = re.compile(r"(\d+) ?- ?(\d+)|de (\d+) à (\d+)")


def recoverable(token: str, text: str) -> bool:
    """An oracle apart from the code under test: the token is a word of the text, or a number
    inside one of its ranges "a-b" / "de a à b"."""
    canonical = dedup_text(text)
    if token in words(canonical) or token in carrier_tokens(text):
        return True
    if not token.isdigit():
        return False
    for match in _RANGE.finditer(canonical):
        low, high = (int(g) for g in match.groups() if g is not None)
        if low <= int(token) <= high:
            return True
    return False


@st.composite
def cases(draw: st.DrawFn) -> dict[str, object]:
    kind = draw(st.sampled_from(sorted(TEMPLATES)))
    template, carrier = TEMPLATES[kind]
    chosen = draw(st.lists(carrier, min_size=3, max_size=7, unique=True))
    n = len(chosen)
    texts = [template.format(v) for v in chosen]
    proposal = draw(st.sampled_from(["all", "all", "range", "drop_one", "invent", "other_city", "garbage"]))
    touched = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(["pin", "edit"])), max_size=2))
    return {"kind": kind, "texts": texts, "values": chosen, "proposal": proposal, "touched": touched}


def proposed_text(case: dict[str, object]) -> str:
    texts: list[str] = case["texts"]  # type: ignore[assignment]
    values = [str(v) for v in case["values"]]  # type: ignore[union-attr]
    head = texts[0].rsplit(" ", 1)[0] if case["kind"] != "month" else "Alice est allée à Porto en"
    tail = " 2019" if case["kind"] == "month" else ""
    listed = ", ".join(values[:-1]) + " et " + values[-1]
    match case["proposal"]:
        case "all":
            return f"{head} {listed}{tail}"
        case "range" if case["kind"] in ("year", "km"):
            numbers = sorted(int(v) for v in values)
            return f"{head} de {numbers[0]} à {numbers[-1]}{tail}"
        case "drop_one":
            return f"{head} {', '.join(values[1:])}{tail}"
        case "invent":
            return f"{head} {listed} et 1789{tail}"
        case "other_city":
            return f"{head.replace('Trieste', 'Lisbonne').replace('Porto', 'Lisbonne').replace('parc', 'stade')} {listed}{tail}"
        case "garbage":
            return "rien à dire"
    return f"{head} {listed}{tail}"


async def run(case: dict[str, object], folder: Path) -> None:
    db = await SQLiteDatabase.open(folder / "x.db")
    server = FakeLLMServer()
    await server.start()
    http = http_client(timeout=30)
    try:
        engine = make_engine(db, http, server, folder, consolidation_series_per_run=5)
        store = MemoryStore(db)
        ids = [await store.add("alice", NewMemory(text=t)) for t in case["texts"]]  # type: ignore[union-attr]
        await store.add("alice", NewMemory(text="Alice aime le thé vert"))
        texts = dict(zip(ids, case["texts"]))  # type: ignore[arg-type]
        pinned: set[int] = set()

        async def answer(request: LLMRequest) -> str:
            for index, action in case["touched"]:  # type: ignore[union-attr]
                memory_id = ids[index]
                if action == "pin":
                    await engine.memories.pin("alice", memory_id)
                    pinned.add(memory_id)
                else:
                    texts[memory_id] = texts[memory_id] + " avec Marc en 1999"
                    await engine.memories.edit("alice", memory_id, texts[memory_id])
            return json.dumps({"text": proposed_text(case), "confidence": 0.95})

        server.handler = answer
        async with db.write() as conn:  # she spoke lately: the job looks at her memories
            await save_exchange(
                conn, "alice", user_name="Alice", story_id="c", place="g", message_id=None, text="Salut", now=utcnow()
            )
        figures = await engine.operator.consolidate()

        event("applied" if figures.consolidated else f"left alone: {dict(figures.refused)}")
        live = {m.id: m for m in await engine.memories.list("alice")}
        new = [m for i, m in live.items() if i not in ids and "thé" not in m.text]
        if figures.consolidated:
            assert not case["touched"], "applied although a member changed while the model answered"
            [consolidated] = new
            for memory_id, text in texts.items():
                assert memory_id not in live
                for token in carrier_tokens(text):
                    assert recoverable(token, consolidated.text), (token, text, consolidated.text)
        else:
            # Untouched: every member live, as it was or as the user changed it, nothing new.
            assert new == []
            assert {i: live[i].text for i in ids} == texts
            assert {i for i in ids if live[i].pinned} == pinned
    finally:
        await http.aclose()
        await server.stop()
        await db.close()


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cases())
def test_every_carrier_of_every_member_stays_recoverable_or_the_series_is_untouched(case: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(case, Path(folder)))
