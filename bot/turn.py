"""One turn: a message in, a reply out, from any front end.

The turn persists the exchange, selects the author's memories, calls the LLM, and only then
schedules the reflection; a reflection never delays or breaks a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.character import fill_user, render_character_prompt
from bot.clients.db import to_db
from bot.clients.llm import OnText
from bot.clients.llm_wire import ChatReply, Image, TokenUsage
from bot.clients.outage import Outage
from bot.context import EngineContext
from bot.errors import LLMError, LLMStreamCut, StorageError
from bot.llm_calls import final_reply
from bot.memory import settings_store
from bot.memory.exchange_store import exchange_failed, hold_reply, mark_settled_now, save_exchange, set_reply
from bot.memory.model import Memory
from bot.memory.recall import TurnFigures, TurnSelection
from bot.memory.story import render_story_context, select_positions
from bot.memory.story_state import StateSpec, state_values
from bot.memory.story_store import load_story
from bot.memory.text import storable
from bot.open_exchanges import OpenExchanges
from bot.prompting import ChannelLine, bounded_history, build_reply_messages, speaker_name
from bot.reflection_worker import Reflections

log = logging.getLogger(__name__)

LLM_DOWN_REPLY = (
    "(I can't reach my language model right now, so I can't answer. Your message is kept; "
    "try again in a moment.)"
)
STORAGE_DOWN_REPLY = (
    "(I can't save anything right now: the bot's storage is failing, so I would forget what you "
    "tell me. I'm not answering until it works again; whoever runs the bot can see why in its log.)"
)
ERASED_REPLY = "(Everything about you was just erased, as you asked: this message was not kept.)"
# Ends a reply whose stream broke halfway: what arrived is kept, and said to be cut.
CUT_NOTE = "*(…my answer was cut off here.)*"


@dataclass(frozen=True, slots=True)
class Incoming:
    """One message addressed to the character, from any front end."""

    user_id: str
    user_name: str
    text: str
    story_id: str
    place: str
    message_id: str | None = None
    history: Sequence[ChannelLine] = ()
    # Shown to a vision model with this message only; `text` names them ("[image: name]"), and
    # only the text is saved and reflected.
    images: Sequence[Image] = ()
    # The reply may be regenerated and swiped: the exchange stays open, and is reflected on the
    # answer the user keeps once it settles (next message in the story, SETTLE_SECONDS, restart).
    swipes: bool = False
    # The key of the character who answers ("" for the default); `user_id` is then the
    # memory owner key the cast gives that character (bot.cast).
    character: str = ""


@dataclass(slots=True)
class TurnResult:
    reply: str | None
    error: str | None
    # None when the message could not even be saved (nothing was selected).
    selection: TurnSelection | None
    exchange_id: int | None
    # What the user is told when there is no reply.
    apology: str = LLM_DOWN_REPLY
    # The streamed answer broke halfway: `reply` is the part that arrived, `error` why.
    cut: bool = False
    usage: TokenUsage | None = None

    @property
    def shown(self) -> str:
        """What the user reads, in every front end: the reply (marked when cut), or the apology."""
        if self.reply is None:
            return self.apology
        return f"{self.reply}\n\n{CUT_NOTE}" if self.cut else self.reply


class Turns:
    def __init__(self, ctx: EngineContext, exchanges: OpenExchanges, reflections: Reflections) -> None:
        self.ctx = ctx
        self.exchanges = exchanges
        self.reflections = reflections
        self.outage = Outage(log)
        self._recording: dict[str, set[asyncio.Task[None]]] = {}
        # Erasures asked per person: a turn that began before one writes nothing after it.
        self._erasures: dict[str, int] = {}

    def erasing(self, person: str) -> None:
        """From now on, a turn of this person already under way writes nothing more."""
        self._erasures[person] = self._erasures.get(person, 0) + 1

    async def wait_recorded(self, user_id: str) -> None:
        pending = list(self._recording.get(user_id, ()))
        if pending:
            await asyncio.wait(pending)
        # The candidate counts a user with many memories holds in memory, written before a read.
        await self.ctx.recall.flush_counts(user_id)

    async def run(self, msg: Incoming, rules: Sequence[Memory], *, on_text: OnText | None = None) -> TurnResult:
        ctx, settings = self.ctx, self.ctx.settings
        # Every front end's text enters here; made storable once (a lone surrogate from Discord's
        # JSON or a terminal's undecodable bytes would otherwise fail the INSERT, unanswered).
        msg = replace(
            msg,
            user_name=storable(msg.user_name),
            text=storable(msg.text),
            history=[ChannelLine(storable(h.author), storable(h.text), h.from_bot) for h in msg.history],
        )
        text = msg.text.strip()[: settings.max_message_chars]
        # Counted per person, not per owner key: erasing someone stops their turns with every
        # character, even one whose key holds nothing yet.
        person = ctx.cast.user_of_key(msg.user_id)
        erasures = self._erasures.get(person, 0)

        def erased() -> bool:
            # Asked inside each write transaction: an erase is one transaction too, so a turn
            # that was waiting (for the LLM, for the write lock) when it ran writes nothing after.
            return self._erasures.get(person, 0) != erasures

        if self.exchanges.has_open(msg.user_id):
            with contextlib.suppress(StorageError):  # they stay open; the next start settles them
                # Writing again in the story keeps the previous answer as it is shown.
                await self.exchanges.settle(msg.user_id, story_id=msg.story_id)
        try:
            exchange_id = await self._save(msg, text, erased)
        except StorageError as exc:
            # Answering what cannot be kept would make the character forget it silently.
            ctx.metrics.turns.labels("failed").inc()
            return TurnResult(None, str(exc), None, None, apology=STORAGE_DOWN_REPLY)
        if exchange_id is None:
            return TurnResult(None, "erased", None, None, apology=ERASED_REPLY)
        character = ctx.cast.get(msg.character)
        share = await settings_store.sharing(ctx.db, msg.user_id)
        story_block, story_detail = await self._story_context(msg.user_id, msg.story_id, text, ctx.specs(character.key))
        started = time.perf_counter()
        selection = await ctx.recall.select_for_turn(
            msg.user_id,
            story_id=msg.story_id,
            place=msg.place,
            query=text,
            conversation=[line.text for line in msg.history],
            rules=rules,
            share=share,
            story=story_detail,
            record=False,
        )
        memory_seconds = time.perf_counter() - started
        ctx.metrics.memory_seconds.observe(memory_seconds)
        history = bounded_history(
            list(msg.history), max_messages=settings.history_messages, max_chars=settings.history_chars
        )
        self._note_scene(msg, history)
        lore = (
            character.lore.match(
                [line.text for line in history] + [text],
                budget_chars=settings.lore_budget_chars,
                scan_depth=settings.lore_scan_depth,
            )
            if character.lore is not None
            else []
        )
        selection.lore = [{"name": h.name, "keyword": h.keyword, "cost": h.cost, "kept": h.kept} for h in lore]
        messages = build_reply_messages(
            character_prompt=render_character_prompt(character, speaker_name(msg.user_name)),
            character_name=character.name,
            rules=[r.text for r in rules],
            user_name=msg.user_name,
            memories=selection.memories,
            story_context=story_block,
            history=history,
            message=text,
            post_history=fill_user(character.post_history_instructions, speaker_name(msg.user_name)),
            images=msg.images,
            lore=lore,
        )
        started = time.perf_counter()
        cut: LLMStreamCut | None = None
        answer: ChatReply | None = None
        try:
            if on_text is None:
                answer = await ctx.calls.chat(
                    "reply", messages, model=settings.llm_model, timeout=settings.llm_timeout_seconds
                )
            else:
                answer = await ctx.calls.stream_reply(
                    messages, on_text, model=settings.llm_model, timeout=settings.llm_timeout_seconds
                )
            reply = answer.text
        except LLMStreamCut as exc:
            # What the user already saw is the reply: kept, saved and reflected like any other.
            self.outage.failed("streamed replies are cut off midway: %s", exc)
            cut, reply = exc, exc.partial
        except LLMError as exc:
            self.outage.failed("replies fail, messages are kept unanswered: %s", exc)
            selection.figures = TurnFigures(
                failed=True, memory_ms=_ms(memory_seconds), reply_ms=_ms(time.perf_counter() - started)
            )
            ctx.metrics.turns.labels("failed").inc()
            self._record_later(selection, erased)
            with contextlib.suppress(StorageError):  # counted and logged by the database
                await exchange_failed(ctx.db, msg.user_id, exchange_id, str(exc))
            return TurnResult(None, str(exc), selection, exchange_id)
        # The selection (counters, /why) is written in the background: the reply never queues
        # behind another user's reflection for it.
        if cut is None:
            self.outage.recovered("replies work again after %d failed turn(s)")
        usage = answer.usage if answer is not None else TokenUsage(None, None)
        selection.figures = TurnFigures(
            memory_ms=_ms(memory_seconds),
            reply_ms=_ms(time.perf_counter() - started),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            context_tokens=ctx.calls.llm.context_tokens,
            context_full=answer is not None and ctx.calls.context_full(answer),
        )
        ctx.metrics.turns.labels(selection.outcome).inc()
        self._record_later(selection, erased)
        reply = final_reply(reply)
        await self._keep(msg, exchange_id, reply, messages, erased)
        # The next turn of the story finds its conversation's lines embedded: off the critical path.
        lines = [*(line.text for line in msg.history), text, reply]
        ctx.tasks.spawn(
            ctx.recall.prepare_conversation(msg.user_id, msg.story_id, lines), name=f"conversation:{msg.user_id}"
        )
        # Also what an outage left pending; an open exchange is reflected once it settles.
        self.reflections.schedule(msg.user_id)
        if cut is not None:
            return TurnResult(reply, str(cut), selection, exchange_id, cut=True)
        return TurnResult(reply, None, selection, exchange_id, usage=usage)

    async def _keep(
        self, msg: Incoming, exchange_id: int, reply: str, messages: list[dict[str, Any]], erased: Callable[[], bool]
    ) -> None:
        """Save the reply: settled now, or open for regenerate and swipes."""
        ctx = self.ctx
        try:
            async with ctx.db.write() as conn:
                # After an erase the exchange row is gone: the answer is still given, never kept.
                kept = not erased()
                if kept:
                    await set_reply(conn, msg.user_id, exchange_id, reply, now=ctx.clock())
                    if msg.swipes:
                        await hold_reply(conn, msg.user_id, exchange_id, reply, messages, now=ctx.clock())
                    else:
                        await mark_settled_now(conn, msg.user_id, exchange_id, now=ctx.clock())
        except StorageError:
            # The user still gets the answer; the exchange stays unanswered, so it is not reflected.
            return
        if msg.swipes and kept:
            self.exchanges.arm(msg.user_id, exchange_id)

    def _note_scene(self, msg: Incoming, history: Sequence[ChannelLine]) -> None:
        """The people other than the author who spoke in the recent lines of the channel."""
        cast = self.ctx.cast
        others = {
            line.author for line in history
            if not line.from_bot and line.author != msg.user_name and not cast.is_speaker(line.author)
        }
        self.ctx.scene[msg.story_id] = others

    async def _record(self, selection: TurnSelection, erased: Callable[[], bool]) -> None:
        with contextlib.suppress(StorageError):  # counted and logged by the database
            await self.ctx.recall.record(selection, cancelled=erased)

    def _record_later(self, selection: TurnSelection, erased: Callable[[], bool]) -> None:
        task = self.ctx.tasks.spawn(self._record(selection, erased), name=f"record-turn:{selection.user_id}")
        pending = self._recording.setdefault(selection.user_id, set())
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def _save(self, msg: Incoming, text: str, erased: Callable[[], bool]) -> int | None:
        """The new exchange's id; None when the user erased their data since the message came."""
        async with self.ctx.db.write() as conn:
            if erased():
                return None
            return await save_exchange(
                conn,
                msg.user_id,
                user_name=msg.user_name,
                story_id=msg.story_id,
                place=msg.place,
                message_id=msg.message_id,
                text=text,
                now=self.ctx.clock(),
            )

    async def _story_context(
        self, user_id: str, story_id: str, query: str, specs: dict[str, StateSpec]
    ) -> tuple[str, dict[str, Any]]:
        story = await load_story(self.ctx.db, user_id, story_id)
        positions = select_positions(story.positions, query)
        values = state_values(specs, story.state)
        block = render_story_context(story.anchors, story.summary, positions, values, specs)
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


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
