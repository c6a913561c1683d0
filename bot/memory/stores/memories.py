"""The memory store: memories and their history in SQLite, every statement scoped by user.

A memory id of another user behaves exactly like an id that does not exist: every lookup,
update and delete carries `WHERE user_id = ?`. Every change of a memory's text, expiry, type or
scope (replace, merge, new expiry, restore, delete) archives the previous version in
`memory_history` first, in the same transaction; only `erase_user` deletes for real.

Functions taking `conn` run inside the caller's `async with db.write() as conn:` transaction so
that a whole reflection lands or none of it; `MemoryStore` methods open their own.

Over 450 lines on purpose: every statement on `memories` and `memory_history` is here, so the
archive-before-change rule and the user scoping can be checked in one file.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
import unicodedata
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bot.clients.db import Sql, fetch_all, fetch_one, fetch_pages, from_db, inserted_id, to_db
from bot.clients.storage import Connection, Database, Row
from bot.errors import InvalidMemory
from bot.memory.model import MEMORY_TYPES, SCOPES, HistoryEntry, Memory, checked_expiry, content_hash, utcnow
from bot.memory.text import canonical, storable

log = logging.getLogger(__name__)

MAX_MEMORY_CHARS = 500

# What memory_history keeps of a memory: its columns from user_id to source.
_SNAPSHOT_COLUMNS = (
    "user_id, text, type, scope, story_id, place, confidence, pinned, created_at, updated_at, "
    "expires_at, source"
)
# The columns row_to_memory reads, in its order: every statement that loads a Memory selects these.
MEMORY_COLUMNS = "id, " + _SNAPSHOT_COLUMNS + ", content_hash, times_candidate, times_served, times_semantic"
# Statements are assembled once from the constant column lists above; values always go through
# placeholders.
SELECT_MEMORY = "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND id = ?"
SELECT_MEMORIES = (
    "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND (? OR type != 'rule') ORDER BY id"
)
_ARCHIVE = (
    "INSERT INTO memory_history (memory_id, operation, archived_at, cause, " + _SNAPSHOT_COLUMNS + ") "
    "SELECT id, ?, ?, ?, " + _SNAPSHOT_COLUMNS + " FROM memories WHERE user_id = ? AND id = ? RETURNING id"
)
_SELECT_HISTORY = (
    "SELECT id, memory_id, operation, archived_at, cause, restored_at, " + _SNAPSHOT_COLUMNS + " "
    "FROM memory_history WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?"
)
_SELECT_SNAPSHOT = (
    "SELECT memory_id, " + _SNAPSHOT_COLUMNS + " FROM memory_history WHERE user_id = ? AND id = ?"
)
_REINSERT = (
    "INSERT INTO memories (id, content_hash, " + _SNAPSHOT_COLUMNS + ") "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


# The triggers only add deletion markers to the full-text index: its segments keep the erased
# words (lower-cased) until merged. 'optimize' merges them all into one now. On PostgreSQL the
# words live in the row itself (memories.search), gone with it.
_MERGE_FULL_TEXT_INDEX = Sql("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')", postgresql=None)


class MemoryCapReached(InvalidMemory):
    """The user holds as many memories as the operator allows (MAX_MEMORIES_PER_USER)."""


def check_room(held: int, cap: int | None) -> None:
    """Refuse one more memory past the cap; what is held is never dropped to make room."""
    if cap is not None and held >= cap:
        raise MemoryCapReached(
            f"you hold {held} memories, the most kept per person here ({cap}): "
            "forget some to make room",
            code="cap", held=held, cap=cap,
        )


def valid_expiry(expires_at: datetime | None) -> datetime | None:
    """The expiry every stored memory gets: in UTC, in range (or InvalidMemory)."""
    try:
        return checked_expiry(expires_at)
    except ValueError as exc:
        raise InvalidMemory(f"expiry {exc}") from None


@dataclass(slots=True)
class NewMemory:
    text: str
    type: str = "fact"
    scope: str = "global"
    confidence: float = 1.0
    story_id: str | None = None
    place: str | None = None
    expires_at: datetime | None = None
    source: str | None = None
    pinned: bool = False

    def validated(self) -> "NewMemory":
        # Stored in the one form comparisons use (a look-alike copy is the same memory); control
        # characters (NUL, escapes) are noise in a sentence and trouble in a terminal.
        text = canonical(storable(self.text))
        text = " ".join("".join(c for c in text if unicodedata.category(c) != "Cc" or c.isspace()).split())
        if not any(unicodedata.category(c)[0] not in "CZ" for c in text):
            # Zero-width and other format characters alone would show as a blank memory.
            raise InvalidMemory("a memory needs some visible text", code="empty")
        if len(text) > MAX_MEMORY_CHARS:
            raise InvalidMemory(f"a memory is one short sentence (at most {MAX_MEMORY_CHARS} characters)", code="too_long", most=MAX_MEMORY_CHARS)
        if self.type not in MEMORY_TYPES:
            raise InvalidMemory(f"unknown memory type {self.type!r}: one of {', '.join(MEMORY_TYPES)}")
        if self.scope not in SCOPES:
            raise InvalidMemory(f"unknown scope {self.scope!r}: global or story")
        if self.scope == "story" and not self.story_id:
            raise InvalidMemory("a story memory needs the story it belongs to")
        self.expires_at = valid_expiry(self.expires_at)
        self.text = text
        self.confidence = min(1.0, max(0.0, float(self.confidence)))
        return self


def row_to_memory(row: Row | Sequence[Any]) -> Memory:
    return Memory(
        id=row[0],
        user_id=row[1],
        text=row[2],
        type=row[3],
        scope=row[4],
        story_id=row[5],
        place=row[6],
        confidence=row[7],
        pinned=bool(row[8]),
        created_at=from_db(row[9]),  # type: ignore[arg-type]
        updated_at=from_db(row[10]),  # type: ignore[arg-type]
        expires_at=from_db(row[11]),
        source=row[12],
        content_hash=row[13],
        times_candidate=row[14],
        times_served=row[15],
        times_semantic=row[16],
    )


def _row_to_history(row: Row | Sequence[Any]) -> HistoryEntry:
    return HistoryEntry(
        id=row[0],
        memory_id=row[1],
        operation=row[2],
        archived_at=from_db(row[3]),  # type: ignore[arg-type]
        cause=row[4],
        restored=row[5] is not None,
        user_id=row[6],
        text=row[7],
        type=row[8],
        scope=row[9],
        story_id=row[10],
        place=row[11],
        confidence=row[12],
        pinned=bool(row[13]),
        created_at=from_db(row[14]),  # type: ignore[arg-type]
        updated_at=from_db(row[15]),  # type: ignore[arg-type]
        expires_at=from_db(row[16]),
        source=row[17],
    )


@dataclass(slots=True)
class EraseReport:
    memories: int
    history: int


# --- statements that join the caller's transaction -------------------------------------------


async def fetch_memory(conn: Connection, user_id: str, memory_id: int) -> Memory | None:
    row = await fetch_one(conn, SELECT_MEMORY, (user_id, memory_id))
    return row_to_memory(row) if row else None


async def fetch_memories(
    conn: Connection, user_id: str, *, include_rules: bool = False
) -> list[Memory]:
    rows = await fetch_all(conn, SELECT_MEMORIES, (user_id, include_rules))
    return [row_to_memory(r) for r in rows]


_VERSION = "SELECT epoch, version FROM memory_versions WHERE user_id = ?"
_CHANGED_SINCE = "SELECT memory_id FROM memory_version_log WHERE user_id = ? AND version > ?"
_CACHED_ROWS = "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND type != 'rule' ORDER BY id"
_HOLDS_MORE_THAN = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM memories WHERE user_id = ? AND type != 'rule' LIMIT ?) AS held"
)
# `+user_id`: the listed ids by primary key, not every row of the user through their index
# (bot/memory/stores/counters.py).
_CACHED_ROWS_AMONG = Sql(
    "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE +user_id = ? AND type != 'rule' "
    "AND id IN (SELECT value FROM json_each(?)) ORDER BY id",
    postgresql="SELECT " + MEMORY_COLUMNS + " FROM memories WHERE user_id = ? AND type != 'rule' "
    "AND id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))::bigint) ORDER BY id",
)


async def memory_version(conn: Connection, user_id: str) -> tuple[int, int]:
    """The user's (epoch, version), which every change to their memories or vectors bumps in
    its own transaction (triggers of migration 0007); (0, 0) before their first memory."""
    row = await fetch_one(conn, _VERSION, (user_id,))
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def changed_since(conn: Connection, user_id: str, version: int) -> list[int]:
    """Ids of the user's memories (deleted ones included) changed after `version`."""
    return [int(r[0]) for r in await fetch_all(conn, _CHANGED_SINCE, (user_id, version))]


async def memory_rows(conn: Connection, user_id: str, among: Sequence[int] | None = None) -> list[Row]:
    """The user's memories but rules as raw rows (`row_to_memory` reads them), in id order: those
    of `among` when given (the ids travel as one JSON array), else all of them, in one step."""
    if among is None:
        return await fetch_all(conn, _CACHED_ROWS, (user_id,))
    return await fetch_all(conn, _CACHED_ROWS_AMONG, (user_id, json.dumps(list(map(int, among)))))


async def memory_pages(conn: Connection, user_id: str, size: int) -> AsyncIterator[list[Row]]:
    """All the user's memories but rules as raw rows, in id order, `size` at a time from one
    statement: on a connection of `Database.reading()` only (bot.clients.db.fetch_pages)."""
    async for page in fetch_pages(conn, _CACHED_ROWS, (user_id,), size):
        yield page


async def holds_more_than(conn: Connection, user_id: str, count: int) -> bool:
    """Whether the user has more than `count` memories but rules (reads `count` + 1 at most)."""
    row = await fetch_one(conn, _HOLDS_MORE_THAN, (user_id, count + 1))
    return row is not None and int(row[0]) > count


async def insert_memory(
    conn: Connection, user_id: str, new: NewMemory, *, now: datetime
) -> int:
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
    user_id: str,
    memory_id: int,
    operation: str,
    *,
    cause: str,
    now: datetime,
) -> int | None:
    """Copy the current version of a memory into history. Returns the history id, or None."""
    return await inserted_id(conn, _ARCHIVE, (operation, to_db(now), cause, user_id, memory_id))


async def rewrite_memory(
    conn: Connection,
    user_id: str,
    memory_id: int,
    text: str,
    *,
    operation: str,
    cause: str,
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
    user_id: str,
    memory_id: int,
    expires_at: datetime | None,
    *,
    cause: str,
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
    conn: Connection, user_id: str, memory_id: int, *, cause: str, now: datetime, operation: str = "delete"
) -> bool:
    """Archive, then delete. False when the id is not one of the user's."""
    if await archive(conn, user_id, memory_id, operation, cause=cause, now=now) is None:
        return False
    await conn.execute("DELETE FROM memories WHERE user_id = ? AND id = ?", (user_id, memory_id))
    return True


async def replace_rules(conn: Connection, owner: str, rules: Sequence[str], *, now: datetime) -> None:
    """A character's rules, as `rule` memories of the character itself, rewritten whole."""
    await conn.execute("DELETE FROM memories WHERE user_id = ? AND type = 'rule'", (owner,))
    for rule in rules:
        await insert_memory(conn, owner, NewMemory(text=rule, type="rule"), now=now)


async def erase_user_memories(conn: Connection, user_id: str) -> EraseReport:
    """The one real deletion: the user's memories (their vectors cascade) and whole history."""
    cur = await conn.execute("DELETE FROM memories WHERE user_id = ?", (user_id,))
    memories = cur.rowcount
    cur = await conn.execute("DELETE FROM memory_history WHERE user_id = ?", (user_id,))
    history = cur.rowcount
    # After the deletes above, which logged every id: a cache of another process then finds no
    # version (another epoch when the key holds memories again) and reads the user again.
    await conn.execute("DELETE FROM memory_version_log WHERE user_id = ?", (user_id,))
    await conn.execute("DELETE FROM memory_versions WHERE user_id = ?", (user_id,))
    await conn.execute(_MERGE_FULL_TEXT_INDEX)
    return EraseReport(memories=memories, history=history)


# Every table keyed by user_id: a derived key that holds rows in only one of them (a turn_log
# line, an archived memory) is still that person's data, found by /export and /erase-me.
_OWNER_KEYS_SQL = (
    "SELECT user_id FROM memories WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_history WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM exchanges WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM exchange_replies WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM exchange_messages WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_sources WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_versions WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_version_log WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_changes WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM turns WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM turn_stats WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM turn_log WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM user_settings WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_summaries WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_anchors WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_positions WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_state WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_history WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
)
_OWNER_KEYS_TABLES = _OWNER_KEYS_SQL.count("SELECT ")


async def owner_keys(db: Database, user_id: str) -> list[str]:
    """Every owner key that holds data of one person: their own id and the derived keys
    `<id>@<character>` of characters with a memory of their own (bot.characters.cast)."""
    derived = user_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "@%"
    rows = await fetch_all(db.reader, _OWNER_KEYS_SQL, (user_id, derived) * _OWNER_KEYS_TABLES)
    found = sorted({str(r[0]) for r in rows} - {user_id})
    return [user_id, *found]


# --- the store ---------------------------------------------------------------------------------


class MemoryStore:
    """High-level memory operations for commands; each method is one transaction."""

    def __init__(self, db: Database, *, clock: Any = utcnow) -> None:
        self.db = db
        self.clock = clock

    async def get(self, user_id: str, memory_id: int) -> Memory | None:
        return await fetch_memory(self.db.reader, user_id, memory_id)

    async def list(
        self,
        user_id: str,
        *,
        types: Iterable[str] | None = None,
        include_expired: bool = True,
        include_rules: bool = False,
    ) -> list[Memory]:
        memories = await fetch_memories(self.db.reader, user_id, include_rules=include_rules)
        wanted = set(types) if types else None
        now = self.clock()
        return [
            m
            for m in memories
            if (wanted is None or m.type in wanted) and (include_expired or not m.is_expired(now))
        ]

    async def add(self, user_id: str, new: NewMemory, *, cap: int | None = None) -> int:
        """Insert one memory; MemoryCapReached when the user already holds `cap`."""
        async with self.db.write() as conn:
            if cap is not None:
                row = await fetch_one(conn, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (user_id,))
                check_room(int(row[0]) if row else 0, cap)
            return await insert_memory(conn, user_id, new, now=self.clock())

    async def set_pinned(self, user_id: str, memory_id: int, pinned: bool) -> bool:
        """Pinning is a flag, not a new version: no history row, no date change."""
        async with self.db.write() as conn:
            cur = await conn.execute(
                "UPDATE memories SET pinned = ? WHERE user_id = ? AND id = ? AND type != 'rule'",
                (int(pinned), user_id, memory_id),
            )
            return cur.rowcount == 1

    async def replace(self, user_id: str, memory_id: int, text: str, *, cause: str) -> bool:
        async with self.db.write() as conn:
            return await rewrite_memory(
                conn, user_id, memory_id, text, operation="replace", cause=cause, now=self.clock()
            )

    async def edit(self, user_id: str, memory_id: int, text: str, *, cause: str) -> int | None:
        """Rewrite a memory as the user typed it (pinned or not). Returns the id of the archived
        previous version, or None when the id is not one of the user's."""
        now = self.clock()
        text = NewMemory(text=text).validated().text
        async with self.db.write() as conn:
            history_id = await archive(conn, user_id, memory_id, "edit", cause=cause, now=now)
            if history_id is None:
                return None
            await conn.execute(
                "UPDATE memories SET text = ?, content_hash = ?, updated_at = ? WHERE user_id = ? AND id = ?",
                (text, content_hash(text), to_db(now), user_id, memory_id),
            )
            return history_id

    async def forget(self, user_id: str, memory_id: int, *, cause: str) -> bool:
        async with self.db.write() as conn:
            return await delete_memory(conn, user_id, memory_id, cause=cause, now=self.clock())

    # builtins.list: inside this class, `list` is the method above.
    async def history(self, user_id: str, *, limit: int = 50, offset: int = 0) -> builtins.list[HistoryEntry]:
        rows = await fetch_all(self.db.reader, _SELECT_HISTORY, (user_id, limit, offset))
        return [_row_to_history(r) for r in rows]

    async def restore(self, user_id: str, history_id: int, *, cause: str = "restore") -> int | None:
        """Bring back an archived version. Returns the memory id, or None for an unknown entry.

        If the memory still exists, its current version is archived first (so a restore is itself
        undoable); if it was deleted, it comes back under its own id (ids are never reused). A
        member of a consolidation brings back the whole series and retires the memory that held
        it, in the same transaction.
        """
        now = self.clock()
        async with self.db.write() as conn:
            row = await fetch_one(conn, _SELECT_CAUSE, (user_id, history_id))
            if row is None:
                return None
            consolidated = consolidated_into(row[1]) if row[0] == CONSOLIDATE else None
            if consolidated is None:
                return await restore_version(conn, user_id, history_id, cause=cause, now=now)
            await undo_consolidation(conn, user_id, consolidated, cause=cause, now=now)
            return int(row[2])


async def restore_version(
    conn: Connection, user_id: str, history_id: int, *, cause: str, now: datetime
) -> int | None:
    """`MemoryStore.restore` of one archived version, inside the caller's transaction."""
    row = await fetch_one(conn, _SELECT_SNAPSHOT, (user_id, history_id))
    if row is None:
        return None
    memory_id = row[0]
    snapshot = dict(zip(_SNAPSHOT_COLUMNS.split(", "), row[1:]))
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


# --- consolidations (bot/memory/consolidation/proposal.py) ---------------------------------------------
# A consolidation is written in memory_history alone: each member archived with the operation
# CONSOLIDATE and the cause "consolidated into #N", N the memory that holds the series now.

CONSOLIDATE = "consolidate"
_CONSOLIDATED_INTO = re.compile(r"consolidated into #(\d{1,19})")
_SELECT_CAUSE = "SELECT operation, cause, memory_id FROM memory_history WHERE user_id = ? AND id = ?"
_SELECT_MEMBERS = (
    "SELECT id, memory_id, restored_at FROM memory_history "
    "WHERE user_id = ? AND operation = ? AND cause = ? ORDER BY id"
)
_SELECT_CONSOLIDATIONS = (
    "SELECT cause, memory_id, text, archived_at, restored_at, id FROM memory_history "
    "WHERE user_id = ? AND operation = ? ORDER BY id DESC LIMIT ?"
)


def consolidation_cause(memory_id: int) -> str:
    return f"consolidated into #{memory_id}"


def consolidated_into(cause: str) -> int | None:
    match = _CONSOLIDATED_INTO.fullmatch(cause)
    return int(match.group(1)) if match else None


def _unchanged(read: Memory, now: Memory | None) -> bool:
    return now is not None and (read.content_hash, read.pinned, read.type, read.scope, read.story_id, read.place,
                                read.expires_at) == (now.content_hash, now.pinned, now.type, now.scope, now.story_id,
                                                     now.place, now.expires_at)  # fmt: skip


async def consolidate(
    conn: Connection, user_id: str, members: Sequence[Memory], new: NewMemory, *, now: datetime
) -> int | None:
    """Replace the series `members` by the memory `new`, inside the caller's transaction: the new
    memory inserted, each member archived (CONSOLIDATE, "consolidated into #N") and deleted.
    None, and nothing written, when a member changed or left since it was read."""
    for member in members:
        if not _unchanged(member, await fetch_memory(conn, user_id, member.id)):
            return None
    new_id = await insert_memory(conn, user_id, new, now=now)
    for member in members:
        await delete_memory(conn, user_id, member.id, cause=consolidation_cause(new_id), now=now, operation=CONSOLIDATE)
    return new_id


async def undo_consolidation(
    conn: Connection, user_id: str, memory_id: int, *, cause: str, now: datetime
) -> list[int]:
    """Every member of the consolidation into `memory_id` back (those not restored already), and
    that memory retired to history; the members' ids."""
    rows = await fetch_all(conn, _SELECT_MEMBERS, (user_id, CONSOLIDATE, consolidation_cause(memory_id)))
    restored = [
        int(memory) for history_id, memory, restored_at in rows if restored_at is None
        and await restore_version(conn, user_id, int(history_id), cause=cause, now=now) is not None
    ]  # fmt: skip
    await delete_memory(conn, user_id, memory_id, cause=cause, now=now)
    return restored


@dataclass(frozen=True, slots=True)
class Consolidation:
    """One consolidation as /history and the owner's page show it."""

    memory_id: int
    members: list[tuple[int, str]]  # (memory id, its text then)
    at: datetime
    undone: bool
    # The history entry whose /restore undoes it.
    history_id: int
    # The memory's text now; None once it was retired (undone, forgotten).
    text: str | None = None


async def consolidations(conn: Connection, user_id: str, *, limit: int = 200) -> list[Consolidation]:
    """The user's consolidations, newest first (from at most `limit` archived members)."""
    found: dict[int, Consolidation] = {}
    for cause, memory_id, text, archived_at, restored_at, history_id in await fetch_all(
        conn, _SELECT_CONSOLIDATIONS, (user_id, CONSOLIDATE, limit)
    ):
        into = consolidated_into(cause)
        if into is None:
            continue
        held = found.get(into)
        if held is None:
            held = found[into] = Consolidation(into, [], from_db(archived_at) or utcnow(), restored_at is not None, history_id)
        held.members.insert(0, (int(memory_id), text))
    out = []
    for held in found.values():
        now = await fetch_memory(conn, user_id, held.memory_id)
        out.append(replace(held, text=now.text) if now is not None else held)
    return out
