"""The memory store: memories and their history in SQLite, every statement scoped by user.

A memory id of another user behaves exactly like an id that does not exist: every lookup,
update and delete carries `WHERE user_id = ?`. Every change of a memory's text, expiry, type or
scope (replace, merge, new expiry, restore, delete) archives the previous version in
`memory_history` first, in the same transaction; only `erase_user` deletes for real.

Functions taking `conn` run inside the caller's `async with db.write() as conn:` transaction so
that a whole reflection lands or none of it; `MemoryStore` (bot/memory/stores/memory_store.py)
opens its own. A consolidation's statements are in bot/memory/stores/consolidations.py, the keys
a person's data is filed under in bot/memory/stores/owners.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from bot.clients.storage import (
    Connection,
    Row,
    Sql,
    fetch_all,
    fetch_one,
    fetch_pages,
    from_db,
    inserted_id,
    to_db,
)
from bot.memory.model import (
    Cause,
    Memory,
    MemoryType,
    NewMemory,
    Operation,
    OwnerKey,
    Scope,
    StoryId,
    content_hash,
    valid_expiry,
)

log = logging.getLogger(__name__)

# What memory_history keeps of a memory: its columns from user_id to source.
SNAPSHOT_COLUMNS = (
    "user_id, text, type, scope, story_id, place, confidence, pinned, created_at, updated_at, expires_at, source"
)


class MemoryRow(NamedTuple):
    """A row of `memories` as the cache keeps it, read by name."""

    id: int
    user_id: OwnerKey
    text: str
    type: MemoryType
    scope: Scope
    story_id: StoryId | None
    place: str | None
    confidence: float
    pinned: int
    created_at: str
    updated_at: str
    expires_at: str | None
    source: str | None
    content_hash: str
    times_candidate: int
    times_served: int
    times_semantic: int


# Every statement that loads a Memory selects these: MemoryRow's fields, in its order
# (tests/memory/stores/test_memories.py holds the two to the same names).
MEMORY_COLUMNS = "id, " + SNAPSHOT_COLUMNS + ", content_hash, times_candidate, times_served, times_semantic"
# Statements are assembled once from the constant column lists above; values always go through
# placeholders.
SELECT_MEMORY = "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND id = ?"
SELECT_MEMORIES = "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND (? OR type != 'rule') ORDER BY id"
_ARCHIVE = (
    "INSERT INTO memory_history (memory_id, operation, archived_at, cause, " + SNAPSHOT_COLUMNS + ") "
    "SELECT id, ?, ?, ?, " + SNAPSHOT_COLUMNS + " FROM memories WHERE user_id = ? AND id = ? RETURNING id"
)
_SELECT_SNAPSHOT = "SELECT memory_id, " + SNAPSHOT_COLUMNS + " FROM memory_history WHERE user_id = ? AND id = ?"
_REINSERT = (
    "INSERT INTO memories (id, content_hash, " + SNAPSHOT_COLUMNS + ") "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


# The triggers only add deletion markers to the full-text index: its segments keep the erased
# words (lower-cased) until merged. 'optimize' merges them all into one now. On PostgreSQL the
# words live in the row itself (memories.search), gone with it.
_MERGE_FULL_TEXT_INDEX = Sql("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')", postgresql=None)


def memory_row(row: Row) -> MemoryRow:
    """A row of MEMORY_COLUMNS, whose names MemoryRow's fields are, as a MemoryRow."""
    return MemoryRow._make(row)


def row_to_memory(row: MemoryRow) -> Memory:
    return Memory(
        id=row.id,
        user_id=row.user_id,
        text=row.text,
        type=row.type,
        scope=row.scope,
        story_id=row.story_id,
        place=row.place,
        confidence=row.confidence,
        pinned=bool(row.pinned),
        created_at=from_db(row.created_at),
        updated_at=from_db(row.updated_at),
        expires_at=from_db(row.expires_at),
        source=row.source,
        content_hash=row.content_hash,
        times_candidate=row.times_candidate,
        times_served=row.times_served,
        times_semantic=row.times_semantic,
    )


@dataclass(slots=True)
class EraseReport:
    memories: int
    history: int


# --- statements that join the caller's transaction -------------------------------------------


async def fetch_memory(conn: Connection, user_id: OwnerKey, memory_id: int) -> Memory | None:
    row = await fetch_one(conn, SELECT_MEMORY, (user_id, memory_id))
    return row_to_memory(memory_row(row)) if row else None


async def fetch_memories(conn: Connection, user_id: OwnerKey, *, include_rules: bool = False) -> list[Memory]:
    rows = await fetch_all(conn, SELECT_MEMORIES, (user_id, include_rules))
    return [row_to_memory(memory_row(r)) for r in rows]


_VERSION = "SELECT epoch, version FROM memory_versions WHERE user_id = ?"
_CHANGED_SINCE = "SELECT memory_id FROM memory_version_log WHERE user_id = ? AND version > ?"
_CACHED_ROWS = "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND type != 'rule' ORDER BY id"
_HOLDS_MORE_THAN = (
    "SELECT COUNT(*) AS held FROM (SELECT 1 FROM memories WHERE user_id = ? AND type != 'rule' LIMIT ?) AS kept"
)
# `+user_id`: the listed ids by primary key, not every row of the user through their index
# (bot/memory/stores/counters.py).
_CACHED_ROWS_AMONG = Sql(
    "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE +user_id = ? AND type != 'rule' "
    "AND id IN (SELECT value FROM json_each(?)) ORDER BY id",
    postgresql="SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND type != 'rule' "
    "AND id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))::bigint) ORDER BY id",
)


async def memory_version(conn: Connection, user_id: OwnerKey) -> tuple[int, int]:
    """The user's (epoch, version), which every change to their memories or vectors bumps in
    its own transaction (triggers of migration 0007); (0, 0) before their first memory."""
    row = await fetch_one(conn, _VERSION, (user_id,))
    return (int(row["epoch"]), int(row["version"])) if row else (0, 0)


async def changed_since(conn: Connection, user_id: OwnerKey, version: int) -> list[int]:
    """Ids of the user's memories (deleted ones included) changed after `version`."""
    return [int(r["memory_id"]) for r in await fetch_all(conn, _CHANGED_SINCE, (user_id, version))]


async def memory_rows(conn: Connection, user_id: OwnerKey, among: Sequence[int] | None = None) -> list[MemoryRow]:
    """The user's memories but rules as rows (`row_to_memory` reads them), in id order: those of
    `among` when given (the ids travel as one JSON array), else all of them, in one step."""
    if among is None:
        rows = await fetch_all(conn, _CACHED_ROWS, (user_id,))
    else:
        rows = await fetch_all(conn, _CACHED_ROWS_AMONG, (user_id, json.dumps(list(map(int, among)))))
    return [memory_row(r) for r in rows]


async def memory_pages(conn: Connection, user_id: OwnerKey, size: int) -> AsyncGenerator[list[MemoryRow], None]:
    """All the user's memories but rules as rows, in id order, `size` at a time from one
    statement: on a connection of `Database.reading()` only (bot.clients.storage.fetch_pages)."""
    async with contextlib.aclosing(fetch_pages(conn, _CACHED_ROWS, (user_id,), size)) as pages:
        async for page in pages:
            yield [memory_row(r) for r in page]


async def holds_more_than(conn: Connection, user_id: OwnerKey, count: int) -> bool:
    """Whether the user has more than `count` memories but rules (reads `count` + 1 at most)."""
    row = await fetch_one(conn, _HOLDS_MORE_THAN, (user_id, count + 1))
    return row is not None and int(row["held"]) > count


async def insert_memory(conn: Connection, user_id: OwnerKey, new: NewMemory, *, now: datetime) -> int:
    new = new.validated()
    stamp = to_db(now)
    memory_id = await inserted_id(
        conn,
        "INSERT INTO memories (user_id, text, type, scope, story_id, place, confidence, pinned, "
        "created_at, updated_at, expires_at, source, content_hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            user_id,
            new.text,
            new.type,
            new.scope,
            new.story_id,
            new.place,
            new.confidence,
            int(new.pinned),
            stamp,
            stamp,
            to_db(new.expires_at),
            new.source,
            content_hash(new.text),
        ),
    )
    assert memory_id is not None
    return memory_id


async def archive(
    conn: Connection,
    user_id: OwnerKey,
    memory_id: int,
    operation: Operation,
    *,
    cause: Cause,
    now: datetime,
) -> int | None:
    """Copy the current version of a memory into history. Returns the history id, or None."""
    return await inserted_id(conn, _ARCHIVE, (operation, to_db(now), cause.stored(), user_id, memory_id))


async def rewrite_memory(
    conn: Connection,
    user_id: OwnerKey,
    memory_id: int,
    text: str,
    *,
    operation: Operation,
    cause: Cause,
    now: datetime,
    refresh_date: bool = True,
    expires_at: datetime | None = None,
    keep_expiry: bool = True,
) -> bool:
    """Archive, then give the memory a new text. False when the id is not one of the user's.

    `expires_at` replaces the expiry when given; with `keep_expiry=False` it replaces it even
    when None (a corrected text that is no longer dated).
    """
    valid = NewMemory(text=text, expires_at=expires_at).validated()
    text, expires_at = valid.text, valid.expires_at
    if await archive(conn, user_id, memory_id, operation, cause=cause, now=now) is None:
        return False
    await conn.execute(
        "UPDATE memories SET text = ?, content_hash = ?, "
        "updated_at = CASE WHEN ? THEN ? ELSE updated_at END, "
        "expires_at = CASE WHEN ? THEN COALESCE(?, expires_at) ELSE ? END "
        "WHERE user_id = ? AND id = ?",
        (
            text,
            content_hash(text),
            refresh_date,
            to_db(now),
            keep_expiry,
            to_db(expires_at),
            to_db(expires_at),
            user_id,
            memory_id,
        ),
    )
    return True


async def set_expiry(
    conn: Connection,
    user_id: OwnerKey,
    memory_id: int,
    expires_at: datetime | None,
    *,
    cause: Cause,
    now: datetime,
) -> bool:
    """Archive, then give the memory a new date (no date refresh). False for an unknown id."""
    expires_at = valid_expiry(expires_at)
    if await archive(conn, user_id, memory_id, "expiry", cause=cause, now=now) is None:
        return False
    await conn.execute(
        "UPDATE memories SET expires_at = ? WHERE user_id = ? AND id = ?", (to_db(expires_at), user_id, memory_id)
    )
    return True


async def delete_memory(
    conn: Connection, user_id: OwnerKey, memory_id: int, *, cause: Cause, now: datetime, operation: Operation = "delete"
) -> bool:
    """Archive, then delete. False when the id is not one of the user's."""
    if await archive(conn, user_id, memory_id, operation, cause=cause, now=now) is None:
        return False
    await conn.execute("DELETE FROM memories WHERE user_id = ? AND id = ?", (user_id, memory_id))
    return True


async def replace_rules(conn: Connection, owner: OwnerKey, rules: Sequence[str], *, now: datetime) -> None:
    """A character's rules, as `rule` memories of the character itself, rewritten whole."""
    await conn.execute("DELETE FROM memories WHERE user_id = ? AND type = 'rule'", (owner,))
    for rule in rules:
        await insert_memory(conn, owner, NewMemory(text=rule, type="rule"), now=now)


async def erase_user_memories(conn: Connection, user_id: OwnerKey) -> EraseReport:
    """The one real deletion: the user's memories (their vectors cascade) and whole history."""
    cur = await conn.execute("DELETE FROM memories WHERE user_id = ?", (user_id,))
    memories = cur.rowcount
    cur = await conn.execute("DELETE FROM memory_history WHERE user_id = ?", (user_id,))
    history = cur.rowcount
    # After the deletes above, which logged every id: a cache of another process then finds no
    # version (another epoch when the key holds memories again) and reads the user again.
    await conn.execute("DELETE FROM memory_version_log WHERE user_id = ?", (user_id,))
    await conn.execute("DELETE FROM memory_versions WHERE user_id = ?", (user_id,))
    await conn.execute("DELETE FROM consolidation_members WHERE user_id = ?", (user_id,))
    await conn.execute("DELETE FROM consolidations WHERE user_id = ?", (user_id,))
    await conn.execute(_MERGE_FULL_TEXT_INDEX)
    return EraseReport(memories=memories, history=history)


# --- the store ---------------------------------------------------------------------------------


async def restore_version(
    conn: Connection, user_id: OwnerKey, history_id: int, *, cause: Cause, now: datetime
) -> int | None:
    """`MemoryStore.restore` of one archived version, inside the caller's transaction."""
    row = await fetch_one(conn, _SELECT_SNAPSHOT, (user_id, history_id))
    if row is None:
        return None
    memory_id: int = row["memory_id"]
    snapshot = {column: row[column] for column in SNAPSHOT_COLUMNS.split(", ")}
    existing = await fetch_memory(conn, user_id, memory_id)
    if existing is not None:
        await archive(conn, user_id, memory_id, "restore", cause=cause, now=now)
        await conn.execute(
            "UPDATE memories SET text = ?, type = ?, scope = ?, story_id = ?, place = ?, "
            "confidence = ?, pinned = ?, expires_at = ?, content_hash = ?, updated_at = ? "
            "WHERE user_id = ? AND id = ?",
            (
                snapshot["text"],
                snapshot["type"],
                snapshot["scope"],
                snapshot["story_id"],
                snapshot["place"],
                snapshot["confidence"],
                snapshot["pinned"],
                snapshot["expires_at"],
                content_hash(snapshot["text"]),
                to_db(now),
                user_id,
                memory_id,
            ),
        )
    else:
        await conn.execute(
            _REINSERT,
            (
                memory_id,
                content_hash(snapshot["text"]),
                user_id,
                snapshot["text"],
                snapshot["type"],
                snapshot["scope"],
                snapshot["story_id"],
                snapshot["place"],
                snapshot["confidence"],
                snapshot["pinned"],
                snapshot["created_at"],
                to_db(now),
                snapshot["expires_at"],
                snapshot["source"],
            ),
        )
    await conn.execute(
        "UPDATE memory_history SET restored_at = ? WHERE user_id = ? AND id = ?",
        (to_db(now), user_id, history_id),
    )
    return memory_id
