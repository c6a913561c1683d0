"""The memory store: the memory commands' operations on one person's memories, each one
transaction over the statements of bot/memory/stores/memories.py (a consolidated member's restore
brings back its series: bot/memory/stores/consolidations.py)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any

from bot.clients.storage import (
    Database,
    Row,
    fetch_all,
    fetch_one,
    from_db,
    to_db,
)
from bot.memory.model import (
    Cause,
    HistoryEntry,
    Memory,
    NewMemory,
    OwnerKey,
    check_room,
    content_hash,
    utcnow,
)
from bot.memory.stores.consolidations import CONSOLIDATE, undo_consolidation
from bot.memory.stores.memories import (
    SNAPSHOT_COLUMNS,
    archive,
    delete_memory,
    fetch_memories,
    fetch_memory,
    insert_memory,
    restore_version,
    rewrite_memory,
)

_SELECT_HISTORY = (
    "SELECT id, memory_id, operation, archived_at, cause, restored_at, " + SNAPSHOT_COLUMNS + " "
    "FROM memory_history WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?"
)


def _row_to_history(row: Row) -> HistoryEntry:
    return HistoryEntry(
        id=row["id"],
        memory_id=row["memory_id"],
        operation=row["operation"],
        archived_at=from_db(row["archived_at"]),
        cause=Cause.from_stored(row["cause"]),
        restored=row["restored_at"] is not None,
        user_id=row["user_id"],
        text=row["text"],
        type=row["type"],
        scope=row["scope"],
        story_id=row["story_id"],
        place=row["place"],
        confidence=row["confidence"],
        pinned=bool(row["pinned"]),
        created_at=from_db(row["created_at"]),
        updated_at=from_db(row["updated_at"]),
        expires_at=from_db(row["expires_at"]),
        source=row["source"],
    )


RESTORE = Cause("restore")


class MemoryStore:
    """High-level memory operations for commands; each method is one transaction."""

    def __init__(self, db: Database, *, clock: Any = utcnow) -> None:
        self.db = db
        self.clock = clock

    async def get(self, user_id: OwnerKey, memory_id: int) -> Memory | None:
        return await fetch_memory(self.db.reader, user_id, memory_id)

    async def list(
        self,
        user_id: OwnerKey,
        *,
        types: Iterable[str] | None = None,
        include_expired: bool = True,
        include_rules: bool = False,
    ) -> list[Memory]:
        memories = await fetch_memories(self.db.reader, user_id, include_rules=include_rules)
        wanted = set(types) if types else None
        now = self.clock()
        return [
            m for m in memories if (wanted is None or m.type in wanted) and (include_expired or not m.is_expired(now))
        ]

    async def add(self, user_id: OwnerKey, new: NewMemory, *, cap: int | None = None) -> int:
        """Insert one memory; MemoryCapReached when the user already holds `cap`."""
        async with self.db.write() as conn:
            if cap is not None:
                row = await fetch_one(conn, "SELECT COUNT(*) AS held FROM memories WHERE user_id = ?", (user_id,))
                check_room(int(row["held"]) if row else 0, cap)
            return await insert_memory(conn, user_id, new, now=self.clock())

    async def set_pinned(self, user_id: OwnerKey, memory_id: int, pinned: bool) -> bool:
        """Pinning is a flag, not a new version: no history row, no date change."""
        async with self.db.write() as conn:
            cur = await conn.execute(
                "UPDATE memories SET pinned = ? WHERE user_id = ? AND id = ? AND type != 'rule'",
                (int(pinned), user_id, memory_id),
            )
            return cur.rowcount == 1

    async def replace(self, user_id: OwnerKey, memory_id: int, text: str, *, cause: Cause) -> bool:
        async with self.db.write() as conn:
            return await rewrite_memory(
                conn, user_id, memory_id, text, operation="replace", cause=cause, now=self.clock()
            )

    async def edit(self, user_id: OwnerKey, memory_id: int, text: str, *, cause: Cause) -> int | None:
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

    async def forget(self, user_id: OwnerKey, memory_id: int, *, cause: Cause) -> bool:
        async with self.db.write() as conn:
            return await delete_memory(conn, user_id, memory_id, cause=cause, now=self.clock())

    # builtins.list: inside this class, `list` is the method above.
    async def history(self, user_id: OwnerKey, *, limit: int = 50, offset: int = 0) -> builtins.list[HistoryEntry]:
        rows = await fetch_all(self.db.reader, _SELECT_HISTORY, (user_id, limit, offset))
        return [_row_to_history(r) for r in rows]

    async def restore(self, user_id: OwnerKey, history_id: int, *, cause: Cause = RESTORE) -> int | None:
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
            consolidated = Cause.from_stored(row["cause"]).into if row["operation"] == CONSOLIDATE else None
            if consolidated is None:
                return await restore_version(conn, user_id, history_id, cause=cause, now=now)
            await undo_consolidation(conn, user_id, consolidated, cause=cause, now=now)
            return int(row["memory_id"])


_SELECT_CAUSE = "SELECT operation, cause, memory_id FROM memory_history WHERE user_id = ? AND id = ?"
