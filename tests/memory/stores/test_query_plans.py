"""Statements given a list of a person's memory ids find those rows by primary key, on SQLite.

Through the person's index instead (`user_id = ?` is an index term too), SQLite read every row of
the person to keep the listed ones: for a person of 100,000 memories, 130 ms inside the write
lock to count a turn's 24 served memories, 350 ms on the shared reader to read one changed
memory's vector again, whoever waited behind it. The plans are read with EXPLAIN QUERY PLAN on the
statements as the stores run them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.storage import Connection
from bot.memory.model import NewMemory
from bot.memory.stores.counters import count_candidates, count_served, record_turn
from bot.memory.stores.followups import Due, due
from bot.memory.stores.memories import memory_rows
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.vectors import VectorRow, store_vectors, vector_rows

MODEL = "test-model"


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteDatabase]:
    database = await SQLiteDatabase.open(tmp_path / "x.db")
    yield database
    await database.close()


async def plans(conn: Connection, run: Callable[[], Awaitable[object]]) -> list[str]:
    """The query plan of every statement `run` sends through `conn`."""
    statements: list[str] = []
    await conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    try:
        await run()
    finally:
        await conn.set_trace_callback(None)  # type: ignore[attr-defined]
    assert statements
    return [
        "\n".join(str(row[-1]) for row in await conn.execute_fetchall("EXPLAIN QUERY PLAN " + sql))
        for sql in statements
    ]


def by_primary_key(plan: str) -> bool:
    return "_by_user" not in plan and ("PRIMARY KEY" in plan or "sqlite_autoindex_memory_vectors" in plan)


async def test_a_list_of_ids_is_found_by_primary_key(db: SQLiteDatabase) -> None:
    store = MemoryStore(db)
    ids = {
        user: [await store.add(user, NewMemory(text=f"{user} note le fait {n}")) for n in range(20)]
        for user in ("alice", "bob")
    }
    rows = await memory_rows(db.reader, "alice")
    async with db.write() as conn:
        await store_vectors(
            conn, [VectorRow(int(r[0]), "alice", MODEL, r[13], np.ones(4, dtype=np.float32) / 2) for r in rows]
        )
    mine = ids["alice"][3:9]

    for plan in await plans(db.reader, lambda: memory_rows(db.reader, "alice", mine)):
        assert by_primary_key(plan), plan
    for plan in await plans(db.reader, lambda: vector_rows(db.reader, "alice", MODEL, mine)):
        assert by_primary_key(plan), plan
    async with db.write() as conn:
        for run in (
            lambda: record_turn(conn, "alice", mine, mine[:2], mine[:1]),
            lambda: count_served(conn, "alice", mine[:2], mine[:1]),
            lambda: count_candidates(conn, "alice", mine, 3),
        ):
            for plan in await plans(conn, run):
                assert by_primary_key(plan), plan
    # The person's scope still holds: another person's ids in the list are not theirs.
    assert [int(r[0]) for r in await memory_rows(db.reader, "alice", [*mine, *ids["bob"][:3]])] == mine
    assert sorted(int(r[0]) for r in await vector_rows(db.reader, "bob", MODEL, mine)) == []


async def test_the_dates_passed_since_the_last_turn_are_found_by_the_expiry_index(db: SQLiteDatabase) -> None:
    """Each turn asks which of the person's dated memories' dates passed since the last one
    (follow-ups): through the person's index that read every row of theirs, 58 ms a turn at
    100,000 memories on the shared reader; the dated ones are found by date instead."""
    store = MemoryStore(db)
    now = datetime.now(UTC)
    for n in range(20):
        await store.add("alice", NewMemory(text=f"alice note le fait {n}"))
    dated = await store.add("alice", NewMemory(text="alice a un rendez-vous", expires_at=now + timedelta(days=1)))
    later = now + timedelta(days=2)
    found: list[Due] = []

    async def ask() -> None:
        found.extend(await due(db, "alice", now=later, since=now, story_id=None, place=None, share=True))

    [plan] = await plans(db.reader, ask)
    assert "memories_by_expiry" in plan, plan
    assert [d.memory_id for d in found] == [dated]
