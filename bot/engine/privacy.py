"""The privacy port: what a person decides about their data — whether memories cross places,
whether the character may write to them first (check-ins), a copy of everything, and its real
deletion."""

from __future__ import annotations

import asyncio
import logging

from bot.engine.consolidation_worker import Consolidations
from bot.engine.context import EngineContext
from bot.engine.followups import CheckinStatus
from bot.engine.reflection_worker import Reflections
from bot.engine.turn import Turns
from bot.memory.model import OwnerKey, PersonId
from bot.memory.reports.export import PersonExport, UserExport, export_user
from bot.memory.stores import settings as settings_store
from bot.memory.stores.epoch import end_epoch
from bot.memory.stores.exchanges import erase_user_exchange_data
from bot.memory.stores.memories import EraseReport, erase_user_memories
from bot.memory.stores.owners import owner_keys
from bot.memory.stores.stories import erase_user_story_data

log = logging.getLogger(__name__)


class Privacy:
    def __init__(
        self, ctx: EngineContext, turns: Turns, reflections: Reflections, consolidations: Consolidations
    ) -> None:
        self._ctx = ctx
        self._turns = turns
        self._reflections = reflections
        self._consolidations = consolidations

    async def sharing(self, owner: OwnerKey) -> bool:
        """Whether the owner's memories cross places (servers, DMs)."""
        return await settings_store.sharing(self._ctx.db, owner)

    async def set_sharing(self, owner: OwnerKey, share: bool) -> None:
        await settings_store.set_sharing(self._ctx.db, owner, share)

    async def checkins(self, person: PersonId) -> CheckinStatus:
        """Whether the person's check-ins are on, and their time zone (set or learned)."""
        return await self._turns.followups.status(person)

    async def set_checkins(self, person: PersonId, on: bool, timezone: str | None = None) -> CheckinStatus:
        """Turn the person's check-ins on or off; `timezone` (an IANA name) is checked first
        (InvalidTimezone) and kept when not given."""
        return await self._turns.followups.set_checkins(person, on, timezone)

    async def export(self, owner: OwnerKey) -> UserExport:
        """Everything stored under one owner key, as plain JSON-able data."""
        await self._turns.wait_recorded(owner)
        return await export_user(self._ctx.db, self._ctx.store, owner, now=self._ctx.clock())

    async def export_person(self, user_id: PersonId) -> PersonExport:
        """`export` of the person's own key, with what each character of its own memory keeps
        under "characters", filed by the stored key (`<id>@<key>`): a character since removed
        from the folder has no name in the cast, and two of them must not share one entry."""
        keys = await owner_keys(self._ctx.db, user_id)
        own = await self.export(keys[0])  # the person's own key
        return PersonExport(**own, characters={key: await self.export(key) for key in keys[1:]})

    async def erase(self, owner: OwnerKey) -> EraseReport:
        """Real deletion of everything under one owner key, in one transaction, written first to
        the erasure ledger (a restored backup never brings them back). Front ends drop what no
        turn has begun on (`Engine.listen(erasing=…)`); a running reflection and a
        consolidation's model call are cancelled, never waited for; a turn under way, here or in
        another process, writes nothing after it: the erase ends the person's epoch, checked by
        each of its writes."""
        ctx = self._ctx
        person = ctx.cast.user_of_key(owner)
        ctx.events.erasing(person)
        erasure = await ctx.events.record_erasure(person, ctx.clock())
        await self._turns.wait_recorded(owner)
        await asyncio.gather(self._reflections.stop(owner), self._consolidations.stop(owner))
        async with self._reflections.lock(owner), ctx.db.write() as conn:
            await end_epoch(conn, person, erasure)
            report = await erase_user_memories(conn, owner)
            await erase_user_story_data(conn, owner)
            await erase_user_exchange_data(conn, owner)
            await settings_store.erase_user_settings(conn, owner)
        # The deleted rows' earlier versions are still pages of the WAL file until it is copied back.
        await ctx.db.checkpoint()
        ctx.cache.forget(owner)
        self._reflections.forget_report(owner)
        log.info("erased all data of one user on request (%d memories)", report.memories)
        return report

    async def erase_person(self, user_id: PersonId) -> EraseReport:
        """`erase` of every key of the person: their id and every derived key."""
        keys = await owner_keys(self._ctx.db, user_id)
        reports = [await self.erase(key) for key in keys]
        # Read again once the first erase ended the person's epoch: a turn with another character
        # that saved its first message between the read and that erase writes nothing more, and
        # what it saved is found now.
        reports += [await self.erase(key) for key in await owner_keys(self._ctx.db, user_id) if key not in keys]
        return EraseReport(memories=sum(r.memories for r in reports), history=sum(r.history for r in reports))
