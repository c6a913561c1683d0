"""Each consolidation of a series, recorded whole (migration 0010): the memory that holds it,
each member and the history entry of its archived version, when it was made, and whether it
was undone and by whom. Every statement is scoped by user_id.

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
from dataclasses import dataclass, replace
from datetime import datetime

from bot.clients.db import fetch_all, from_db, to_db
from bot.clients.storage import Connection
from bot.memory.model import utcnow
from bot.memory.stores.memories import CONSOLIDATE, consolidation_cause, fetch_memory, undo_consolidation

# undone_by: the user undid it (never asked again for these members), or a member's message
# was deleted or edited.
BY_USER = "restore"
BY_SOURCE = "source"


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
    # Who undid it: BY_USER, BY_SOURCE, or None.
    undone_by: str | None = None


async def record_consolidation(conn: Connection, user_id: str, memory_id: int, *, now: datetime) -> None:
    """In the consolidation's transaction, once its members are archived: the record, whole."""
    await conn.execute(
        "INSERT INTO consolidations (memory_id, user_id, at) VALUES (?, ?, ?)", (memory_id, user_id, to_db(now))
    )
    await conn.execute(
        "INSERT INTO consolidation_members (memory_id, member_id, user_id, history_id) "
        "SELECT ?, memory_id, user_id, id FROM memory_history WHERE user_id = ? AND operation = ? AND cause = ?",
        (memory_id, user_id, CONSOLIDATE, consolidation_cause(memory_id)),
    )


async def consolidations(conn: Connection, user_id: str) -> list[Consolidation]:
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
    for memory_id, at, undone_at, undone_by, member_id, history_id, text in rows:
        held = found.get(int(memory_id))
        if held is None:
            held = found[int(memory_id)] = Consolidation(
                int(memory_id), [], from_db(at) or utcnow(), undone_at is not None, 0, undone_by=undone_by
            )
        held.members.append((int(member_id), str(text)))
        # /history names the last member archived: its entry is the newest of the series.
        found[int(memory_id)] = replace(held, history_id=max(held.history_id, int(history_id)))
    out = []
    for held in found.values():
        now = await fetch_memory(conn, user_id, held.memory_id)
        out.append(replace(held, text=now.text) if now is not None else held)
    return out


async def undone_by_user(conn: Connection, user_id: str) -> list[frozenset[int]]:
    """The members of each consolidation the user undid: never asked again together."""
    rows = await fetch_all(
        conn,
        "SELECT m.memory_id, m.member_id FROM consolidations AS c "
        "JOIN consolidation_members AS m ON m.memory_id = c.memory_id "
        "WHERE c.user_id = ? AND m.user_id = ? AND c.undone_by = ?",
        (user_id, user_id, BY_USER),
    )
    members: dict[int, set[int]] = defaultdict(set)
    for memory_id, member_id in rows:
        members[int(memory_id)].add(int(member_id))
    return [frozenset(m) for m in members.values()]


async def _standing(conn: Connection, user_id: str) -> dict[int, set[int]]:
    """Members of each consolidation not undone, by the memory that holds it."""
    rows = await fetch_all(
        conn,
        "SELECT m.memory_id, m.member_id FROM consolidations AS c "
        "JOIN consolidation_members AS m ON m.memory_id = c.memory_id "
        "WHERE c.user_id = ? AND m.user_id = ? AND c.undone_at IS NULL",
        (user_id, user_id),
    )
    members: dict[int, set[int]] = defaultdict(set)
    for memory_id, member_id in rows:
        members[int(memory_id)].add(int(member_id))
    return members


async def _alone_from(conn: Connection, user_id: str, exchange_id: int) -> set[int]:
    """Memories, live or archived, whose every source is this exchange."""
    rows = await fetch_all(
        conn,
        "SELECT s.memory_id FROM memory_sources AS s WHERE s.user_id = ? AND s.exchange_id = ? "
        "AND NOT EXISTS (SELECT 1 FROM memory_sources AS o WHERE o.user_id = ? "
        "AND o.memory_id = s.memory_id AND o.exchange_id != ?)",
        (user_id, exchange_id, user_id, exchange_id),
    )
    return {int(r[0]) for r in rows}


@dataclass(slots=True)
class SourceUndo:
    undone: list[int]  # consolidated memories retired, their members back
    kept_pinned: list[int]  # consolidated memories the user pinned: kept as they are


async def undo_consolidations_from(
    conn: Connection, user_id: str, exchange_id: int, *, cause: str, now: datetime
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
            await undo_consolidation(conn, user_id, memory_id, cause=cause, now=now, by=BY_SOURCE)
            outcome.undone.append(memory_id)
    return outcome
