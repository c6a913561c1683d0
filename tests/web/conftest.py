"""The owner's page over real HTTP on 127.0.0.1: a real engine on a SQLite file, the scripted
LLM server, the real offline embedder."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest_asyncio

from bot.characters.reading import Character
from bot.clients.db import SQLiteDatabase
from bot.clients.health import Health
from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.engine import Engine, Incoming
from bot.memory.read.indexing import Indexer
from bot.memory.stores.memory_store import MemoryStore
from bot.web.server import WebServer, make_app
from tests.builders import http_client, local_embedder, make_engine
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest

TOKEN = "test-token-0123456789abcdef"
CONTEXT = 8192


@dataclass
class Page:
    url: str
    engine: Engine
    metrics: Metrics
    health: Health
    llm: FakeLLMServer
    http: httpx.AsyncClient
    indexer: Indexer
    store: MemoryStore
    db: SQLiteDatabase

    async def get(self, path: str, *, token: str | None = TOKEN, **kwargs: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.http.get(self.url + path, headers=headers, **kwargs)  # type: ignore[arg-type]

    async def play(self, text: str, *, user: str = "alice", name: str = "Alice", story: str = "chan-1") -> None:
        """One turn through the engine, its reflection and recording finished."""
        result = await self.engine.conversation.turn(
            Incoming(
                user_id=user,
                user_name=name,
                text=text,
                story_id=story,
                place="guild-1",
                message_id=f"m-{time.monotonic_ns()}",
            )
        )
        if result.reply is not None:
            self.engine.operator.schedule_reflection(user)
            await self.engine.operator.wait_reflections(user)
        await self.engine.conversation.wait_recorded(user)
        await self.indexer.run_once()  # the next turn scores what the reflection wrote


def remembering(request: LLMRequest) -> str:
    """Replies with prose; a reflection remembers the user's last line as a fact."""
    if request.json_schema is None:
        return f"Je note : {request.last_user[:60]}"
    said = request.last_user.split("\n")
    line = next((said_line for said_line in reversed(said) if said_line.strip()), "rien")
    return json.dumps(
        {"memories": [{"text": f"L'utilisateur a dit : {line[-120:]}", "type": "fact", "confidence": 0.9}]}
    )


@asynccontextmanager
async def serving(
    db: SQLiteDatabase, tmp_path, character: Character | None = None, clock: Callable[[], datetime] | None = None
) -> AsyncIterator[Page]:
    """The page of a real engine playing `character` (the bundled one by default)."""
    server = FakeLLMServer()
    await server.start()
    server.handler = remembering
    http = http_client(timeout=30)
    llm = LLMClient(http, api="ollama", base_url=server.url, context_tokens=CONTEXT)
    metrics = Metrics()
    metrics.watch_storage(lambda: db.storage.failures)
    embedder = metrics.timed(local_embedder())
    engine = make_engine(
        db, http, server, tmp_path, llm=llm, embedder=embedder, metrics=metrics, character=character, clock=clock
    )
    await engine.start()
    health = Health(db=db, llm=llm, model=FAKE_MODEL, embedder=embedder)
    web = WebServer(make_app(engine, health, metrics, TOKEN))
    await web.start("127.0.0.1", 0)
    try:
        yield Page(web.url, engine, metrics, health, server, http, Indexer(db, embedder), MemoryStore(db), db)
    finally:
        await web.stop()
        await engine.close(timeout=5)
        await http.aclose()
        await server.stop()


@pytest_asyncio.fixture
async def page(db: SQLiteDatabase, tmp_path) -> AsyncIterator[Page]:
    async with serving(db, tmp_path) as served:
        yield served
