"""The operator's port: the jobs the composition root schedules, the owner's page's read-only
report, what the last reflections decided, and a past conversation imported."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.characters.character import Character
from bot.characters.transcripts import Transcript
from bot.engine.consolidation_worker import Consolidations, RunFigures
from bot.engine.context import EngineContext
from bot.engine.importing import ImportPlan, ImportProgress, Imports
from bot.engine.llm_calls import ModelFigures
from bot.engine.reflection_worker import Reflections
from bot.memory.cache.warm_up import WarmUp, warm_up
from bot.memory.model import OwnerKey, PersonId
from bot.memory.read.indexing import Indexer
from bot.memory.reports.page import Report
from bot.memory.write.decisions import ReflectionReport

if TYPE_CHECKING:
    from apscheduler.job import Job
    from apscheduler.schedulers.asyncio import AsyncIOScheduler


class Operator:
    def __init__(
        self, ctx: EngineContext, reflections: Reflections, consolidations: Consolidations, indexer: Indexer | None
    ) -> None:
        self._ctx = ctx
        self._reflections = reflections
        self._consolidations = consolidations
        self._indexer = indexer
        self._warming: asyncio.Task[WarmUp] | None = None
        self._report = Report(ctx.db)
        self._imports = Imports(ctx, reflections, indexer)

    @property
    def report(self) -> Report:
        """The owner's page's read-only view of the memory (it reads nothing through the stores)."""
        return self._report

    def model_figures(self) -> ModelFigures:
        """The language model's figures since start-up (its context, its prompts by kind)."""
        return self._ctx.calls.figures()

    # --- scheduled jobs -------------------------------------------------------------------------

    async def consolidate(self) -> RunFigures:
        """One run of the consolidation job (scheduled by the composition root, never in a turn)."""
        return await self._consolidations.run_once()

    async def resume_pending_reflections(self) -> int:
        """After a restart (and periodically): reflect every answered, unreflected exchange; the
        number of people who had some."""
        return await self._reflections.resume_pending()

    def schedule_indexing(self, scheduler: AsyncIOScheduler, seconds: float) -> Job | None:
        """Embed stale memories every `seconds` (none without an embedder)."""
        return self._indexer.schedule(scheduler, seconds=seconds) if self._indexer is not None else None

    async def index_pending(self) -> int:
        """Embed the memories written since the last run, now; how many got a vector."""
        return await self._indexer.run_once() if self._indexer is not None else 0

    # --- a past conversation imported (`python -m bot import`) -----------------------------------

    def import_plan(self, transcript: Transcript, person_id: PersonId, character: Character) -> ImportPlan:
        """The conversation as this engine would import it, without writing anything."""
        return self._imports.plan(transcript, person_id, character)

    async def import_conversation(
        self, plan: ImportPlan, on_progress: Callable[[ImportProgress], None] = lambda p: None
    ) -> ImportProgress:
        """Import it, each exchange reflected as of its own date (an engine built with a
        ReplayClock, bot/engine/importing.py); ImportStopped with how far it went when the model
        or the database stops answering: running it again continues."""
        return await self._imports.run(plan, on_progress)

    # --- reflections ----------------------------------------------------------------------------

    def schedule_reflection(self, user_id: OwnerKey) -> asyncio.Task[None]:
        """Reflect the user's answered exchanges in the background (a turn already does)."""
        return self._reflections.schedule(user_id)

    async def wait_reflections(self, user_id: OwnerKey) -> None:
        """Wait until the user's reflection worker is idle (whatever became of its batch)."""
        await self._reflections.wait(user_id)

    def last_reflection(self, user_id: OwnerKey) -> ReflectionReport | None:
        """What the user's last reflection decided, item by item (None before the first)."""
        return self._reflections.last_report(user_id)

    # --- the start-up warm-up and the background ------------------------------------------------

    def warm_up(self) -> None:
        """Read ahead, in the background, the memories of the people who spoke lately."""
        if self._warming is None:
            ctx = self._ctx
            self._warming = ctx.tasks.spawn(
                warm_up(ctx.db, ctx.cache, ctx.clock, ctx.write_indexes.warm), name="warm-up"
            )

    async def warmed(self) -> WarmUp | None:
        """The warm-up's figures once it ended (None when it never started)."""
        return await self._warming if self._warming is not None else None

    def stop_warm_up(self) -> None:
        """Only a head start: whatever it did not read, the people's turns will."""
        if self._warming is not None:
            self._warming.cancel()

    async def wait_background(self, timeout: float | None = None) -> bool:
        """Wait for the background work under way (reflections, receipts, recordings); False
        when `timeout` passed first."""
        return await self._ctx.tasks.wait(timeout)
