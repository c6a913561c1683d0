"""The reflection worker: after a turn, in the background, the model reads the user's answered
exchanges and the write path applies what it decided to their memories and story.

One worker per user (their reflections never run concurrently), REFLECTION_CONCURRENCY users at
once; a reflection never delays or breaks a reply. A batch the LLM cannot reflect stays pending
for the periodic sweep; one that fails for its own reason is set aside after
MAX_REFLECTION_ATTEMPTS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from bot.clients.llm_wire import ChatMessage
from bot.clients.locks import KeyedLocks
from bot.clients.outage import Outage
from bot.clients.storage import Connection
from bot.engine.context import EngineContext
from bot.engine.events import Receipt
from bot.errors import ExchangesGone, LLMError, LLMTooLarge, ReflectionParseError, StorageError
from bot.memory.model import Memory, OwnerKey
from bot.memory.read.indexing import Indexer
from bot.memory.stores.exchanges import (
    PendingExchange,
    mark_reflected,
    pending_exchanges,
    reflection_attempt_failed,
    reply_message_of,
    users_pending_reflection,
)
from bot.memory.stores.followups import of_exchanges
from bot.memory.stores.provenance import changes_of, produced_by, sources_of
from bot.memory.stores.stories import load_story
from bot.memory.story.plans import render_state_guide, render_story_context
from bot.memory.story.state import state_values
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import CHANGE_ACTIONS, ReflectionContext, ReflectionReport
from bot.memory.write.reflection import parse_reflection, reflection_json_schema
from bot.memory.write.reflection_prompt import Correction, build_reflection_messages

log = logging.getLogger(__name__)

# Memories shown to the reflection with their ids (its allowed_ids): every memory of the person
# when they have at most REFLECTION_EVERY (a list that only grows from one reflection to the
# next, in id order, so a server's prompt cache keeps it), else the REFLECTION_KNOWN closest to
# the exchange. 48 memories are about 4,500 characters, what 24 slots take in a reply.
REFLECTION_KNOWN = 12
REFLECTION_EVERY = 48
# Exchanges of one user reflected in one call: a burst of 30 messages costs ~8 calls, in turn.
REFLECTION_BATCH = 4
MAX_REFLECTION_ATTEMPTS = 3
# Reflections of different users running at once (one user's never run concurrently).
REFLECTION_CONCURRENCY = 2
# How soon a worker looks again when another bot process (sharing PostgreSQL) holds the user.
OTHER_PROCESS_POLL_SECONDS = 0.5
REFLECTION_EMBED_TIMEOUT = 30.0


@dataclass(slots=True)
class _Workers:
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)
    # Held while a user's reflection or consolidation writes, and by erase (never across a model
    # call): an erase never races a write.
    locks: KeyedLocks[str] = field(default_factory=KeyedLocks)


class Reflections:
    def __init__(self, ctx: EngineContext, indexer: Indexer | None = None) -> None:
        self.ctx = ctx
        self._indexer = indexer
        self._workers = _Workers()
        self._slots = asyncio.Semaphore(REFLECTION_CONCURRENCY)
        self.closing = False
        self.outage = Outage(log)
        # The last reflection report per user: what the write path decided, for the operator.
        self._last_reports: dict[str, ReflectionReport] = {}

    def last_report(self, user_id: OwnerKey) -> ReflectionReport | None:
        return self._last_reports.get(user_id)

    def forget_report(self, user_id: OwnerKey) -> None:
        self._last_reports.pop(user_id, None)

    def schedule(self, user_id: OwnerKey) -> asyncio.Task[None]:
        """Reflect the user's answered exchanges in the background, one worker per user."""
        self._workers.dirty.add(user_id)
        running = self._workers.tasks.get(user_id)
        if running is not None and not running.done():
            return running
        task = self.ctx.tasks.spawn(self._worker(user_id), name=f"reflect:{user_id}")
        self._workers.tasks[user_id] = task
        return task

    async def wait(self, user_id: OwnerKey) -> None:
        """Wait until the user's reflection worker is idle (whatever became of its batch)."""
        task = self._workers.tasks.get(user_id)
        if task is not None:
            await asyncio.wait([task])

    async def resume_pending(self) -> int:
        """After a restart (and periodically): reflect every answered, unreflected exchange."""
        users = await users_pending_reflection(self.ctx.db)
        for user_id in users:
            self.schedule(user_id)
        if users:
            log.info("resuming pending reflections for %d user(s)", len(users))
        return len(users)

    async def stop(self, user_id: OwnerKey) -> None:
        """Cancel the user's running reflection (its transaction rolls back)."""
        worker = self._workers.tasks.get(user_id)
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.wait([worker])

    def lock(self, user_id: OwnerKey) -> AbstractAsyncContextManager[None]:
        return self._workers.locks.hold(user_id)

    async def pending(self, user_id: OwnerKey) -> list[PendingExchange]:
        exchanges = await pending_exchanges(self.ctx.db, user_id, REFLECTION_BATCH)
        if exchanges and exchanges[0].edited_from is not None:
            return exchanges[:1]  # a correction is reflected alone, with what it produced
        # One call reflects one story: later exchanges of another story wait for the next round.
        batch = []
        for e in exchanges:
            if e.edited_from is not None or e.story_id != exchanges[0].story_id or e.place != exchanges[0].place:
                break
            batch.append(e)
        return batch

    async def _worker(self, user_id: OwnerKey) -> None:
        try:
            while not self.closing:
                self._workers.dirty.discard(user_id)
                if not await self.pending(user_id):
                    if user_id in self._workers.dirty:
                        continue
                    break
                # The user's lock is taken for the write only (`reflect`), never across the model
                # call: an erase cancels this worker, and nothing else waits for a model.
                async with self._slots, self.ctx.db.exclusive(f"reflect:{user_id}") as mine:
                    ok: bool | None = None
                    if mine:
                        # Read once the user is this worker's alone: while it waited for a
                        # slot or for another process, that process may have reflected what
                        # was pending, and the model would be asked about it a second time.
                        batch = await self.pending(user_id)
                        ok = await self.reflect_safely(batch) if batch else True
                if ok is None:
                    # Another bot process reflects this user now; what it leaves is seen here next.
                    await asyncio.sleep(OTHER_PROCESS_POLL_SECONDS)
                    continue
                if not ok:
                    break  # the LLM is failing: the periodic sweep retries later
        finally:
            if self._workers.tasks.get(user_id) is asyncio.current_task():
                del self._workers.tasks[user_id]

    async def reflect_safely(self, batch: list[PendingExchange]) -> bool:
        """A reflection that fails for any other reason counts as a failed attempt: a batch
        that always fails is set aside after MAX_REFLECTION_ATTEMPTS instead of blocking the
        user's later exchanges forever."""
        try:
            return await self.reflect(batch)
        except StorageError:
            return False  # not the batch's fault: it stays pending, the periodic sweep retries
        except ExchangesGone as exc:
            log.info("a reflection was rolled back: %s", exc)
            return True
        except Exception as exc:
            self.ctx.metrics.reflections.labels("crashed").inc()
            log.exception("reflection of %d exchange(s) crashed", len(batch))
            await self._failed(batch, f"{type(exc).__name__}: {exc}", give_up=True)
            return True

    async def _known(
        self, first: PendingExchange, user_text: str, *, continuing: bool
    ) -> tuple[list[Memory], Correction | None, frozenset[int]]:
        """The memories shown with their ids; for an edited message, what it produced first.
        A reflection that continues the reply's conversation reads its list after the
        conversation, where no cache keeps it: the closest ones only."""
        ctx = self.ctx
        known: list[Memory] | None = None
        if not continuing:
            entry = await ctx.cache.get(first.user_id)
            slots = entry.candidates(ctx.clock(), story_id=first.story_id, place=first.place, share=False)
            if slots.size <= REFLECTION_EVERY:
                known = entry.memories(slots)
        if known is None:
            known = await ctx.recall.neighbours(
                first.user_id,
                user_text,
                story_id=first.story_id,
                place=first.place,
                limit=REFLECTION_KNOWN,
                timeout=REFLECTION_EMBED_TIMEOUT,
            )
        # In id order: from one reflection to the next the list changes little, and at its end.
        known.sort(key=lambda m: m.id)
        if first.edited_from is None:
            return known, None, frozenset()
        produced = [
            m
            for m in [await ctx.store.get(first.user_id, i) for i in await produced_by(ctx.db, first.user_id, first.id)]
            if m is not None
        ]
        correction = Correction(first.edited_from, [m.id for m in produced])
        known = produced + [m for m in known if m.id not in correction.produced]
        correctable = frozenset([m.id for m in produced if await sources_of(ctx.db, first.user_id, m.id) == [first.id]])
        return known, correction, correctable

    async def reflect(self, batch: list[PendingExchange]) -> bool:
        """Reflect one batch. False when the LLM failed (the batch stays pending)."""
        ctx = self.ctx
        first, last = batch[0], batch[-1]
        ids = [e.id for e in batch]
        character = ctx.cast.character_of_key(first.user_id)
        specs = ctx.specs(character.key)
        others = ctx.scenes.others(first.story_id, besides=first.user_name)
        user_text = "\n".join(e.user_message for e in batch)
        conversation = self._conversation(batch)
        known, correction, correctable = await self._known(first, user_text, continuing=bool(conversation))
        # A dated memory the character asked about in these exchanges (bot/engine/followups.py):
        # shown with its id, though its date has passed, so that what the person answered
        # replaces it or is added beside it.
        followed = [
            m
            for m in [await ctx.store.get(first.user_id, i) for i in await of_exchanges(ctx.db, first.user_id, ids)]
            if m is not None
        ]
        known = followed + [m for m in known if m.id not in {f.id for f in followed}]
        story = await load_story(ctx.db, first.user_id, first.story_id)
        story_block = render_story_context(
            story.anchors,
            story.summary,
            story.positions,
            state_values(specs, story.state),
            specs,
            show_ids=True,
            describe_state=False,
        )
        messages = build_reflection_messages(
            character=character.name,
            user=first.user_name,
            exchanges=[(e.user_message, e.reply) for e in batch],
            known=known,
            today=ctx.clock().date(),
            story_context=story_block,
            state_keys=list(specs),
            state_guide=render_state_guide(specs),
            correction=correction,
            others=others,
            lore=[e.name for e in character.lore.entries] if character.lore is not None else [],
            conversation=conversation,
            followups=followed,
        )
        try:
            answer = await ctx.calls.chat(
                "reflection",
                messages,
                model=ctx.settings.reflection_model,
                json_schema=reflection_json_schema(),
                timeout=ctx.settings.reflection_timeout_seconds,
            )
            parsed = parse_reflection(answer.text)
        except LLMTooLarge as exc:
            # Not an outage: the same prompt would run away again, so it counts towards giving up.
            ctx.metrics.reflections.labels("rejected").inc()
            await self._failed(batch, f"LLM: {exc}", give_up=True)
            return True
        except LLMError as exc:
            ctx.metrics.reflections.labels("llm_failed").inc()
            self.outage.failed("reflections fail, exchanges stay pending: %s", exc)
            await self._failed(batch, f"LLM: {exc}", give_up=False)
            return False
        except ReflectionParseError as exc:
            ctx.metrics.reflections.labels("rejected").inc()
            await self._failed(batch, f"unparseable reflection: {exc}", give_up=True)
            return True
        context = ReflectionContext(
            user_id=first.user_id,
            allowed_ids=frozenset(m.id for m in known),
            character_name=character.name,
            user_message=user_text,
            user_name=first.user_name,
            story_id=first.story_id,
            place=first.place,
            source=last.message_id or f"exchange {last.id}",
            state_specs=specs,
            max_memories=ctx.settings.max_memories_per_user,
            exchange_ids=tuple(ids),
            correctable=correctable,
            other_names=tuple(others),
        )

        async def finalize(conn: Connection) -> None:
            # The text read is still the message's: an edit meanwhile makes it pending again.
            marked = 0
            for e in batch:
                marked += await mark_reflected(conn, first.user_id, e, now=ctx.clock())
            if marked != len(ids):
                raise ExchangesGone(f"{len(ids) - marked} exchange(s) erased, edited or already reflected")

        self.outage.recovered("reflections work again after %d failed attempt(s)")
        # What the model was shown may have changed meanwhile (a consolidation, a command): the
        # apply reads the memories again in its transaction, and an id gone is "no such memory".
        async with self.lock(first.user_id):
            report = await apply_reflection(
                ctx.db,
                parsed.reflection,
                context,
                problems=parsed.problems,
                clock=ctx.clock,
                finalize=finalize,
                indexes=ctx.write_indexes,
            )
        self._last_reports[first.user_id] = report
        ctx.metrics.reflections.labels("applied").inc()
        written = [d.memory_id for d in report.decisions if d.action in CHANGE_ACTIONS and d.memory_id is not None]
        if written:
            ctx.tasks.spawn(self._after_written(first.user_id, written), name=f"after-reflection:{first.user_id}")
            # The count covers every reflection of this exchange (a correction adds to it).
            changes = len(await changes_of(ctx.db, first.user_id, last.id))
            # Read again: the reply may have been sent while it was reflected.
            message_id = await reply_message_of(ctx.db, first.user_id, last.id)
            await ctx.events.receipt(Receipt(first.user_id, last.id, last.story_id, message_id, changes))
        return True

    async def _after_written(self, user_id: OwnerKey, written: list[int]) -> None:
        """What the person's next message, seconds away, would otherwise do while they wait:
        the memories just written embedded (scored by meaning, not by a lexical stand-in), then
        their cache entry read up to them."""
        if self._indexer is not None:
            await self._indexer.written(user_id, written)
        with contextlib.suppress(StorageError):  # counted and logged by the database; the turn reads them
            await self.ctx.cache.catch_up(user_id)

    def _conversation(self, batch: list[PendingExchange]) -> list[ChatMessage]:
        """The reply's conversation the reflection continues, or none.

        On a server that takes one request at a time (LLM_CONCURRENCY=1, Ollama's default) one
        prompt is all it keeps: the reflection then continues the reply call of the batch's last
        exchange, with the answer kept, so that the server reads only the reflection's part and
        the next reply extends what it holds. Not when the reflection has a model of its own,
        nor for a prompt that showed an image (the reflection never sees one), nor once that
        prompt is forgotten (a restart): the reflection then starts with its own instructions,
        which a server with more slots keeps from one reflection to the next.
        """
        if not self.ctx.reflection_continues():
            return []
        last = batch[-1]
        sent = self.ctx.prompts.sent(last.user_id, last.story_id, last.id)
        if sent is None or any("images" in m for m in sent.messages):
            return []
        # The answer kept (another one, if the person swiped to it), as the conversation goes on.
        return [*sent.messages, {"role": "assistant", "content": last.reply}]

    async def _failed(self, batch: list[PendingExchange], error: str, *, give_up: bool) -> None:
        """Count the attempt; after MAX_REFLECTION_ATTEMPTS the exchanges are set aside, logged."""
        if give_up:  # the batch's own fault (an LLM outage is logged once, by its Outage)
            log.warning("reflection of %d exchange(s) failed: %s", len(batch), error)
        async with self.ctx.db.write() as conn:
            for e in batch:
                attempts = e.attempts + 1
                set_aside = self.ctx.clock() if (give_up and attempts >= MAX_REFLECTION_ATTEMPTS) else None
                await reflection_attempt_failed(
                    conn, e.user_id, e.id, attempts=attempts, error=error, set_aside_at=set_aside
                )
        if give_up and all(e.attempts + 1 >= MAX_REFLECTION_ATTEMPTS for e in batch):
            log.error("gave up reflecting %d exchange(s) after %d attempts", len(batch), MAX_REFLECTION_ATTEMPTS)
