"""/erase-me in one bot process stops a turn of the same person in another process, on one
PostgreSQL database and on one SQLite file.

Two real processes: B plays the person's turns (tests/reliability/turns_driver.py, with swipes
on as on Discord, and off) and waits for the scripted LLM, which holds B's second reply; A is the real
`python -m bot chat`, whose `/erase-me yes` answers "Erased" meanwhile. Then the reply is let go.
B still answers the person, and afterwards no row of any table, read with raw SQL, mentions them
or their messages. Their next message, in a third process, is stored as usual.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import asyncpg
import pytest

from tests.fakes.llm_server import FakeLLMServer, LLMRequest
from tests.reliability.process import chat_env, run_chat, run_module

pytestmark = pytest.mark.both_stores

USER = "alice"
FIRST = "Je m'appelle Quentinosaure."
SECOND = "J'habite rue des Zéphyrs."
AGAIN = "Bonjour, je reviens."
# Lower-cased pieces of everything about the person: their key and name, and their messages'
# words as stored, folded and stemmed (FTS5 drops the accents, PostgreSQL's tsvector stems).
TRACES = ("alice", "quentinos", "zéphyr", "zephyr")


async def rows_mentioning(target: str, pieces: tuple[str, ...]) -> list[str]:
    """Every row of every table, read as text, that holds one of `pieces` (case-insensitive)."""
    if target.startswith("postgresql://"):
        conn = await asyncpg.connect(target)
        try:
            tables = [
                r[0]
                for r in await conn.fetch(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
                )
            ]
            rows = [(t, r[0]) for t in tables for r in await conn.fetch(f'SELECT t::text FROM "{t}" t')]
        finally:
            await conn.close()
    else:
        with sqlite3.connect(target) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            rows = [(t, repr(row)) for t in tables for row in db.execute(f'SELECT * FROM "{t}"')]
    return [f"{table}: {text}" for table, text in rows if any(p in text.lower() for p in pieces)]


def env_for(llm_server: FakeLLMServer, database_url: str, folder: Path) -> dict[str, str]:
    # Two places for the model: the first message's reflection runs while the second reply is
    # held (with one, it would wait for that reply, live replies going first).
    if database_url.startswith("postgresql://"):
        return chat_env(llm_server.url, folder / "unused.sqlite3", DATABASE_URL=database_url, LLM_CONCURRENCY="2")
    return chat_env(llm_server.url, Path(database_url), LLM_CONCURRENCY="2")


# With swipes the reply is also kept as alternative 1 of an open exchange (exchange_replies).
@pytest.mark.parametrize("swipes", [True, False], ids=["swipes", "no-swipes"])
async def test_an_erase_in_one_process_stops_the_turn_another_process_waits_for(
    swipes: bool, database_url: str, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    held, release = asyncio.Event(), asyncio.Event()
    reflected = asyncio.Event()

    async def answer(request: LLMRequest) -> str:
        if request.json_schema is not None:
            reflected.set()
            return json.dumps(
                {"memories": [{"text": "L'utilisateur s'appelle Quentinosaure.", "type": "fact", "confidence": 0.95}]}
            )
        if SECOND not in request.last_user:
            return "Enchantée, Quentinosaure !"
        held.set()
        await release.wait()
        return "Bienvenue rue des Zéphyrs !"

    llm_server.handler = answer
    env = env_for(llm_server, database_url, tmp_path)
    spec = {"turns": [[USER, FIRST], [USER, SECOND]], "swipes": swipes}
    b = asyncio.create_task(run_module(env, tmp_path, ["tests.reliability.turns_driver", json.dumps(spec)]))
    try:
        # B holds the second message, and the first one (settled by it) was reflected.
        await asyncio.wait_for(asyncio.gather(held.wait(), reflected.wait()), 60)
        for _ in range(100):
            if any(
                r.startswith("memories:") for r in await rows_mentioning(database_url, ("s'appelle quentinosaure",))
            ):
                break
            await asyncio.sleep(0.1)
        before = await rows_mentioning(database_url, TRACES)
        assert any(r.startswith("memories:") for r in before), before

        a = await run_chat(env, tmp_path, b"/erase-me yes\n", user=USER)
        assert a.code == 0 and "Erased: 1 memory and" in a.stdout, (a.stdout, a.stderr[-2000:])
    finally:
        release.set()
    run = await b
    assert run.code == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    # The person is still answered; nothing of theirs is kept.
    assert f"answered {USER}: Bienvenue rue des Zéphyrs !" in run.stdout, run.stdout
    assert await rows_mentioning(database_url, TRACES) == []

    again = await run_chat(env, tmp_path, f"{AGAIN}\n".encode(), user=USER)
    assert again.code == 0 and "Enchantée" in again.stdout, again.stderr[-2000:]
    kept = await rows_mentioning(database_url, ("je reviens",))
    assert any(r.startswith("exchanges:") for r in kept) and any(r.startswith("turns:") for r in kept), kept
