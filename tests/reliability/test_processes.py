"""Several bot processes, one PostgreSQL database: a user's reflection runs once at a time across
processes, and a pending exchange seen by two of them is reflected and applied once.

Each "process" is its own PostgresDatabase (its own pool, write lock and advisory locks) with
its own engine, as two `python -m bot` would have; the database is the real one they share.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.clients.postgres import PostgresDatabase
from bot.memory.stores.memory_store import MemoryStore
from tests.builders import http_client, make_engine, msg
from tests.fakes.llm_server import LLMRequest

FACT = "L'utilisateur est allergique aux arachides."


@pytest.fixture
async def shared_url(postgres_cluster) -> str:
    return await postgres_cluster.reset_database()


async def test_two_processes_seeing_the_same_pending_exchange_reflect_it_once(shared_url, llm_server, tmp_path):
    running = peak = reflections = 0
    release = asyncio.Event()

    async def handler(request: LLMRequest):
        nonlocal running, peak, reflections
        if request.json_schema is None:
            return "Noté."
        reflections += 1
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return json.dumps({"memories": [{"text": FACT, "type": "fact", "confidence": 0.9}]})

    llm_server.handler = handler
    first, second = await PostgresDatabase.open(shared_url), await PostgresDatabase.open(shared_url)
    async with http_client() as http:
        one = make_engine(first, http, llm_server, tmp_path)
        two = make_engine(second, http, llm_server, tmp_path)
        try:
            await one.conversation.turn(msg("Je suis allergique aux arachides."))
            one.operator.schedule_reflection("alice")
            while reflections == 0:
                await asyncio.sleep(0.01)
            # The second process's sweep finds the same exchange pending while the first reflects it.
            assert await two.operator.resume_pending_reflections() == 1
            await asyncio.sleep(1.0)
            release.set()
            await one.operator.wait_reflections("alice")
            await two.operator.wait_reflections("alice")
            assert (reflections, peak) == (1, 1)
            assert [m.text for m in await MemoryStore(second).list("alice")] == [FACT]
            stats = await one.memories.stats("alice")
            assert (stats.pending_reflections, stats.turns) == (0, 1)
        finally:
            await one.close()
            await two.close()
            await first.close()
            await second.close()
