"""Where each memory came from and what each reflection changed: the exchanges a memory was read
from (its sources), and the changes a reply's receipt lists. Every statement scoped by user."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from bot.clients.storage import Connection, Database, fetch_all, from_db, to_db
from bot.memory.model import ChangeAction, OwnerKey


@dataclass(frozen=True, slots=True)
class MemoryChange:
    memory_id: int
    action: ChangeAction
    text: str
    before: str | None
    at: datetime


async def add_sources(conn: Connection, user_id: OwnerKey, memory_id: int, exchange_ids: Iterable[int]) -> None:
    for exchange_id in exchange_ids:
        await conn.execute(
            "INSERT OR IGNORE INTO memory_sources (memory_id, exchange_id, user_id) VALUES (?, ?, ?)",
            (memory_id, exchange_id, user_id),
        )


async def copy_sources(conn: Connection, user_id: OwnerKey, from_ids: Iterable[int], to_id: int) -> None:
    """Memory `to_id` comes from every exchange the memories `from_ids` came from."""
    for memory_id in from_ids:
        rows = await fetch_all(
            conn, "SELECT exchange_id FROM memory_sources WHERE user_id = ? AND memory_id = ?", (user_id, memory_id)
        )
        await add_sources(conn, user_id, to_id, [int(r["exchange_id"]) for r in rows])


async def sources_of(db: Database, user_id: OwnerKey, memory_id: int) -> list[int]:
    rows = await fetch_all(
        db.reader,
        "SELECT exchange_id FROM memory_sources WHERE user_id = ? AND memory_id = ? ORDER BY exchange_id",
        (user_id, memory_id),
    )
    return [int(r["exchange_id"]) for r in rows]


async def produced_by(db: Database, user_id: OwnerKey, exchange_id: int) -> list[int]:
    """Ids of the memories this exchange is a source of."""
    rows = await fetch_all(
        db.reader,
        "SELECT memory_id FROM memory_sources WHERE user_id = ? AND exchange_id = ? ORDER BY memory_id",
        (user_id, exchange_id),
    )
    return [int(r["memory_id"]) for r in rows]


async def record_change(
    conn: Connection,
    user_id: OwnerKey,
    exchange_id: int,
    memory_id: int,
    action: ChangeAction,
    text: str,
    before: str | None,
    *,
    now: datetime,
) -> None:
    await conn.execute(
        "INSERT INTO memory_changes (user_id, exchange_id, memory_id, action, text, before, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (user_id, exchange_id, memory_id, action, text, before, to_db(now)),
    )


async def changes_of(db: Database, user_id: OwnerKey, exchange_id: int) -> list[MemoryChange]:
    rows = await fetch_all(
        db.reader,
        "SELECT memory_id, action, text, before, at FROM memory_changes WHERE user_id = ? AND exchange_id = ? "
        "ORDER BY id",
        (user_id, exchange_id),
    )
    return [MemoryChange(int(r["memory_id"]), r["action"], r["text"], r["before"], from_db(r["at"])) for r in rows]


async def memory_sources(db: Database, user_id: OwnerKey) -> dict[int, list[int]]:
    """For the data export: each memory's source exchanges."""
    sources: dict[int, list[int]] = {}
    for row in await fetch_all(
        db.reader,
        "SELECT memory_id, exchange_id FROM memory_sources WHERE user_id = ? ORDER BY memory_id, exchange_id",
        (user_id,),
    ):
        sources.setdefault(int(row["memory_id"]), []).append(int(row["exchange_id"]))
    return sources
