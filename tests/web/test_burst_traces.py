"""Property (issue 22, item 4): whatever subset of a burst's messages is edited or deleted, in
whatever order, before or after its reflection, the deleted or replaced text leaves no trace
anywhere a user or the owner's page can read it — the stored transcript, /why, /export, the
live memories and their provenance, the owner's page — and what the other messages say stays.

One real engine on a SQLite file, the scripted LLM server and the owner's page over real HTTP
on 127.0.0.1; each example is a new user, so examples share the engine and nothing else."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.clients.db import SQLiteDatabase
from bot.clients.health import Health
from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.clients.storage import fetch_all
from bot.engine import Incoming, MessagePart, join_parts
from bot.presenting import why_text
from bot.web.server import WebServer, make_app
from tests.builders import http_client, make_engine
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest
from tests.lanes import examples

TOKEN = "test-token-0123456789abcdef"
# One distinct fact per place in the burst, so that no two merge.
TEMPLATES = (
    "L'utilisateur a un chat nommé {t}.",
    "L'utilisateur joue du violon dans l'orchestre {t}.",
    "L'utilisateur habite rue {t} depuis l'été.",
    "L'utilisateur collectionne les timbres de la série {t}.",
    "L'utilisateur prépare un marathon avec le club {t}.",
)
TOKEN_RE = re.compile(r"\bzq[a-z]+\d+\b")


@dataclass(frozen=True)
class Message:
    id: str
    token: str
    text: str


def reflect(templates: dict[str, str]):  # type: ignore[no-untyped-def]
    def handler(request: LLMRequest) -> str:
        if request.json_schema is None:
            return "D'accord."
        said = " ".join(re.findall(r"<message [^>]*>\n(.*?)\n</message>", request.last_user, re.DOTALL))
        facts = [templates[t].format(t=t) for t in TOKEN_RE.findall(said) if t in templates]
        return json.dumps({"memories": [{"text": f, "type": "fact", "confidence": 0.95} for f in facts]})

    return handler


class World:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.templates: dict[str, str] = {}
        self.examples = 0

    async def start(self) -> None:
        self.db = await SQLiteDatabase.open(self.folder / "echo.sqlite3")
        self.llm_server = FakeLLMServer()
        await self.llm_server.start()
        self.llm_server.handler = reflect(self.templates)
        self.http = http_client(timeout=30)
        llm = LLMClient(self.http, api="ollama", base_url=self.llm_server.url)
        metrics = Metrics()
        self.engine = make_engine(self.db, self.http, self.llm_server, self.folder, llm=llm, metrics=metrics)
        await self.engine.start()
        health = Health(db=self.db, llm=llm, model=FAKE_MODEL, embedder=None)
        self.web = WebServer(make_app(self.engine, health, metrics, TOKEN))
        await self.web.start("127.0.0.1", 0)

    async def stop(self) -> None:
        await self.web.stop()
        await self.engine.close(timeout=5)
        await self.http.aclose()
        await self.llm_server.stop()
        await self.db.close()

    async def page(self, path: str) -> str:
        response = await self.http.get(self.web.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200, (path, response.status_code)
        return response.text

    async def owner_pages(self, user: str) -> str:
        turns = await fetch_all(self.db.reader, "SELECT id FROM turns WHERE user_id = ?", (user,))
        pages = [await self.page("/"), await self.page(f"/users/{user}")]
        pages += [await self.page(f"/users/{user}/turns/{row[0]}") for row in turns]
        return "\n".join(pages)

    async def stored(self, user: str) -> str:
        """Every stored text of the user's exchanges and turns, whatever a front end shows of it."""
        rows = await fetch_all(
            self.db.reader,
            "SELECT user_message, COALESCE(edited_from, ''), COALESCE(prompt, '') FROM exchanges WHERE user_id = ?",
            (user,),
        )
        rows += await fetch_all(self.db.reader, "SELECT text, marks FROM exchange_messages WHERE user_id = ?", (user,))
        rows += await fetch_all(self.db.reader, "SELECT query, detail FROM turns WHERE user_id = ?", (user,))
        return "\n".join(str(v) for row in rows for v in row)

    async def run(self, size: int, fates: list[str], order: list[int], reflect_first: bool) -> None:
        self.examples += 1
        user = f"u{self.examples}"
        engine = self.engine
        letters = "abcdefghij"

        def message(i: int, edited: bool = False) -> Message:
            token = f"zq{letters[self.examples % 10]}{'e' if edited else 'o'}{self.examples}{i}"
            self.templates[token] = TEMPLATES[i]
            if edited:
                return Message(f"{user}-m{i}", token, f"Correction numéro {i} : c'est {token}, pas l'autre.")
            return Message(f"{user}-m{i}", token, f"Retiens bien ceci, numéro {i} : le mot {token} compte.")

        sent = [message(i) for i in range(size)]
        parts = [MessagePart(m.id, m.text) for m in sent]
        result = await engine.conversation.turn(
            Incoming(
                user_id=user,
                user_name="Alice",
                text=join_parts(parts),
                story_id="chan-1",
                place="guild-1",
                message_id=sent[-1].id,
                parts=parts,
            )
        )
        assert result.reply is not None
        if reflect_first:
            await engine.operator.wait_reflections(user)
        now = list(sent)
        for i in order:
            if fates[i] == "delete":
                await engine.conversation.message_deleted(sent[i].id)
            elif fates[i] == "edit":
                now[i] = message(i, edited=True)
                assert await engine.conversation.message_edited(sent[i].id, now[i].text, author=user) != "unknown"
        await engine.operator.wait_reflections(user)
        await engine.conversation.wait_recorded(user)

        gone = [sent[i] for i in range(size) if fates[i] != "keep"]
        kept = [now[i] for i in range(size) if fates[i] != "delete"]
        exported = await engine.privacy.export_person(user)
        export_text = json.dumps(exported, ensure_ascii=False)
        why = why_text(await engine.memories.why(user, "chan-1"))
        pages = await self.owner_pages(user)
        stored = await self.stored(user)
        live = [m.text for m in await engine.memories.list(user)]
        readable = {"export": export_text, "why": why, "owner's page": pages, "stored": stored}
        for m in gone:
            for where, text in readable.items():
                assert m.text not in text, f"{m.text!r} is still in {where}"
            # Its token: not in the transcript or /why; for a deleted message, in no live memory
            # either (an archived one keeps it, restorable from /history as any forgotten memory;
            # what an edit changes in memory is the correction reflection's to decide).
            in_use = [export_text_of(exported, "exchanges"), export_text_of(exported, "turns"), why, stored]
            if fates[int(m.id.rsplit("m", 1)[1])] == "delete":
                in_use += live
            assert not any(m.token in text for text in in_use), f"{m.token} is still in use"
        (transcript,) = [e["message"] for e in exported["exchanges"]]
        assert transcript == join_parts([MessagePart(m.id, m.text) for m in kept])
        for m in kept:
            # What the messages left say is remembered, after the first reflection or again.
            assert TEMPLATES[int(m.id.rsplit("m", 1)[1])].format(t=m.token) in live, (m, live)
        for memory in exported["memories"]:
            assert memory["from_exchanges"] == [exported["exchanges"][0]["id"]]


def export_text_of(exported: dict[str, Any], key: str) -> str:
    return json.dumps(exported[key], ensure_ascii=False)


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, list[str], list[int], bool]:
    size = draw(st.integers(2, len(TEMPLATES)))
    fates = draw(st.lists(st.sampled_from(["keep", "edit", "delete"]), min_size=size, max_size=size))
    order = draw(st.permutations(range(size)))
    return size, fates, list(order), draw(st.booleans())


def test_any_subset_of_a_burst_edited_or_deleted_leaves_no_trace_of_the_old_text() -> None:
    loop = asyncio.new_event_loop()
    with tempfile.TemporaryDirectory() as folder:
        world = World(Path(folder))
        loop.run_until_complete(world.start())
        try:

            @settings(
                max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
            )
            @given(shapes())
            def check(shape: tuple[int, list[str], list[int], bool]) -> None:
                loop.run_until_complete(world.run(*shape))

            check()
        finally:
            loop.run_until_complete(world.stop())
            loop.close()
