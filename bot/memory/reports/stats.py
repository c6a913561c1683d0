"""The figures of /stats: what one user's memory holds, and how it is used."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.clients.storage import Database
from bot.memory.model import Memory, OwnerKey
from bot.memory.stores.consolidations import consolidations
from bot.memory.stores.exchanges import count_pending_reflection
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.turn import turn_stats

# A memory that was a candidate this often and never chosen is listed as never surfaced.
NEVER_SURFACED_AFTER = 5


@dataclass(slots=True)
class MemoryStats:
    total: int
    cap: int
    by_type: dict[str, int]
    pinned: int
    expired: int
    never_surfaced: list[Memory]
    never_semantic: int
    turns: int
    degraded_turns: int
    pending_reflections: int
    # Series consolidated into one memory and not undone: (consolidations, memories they hold).
    consolidations: int = 0
    consolidated_members: int = 0
    # Follow-ups (bot/engine/followups.py): dated memories followed up; the person's check-ins.
    followed_up: int = 0
    checkins: bool = False
    checkins_timezone: str | None = None


async def memory_stats(db: Database, store: MemoryStore, user_id: OwnerKey, *, cap: int, now: datetime) -> MemoryStats:
    memories = await store.list(user_id)
    by_type: dict[str, int] = {}
    for m in memories:
        by_type[m.type] = by_type.get(m.type, 0) + 1
    turns, degraded = await turn_stats(db, user_id)
    applied = [c for c in await consolidations(db.reader, user_id) if not c.undone]
    return MemoryStats(
        total=len(memories),
        cap=cap,
        by_type=by_type,
        pinned=sum(m.pinned for m in memories),
        expired=sum(m.is_expired(now) for m in memories),
        never_surfaced=[m for m in memories if m.times_served == 0 and m.times_candidate >= NEVER_SURFACED_AFTER],
        never_semantic=sum(1 for m in memories if m.times_semantic == 0),
        turns=turns,
        degraded_turns=degraded,
        pending_reflections=await count_pending_reflection(db, user_id),
        consolidations=len(applied),
        consolidated_members=sum(len(c.members) for c in applied),
    )
