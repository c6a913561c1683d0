"""Consolidations in the database: a series of memories replaced by one, each member archived with
the operation `consolidate` and the cause "consolidated into #N" (N the memory that holds the
series now), and undone by bringing the members back. Inside the caller's transaction; every
statement scoped by user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from bot.clients.storage import (
    Connection,
    fetch_all,
    from_db,
)
from bot.memory.model import (
    Cause,
    Memory,
    NewMemory,
    Operation,
    OwnerKey,
    utcnow,
)
from bot.memory.stores.memories import delete_memory, fetch_memory, insert_memory, restore_version

CONSOLIDATE: Operation = "consolidate"


_SELECT_MEMBERS = (
    "SELECT id, memory_id, restored_at FROM memory_history "
    "WHERE user_id = ? AND operation = ? AND cause = ? ORDER BY id"
)


_SELECT_CONSOLIDATIONS = (
    "SELECT cause, memory_id, text, archived_at, restored_at, id FROM memory_history "
    "WHERE user_id = ? AND operation = ? ORDER BY id DESC LIMIT ?"
)


def _unchanged(read: Memory, now: Memory | None) -> bool:
    return now is not None and (read.content_hash, read.pinned, read.type, read.scope, read.story_id, read.place,
                                read.expires_at) == (now.content_hash, now.pinned, now.type, now.scope, now.story_id,
                                                     now.place, now.expires_at)  # fmt: skip


async def consolidate(
    conn: Connection, user_id: OwnerKey, members: Sequence[Memory], new: NewMemory, *, now: datetime
) -> int | None:
    """Replace the series `members` by the memory `new`, inside the caller's transaction: the new
    memory inserted, each member archived (CONSOLIDATE, "consolidated into #N") and deleted.
    None, and nothing written, when a member changed or left since it was read."""
    for member in members:
        if not _unchanged(member, await fetch_memory(conn, user_id, member.id)):
            return None
    new_id = await insert_memory(conn, user_id, new, now=now)
    for member in members:
        await delete_memory(conn, user_id, member.id, cause=Cause.consolidated(new_id), now=now, operation=CONSOLIDATE)
    return new_id


async def undo_consolidation(
    conn: Connection, user_id: OwnerKey, memory_id: int, *, cause: Cause, now: datetime
) -> list[int]:
    """Every member of the consolidation into `memory_id` back (those not restored already), and
    that memory retired to history; the members' ids."""
    rows = await fetch_all(conn, _SELECT_MEMBERS, (user_id, CONSOLIDATE, Cause.consolidated(memory_id).stored()))
    restored = [
        int(row["memory_id"]) for row in rows if row["restored_at"] is None
        and await restore_version(conn, user_id, int(row["id"]), cause=cause, now=now) is not None
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


async def consolidations(conn: Connection, user_id: OwnerKey, *, limit: int = 200) -> list[Consolidation]:
    """The user's consolidations, newest first (from at most `limit` archived members)."""
    found: dict[int, Consolidation] = {}
    for row in await fetch_all(conn, _SELECT_CONSOLIDATIONS, (user_id, CONSOLIDATE, limit)):
        into = Cause.from_stored(row["cause"]).into
        if into is None:
            continue
        held = found.get(into)
        if held is None:
            held = found[into] = Consolidation(
                into, [], from_db(row["archived_at"]) or utcnow(), row["restored_at"] is not None, row["id"]
            )
        held.members.insert(0, (int(row["memory_id"]), row["text"]))
    out = []
    for held in found.values():
        now = await fetch_memory(conn, user_id, held.memory_id)
        out.append(replace(held, text=now.text) if now is not None else held)
    return out
