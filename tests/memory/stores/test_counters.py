"""The three per-memory counters, on a real SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.storage import inserted_id, to_db
from bot.memory.model import content_hash, utcnow
from bot.memory.stores.counters import record_turn

pytestmark = pytest.mark.both_stores


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteDatabase]:
    database = await SQLiteDatabase.open(tmp_path / "x.db")
    yield database
    await database.close()


async def insert(db: SQLiteDatabase, user_id: str, count: int) -> list[int]:
    now = to_db(utcnow())
    ids = []
    async with db.write() as conn:
        for n in range(count):
            text = f"{user_id} souvenir {n}"
            memory_id = await inserted_id(
                conn,
                "INSERT INTO memories (user_id, text, type, scope, created_at, updated_at, content_hash)"
                " VALUES (?, ?, 'fact', 'global', ?, ?, ?) RETURNING id",
                (user_id, text, now, now, content_hash(text)),
            )
            assert memory_id is not None
            ids.append(memory_id)
    return ids


async def counters(db: SQLiteDatabase) -> dict[int, tuple[int, int, int]]:
    async with db.reader.execute("SELECT id, times_candidate, times_served, times_semantic FROM memories") as cursor:
        return {row[0]: (row[1], row[2], row[3]) for row in await cursor.fetchall()}


async def test_counts_candidates_served_and_semantic(db: SQLiteDatabase) -> None:
    a, b, c, d = await insert(db, "alice", 4)

    async with db.write() as conn:
        await record_turn(conn, "alice", [a, b, c], served_ids=[a, b], semantic_ids=[b])
    async with db.write() as conn:
        await record_turn(conn, "alice", [a, b, c, d], served_ids=[b, d], semantic_ids=[])

    assert await counters(db) == {
        a: (2, 1, 0),
        b: (2, 2, 1),
        c: (2, 0, 0),
        d: (1, 1, 0),
    }


async def test_another_users_memories_are_untouched(db: SQLiteDatabase) -> None:
    (mine,) = await insert(db, "alice", 1)
    theirs = await insert(db, "bob", 2)

    async with db.write() as conn:
        await record_turn(conn, "alice", [mine, *theirs], served_ids=[mine, *theirs], semantic_ids=theirs)

    found = await counters(db)
    assert found[mine] == (1, 1, 0)
    assert [found[i] for i in theirs] == [(0, 0, 0), (0, 0, 0)]


async def test_one_statement_per_turn(db: SQLiteDatabase) -> None:
    ids = await insert(db, "alice", 300)
    statements: list[str] = []

    async with db.write() as conn:
        await conn.set_trace_callback(statements.append)
        await record_turn(conn, "alice", ids, served_ids=ids[:24], semantic_ids=ids[:10])
        await conn.set_trace_callback(None)

    assert len(statements) == 1
    assert statements[0].lstrip().startswith("UPDATE memories")
    found = await counters(db)
    assert sum(v[0] for v in found.values()) == 300
    assert sum(v[1] for v in found.values()) == 24
    assert sum(v[2] for v in found.values()) == 10


async def test_no_candidates_writes_nothing(db: SQLiteDatabase) -> None:
    (only,) = await insert(db, "alice", 1)
    statements: list[str] = []

    async with db.write() as conn:
        await conn.set_trace_callback(statements.append)
        await record_turn(conn, "alice", [], served_ids=[], semantic_ids=[])
        await conn.set_trace_callback(None)

    assert statements == []
    assert (await counters(db))[only] == (0, 0, 0)


async def test_rolled_back_with_the_callers_transaction(db: SQLiteDatabase) -> None:
    (only,) = await insert(db, "alice", 1)

    with pytest.raises(RuntimeError):
        async with db.write() as conn:
            await record_turn(conn, "alice", [only], served_ids=[only], semantic_ids=[only])
            raise RuntimeError("the rest of the turn's write failed")

    assert (await counters(db))[only] == (0, 0, 0)
