"""The memory commands, once for every front end: what each does and what it answers.

The terminal chat parses a `/command` line and the Discord cog a slash command's options; both
then call these, and only render the text they return (plain, or in a Discord message).
"""

from __future__ import annotations

from bot.clients.values import MAX_ROW_ID
from bot.engine import Engine
from bot.errors import InvalidMemory
from bot.i18n import DEFAULT_LANGUAGE
from bot.presenting import (
    edit_result,
    forget_result,
    history_text,
    not_edited,
    not_remembered,
    pin_result,
    remembered,
    restore_result,
    sharing_text,
    stats_text,
    why_text,
)


class MemoryCommands:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def remember(
        self, owner: str, text: str, *, story_id: str, place: str, source: str | None = None, lang: str = DEFAULT_LANGUAGE
    ) -> str:
        try:
            memory_id = await self.engine.remember(owner, text, story_id=story_id, place=place, source=source)
        except InvalidMemory as exc:
            return not_remembered(exc, lang=lang)
        return remembered(memory_id, lang=lang)

    async def pin(self, owner: str, memory_id: int, pinned: bool, *, lang: str = DEFAULT_LANGUAGE) -> str:
        # A larger id is answered like any id that is not there.
        done = memory_id <= MAX_ROW_ID and await self.engine.pin(owner, memory_id, pinned)
        return pin_result(memory_id, pinned, done, lang=lang)

    async def forget(self, owner: str, memory_id: int, *, lang: str = DEFAULT_LANGUAGE) -> str:
        done = memory_id <= MAX_ROW_ID and await self.engine.forget(owner, memory_id)
        return forget_result(memory_id, done, lang=lang)

    async def restore(self, owner: str, history_id: int, *, lang: str = DEFAULT_LANGUAGE) -> str:
        restored = await self.engine.restore(owner, history_id) if history_id <= MAX_ROW_ID else None
        return restore_result(history_id, restored, lang=lang)

    async def edit(self, owner: str, memory_id: int, text: str, *, lang: str = DEFAULT_LANGUAGE) -> str:
        if memory_id > MAX_ROW_ID:
            return edit_result(memory_id, None, lang=lang)
        try:
            return edit_result(memory_id, await self.engine.edit_memory(owner, memory_id, text), lang=lang)
        except InvalidMemory as exc:
            return not_edited(exc, lang=lang)

    async def history(self, owner: str, *, lang: str = DEFAULT_LANGUAGE) -> str:
        entries, removals = await self.engine.history(owner)
        return history_text(entries, removals, await self.engine.consolidated(owner), lang=lang)

    async def why(self, owner: str, story_id: str, *, lang: str = DEFAULT_LANGUAGE) -> str:
        return why_text(await self.engine.why(owner, story_id), lang=lang)

    async def stats(self, owner: str, *, lang: str = DEFAULT_LANGUAGE) -> str:
        return stats_text(await self.engine.stats(owner), lang=lang)

    async def share(self, owner: str, on: bool | None, *, lang: str = DEFAULT_LANGUAGE) -> str:
        """With `on` None, says whether memories cross places; else turns it on or off."""
        if on is None:
            return sharing_text(await self.engine.sharing(owner), changed=False, lang=lang)
        await self.engine.set_sharing(owner, on)
        return sharing_text(on, changed=True, lang=lang)
