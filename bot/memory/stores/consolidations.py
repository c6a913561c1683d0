"""Consolidations in the database: a series of memories replaced by one, each member archived with
the operation `consolidate` and the cause "consolidated into #N" (N the memory that holds the
series now), the consolidation recorded whole (migration 0010: the memory that holds it, each
member and the history entry of its archived version, when it was made, whether it was undone
and by whom), and undone by bringing the members back. Inside the caller's transaction; every
statement scoped by user.

- The job reads the user's undone consolidations whole: one the user undid (`/restore`) is never
  asked again for the same members, however many consolidations came after it.
- A member keeps its own provenance (its rows of memory_sources outlive it, keyed by its own id):
  a message deleted or edited that alone supported a member undoes every consolidation that
  holds that member, outermost first (a consolidated memory can itself be a member of a later
  one); the members come back and what the message alone said is forgotten or corrected as for
  any memory (bot/engine/open_exchanges.py). Undone that way (`source`), the other members may be
  consolidated again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from bot.clients.storage import Connection, Row, fetch_all, from_db, to_db
from bot.memory.model import Cause, Memory, NewMemory, Operation, OwnerKey, UndoneBy, utcnow
from bot.memory.stores.memories import delete_memory, fetch_memory, insert_memory, restore_version

CONSOLIDATE: Operation = "consolidate"

_SELECT_MEMBERS = (
    "SELECT id, memory_id, restored_at FROM memory_history "
    "WHERE user_id = ? AND operation = ? AND cause = ? ORDER BY id"
)


def _unchanged(read: Memory, now: Memory | None) -> bool:
    return now is not None and (read.content_hash, read.pinned, read.type, read.scope, read.story_id, read.place,
                                read.expires_at) == (now.content_hash, now.pinned, now.type, now.scope, now.story_id,
                                                     now.place, now.expires_at)  # fmt: skip


async def consolidate(
    conn: Connection, user_id: OwnerKey, members: Sequence[Memory], new: NewMemory, *, now: datetime
) -> int | None:
    """Replace the series `members` by the memory `new`, inside the caller's transaction: the new
    memory inserted, each member archived (CONSOLIDATE, "consolidated into #N") and deleted, the
    consolidation recorded whole. None, and nothing written, when a member changed or left since
    it was read."""
    for member in members:
        if not _unchanged(member, await fetch_memory(conn, user_id, member.id)):
            return None
    new_id = await insert_memory(conn, user_id, new, now=now)
    for member in members:
        await delete_memory(conn, user_id, member.id, cause=Cause.consolidated(new_id), now=now, operation=CONSOLIDATE)
    await conn.execute(
        "INSERT INTO consolidations (memory_id, user_id, at) VALUES (?, ?, ?)", (new_id, user_id, to_db(now))
    )
    await conn.execute(
        "INSERT INTO consolidation_members (memory_id, member_id, user_id, history_id) "
        "SELECT ?, memory_id, user_id, id FROM memory_history WHERE user_id = ? AND operation = ? AND cause = ?",
        (new_id, user_id, CONSOLIDATE, Cause.consolidated(new_id).stored()),
    )
    return new_id


async def undo_consolidation(
    conn: Connection, user_id: OwnerKey, memory_id: int, *, cause: Cause, now: datetime, by: UndoneBy = "restore"
) -> list[int]:
    """Every member of the consolidation into `memory_id` back (those not restored already), and
    that memory retired to history; the members' ids. `by` is recorded: "restore" when the user
    undid it, "source" when a member's message went."""
    await conn.execute(
        "UPDATE consolidations SET undone_at = ?, undone_by = ? WHERE user_id = ? AND memory_id = ? AND undone_at IS NULL",
        (to_db(now), by, user_id, memory_id),
    )
    rows = await fetch_all(conn, _SELECT_MEMBERS, (user_id, CONSOLIDATE, Cause.consolidated(memory_id).stored()))
    restored = [
        int(row["memory_id"]) for row in rows if row["restored_at"] is None
        and await restore_version(conn, user_id, int(row["id"]), cause=cause, now=now) is not None
    ]  # fmt: skip
    await delete_memory(conn, user_id, memory_id, cause=cause, now=now)
    return restored


@dataclass(frozen=True, slots=True)
class Consolidation:
    """One consolidation as /history, /export and the owner's page show it."""

    memory_id: int
    members: list[tuple[int, str]]  # (memory id, its text then)
    at: datetime
    undone: bool
    # The history entry whose /restore undoes it.
    history_id: int
    # The memory's text now; None once it was retired (undone, forgotten).
    text: str | None = None
    # Who undid it, if it was.
    undone_by: UndoneBy | None = None


async def consolidations(conn: Connection, user_id: OwnerKey) -> list[Consolidation]:
    """Every consolidation of the user, newest first, read whole."""
    rows = await fetch_all(
        conn,
        "SELECT c.memory_id, c.at, c.undone_at, c.undone_by, m.member_id, m.history_id, h.text "
        "FROM consolidations AS c JOIN consolidation_members AS m ON m.memory_id = c.memory_id "
        "JOIN memory_history AS h ON h.id = m.history_id "
        "WHERE c.user_id = ? AND m.user_id = ? AND h.user_id = ? ORDER BY c.memory_id DESC, m.history_id",
        (user_id, user_id, user_id),
    )
    found: dict[int, Consolidation] = {}
    for row in rows:
        memory_id = int(row["memory_id"])
        held = found.get(memory_id)
        if held is None:
            held = found[memory_id] = Consolidation(
                memory_id, [], from_db(row["at"]) or utcnow(), row["undone_at"] is not None, 0,
                undone_by=row["undone_by"],
            )  # fmt: skip
        held.members.append((int(row["member_id"]), str(row["text"])))
        # /history names the last member archived: its entry is the newest of the series.
        found[memory_id] = replace(held, history_id=max(held.history_id, int(row["history_id"])))
    out = []
    for held in found.values():
        now = await fetch_memory(conn, user_id, held.memory_id)
        out.append(replace(held, text=now.text) if now is not None else held)
    return out


def _by_consolidation(rows: Sequence[Row]) -> dict[int, set[int]]:
    members: dict[int, set[int]] = defaultdict(set)
    for row in rows:
        members[int(row["memory_id"])].add(int(row["member_id"]))
    return members


async def undone_by_user(conn: Connection, user_id: OwnerKey) -> list[frozenset[int]]:
    """The members of each consolidation the user undid: never asked again together."""
    rows = await fetch_all(
        conn,
        "SELECT m.memory_id, m.member_id FROM consolidations AS c "
        "JOIN consolidation_members AS m ON m.memory_id = c.memory_id "
        "WHERE c.user_id = ? AND m.user_id = ? AND c.undone_by = ?",
        (user_id, user_id, "restore"),
    )
    return [frozenset(m) for m in _by_consolidation(rows).values()]


async def _standing(conn: Connection, user_id: OwnerKey) -> dict[int, set[int]]:
    """Members of each consolidation not undone, by the memory that holds it."""
    rows = await fetch_all(
        conn,
        "SELECT m.memory_id, m.member_id FROM consolidations AS c "
        "JOIN consolidation_members AS m ON m.memory_id = c.memory_id "
        "WHERE c.user_id = ? AND m.user_id = ? AND c.undone_at IS NULL",
        (user_id, user_id),
    )
    return _by_consolidation(rows)


async def _alone_from(conn: Connection, user_id: OwnerKey, exchange_id: int) -> set[int]:
    """Memories, live or archived, whose every source is this exchange."""
    rows = await fetch_all(
        conn,
        "SELECT s.memory_id FROM memory_sources AS s WHERE s.user_id = ? AND s.exchange_id = ? "
        "AND NOT EXISTS (SELECT 1 FROM memory_sources AS o WHERE o.user_id = ? "
        "AND o.memory_id = s.memory_id AND o.exchange_id != ?)",
        (user_id, exchange_id, user_id, exchange_id),
    )
    return {int(row["memory_id"]) for row in rows}


@dataclass(slots=True)
class SourceUndo:
    undone: list[int]  # consolidated memories retired, their members back
    kept_pinned: list[int]  # consolidated memories the user pinned: kept as they are


async def undo_consolidations_from(
    conn: Connection, user_id: OwnerKey, exchange_id: int, *, cause: Cause, now: datetime
) -> SourceUndo:
    """Undo, inside the caller's transaction, every standing consolidation that holds (maybe
    through another consolidation) a member this exchange alone supported, outermost first."""
    outcome = SourceUndo([], [])
    standing = await _standing(conn, user_id)
    if not standing:
        return outcome
    hit = await _alone_from(conn, user_id, exchange_id)
    changed = True
    while changed:  # a consolidation holding a hit one is hit too
        changed = False
        for memory_id, members in standing.items():
            if memory_id not in hit and members & hit:
                hit.add(memory_id)
                changed = True
    pending = {m for m in standing if m in hit}
    while pending:
        live = {}
        for memory_id in sorted(pending):
            memory = await fetch_memory(conn, user_id, memory_id)
            if memory is not None:
                live[memory_id] = memory
        if not live:
            break  # the rest are inside a consolidation the user pinned, or gone
        for memory_id, memory in live.items():
            pending.discard(memory_id)
            if memory.pinned:
                outcome.kept_pinned.append(memory_id)
                continue
            await undo_consolidation(conn, user_id, memory_id, cause=cause, now=now, by="source")
            outcome.undone.append(memory_id)
    return outcome
