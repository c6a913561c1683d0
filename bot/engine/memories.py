"""The memory commands' port: what a user reads and changes of their own memories.

Every method takes the owner key (`Cast.memory_key`) of the memories it reads or changes; a
memory id of another owner behaves like an id that does not exist.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from bot.engine.context import EngineContext
from bot.engine.turn import Turns
from bot.errors import InvalidMemory
from bot.memory.choice import TurnSelection
from bot.memory.model import Cause, HistoryEntry, Memory, MemoryType, NewMemory, OwnerKey, StoryId
from bot.memory.reports.stats import MemoryStats
from bot.memory.stores.consolidations import Consolidation, consolidations
from bot.memory.stores.stories import StoryHistoryEntry, story_history
from bot.memory.stores.turn import last_turn
from bot.memory.text import storable


class Memories:
    def __init__(self, ctx: EngineContext, turns: Turns) -> None:
        self._ctx = ctx
        self._turns = turns

    async def list(self, owner: OwnerKey, *, types: Sequence[MemoryType] | None = None) -> builtins.list[Memory]:
        """The owner's memories (of these types, when given)."""
        return await self._ctx.store.list(owner, types=types)

    async def get(self, owner: OwnerKey, memory_id: int) -> Memory | None:
        return await self._ctx.store.get(owner, memory_id)

    async def history(self, owner: OwnerKey) -> tuple[builtins.list[HistoryEntry], builtins.list[StoryHistoryEntry]]:
        """The archived versions of the owner's memories, and the anchors removed from their stories."""
        entries = await self._ctx.store.history(owner)
        return entries, await story_history(self._ctx.db, owner, None, operations=("anchor_removed",))

    async def consolidations(self, owner: OwnerKey) -> builtins.list[Consolidation]:
        """The owner's consolidations of series, newest first (for /history and the owner's page)."""
        return await consolidations(self._ctx.db.reader, owner)

    async def remember(
        self,
        owner: OwnerKey,
        text: str,
        *,
        story_id: StoryId,
        place: str,
        type_: MemoryType = "fact",
        source: str | None = None,
    ) -> int:
        if type_ == "rule":
            raise InvalidMemory("rules come from the character file only, never from a user", code="rule")
        return await self._ctx.store.add(
            owner,
            NewMemory(text=storable(text), type=type_, scope="global", story_id=story_id, place=place, source=source),
            cap=self._ctx.settings.max_memories_per_user,
        )

    async def pin(self, owner: OwnerKey, memory_id: int, pinned: bool = True) -> bool:
        return await self._ctx.store.set_pinned(owner, memory_id, pinned)

    async def forget(self, owner: OwnerKey, memory_id: int) -> bool:
        return await self._ctx.store.forget(owner, memory_id, cause=Cause("forget"))

    async def edit(self, owner: OwnerKey, memory_id: int, text: str) -> int | None:
        """The user rewrites a memory, archived first: its history id (/restore), None if not theirs."""
        return await self._ctx.store.edit(owner, memory_id, storable(text), cause=Cause("edit"))

    async def restore(self, owner: OwnerKey, history_id: int) -> int | None:
        """Bring back an archived version; a consolidated member brings back its whole series."""
        return await self._ctx.store.restore(owner, history_id, cause=Cause("restore"))

    async def why(self, owner: OwnerKey, story_id: StoryId) -> TurnSelection | None:
        """What the owner's last turn in the story chose, and why."""
        await self._turns.wait_recorded(owner)
        return await last_turn(self._ctx.db, owner, story_id)

    async def stats(self, owner: OwnerKey) -> MemoryStats:
        await self._turns.wait_recorded(owner)
        # With the dated memories followed up and the person's check-ins.
        return await self._turns.followups.stats(self._ctx.store, owner, cap=self._ctx.settings.max_memories_per_user)
