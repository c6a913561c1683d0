"""Importing a past conversation (`python -m bot import`): its exchanges reflected in order, by
the same reflection as live ones, on the engine's clock set to each exchange's own time.

The engine that imports is built for it (`ReplayClock` is its clock): then the reflection reads
"today" as the day of the exchange, recall sees the memories that were true then (a dated fact
not expired yet), and every memory, version and receipt is dated by the original message. Once
every exchange is reflected, a dated memory whose date has passed is kept as history (its expiry
removed, archived first: a follow-up never asks about it, and it stays in context), and the
story's summary is rebuilt from the whole conversation; then the conversation is recorded as
imported.

- **Resumable, idempotent.** Every exchange is saved first, in one transaction, under a key
  made of the conversation and its content (`Exchange.key`), its reply held back until its turn:
  an import stopped anywhere (Ctrl-C, kill -9, the model down) continues where it stopped when
  run again, and a conversation already imported writes nothing.
- **One person at a time.** The import holds the person's reflection claim (the lock a bot
  process takes to reflect them) for its whole run; a bot running beside it reflects everyone
  else as usual, and this person's live exchanges after the import.
- **Live turns first.** Before each model call the import waits while a turn, in any process
  sharing the database, waits for its reply (`live_turn_waiting`): an import never delays a
  reply by more than the one call it has under way. One exchange per call, in order (each
  reflection reads the memories the previous ones wrote): the live path's own prompts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bot.characters.character import Character
from bot.characters.transcripts import Exchange, Transcript
from bot.clients.llm_wire import ChatMessage
from bot.clients.storage import Connection
from bot.engine.context import EngineContext
from bot.engine.reflection_worker import MAX_REFLECTION_ATTEMPTS, Reflections
from bot.errors import ImportStopped, LLMError, StorageError
from bot.memory.model import DM_PLACE, Cause, OwnerKey, PersonId, StoryId, utcnow
from bot.memory.quoting import quote_block
from bot.memory.read.indexing import Indexer
from bot.memory.stores import imports as store
from bot.memory.stores.exchanges import PendingExchange
from bot.memory.stores.memories import set_expiry
from bot.memory.stores.stories import apply_story_reflection, load_story
from bot.memory.story.plans import MAX_SUMMARY_CHARS
from bot.memory.write.decisions import CHANGE_ACTIONS

log = logging.getLogger(__name__)

# How often an import looks again whether live turns still wait for the model.
LIVE_POLL_SECONDS = 0.05
# The summary is rebuilt from the story as it stands and this much of the conversation's end.
SUMMARY_SOURCE_CHARS = 12_000
HISTORY_CAUSE = Cause("other", detail="import: a dated fact whose date had passed, kept as history")
SUMMARY_CAUSE = Cause("other", detail="import: the summary rebuilt")


class ReplayClock:
    """The clock of an engine that imports: the time of the exchange being reflected."""

    def __init__(self) -> None:
        self.at: datetime | None = None

    def __call__(self) -> datetime:
        return self.at if self.at is not None else utcnow()


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """Whose memory, which story and place, and the exchanges in order with their keys."""

    owner: OwnerKey
    user_name: str
    character: Character
    story_id: StoryId
    place: str
    exchanges: list[Exchange]
    keys: list[str]

    @property
    def source(self) -> str:
        return hashlib.sha256("\n".join(self.keys).encode()).hexdigest()[:32]


@dataclass(slots=True)
class ImportProgress:
    done: int = 0
    total: int = 0
    memories: int = 0  # memories added, replaced or forgotten
    model_seconds: float = 0.0
    skipped: int = 0  # exchanges imported by an earlier run
    set_aside: int = 0  # exchanges whose reflection kept failing (as live ones, set aside)
    history: int = 0  # dated memories kept as history
    summary: bool = False
    already: bool = False  # the whole conversation was imported before: nothing written


@dataclass(slots=True)
class Imports:
    """The import part of an engine (its port: `engine.operator.import_conversation`), which
    runs on an engine built with a ReplayClock."""

    ctx: EngineContext
    reflections: Reflections
    indexer: Indexer | None = None
    _live_since: Callable[[], datetime] = field(default=lambda: utcnow() - timedelta(minutes=5))

    def plan(self, transcript: Transcript, person_id: PersonId, character: Character) -> ImportPlan:
        """The conversation as this engine would import it, without writing anything."""
        owner = self.ctx.cast.memory_key(person_id, character)
        place = DM_PLACE if transcript.direct or transcript.guild_id is None else transcript.guild_id
        exchanges = transcript.exchanges()
        story_id = StoryId(transcript.story)
        return ImportPlan(
            owner, transcript.person_name or person_id, character, story_id, place, exchanges,
            [e.key(owner, story_id) for e in exchanges],
        )  # fmt: skip

    async def run(
        self, plan: ImportPlan, on_progress: Callable[[ImportProgress], None] = lambda p: None
    ) -> ImportProgress:
        """Import the conversation; ImportStopped (with how far it went) when the model or the
        database stops answering: running it again continues."""
        ctx = self.ctx
        clock = ctx.clock
        if not isinstance(clock, ReplayClock):
            raise TypeError("an import runs on an engine whose clock is a ReplayClock")
        progress = ImportProgress(total=len(plan.exchanges))
        if await store.finished(ctx.db, plan.owner, plan.story_id, plan.source):
            progress.already, progress.done, progress.skipped = True, progress.total, progress.total
            return progress
        async with ctx.db.exclusive(f"reflect:{plan.owner}") as mine:
            if not mine:
                raise ImportStopped(
                    "a bot process is writing this person's memories right now: run it again in a minute"
                )
            ids = await self._save(plan)
            start = utcnow()
            for n, (exchange, key, (exchange_id, reflected)) in enumerate(zip(plan.exchanges, plan.keys, ids), 1):
                if reflected:
                    progress.skipped += 1
                else:
                    clock.at = _when(exchange, start, n)
                    await self._reflect(plan, exchange, key, exchange_id, progress)
                progress.done = n
                on_progress(progress)
            clock.at = _when(plan.exchanges[-1], start, len(plan.exchanges)) if plan.exchanges else None
            progress.history = await self._keep_as_history(plan.owner)
            progress.summary = await self._rebuild_summary(plan)
            async with ctx.db.write() as conn:
                await store.finish(conn, plan.owner, plan.story_id, plan.source, len(plan.exchanges), clock())
        clock.at = None
        return progress

    async def _save(self, plan: ImportPlan) -> list[tuple[int, bool]]:
        """Every exchange of the conversation stored (those a run before saved are kept):
        (its row, whether it was reflected), in order."""
        ctx = self.ctx
        found = await store.saved(ctx.db, plan.owner, plan.story_id)
        start = utcnow()
        missing = [(n, e, k) for n, (e, k) in enumerate(zip(plan.exchanges, plan.keys), 1) if k not in found]
        if missing:
            async with ctx.db.write() as conn:
                for n, exchange, key in missing:
                    found[key] = store.Saved(
                        await store.save(
                            conn, plan.owner, key=key, user_name=plan.user_name, story_id=plan.story_id,
                            place=plan.place, text=exchange.text, at=exchange.at or _when(exchange, start, n),
                        ),
                        False,
                    )  # fmt: skip
        return [(found[k].exchange_id, found[k].reflected) for k in plan.keys]

    async def _live_first(self) -> None:
        # The turns may be another process's: the database is what tells, read again until none waits.
        while await store.live_turn_waiting(self.ctx.db, self._live_since()):  # noqa: ASYNC110
            await asyncio.sleep(LIVE_POLL_SECONDS)

    async def _reflect(
        self, plan: ImportPlan, exchange: Exchange, key: str, exchange_id: int, progress: ImportProgress
    ) -> None:
        ctx = self.ctx
        at = ctx.clock()
        async with ctx.db.write() as conn:
            await store.answer(conn, plan.owner, exchange_id, exchange.reply, at)
        # Its key is where its memories came from (their source), as a message id would be.
        pending = PendingExchange(
            exchange_id, plan.owner, plan.user_name, plan.story_id, plan.place, key, exchange.text, exchange.reply,
            0, None, None,
        )  # fmt: skip
        for attempt in range(1, MAX_REFLECTION_ATTEMPTS + 1):
            await self._live_first()
            started = time.perf_counter()
            try:
                ok = await self.reflections.reflect([pending])
            except StorageError as exc:
                raise ImportStopped(f"the database failed ({exc})", progress.done) from None
            except Exception as exc:
                log.warning("the reflection of an imported exchange failed: %s", exc)
                ok = True
            finally:
                progress.model_seconds += time.perf_counter() - started
            if not ok:
                raise ImportStopped("the model could not be reached", progress.done)
            if await self._reflected(plan.owner, exchange_id):
                report = self.reflections.last_report(plan.owner)
                if report is not None:
                    progress.memories += sum(1 for d in report.decisions if d.action in CHANGE_ACTIONS and d.memory_id)
                break
            if attempt == MAX_REFLECTION_ATTEMPTS:
                progress.set_aside += 1
            pending = dataclasses.replace(pending, attempts=attempt)
        if self.indexer is not None:
            # What a live conversation would have had: the memories written so far embedded.
            await self.indexer.run_once()

    async def _reflected(self, owner: OwnerKey, exchange_id: int) -> bool:
        return await store.reflected(self.ctx.db, owner, exchange_id)

    async def _keep_as_history(self, owner: OwnerKey) -> int:
        """Dated memories of the import whose date has passed (now, not then) are history."""
        ctx = self.ctx
        passed = await store.passed_dates(ctx.db, owner, utcnow())
        if passed:
            async with ctx.db.write() as conn:
                for memory_id, _ in passed:
                    await set_expiry(conn, owner, memory_id, None, cause=HISTORY_CAUSE, now=ctx.clock())
        return len(passed)

    async def _rebuild_summary(self, plan: ImportPlan) -> bool:
        """The story's summary written again from the story as it stands and the end of the
        conversation; False when the model did not give one (the next run tries again)."""
        ctx = self.ctx
        story = await load_story(ctx.db, plan.owner, plan.story_id)
        recent: list[str] = []
        used = 0
        for e in reversed(plan.exchanges):
            block = f"{plan.user_name}: {e.text}\n{plan.character.name}: {e.reply}"
            if used + len(block) > SUMMARY_SOURCE_CHARS:
                break
            recent.insert(0, block)
            used += len(block)
        messages: list[ChatMessage] = [
            {"role": "system", "content": (
                f"You keep the summary of the story between {plan.character.name} and {plan.user_name}. "
                f"Rewrite it in full from the summary so far and the end of the conversation below: the "
                f"whole story, older events shortened, at most {MAX_SUMMARY_CHARS} characters. Answer with "
                'the JSON object {"summary": "..."} only.'
            )},
            {"role": "user", "content": (
                f"Summary so far:\n{quote_block(story.summary or '(none)')}\n\nThe end of the conversation:\n"
                + quote_block("\n\n".join(recent))
            )},
        ]  # fmt: skip
        await self._live_first()
        try:
            answer = await ctx.calls.chat(
                "import", messages, model=ctx.settings.reflection_model, timeout=ctx.settings.reflection_timeout_seconds,
                json_schema=SUMMARY_SCHEMA,
            )  # fmt: skip
            summary = _summary_of(answer.text)
        except LLMError as exc:
            log.warning("the imported story's summary was not rebuilt: %s", exc)
            raise ImportStopped(
                "the model could not be reached to rebuild the story's summary", len(plan.exchanges)
            ) from None
        if summary is None:
            return False
        async with ctx.db.write() as conn:
            await self._write_summary(conn, plan, summary)
        return True

    async def _write_summary(self, conn: Connection, plan: ImportPlan, summary: str) -> None:
        await apply_story_reflection(
            conn, plan.owner, plan.story_id, summary=summary, anchor_add=None, anchor_remove=None, positions=None,
            state_deltas=None, specs=self.ctx.specs(plan.character.key), cause=SUMMARY_CAUSE,
            now=self.ctx.clock(),
        )  # fmt: skip


SUMMARY_SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


def _summary_of(text: str) -> str | None:
    try:
        value = json.loads(text[text.find("{") : text.rfind("}") + 1])
    except (ValueError, RecursionError):
        return None
    summary = value.get("summary") if isinstance(value, dict) else None
    return summary.strip() if isinstance(summary, str) and summary.strip() else None


def _when(exchange: Exchange, start: datetime, n: int) -> datetime:
    """The exchange's original time (its reply's); a transcript without dates reads as said
    when it is imported, a microsecond apart so that its order holds."""
    return exchange.replied_at or exchange.at or start + timedelta(microseconds=n)
