"""`python -m bot migrate-store`: a bot's SQLite database copied into PostgreSQL keeps every row
(each user's /export is identical), ids continue where SQLite's stopped, a re-run changes
nothing, and a target holding other rows is refused untouched."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.postgres import PostgresDatabase
from bot.errors import MoveRefused
from bot.memory.model import Cause, NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.move import DERIVED_TABLES, TABLES, move
from bot.memory.stores.vectors import VectorRow, store_vectors
from tests.builders import http_client, make_engine, msg
from tests.fakes.llm_server import LLMRequest

REPO = Path(__file__).resolve().parents[2]


def _reflection(request: LLMRequest) -> str:
    if request.json_schema is None:
        return "D'accord, c'est noté."
    said = request.last_user
    return json.dumps(
        {
            "memories": [{"text": f"L'utilisateur a dit : {said[-60:]}", "type": "fact", "confidence": 0.8}],
            "summary": "Une conversation.",
            "anchors": {"add": ["Un fait tenu."]},
        }
    )


async def _fill(path: Path, llm_server, tmp_path: Path) -> tuple[list[str], int]:
    """A bot's life on SQLite: turns, reflections, a forget, a setting, vectors. Returns the
    users and the highest memory id ever given (then deleted)."""
    llm_server.handler = _reflection
    db = await SQLiteDatabase.open(path)
    async with http_client() as http:
        engine = make_engine(db, http, llm_server, tmp_path)
        try:
            for user in ("alice", "bob"):
                for n, text in enumerate(("Je joue du violon.", "J'habite à Lyon, près du parc.")):
                    await engine.conversation.turn(msg(f"{text} ({n})", user=user, story=f"chan-{n}"))
                    engine.operator.schedule_reflection(user)
                    await engine.operator.wait_reflections(user)
                await engine.memories.remember(
                    user, "L'utilisateur aime le thé vert.", story_id="chan-0", place="guild-1"
                )
            await engine.privacy.set_sharing("bob", True)
            store = MemoryStore(db)
            memories = await store.list("alice")
            async with db.write() as conn:
                await store_vectors(
                    conn,
                    [
                        VectorRow(m.id, "alice", "model-a", m.content_hash, np.arange(4, dtype=np.float32) + m.id)
                        for m in memories
                    ],
                )
            newest = await store.add("alice", NewMemory(text="L'utilisateur part demain."))
            assert await store.forget("alice", newest, cause=Cause("forget"))
            async with db.write() as conn:  # gone for good: only AUTOINCREMENT remembers its id
                await conn.execute("DELETE FROM memories WHERE user_id = ? AND id = ?", ("alice", newest))
        finally:
            await engine.close()
            await db.close()
    return ["alice", "bob"], newest


async def _exports(db, llm_server, tmp_path: Path, users: list[str]) -> dict[str, dict]:
    async with http_client() as http:
        engine = make_engine(db, http, llm_server, tmp_path)
        try:
            out = {}
            for user in users:
                data = await engine.privacy.export_person(user)
                data.pop("exported_at", None)
                out[user] = data
            return out
        finally:
            await engine.close()


async def test_the_move_covers_every_column_of_every_table(tmp_path) -> None:
    await (await SQLiteDatabase.open(tmp_path / "s.sqlite3")).close()  # the migrated schema
    with sqlite3.connect(tmp_path / "s.sqlite3") as conn:
        tables = {
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith(("sqlite_", "memories_fts"))
        }
        assert tables == set(TABLES) | set(DERIVED_TABLES)
        for table, (columns, _) in TABLES.items():
            assert {r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))} == set(columns), table


async def test_a_copied_database_exports_the_same_and_continues_its_ids(tmp_path, llm_server, postgres_cluster) -> None:
    path = tmp_path / "echo.sqlite3"
    users, deleted_id = await _fill(path, llm_server, tmp_path)
    source = await SQLiteDatabase.open(path)
    try:
        before = await _exports(source, llm_server, tmp_path, users)
    finally:
        await source.close()
    assert before["alice"]["memories"] and before["alice"]["exchanges"] and before["alice"]["history"]

    url = await postgres_cluster.reset_database()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "LLM_"))}
    env["PYTHONPATH"] = str(REPO)
    for expected in ("copied", "already there"):  # the second run verifies and changes nothing
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "migrate-store",
            "--from",
            f"sqlite:///{path}",
            "--to",
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()[-2000:]
        lines = out.decode().splitlines()
        assert lines[-1].endswith("every table verified (rows and checksums match).")
        assert all(line.endswith(expected) for line in lines[:-1]) and len(lines) == len(TABLES) + 1

    target = await PostgresDatabase.open(url)
    try:
        assert await _exports(target, llm_server, tmp_path, users) == before
        vectors = await target.reader.execute_fetchall("SELECT COUNT(*) FROM memory_vectors")
        assert vectors[0][0] == len(before["alice"]["memories"])
        async with http_client() as http:
            engine = make_engine(target, http, llm_server, tmp_path)
            try:
                new_id = await MemoryStore(target).add("alice", NewMemory(text="L'utilisateur revient."))
            finally:
                await engine.close()
        assert new_id > deleted_id  # never an id SQLite already gave
    finally:
        await target.close()


async def test_a_target_holding_other_rows_is_refused_untouched(tmp_path, postgres_cluster) -> None:
    source = await SQLiteDatabase.open(tmp_path / "echo.sqlite3")
    target = await PostgresDatabase.open(await postgres_cluster.reset_database())
    try:
        from bot.memory.stores.memory_store import MemoryStore

        await MemoryStore(source).add("alice", NewMemory(text="L'utilisateur aime le jazz."))
        await MemoryStore(target).add("carol", NewMemory(text="L'utilisateur aime l'opéra."))
        with pytest.raises(MoveRefused, match=r"memories \(1\)"):
            await move(source, target)
        assert [m.text for m in await MemoryStore(target).list("carol")] == ["L'utilisateur aime l'opéra."]
        reports = await move(source, target, replace=True)
        assert {r.table: r.rows for r in reports}["memories"] == 1
        assert await MemoryStore(target).list("carol") == []
    finally:
        await source.close()
        await target.close()
