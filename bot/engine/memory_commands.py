"""The memory commands, once for every front end: what each does and what it answers, as data.

The Discord cog (cogs/memory.py), its buttons and edit form (cogs/utils/views.py) and the
terminal chat (bot/terminal/commands.py) parse their own input (slash options, a button, a
`/command` line), call these, and show the answer through bot/presenting/, in the language
of whoever asked: nothing here is text for a person. The commands on a whole person (export,
erase) cover every character's memory of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.clients.values import MAX_ROW_ID
from bot.engine import Engine, MemoryStats
from bot.engine.followups import CheckinStatus
from bot.errors import InvalidMemory, InvalidTimezone
from bot.memory.choice import TurnSelection
from bot.memory.model import HistoryEntry, Memory, MemoryType, OwnerKey, PersonId, StoryId
from bot.memory.reports.export import PersonExport
from bot.memory.stores.consolidations import Consolidation
from bot.memory.stores.memories import EraseReport
from bot.memory.stores.stories import StoryHistoryEntry


@dataclass(frozen=True, slots=True)
class Refused:
    """A memory that could not be written (`action`: remember or edit): why, as InvalidMemory's
    code and values."""

    action: str
    code: str
    values: dict[str, object]

    @classmethod
    def of(cls, action: str, exc: InvalidMemory) -> Refused:
        return cls(action, exc.code, dict(exc.values))


@dataclass(frozen=True, slots=True)
class Remembered:
    memory_id: int


@dataclass(frozen=True, slots=True)
class Pinned:
    memory_id: int
    pinned: bool
    done: bool  # False: no memory of theirs has that id


@dataclass(frozen=True, slots=True)
class Forgotten:
    memory_id: int
    done: bool


@dataclass(frozen=True, slots=True)
class Restored:
    history_id: int
    memory_id: int | None  # None: no archived version of theirs has that id


@dataclass(frozen=True, slots=True)
class Edited:
    memory_id: int
    history_id: int | None  # None: no memory of theirs has that id


@dataclass(frozen=True, slots=True)
class History:
    entries: list[HistoryEntry]
    removals: list[StoryHistoryEntry]
    consolidations: list[Consolidation]


@dataclass(frozen=True, slots=True)
class Sharing:
    on: bool
    changed: bool


@dataclass(frozen=True, slots=True)
class FollowupsAnswer:
    """/followups: the person's check-ins as they are now; `changed` when the command set them;
    `bad_timezone` the name refused (nothing changed then)."""

    status: CheckinStatus
    changed: bool
    bad_timezone: str | None = None


@dataclass(frozen=True, slots=True)
class Why:
    selection: TurnSelection | None  # None: no turn of theirs in that story yet


@dataclass(frozen=True, slots=True)
class Exported:
    data: PersonExport


@dataclass(frozen=True, slots=True)
class Erased:
    report: EraseReport


Answer = (
    Refused
    | Remembered
    | Pinned
    | Forgotten
    | Restored
    | Edited
    | History
    | Sharing
    | Why
    | MemoryStats
    | Exported
    | Erased
    | FollowupsAnswer
)


class MemoryCommands:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def memories(self, owner: OwnerKey, types: Sequence[MemoryType] | None = None) -> list[Memory]:
        return await self.engine.memories.list(owner, types=types or None)

    async def remember(
        self, owner: OwnerKey, text: str, *, story_id: StoryId, place: str, source: str | None = None
    ) -> Remembered | Refused:
        try:
            return Remembered(
                await self.engine.memories.remember(owner, text, story_id=story_id, place=place, source=source)
            )
        except InvalidMemory as exc:
            return Refused.of("remember", exc)

    async def pin(self, owner: OwnerKey, memory_id: int, pinned: bool) -> Pinned:
        # A larger id is answered like any id that is not there.
        return Pinned(
            memory_id, pinned, memory_id <= MAX_ROW_ID and await self.engine.memories.pin(owner, memory_id, pinned)
        )

    async def forget(self, owner: OwnerKey, memory_id: int) -> Forgotten:
        return Forgotten(memory_id, memory_id <= MAX_ROW_ID and await self.engine.memories.forget(owner, memory_id))

    async def restore(self, owner: OwnerKey, history_id: int) -> Restored:
        return Restored(
            history_id, await self.engine.memories.restore(owner, history_id) if history_id <= MAX_ROW_ID else None
        )

    async def edit(self, owner: OwnerKey, memory_id: int, text: str) -> Edited | Refused:
        if memory_id > MAX_ROW_ID:
            return Edited(memory_id, None)
        try:
            return Edited(memory_id, await self.engine.memories.edit(owner, memory_id, text))
        except InvalidMemory as exc:
            return Refused.of("edit", exc)

    async def history(self, owner: OwnerKey) -> History:
        entries, removals = await self.engine.memories.history(owner)
        return History(entries, removals, await self.engine.memories.consolidations(owner))

    async def why(self, owner: OwnerKey, story_id: StoryId) -> Why:
        return Why(await self.engine.memories.why(owner, story_id))

    async def stats(self, owner: OwnerKey) -> MemoryStats:
        return await self.engine.memories.stats(owner)

    async def share(self, owner: OwnerKey, on: bool | None) -> Sharing:
        """With `on` None, says whether memories cross places; else turns it on or off."""
        if on is None:
            return Sharing(await self.engine.privacy.sharing(owner), changed=False)
        await self.engine.privacy.set_sharing(owner, on)
        return Sharing(on, changed=True)

    async def followups(self, person: PersonId, on: bool | None, timezone: str | None = None) -> FollowupsAnswer:
        """The person's check-ins (their own id, whichever character asks): shown, or turned on
        or off, their time zone set when given."""
        privacy = self.engine.privacy
        if on is None and timezone is None:
            return FollowupsAnswer(await privacy.checkins(person), changed=False)
        try:
            current = await privacy.checkins(person)
            status = await privacy.set_checkins(person, current.enabled if on is None else on, timezone)
        except InvalidTimezone as exc:
            return FollowupsAnswer(await privacy.checkins(person), changed=False, bad_timezone=exc.name)
        return FollowupsAnswer(status, changed=True)

    async def export(self, person: PersonId) -> Exported:
        """Everything stored about the person, every character's part included."""
        return Exported(await self.engine.privacy.export_person(person))

    async def erase(self, person: PersonId) -> Erased:
        """Everything about the person, every character's memory of them included."""
        return Erased(await self.engine.privacy.erase_person(person))
