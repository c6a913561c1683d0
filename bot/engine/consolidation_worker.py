"""The consolidation job: in the background, series of look-alike memories (bot/memory/series.py)
of the people who spoke lately are rewritten into one memory each, by the reflection model,
checked by code (bot/memory/consolidation/proposal.py), applied in one transaction, undoable.

An APScheduler interval job (CONSOLIDATION_INTERVAL_SECONDS) runs `run_once`: the people who spoke
in the last RECENT_DAYS, most recent first, their series largest first, at most
CONSOLIDATION_SERIES_PER_RUN model calls in all. Never inside a turn. Each series is asked under
the reflection worker's claim on the user (one process at a time per user, never waited for),
and applied under the user's reflection lock, which is never held across the model call: an
erase of that person cancels the call (`stop`) and never waits for it. A member changed, pinned
or gone since the series was read (an erase included) leaves the series as it is. A refused
series is not asked again until one of its members changes; a series whose check or write fails
for any other reason is logged, counted and skipped, and the job goes on with the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from bot.clients.outage import Outage
from bot.engine.context import EngineContext
from bot.engine.reflection_worker import Reflections
from bot.errors import InvalidMemory, LLMError, ReflectionParseError, StorageError
from bot.memory.consolidation.proposal import (
    Refusal,
    build_consolidation_messages,
    check_proposal,
    consolidation_json_schema,
    parse_proposal,
)
from bot.memory.consolidation.scan import ScanFigures
from bot.memory.model import NewMemory, OwnerKey
from bot.memory.series import Series
from bot.memory.stores.consolidations import consolidate, undone_by_user
from bot.memory.stores.exchanges import recent_speakers
from bot.memory.stores.provenance import copy_sources

log = logging.getLogger(__name__)

RECENT_DAYS = 7
RECENT_LIMIT = 1_000
# Refused series remembered (by user and signature) so that the model is not asked again.
REFUSED_KEPT = 10_000


@dataclass(slots=True)
class RunFigures:
    """What one run (or every run, for `Consolidations.totals`) found and decided."""

    users: int = 0
    series_found: int = 0
    consolidated: int = 0
    llm_calls: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    # Series-finding time on the event loop, and its longest slice (CPU time).
    scan_seconds: float = 0.0
    longest_slice_ms: float = 0.0


class Consolidations:
    def __init__(self, ctx: EngineContext, reflections: Reflections) -> None:
        self.ctx = ctx
        self.reflections = reflections
        self.outage = Outage(log)
        self._refused: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.totals = RunFigures()
        self._running = asyncio.Lock()
        # The model call under way for each user: an erase cancels it (`stop`).
        self._asking: dict[OwnerKey, asyncio.Future[Any]] = {}

    async def run_once(self) -> RunFigures:
        """One pass over the recent speakers, within the run's budget of model calls."""
        figures = RunFigures()
        budget = self.ctx.settings.consolidation_series_per_run
        if budget <= 0:
            return figures
        async with self._running:
            now = self.ctx.clock()
            speakers = await recent_speakers(self.ctx.db, now - timedelta(days=RECENT_DAYS), RECENT_LIMIT)
            users = list(dict.fromkeys(user for user, _ in speakers))
            for user_id in users:
                if figures.llm_calls >= budget or self.reflections.closing:
                    break
                figures.users += 1
                try:
                    await self.consolidate_user(user_id, figures, budget)
                except StorageError as exc:
                    log.warning("consolidation stopped for now: %s", exc)
                    break
        self._add(figures)
        return figures

    def _add(self, figures: RunFigures) -> None:
        t = self.totals
        t.users += figures.users
        t.series_found += figures.series_found
        t.consolidated += figures.consolidated
        t.llm_calls += figures.llm_calls
        t.refused.update(figures.refused)
        t.scan_seconds += figures.scan_seconds
        t.longest_slice_ms = max(t.longest_slice_ms, figures.longest_slice_ms)

    async def find(self, user_id: OwnerKey, figures: RunFigures | None = None) -> Sequence[Series]:
        """The user's series as the cache holds their memories now: only the memories changed
        since the last run are read again, the first run of a large user in the worker process
        (bot/memory/consolidation/scan.py)."""
        scan = ScanFigures()
        series = await self.ctx.series_scan.series(user_id, self.ctx.settings.series_min_members, scan)
        if figures is not None:
            figures.series_found += len(series)
            figures.scan_seconds += scan.seconds
            figures.longest_slice_ms = max(figures.longest_slice_ms, scan.longest_slice_ms)
        return series

    async def stop(self, user_id: OwnerKey) -> None:
        """Cancel the model call of a consolidation of this user (their erase): the series is
        left as it is, and the job goes on with the next person."""
        asking = self._asking.get(user_id)
        if asking is not None and not asking.done():
            asking.cancel()
            await asyncio.wait([asking])

    async def consolidate_user(self, user_id: OwnerKey, figures: RunFigures, budget: int) -> None:
        # A consolidation the user undid is theirs to keep undone: its members are not asked
        # again together, only once the series holds a memory more. Read whole, however many
        # consolidations came after it.
        undone = await undone_by_user(self.ctx.db.reader, user_id)
        for series in await self.find(user_id, figures):
            if figures.llm_calls >= budget or self.reflections.closing:
                return
            if (user_id, series.signature) in self._refused:
                continue
            if any(frozenset(m.id for m in series.members) <= members for members in undone):
                continue
            async with self.ctx.db.exclusive(f"reflect:{user_id}") as mine:
                if not mine:
                    return  # another process reflects or consolidates this user now
                try:
                    outcome = await self.consolidate_series(user_id, series, figures)
                except StorageError:
                    raise  # the disk, not the series: the run stops (run_once)
                except Exception as exc:
                    # One series' failure never stops the job: logged, counted, not asked again.
                    log.warning(
                        "consolidation of %d memories failed, skipped: %s: %s",
                        len(series.members),
                        type(exc).__name__,
                        exc,
                    )
                    outcome = self._refuse(user_id, series, Refusal("failed", f"{type(exc).__name__}: {exc}"), figures)
            if outcome is None:
                return  # the model is failing: the next run tries again
            if outcome == "erased":
                return  # the person is being erased: nothing more of theirs

    async def consolidate_series(self, user_id: OwnerKey, series: Series, figures: RunFigures) -> str | None:
        """Ask the model for one memory holding the series, check it, apply it. The outcome
        ("applied" or the refusal's reason), or None when the model did not answer."""
        ctx = self.ctx
        character = ctx.cast.character_of_key(user_id)
        members = list(series.members)
        messages = build_consolidation_messages(character=character.name, user="the user", members=members)
        figures.llm_calls += 1
        asking = asyncio.ensure_future(
            ctx.calls.chat(
                "consolidation",
                messages,
                model=ctx.settings.reflection_model,
                json_schema=consolidation_json_schema(),
                timeout=ctx.settings.reflection_timeout_seconds,
            )
        )
        self._asking[user_id] = asking
        try:
            answer = await asking
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if asking.cancelled() and (current is None or not current.cancelling()):
                log.info("consolidation of %d memories stopped: the person is being erased", len(members))
                return "erased"
            raise
        except LLMError as exc:
            ctx.metrics.consolidations.labels("llm_failed").inc()
            self.outage.failed("consolidations fail, series stay as they are: %s", exc)
            return None
        finally:
            if self._asking.get(user_id) is asking:
                del self._asking[user_id]
        self.outage.recovered("consolidations work again after %d failed call(s)")
        try:
            proposal = parse_proposal(answer.text)
        except ReflectionParseError as exc:
            return self._refuse(user_id, series, Refusal("unparseable", str(exc)), figures)
        first = members[0]
        try:
            # Checked in the form it would be stored in: NFKC writes "…" as "...", which can take
            # a text of 500 characters past the store's limit.
            new = NewMemory(
                text=proposal.text,
                type=first.type,
                scope=first.scope,
                confidence=max(m.confidence for m in members),
                story_id=first.story_id,
                place=first.place,
                source=max(members, key=lambda m: m.updated_at).source,
            ).validated()
        except InvalidMemory as exc:
            return self._refuse(user_id, series, Refusal("unstorable", str(exc)), figures)
        refusal = check_proposal(members, replace(proposal, text=new.text), character_name=character.name)
        if refusal is not None:
            return self._refuse(user_id, series, refusal, figures)
        # The user's lock for the write only: a reflection or an erase of theirs waits for one
        # transaction at most, never for a model.
        async with self.reflections.lock(user_id), ctx.db.write() as conn:
            new_id = await consolidate(conn, user_id, members, new, now=ctx.clock())
            if new_id is not None:
                await copy_sources(conn, user_id, [m.id for m in members], new_id)
        if new_id is None:
            # Not remembered as refused: the series is read again, as it is now, next run.
            ctx.metrics.consolidations.labels("changed").inc()
            figures.refused["changed"] += 1
            log.info("consolidation of %d memories left alone: one changed or left meanwhile", len(members))
            return "changed"
        ctx.metrics.consolidations.labels("applied").inc()
        figures.consolidated += 1
        log.info("consolidated %d memories into #%d", len(members), new_id)
        return "applied"

    def _refuse(self, user_id: OwnerKey, series: Series, refusal: Refusal, figures: RunFigures) -> str:
        self.ctx.metrics.consolidations.labels(refusal.reason).inc()
        figures.refused[refusal.reason] += 1
        log.info("consolidation of %d memories refused (%s): %s", len(series.members), refusal.reason, refusal.detail)
        self._refused[(user_id, series.signature)] = refusal.reason
        while len(self._refused) > REFUSED_KEPT:
            self._refused.popitem(last=False)
        return refusal.reason
