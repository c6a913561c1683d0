"""kill -9 mid-reflection, then restart: the database is intact, the pending reflection is applied
exactly once, and no memory is duplicated or half-written.

Real processes: the terminal chat (`python -m bot chat`) and, for the kill inside the write
transaction, tests/reliability/crash_driver.py. The scripted LLM runs in this test's process on
127.0.0.1, so it outlives the processes it serves; embeddings are the real local model.
Both stores: the SQLite file, and PostgreSQL (the killed process's transaction is rolled back by
the server when its connection drops).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest, Reply

pytestmark = pytest.mark.both_stores

USER = "Camille"
USER_ID = f"terminal:{USER}"
MESSAGE = "Je m'appelle Camille, je suis allergique aux arachides et j'habite à Nantes."
FACTS = [
    "L'utilisateur s'appelle Camille.",
    "L'utilisateur est allergique aux arachides.",
    "L'utilisateur habite à Nantes.",
]
REFLECTION = json.dumps(
    {
        "memories": [{"text": text, "type": "fact", "confidence": 0.95} for text in FACTS],
        "summary": "Camille s'est présentée.",
        "anchors": {"add": ["Camille est allergique aux arachides."]},
    }
)
PROCESS_TIMEOUT = 60.0
REPO = Path(__file__).resolve().parents[2]


class ScriptedLLM:
    """Replies at once; a reflection is answered as `reflection` says, and its arrival is seen."""

    def __init__(self, server: FakeLLMServer) -> None:
        self.server = server
        self.reflection: Reply = Reply(REFLECTION)
        self.reflection_arrived = asyncio.Event()
        server.handler = self.answer

    def answer(self, request: LLMRequest) -> Reply | str:
        if request.json_schema is None:
            return "Enchantée, Camille !"
        self.reflection_arrived.set()
        return self.reflection

    @property
    def reflections(self) -> int:
        return sum(1 for r in self.server.chats if r.json_schema is not None)


@pytest.fixture
def llm(llm_server: FakeLLMServer) -> ScriptedLLM:
    return ScriptedLLM(llm_server)


@pytest.fixture
def env(tmp_path: Path, llm_server: FakeLLMServer, database_url: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "EMBEDDINGS", "DATABASE_"))}
    environment.update(
        LLM_BASE_URL=llm_server.url,
        LLM_MODEL=FAKE_MODEL,
        **(
            {"DATABASE_URL": database_url}
            if database_url.startswith("postgresql:")
            else {"DATABASE_PATH": database_url}
        ),
        EMBEDDINGS="local",
        PYTHONUNBUFFERED="1",
        # The processes run in tmp_path (no stray .env is read); the driver lives in tests/.
        PYTHONPATH=str(REPO),
    )
    return environment


async def start(env: dict[str, str], cwd: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )


async def read_until(proc: asyncio.subprocess.Process, marker: str) -> str:
    assert proc.stdout is not None
    seen = ""
    while marker not in seen:
        line = await asyncio.wait_for(proc.stdout.readline(), PROCESS_TIMEOUT)
        if not line:
            stderr = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"the process ended before {marker!r}: {seen!r} {stderr.decode()[-2000:]}")
        seen += line.decode()
    return seen


async def kill_9(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), PROCESS_TIMEOUT) == -signal.SIGKILL


async def restart_until_idle(env: dict[str, str], cwd: Path) -> None:
    """The chat with nothing to say: it resumes pending reflections, finishes them and exits."""
    proc = await start(env, cwd, "-m", "bot", "chat", "--user", USER)
    _, stderr = await asyncio.wait_for(proc.communicate(b""), PROCESS_TIMEOUT)
    assert proc.returncode == 0, stderr.decode()[-2000:]


async def database_state(env: dict[str, str]) -> dict[str, object]:
    if "DATABASE_URL" in env:
        return await _postgres_state(env["DATABASE_URL"])
    return _sqlite_state(env["DATABASE_PATH"])


async def _postgres_state(url: str) -> dict[str, object]:
    conn = await asyncpg.connect(url)
    try:
        # The search column is generated from the text: it must agree with it.
        assert (
            await conn.fetchval(
                "SELECT COUNT(*) FROM memories WHERE search IS DISTINCT FROM to_tsvector('simple', echo_fold(text))"
            )
            == 0
        )
        return {
            "memories": sorted(r[0] for r in await conn.fetch("SELECT text FROM memories WHERE user_id = $1", USER_ID)),
            "exchanges": [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT user_message, (reply IS NOT NULL)::int, (reflected_at IS NOT NULL)::int, "
                    "reflection_attempts FROM exchanges WHERE user_id = $1",
                    USER_ID,
                )
            ],
            "anchors": [r[0] for r in await conn.fetch("SELECT text FROM story_anchors WHERE user_id = $1", USER_ID)],
        }
    finally:
        await conn.close()


def _sqlite_state(path: str) -> dict[str, object]:
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        # The full-text index is rebuilt from its triggers: it must agree with the table.
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")
        return {
            "memories": sorted(r[0] for r in conn.execute("SELECT text FROM memories WHERE user_id = ?", (USER_ID,))),
            "exchanges": conn.execute(
                "SELECT user_message, reply IS NOT NULL, reflected_at IS NOT NULL, reflection_attempts "
                "FROM exchanges WHERE user_id = ?",
                (USER_ID,),
            ).fetchall(),
            "anchors": [r[0] for r in conn.execute("SELECT text FROM story_anchors WHERE user_id = ?", (USER_ID,))],
        }


def assert_applied_once(state: dict[str, object]) -> None:
    assert state["memories"] == sorted(FACTS)
    assert state["anchors"] == ["Camille est allergique aux arachides."]
    assert state["exchanges"] == [(MESSAGE, 1, 1, 0)]


async def test_kill_9_while_the_reflection_waits_for_the_llm(llm: ScriptedLLM, env, tmp_path):
    llm.reflection = Reply(REFLECTION, delay=PROCESS_TIMEOUT)  # slow: the kill lands first
    proc = await start(env, tmp_path, "-m", "bot", "chat", "--user", USER)
    assert proc.stdin is not None
    proc.stdin.write(MESSAGE.encode() + b"\n")
    await proc.stdin.drain()
    await read_until(proc, "Enchantée")
    await asyncio.wait_for(llm.reflection_arrived.wait(), PROCESS_TIMEOUT)
    await kill_9(proc)

    state = await database_state(env)
    assert state["memories"] == [] and state["exchanges"] == [(MESSAGE, 1, 0, 0)]

    llm.reflection = Reply(REFLECTION)
    await restart_until_idle(env, tmp_path)
    assert llm.reflections == 2
    assert_applied_once(await database_state(env))
    # Once more: nothing is pending, nothing is asked, nothing is added.
    await restart_until_idle(env, tmp_path)
    assert llm.reflections == 2
    assert_applied_once(await database_state(env))


async def test_kill_9_inside_the_reflections_write_transaction(llm: ScriptedLLM, env, tmp_path):
    proc = await start(env, tmp_path, "-m", "tests.reliability.crash_driver", USER, MESSAGE)
    out = await read_until(proc, "in-transaction")
    assert "reply: Enchantée" in out
    await kill_9(proc)

    # Every row was written and the exchange marked before the kill; none of it committed.
    state = await database_state(env)
    assert state["memories"] == [] and state["anchors"] == []
    assert state["exchanges"] == [(MESSAGE, 1, 0, 0)]

    await restart_until_idle(env, tmp_path)
    assert llm.reflections == 2
    assert_applied_once(await database_state(env))


TRIESTE = [f"L'utilisateur a visité Trieste en {year}." for year in (2014, 2015, 2016, 2018, 2019)]
CONSOLIDATED = "L'utilisateur a visité Trieste en 2014, 2015, 2016, 2018 et 2019."


async def run_driver(env: dict[str, str], cwd: Path, mode: str) -> str:
    proc = await start(env, cwd, "-m", "tests.reliability.consolidation_driver", USER, mode)
    out, stderr = await asyncio.wait_for(proc.communicate(), PROCESS_TIMEOUT)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    return out.decode()


async def test_kill_9_inside_a_consolidations_write_transaction(llm_server: FakeLLMServer, env, tmp_path):
    def answer(request: LLMRequest) -> str:
        if request.json_schema is not None and "series" in request.last_user:
            return json.dumps({"text": CONSOLIDATED, "confidence": 0.95})
        return "{}" if request.json_schema is not None else "Bonjour !"

    llm_server.handler = answer
    assert "seeded" in await run_driver(env, tmp_path, "seed")

    proc = await start(env, tmp_path, "-m", "tests.reliability.consolidation_driver", USER, "kill")
    await read_until(proc, "in-transaction")
    await kill_9(proc)
    # The new memory was inserted, the members archived and deleted, the provenance copied: none
    # of it committed.
    assert (await database_state(env))["memories"] == sorted(TRIESTE)

    # The next run applies it, once; the one after finds nothing left to ask.
    assert "consolidated 1 found 1 calls 1" in await run_driver(env, tmp_path, "run")
    assert (await database_state(env))["memories"] == [CONSOLIDATED]
    assert "consolidated 0 found 0 calls 0" in await run_driver(env, tmp_path, "run")
    assert (await database_state(env))["memories"] == [CONSOLIDATED]
    assert sum("series" in r.last_user for r in llm_server.chats) == 2
