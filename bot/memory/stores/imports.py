"""Past conversations imported (`python -m bot import`, bot/engine/importing.py): SQL only.

An imported exchange is an exchange row like any other, its message_id the exchange's key
("import:…"), saved without its reply until its turn to be reflected comes (a bot process
sweeping pending reflections never takes one with the wrong date). `imports` records each
conversation finished. Every statement filters on user_id but `live_turn_waiting`, which reads
only whether some turn waits for the model. Functions taking `conn` join the caller's write
transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.clients.storage import Connection, Database, fetch_all, fetch_one, from_db, to_db
from bot.memory.model import OwnerKey, StoryId


@dataclass(frozen=True, slots=True)
class Saved:
    """An imported exchange already stored: its row, and whether it was reflected."""

    exchange_id: int
    reflected: bool


async def saved(db: Database, user_id: OwnerKey, story_id: StoryId) -> dict[str, Saved]:
    """The exchanges imported into this story of the user, by key."""
    rows = await fetch_all(
        db.reader,
        "SELECT message_id, id, reflected_at FROM exchanges WHERE user_id = ? AND story_id = ? "
        "AND message_id LIKE 'import:%'",
        (user_id, story_id),
    )
    return {str(r["message_id"]): Saved(int(r["id"]), r["reflected_at"] is not None) for r in rows}


async def save(
    conn: Connection,
    user_id: OwnerKey,
    *,
    key: str,
    user_name: str,
    story_id: StoryId,
    place: str,
    text: str,
    at: datetime,
) -> int:
    """The exchange as the person wrote it, its reply kept for its turn (`answer`)."""
    row = await fetch_one(
        conn,
        "INSERT INTO exchanges (user_id, user_name, story_id, place, message_id, user_message, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (user_id, user_name, story_id, place, key, text, to_db(at)),
    )
    assert row is not None
    exchange_id = int(row["id"])
    await conn.execute(
        "INSERT INTO exchange_messages (user_id, exchange_id, n, message_id, text) VALUES (?, ?, 1, ?, ?)",
        (user_id, exchange_id, key, text),
    )
    return exchange_id


async def answer(conn: Connection, user_id: OwnerKey, exchange_id: int, reply: str, at: datetime) -> None:
    """The exchange's reply, answered and settled at its original time: it is reflected next."""
    await conn.execute(
        "UPDATE exchanges SET reply = ?, answered_at = ?, settled_at = ? WHERE user_id = ? AND id = ?",
        (reply, to_db(at), to_db(at), user_id, exchange_id),
    )


async def reflected(db: Database, user_id: OwnerKey, exchange_id: int) -> bool:
    row = await fetch_one(
        db.reader, "SELECT reflected_at FROM exchanges WHERE user_id = ? AND id = ?", (user_id, exchange_id)
    )
    return row is not None and row["reflected_at"] is not None


async def finished(db: Database, user_id: OwnerKey, story_id: StoryId, source: str) -> bool:
    row = await fetch_one(
        db.reader,
        "SELECT 1 FROM imports WHERE user_id = ? AND story_id = ? AND source = ?",
        (user_id, story_id, source),
    )
    return row is not None


async def finish(
    conn: Connection, user_id: OwnerKey, story_id: StoryId, source: str, exchanges: int, at: datetime
) -> None:
    await conn.execute(
        "INSERT INTO imports (user_id, story_id, source, exchanges, finished_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (user_id, story_id, source) DO NOTHING",
        (user_id, story_id, source, exchanges, to_db(at)),
    )


async def passed_dates(db: Database, user_id: OwnerKey, now: datetime) -> list[tuple[int, datetime]]:
    """The user's imported memories with a date that has passed: (id, date)."""
    rows = await fetch_all(
        db.reader,
        "SELECT id, expires_at FROM memories WHERE user_id = ? AND expires_at IS NOT NULL AND expires_at <= ? "
        "AND source LIKE 'import:%' ORDER BY id",
        (user_id, to_db(now)),
    )
    return [(int(r["id"]), from_db(str(r["expires_at"]))) for r in rows]


async def live_turn_waiting(db: Database, since: datetime) -> bool:
    """Whether a turn, in any process, saved its message since `since` and waits for its reply:
    an import then waits, so live turns have the model first."""
    row = await fetch_one(
        db.reader,
        "SELECT 1 FROM exchanges WHERE reply IS NULL AND last_error IS NULL AND created_at >= ? "
        "AND (message_id IS NULL OR message_id NOT LIKE 'import:%') LIMIT 1",
        (to_db(since),),
    )
    return row is not None


async def erase_user_imports(conn: Connection, user_id: OwnerKey) -> None:
    await conn.execute("DELETE FROM imports WHERE user_id = ?", (user_id,))
