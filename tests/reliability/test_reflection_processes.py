"""Several bot processes on one database ask the model to reflect each exchange once, on
PostgreSQL and on one SQLite file.

Three real processes (tests/reliability/turns_driver.py) serve the same six users at once, each
sending its own messages; each turn schedules its reflection, and each process then sweeps
what is pending, its own and the other's, until nothing is left. The scripted LLM takes a
moment per reflection, so that workers queue for a reflection slot and for each other. It counts
the reflection calls that name each message: each exactly once, and every exchange reflected.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import asyncpg
import pytest

from tests.fakes.llm_server import FakeLLMServer, LLMRequest
from tests.reliability.process import run_module
from tests.reliability.test_erase_processes import env_for

pytestmark = pytest.mark.both_stores

USERS = ("ana", "ben", "cleo", "dan", "eve", "fay")
PROCESSES = 3
MESSAGES = 2  # per user and process
TAG = re.compile(r"\bmsg-\d+-[a-z]+-\d+\b")
REFLECTION_SECONDS = 0.3
UNREFLECTED = "SELECT COUNT(*) FROM exchanges WHERE reflected_at IS NULL OR last_error IS NOT NULL"


async def scalar(target: str, sql: str) -> int:
    if target.startswith("postgresql://"):
        conn = await asyncpg.connect(target)
        try:
            return int(await conn.fetchval(sql))
        finally:
            await conn.close()
    with sqlite3.connect(target) as db:
        return int(db.execute(sql).fetchone()[0])


async def test_processes_sharing_a_database_ask_for_each_reflection_once(
    database_url: str, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    calls: Counter[str] = Counter()

    async def answer(request: LLMRequest) -> str:
        if request.json_schema is None:
            return "D'accord."
        calls.update(set(TAG.findall(json.dumps(request.messages, ensure_ascii=False))))
        await asyncio.sleep(REFLECTION_SECONDS)
        return json.dumps({"memories": []})

    llm_server.handler = answer
    env = env_for(llm_server, database_url, tmp_path)
    sent = [f"msg-{p}-{u}-{k}" for p in range(PROCESSES) for u in USERS for k in range(MESSAGES)]

    def spec(p: int) -> str:
        turns = [[u, f"Message msg-{p}-{u}-{k} : j'aime le nombre {k}."] for u in USERS for k in range(MESSAGES)]
        return json.dumps({"turns": turns, "drain": True})

    runs = await asyncio.gather(
        *(run_module(env, tmp_path, ["tests.reliability.turns_driver", spec(p)], timeout=120) for p in range(PROCESSES))
    )
    for run in runs:
        assert run.code == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
        assert run.stdout.count("answered ") == len(USERS) * MESSAGES and "done" in run.stdout, run.stdout
    twice = {tag: n for tag, n in calls.items() if n > 1}
    assert twice == {}, f"{len(twice)} of {len(sent)} exchanges sent to the reflection model more than once"
    assert sorted(calls) == sorted(sent)
    assert await scalar(database_url, UNREFLECTED) == 0
    assert await scalar(database_url, "SELECT COUNT(*) FROM exchanges") == len(sent)
