"""One turn: a message in, a reply out, from any front end.

The turn persists the exchange, selects the author's memories, fits the prompt into the model's
context (bot/engine/fitting.py), calls the LLM, and only then schedules the reflection; a
reflection never delays or breaks a reply. The message in and the result out are
bot/engine/turn_values.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from bot.characters.character import Character
from bot.clients.llm import OnText
from bot.clients.llm_wire import ChatMessage, ChatReply, TokenUsage
from bot.clients.outage import Outage
from bot.clients.storage import Connection, to_db
from bot.engine.context import EngineContext
from bot.engine.fitting import ContextTooSmall, answer_fitted
from bot.engine.followups import Followups
from bot.engine.llm_calls import final_reply
from bot.engine.open_exchanges import OpenExchanges
from bot.engine.prompting import ChannelLine
from bot.engine.reflection_worker import Reflections
from bot.engine.reply_prompt import ReplyPrompts, TurnMessage
from bot.engine.turn_values import Incoming, TurnResult
from bot.errors import LLMError, LLMStreamCut, StorageError
from bot.memory.choice import TurnFigures, TurnSelection
from bot.memory.model import Memory, OwnerKey, PersonId, StoryId
from bot.memory.quoting import speaker_name
from bot.memory.read.conversation import Line
from bot.memory.read.recall import TurnVectors
from bot.memory.stores import settings as settings_store
from bot.memory.stores.edits import save_parts
from bot.memory.stores.epoch import begin_turn, still_current
from bot.memory.stores.exchanges import (
    MessagePart,
    answer_exchange,
    exchange_failed,
    hold_reply,
    message_text,
    save_exchange,
    set_reply,
)
from bot.memory.stores.stories import load_story
from bot.memory.story.plans import render_story_context
from bot.memory.story.positions import select_positions
from bot.memory.story.state import StateSpec, state_values
from bot.memory.text import storable

log = logging.getLogger(__name__)

# Asked with a write transaction's connection: whether the person was erased since the turn began.
Erased = Callable[[Connection], Awaitable[bool]]


class Turns:
    def __init__(self, ctx: EngineContext, exchanges: OpenExchanges, reflections: Reflections) -> None:
        self.ctx = ctx
        self.exchanges = exchanges
        self.reflections = reflections
        self.followups = Followups(ctx)
        self.outage = Outage(log)
        self._recording: dict[str, set[asyncio.Task[None]]] = {}
        # (owner, story) → the clock of its next turn, for lorebooks with timed entries.
        self.prompts = ReplyPrompts(ctx)

    async def wait_recorded(self, user_id: OwnerKey) -> None:
        pending = list(self._recording.get(user_id, ()))
        if pending:
            await asyncio.wait(pending)
        # The candidate counts a user with many memories holds in memory, written before a read.
        await self.ctx.recall.flush_counts(user_id)

    def read_ahead(self, user_id: OwnerKey, story_id: StoryId, text: str, history: Sequence[ChannelLine]) -> None:
        query = message_text(text, self.ctx.settings.max_message_chars)
        self.ctx.tasks.spawn(
            self.ctx.recall.prepare_turn(user_id, story_id, query, conversation_of(history)), name="conversation:ahead"
        )

    async def run(self, msg: Incoming, rules: Sequence[Memory], *, on_text: OnText | None = None) -> TurnResult:
        msg = _storable(msg, self.ctx.settings.max_message_chars)
        text = message_text(msg.text, self.ctx.settings.max_message_chars)
        # The model embeds the query while the turn writes and reads what needs no vectors.
        vectors = self.ctx.recall.start_vectors(msg.user_id, msg.story_id, text, conversation_of(msg.history))
        try:
            # Long jobs for other people step aside while this turn does its memory work.
            with self.ctx.cache.foreground.turn(msg.user_id):
                return await self._run(msg, text, rules, vectors, on_text)
        finally:
            vectors.cancel()

    async def _run(
        self,
        msg: Incoming,
        text: str,
        rules: Sequence[Memory],
        vectors: asyncio.Task[TurnVectors],
        on_text: OnText | None,
    ) -> TurnResult:
        ctx, settings = self.ctx, self.ctx.settings
        # Per person, not per owner key: erasing someone stops their turns with every character,
        # even one whose key holds nothing yet.
        person = ctx.cast.user_of_key(msg.user_id)

        async def erased(conn: Connection) -> bool:
            # Asked inside each write transaction, from the database: an erase is one
            # transaction too, so a turn that was waiting (for the LLM, for the write lock) when
            # any process ran it writes nothing after it.
            return not await still_current(conn, person, epoch)

        try:
            epoch = await begin_turn(ctx.db, person)
            if self.exchanges.has_open(msg.user_id):
                with contextlib.suppress(StorageError):  # they stay open; the next start settles them
                    # Writing again in the story keeps the previous answer as it is shown.
                    await self.exchanges.settle(msg.user_id, story_id=msg.story_id)
            exchange_id = await self._save(msg, text, person, epoch)
        except StorageError as exc:
            # Answering what cannot be kept would make the character forget it silently.
            ctx.metrics.turns.labels("failed").inc()
            return TurnResult.unsaved(str(exc))
        if exchange_id is None:
            return TurnResult.erased()
        character = ctx.cast.get(msg.character)
        share = await settings_store.sharing(ctx.db, msg.user_id)
        followup = await self.followups.for_turn(msg.user_id, msg.story_id, msg.place, exchange_id, share=share)
        selection, story_block, memory_seconds = await self._select(msg, text, rules, character, vectors, share)
        if followup is not None:
            selection.slots.append(self.followups.slot(followup))
        turn = TurnMessage(msg.user_id, msg.user_name, msg.story_id, msg.story_name, text, msg.history, msg.images)
        clock = await self.prompts.lore_clock(turn, character)
        prompt = await self.prompts.prepare(
            turn,
            rules,
            character,
            selection,
            story_block,
            clock,
            self.followups.note(followup, speaker_name(msg.user_name)),
        )
        started = time.perf_counter()
        key = ctx.calls.conversation_key(msg.user_id, msg.story_id)
        try:  # the prompt fitted into the model's context (bot/engine/fitting.py), and its answer
            with ctx.cache.foreground.aside(msg.user_id):
                fitted, (answer, reply, cut) = await answer_fitted(
                    prompt.build,
                    prompt.history,
                    selection.memories,
                    ctx.calls,
                    settings.llm_model,
                    lambda messages: self._answer(messages, on_text, key),
                )
        except (LLMError, ContextTooSmall) as exc:
            too_small = exc if isinstance(exc, ContextTooSmall) else None
            if too_small is None:
                self.outage.failed("replies fail, messages are kept unanswered: %s", exc)
            selection.figures = TurnFigures(
                failed=True,
                memory_ms=_ms(memory_seconds),
                reply_ms=_ms(time.perf_counter() - started),
                context_tokens=ctx.calls.context_tokens(),
                context_too_small=too_small is not None,
            )
            ctx.metrics.turns.labels("failed").inc()
            with contextlib.suppress(StorageError):  # counted and logged by the database
                await exchange_failed(ctx.db, msg.user_id, exchange_id, str(exc))
            self._record_later(selection, erased)
            result = TurnResult.unanswered(str(exc), selection, exchange_id)
            if too_small is not None:  # kept, unanswered, and said why: writing again cannot help
                result.failure, result.needed, result.context = "context_too_small", too_small.needed, too_small.context
            return result
        for slot in selection.slots:
            slot.left_out = slot.id in fitted.memories_left_out
        if cut is None:
            self.outage.recovered("replies work again after %d failed turn(s)")
        usage = answer.usage if answer is not None else TokenUsage(None, None)
        selection.figures = TurnFigures(
            memory_ms=_ms(memory_seconds),
            reply_ms=_ms(time.perf_counter() - started),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            context_tokens=ctx.calls.context_tokens(),
            context_full=answer is not None and ctx.calls.context_full(answer),
            history_left_out=fitted.history_left_out,
            memories_left_out=len(fitted.memories_left_out),
        )
        ctx.metrics.turns.labels(selection.outcome).inc()
        reply = final_reply(reply)
        # The conversation's next prompt extends the one sent, and the reflection may continue it.
        sent = prompt.made(fitted.messages)
        ctx.prompts.keep(msg.user_id, msg.story_id, sent.start, sent.notes, exchange_id, fitted.messages)
        ctx.prompts.answered(msg.user_id, msg.story_id, exchange_id, reply)
        await self._keep(msg, exchange_id, reply, fitted.messages, erased, person=person, epoch=epoch)
        await self.followups.carried(msg.user_id, msg.story_id, followup, exchange_id, reply, erased)
        # The selection (counters, /why) is written in the background, and last: the reply never
        # queues behind another user's reflection for it, nor the turn's own writes behind it.
        self._record_later(selection, erased)
        # Also what an outage left pending; an open exchange is reflected once it settles.
        self.reflections.schedule(msg.user_id)
        if cut is not None:
            return TurnResult.cut_off(reply, str(cut), selection, exchange_id)
        return TurnResult.answered(reply, selection, exchange_id, usage)

    async def _select(
        self,
        msg: Incoming,
        text: str,
        rules: Sequence[Memory],
        character: Character,
        vectors: asyncio.Task[TurnVectors],
        share: bool,
    ) -> tuple[TurnSelection, str, float]:
        """The memories that enter the context (recorded later), the story's block, and the
        seconds the selection took (`vectors`: the query's, asked for when the turn began;
        `share`: the person's setting)."""
        ctx = self.ctx
        story_block, story_detail = await self._story_context(msg.user_id, msg.story_id, text, ctx.specs(character.key))
        started = time.perf_counter()
        selection = await ctx.recall.select_for_turn(
            msg.user_id,
            story_id=msg.story_id,
            place=msg.place,
            query=text,
            conversation=conversation_of(msg.history),
            rules=rules,
            share=share,
            story=story_detail,
            record=False,
            vectors=vectors,
        )
        memory_seconds = time.perf_counter() - started
        ctx.metrics.memory_seconds.observe(memory_seconds)
        return selection, story_block, memory_seconds

    async def _answer(
        self, messages: list[ChatMessage], on_text: OnText | None, key: str
    ) -> tuple[ChatReply | None, str, LLMStreamCut | None]:
        """The model's answer, streamed when `on_text` is given; a stream cut halfway gives what
        arrived and why. Raises LLMError when nothing can be answered."""
        ctx, settings = self.ctx, self.ctx.settings
        try:
            if on_text is None:
                answer = await ctx.calls.chat(
                    "reply", messages, model=settings.llm_model, timeout=settings.llm_timeout_seconds, cache_key=key
                )
            else:
                answer = await ctx.calls.stream_reply(
                    messages, on_text, model=settings.llm_model, timeout=settings.llm_timeout_seconds, cache_key=key
                )
        except LLMStreamCut as exc:
            # What the user already saw is the reply: kept, saved and reflected like any other.
            self.outage.failed("streamed replies are cut off midway: %s", exc)
            return None, exc.partial, exc
        return answer, answer.text, None

    async def _keep(
        self,
        msg: Incoming,
        exchange_id: int,
        reply: str,
        messages: list[ChatMessage],
        erased: Erased,
        *,
        person: PersonId,
        epoch: int,
    ) -> None:
        """Save the reply: settled now, or open for regenerate and swipes. After an erase of the
        person (`epoch` is what their turn read) the answer is still given, never kept."""
        ctx = self.ctx
        try:
            if not msg.swipes:
                # One statement, the erase check within it: the reply is returned after it.
                await answer_exchange(
                    ctx.db, msg.user_id, exchange_id, reply, now=ctx.clock(), person=person, epoch=epoch
                )
                return
            async with ctx.db.write() as conn:
                kept = not await erased(conn)
                if kept:
                    await set_reply(conn, msg.user_id, exchange_id, reply, now=ctx.clock(), settle=False)
                    await hold_reply(conn, msg.user_id, exchange_id, reply, messages, now=ctx.clock())
        except StorageError:
            # The user still gets the answer; the exchange stays unanswered, so it is not reflected.
            return
        if kept:
            self.exchanges.arm(msg.user_id, exchange_id)

    async def _record(self, selection: TurnSelection, erased: Erased) -> None:
        with contextlib.suppress(StorageError):  # counted and logged by the database
            await self.ctx.recall.record(selection, cancelled=erased)

    def _record_later(self, selection: TurnSelection, erased: Erased) -> None:
        task = self.ctx.tasks.spawn(self._record(selection, erased), name=f"record-turn:{selection.user_id}")
        pending = self._recording.setdefault(selection.user_id, set())
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def _save(self, msg: Incoming, text: str, person: PersonId, epoch: int) -> int | None:
        """The new exchange's id; None when the person was erased since their turn began
        (`epoch`, what it read then)."""
        parts = msg.parts or ([MessagePart(msg.message_id, text)] if msg.message_id is not None else [])
        async with self.ctx.db.write() as conn:
            exchange_id = await save_exchange(
                conn,
                msg.user_id,
                user_name=msg.user_name,
                story_id=msg.story_id,
                place=msg.place,
                # The last message: the one the reply answers.
                message_id=parts[-1].message_id if parts else msg.message_id,
                text=text,
                now=self.ctx.clock(),
                current=(person, epoch),
            )
            if exchange_id is not None:
                await save_parts(conn, msg.user_id, exchange_id, parts)
            return exchange_id

    async def _story_context(
        self, user_id: OwnerKey, story_id: StoryId, query: str, specs: dict[str, StateSpec]
    ) -> tuple[str, dict[str, Any]]:
        story = await load_story(self.ctx.db, user_id, story_id)
        positions = select_positions(story.positions, query)
        values = state_values(specs, story.state)
        block = render_story_context(story.anchors, story.summary, positions, values, specs, describe_state=False)
        detail = {
            "anchors": [{"id": a.id, "text": a.text} for a in story.anchors],
            "summary": story.summary,
            "positions": [
                {"id": p.id, "subject": p.subject, "stance": p.stance, "updated_at": to_db(p.updated_at)}
                for p in positions
            ],
            "state": values,
        }
        return block, detail


def conversation_of(history: Sequence[ChannelLine]) -> list[Line]:
    """The channel's lines as recall reads the message with them: each text, and whether the
    person the turn answers wrote it."""
    return [Line(storable(line.text), line.from_person) for line in history]


def _storable(msg: Incoming, max_chars: int) -> Incoming:
    """Every front end's text enters here; made storable once (a lone surrogate from Discord's
    JSON or a terminal's undecodable bytes would otherwise fail the INSERT, unanswered)."""
    return replace(
        msg,
        user_name=storable(msg.user_name),
        text=storable(msg.text),
        history=[replace(h, author=storable(h.author), text=storable(h.text)) for h in msg.history],
        parts=[MessagePart(p.message_id, message_text(p.text, max_chars), storable(p.marks)) for p in msg.parts],
    )


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
