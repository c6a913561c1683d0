"""The conversation engine: one turn, its reflection, and the memory commands — no discord.

Discord cogs and the terminal chat are thin translators over this class, so both run the same
code. A turn persists the exchange, selects the author's memories, calls the LLM, and only then
schedules the reflection; a reflection never delays or breaks a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import aiosqlite

from bot.cast import Cast
from bot.character import Character, fill_user, render_character_prompt
from bot.config import Settings
from bot.clients.db import Database, fetch_all, fetch_one, to_db
from bot.errors import (
    EmbeddingError,
    ExchangesGone,
    InvalidMemory,
    LLMError,
    LLMStreamCut,
    LLMTooLarge,
    ReflectionParseError,
    StorageError,
)
from bot.clients.embeddings import Embedder
from bot.clients.llm import ChatReply, Image, LLMClient, OnText, TokenUsage
from bot.memory.exchange_store import (
    MemoryChange,
    SettledExchange,
    add_alternative,
    changes_of,
    choose_alternative,
    edit_message,
    erase_user_exchange_data,
    export_rows,
    forget_message_text,
    hold_reply,
    mark_settled_now,
    memories_only_from,
    message_exchange,
    message_owner,
    open_exchange,
    produced_by,
    set_reply_message,
    settle_exchanges,
    sources_of,
    users_with_open_exchanges,
)
from bot.memory.model import Memory, utcnow
from bot.memory.recall import Recall, TurnFigures, TurnSelection, last_turn, turn_stats
from bot.memory.reflection import (
    Correction,
    build_reflection_messages,
    parse_reflection,
    reflection_json_schema,
)
from bot.memory.report_store import user_turn_log
from bot.memory.scoring import VectorCache
from bot.memory.store import (
    EraseReport,
    MemoryStore,
    NewMemory,
    delete_memory,
    erase_user_memories,
    insert_memory,
    owner_keys,
)
from bot.memory.story import (
    StateSpec,
    parse_state_specs,
    render_story_context,
    select_positions,
    state_values,
)
from bot.memory.story_store import erase_user_story_data, load_story, story_history, user_story_ids
from bot.memory.text import storable
from bot.memory.vectors import lexical_matches
from bot.memory.write import CHANGE_ACTIONS, ReflectionContext, ReflectionReport, apply_reflection
from bot.clients.metrics import Metrics
from bot.clients.outage import Outage
from bot.prompting import ChannelLine, bounded_history, build_reply_messages, speaker_name
from bot.clients.tasks import BackgroundTasks

log = logging.getLogger(__name__)

# Memories shown to the reflection with their ids (its allowed_ids).
REFLECTION_KNOWN = 12
# Exchanges of one user reflected in one call: a burst of 30 messages costs ~8 calls, in turn.
REFLECTION_BATCH = 4
MAX_REFLECTION_ATTEMPTS = 3
# Reflections of different users running at once (one user's never run concurrently).
REFLECTION_CONCURRENCY = 2
OTHER_PROCESS_POLL_SECONDS = 0.5
REFLECTION_EMBED_TIMEOUT = 30.0
NEVER_SURFACED_AFTER = 5
LLM_DOWN_REPLY = (
    "(I can't reach my language model right now, so I can't answer. Your message is kept; "
    "try again in a moment.)"
)
STORAGE_DOWN_REPLY = (
    "(I can't save anything right now: the bot's storage is failing, so I would forget what you "
    "tell me. I'm not answering until it works again; whoever runs the bot can see why in its log.)"
)
ERASED_REPLY = "(Everything about you was just erased, as you asked: this message was not kept.)"
# Ollama keeps the end of a prompt longer than its context (num_ctx) and counts what it kept
# (prompt_eval_count, cached tokens included), so a cut prompt reads as the context size: one
# counted within 2 % of it is taken as cut.
CONTEXT_FULL_RATIO = 0.98
# Settle and receipt events kept for a front end that is not listening yet (see Engine.listen).
MAX_UNHEARD_EVENTS = 1000
# A reply longer than this is cut: a runaway generation must not become hundreds of Discord
# messages: this is two or three of them.
MAX_REPLY_CHARS = 4000
# The cause archived with the memories a deleted message alone had produced.
MESSAGE_DELETED = "message deleted"


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


@dataclass(slots=True)
class MemoryStats:
    total: int
    cap: int
    by_type: dict[str, int]
    pinned: int
    expired: int
    never_surfaced: list[Memory]
    never_semantic: int
    turns: int
    degraded_turns: int
    pending_reflections: int


@dataclass(slots=True)
class _Exchange:
    id: int
    user_id: str
    user_name: str
    story_id: str
    place: str
    message_id: str | None
    user_message: str
    reply: str
    attempts: int
    edited_from: str | None
    reply_message_id: str | None


@dataclass(frozen=True, slots=True)
class Shown:
    """The answer an open exchange shows now: alternative `n` of `total`."""

    exchange_id: int
    n: int
    total: int
    text: str


@dataclass(frozen=True, slots=True)
class Receipt:
    """A reflection changed the user's memories: the reply of `exchange_id` may say so."""

    user_id: str
    exchange_id: int
    story_id: str
    reply_message_id: str | None
    changes: int


@dataclass(frozen=True, slots=True)
class ReceiptLine:
    change: MemoryChange
    # The memory as it is now; None once it was forgotten (or the change itself forgot it).
    current: Memory | None


@dataclass(slots=True)
class DeleteOutcome:
    user_id: str | None
    archived: list[int] = field(default_factory=list)
    kept_pinned: list[int] = field(default_factory=list)


class _LongEnough(Exception):
    """Stops a streamed reply that went past MAX_REPLY_CHARS."""


@dataclass(slots=True)
class _Workers:
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)
    # Held while a user's reflection applies, and by erase: an erase never races a reflection.
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)


class Engine:
    def __init__(
        self,
        *,
        db: Database,
        llm: LLMClient,
        embedder: Embedder | None,
        settings: Settings,
        character: Character,
        cast: Cast | None = None,
        clock: Callable[[], datetime] = utcnow,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.llm = llm
        self.embedder = embedder
        self.settings = settings
        self.character = character
        self.cast = cast if cast is not None else Cast.single(character)
        self.clock = clock
        self.state_specs = parse_state_specs(character.state)
        self._specs = {key: parse_state_specs(c.state) for key, c in self.cast.characters.items()}
        self._rules: dict[str, list[Memory]] = {}
        # Who else spoke lately in each channel: the reflection is told those people are not
        # the author (kept in memory only: after a restart the guard starts empty).
        self._scene: dict[str, set[str]] = {}
        self.store = MemoryStore(db, clock=clock)
        self.cache = VectorCache()
        self.recall = Recall(db, embedder, cache=self.cache, clock=clock)
        self.tasks = BackgroundTasks()
        self.rules: list[Memory] = []
        self._workers = _Workers()
        self._reflection_slots = asyncio.Semaphore(REFLECTION_CONCURRENCY)
        self._closing = False
        # The last reflection report per user: what the write path decided, for the operator.
        self.last_reports: dict[str, ReflectionReport] = {}
        self._recording: dict[str, set[asyncio.Task[None]]] = {}
        # Erasures asked per user: a turn that began before one writes nothing after it.
        self._erasures: dict[str, int] = {}
        self.reply_outage = Outage(log)
        self.reflection_outage = Outage(log)
        self.metrics = metrics if metrics is not None else Metrics()
        # Calls (reply, reflection) whose full context was already reported in the log.
        self._context_warned: set[str] = set()
        self._settle_timers: dict[tuple[str, int], asyncio.TimerHandle] = {}
        # Front ends follow open exchanges and receipts through these (the core knows no Discord).
        self.settle_listeners: list[Callable[[SettledExchange], Awaitable[None]]] = []
        self.receipt_listeners: list[Callable[[Receipt], Awaitable[None]]] = []
        self._unheard: list[tuple[Sequence[Callable[[Any], Awaitable[None]]], object]] = []

    @property
    def character_user_id(self) -> str:
        return f"character:{self.character.name}"

    # --- start-up and shutdown -------------------------------------------------------------

    async def start(self) -> None:
        await self.sync_rules()
        # Nobody can still be choosing among the answers of a previous run: they are kept as shown.
        for user_id in await users_with_open_exchanges(self.db):
            await self.settle(user_id)
        await self.resume_pending_reflections()

    async def sync_rules(self) -> None:
        """Each character file's rules, stored as `rule` memories of the character itself.

        Rewritten only when a file's rules changed: the same character keeps the same rule ids
        (and their vectors) from one start to the next."""
        for key, character in self.cast.characters.items():
            owner = f"character:{character.name}"
            stored = sorted(await self.store.list(owner, types=["rule"], include_rules=True), key=lambda m: m.id)
            if [m.text for m in stored] != list(character.rules):
                now = self.clock()
                async with self.db.write() as conn:
                    await conn.execute("DELETE FROM memories WHERE user_id = ? AND type = 'rule'", (owner,))
                    for rule in character.rules:
                        await insert_memory(conn, owner, NewMemory(text=rule, type="rule"), now=now)
                stored = sorted(
                    await self.store.list(owner, types=["rule"], include_rules=True), key=lambda m: m.id
                )
            self._rules[key] = stored
        self.rules = self._rules[self.cast.default_key]

    async def close(self, timeout: float = 20.0) -> None:
        """Let in-flight reflections finish; what does not finish stays pending for next start."""
        self._closing = True
        for timer in self._settle_timers.values():
            timer.cancel()  # what is still open is settled at the next start
        self._settle_timers.clear()
        if not await self.tasks.wait(timeout):
            log.warning("shutting down with reflections in flight; they stay pending")
            await self.tasks.cancel_all()

    # --- one turn ----------------------------------------------------------------------------

    async def turn(self, msg: Incoming, *, on_text: OnText | None = None) -> TurnResult:
        """Answer one message. With `on_text`, the answer is streamed: `on_text` sees the
        visible text as it grows, and a stream cut halfway keeps (and saves) what arrived."""
        # Every front end's text enters here; made storable once (a lone surrogate from Discord's
        # JSON or a terminal's undecodable bytes would otherwise fail the INSERT, unanswered).
        msg = replace(
            msg,
            user_name=storable(msg.user_name),
            text=storable(msg.text),
            history=[ChannelLine(storable(h.author), storable(h.text), h.from_bot) for h in msg.history],
        )
        text = msg.text.strip()[: self.settings.max_message_chars]
        # Counted per person, not per owner key: erasing someone stops their turns with every
        # character, even one whose key holds nothing yet.
        person = self.cast.user_of_key(msg.user_id)
        erasures = self._erasures.get(person, 0)

        def erased() -> bool:
            # Asked inside each write transaction: an erase is one transaction too, so a turn
            # that was waiting (for the LLM, for the write lock) when it ran writes nothing after.
            return self._erasures.get(person, 0) != erasures

        if any(user_id == msg.user_id for user_id, _ in self._settle_timers):
            with contextlib.suppress(StorageError):  # they stay open; the next start settles them
                # Writing again in the story keeps the previous answer as it is shown.
                await self.settle(msg.user_id, story_id=msg.story_id)
        try:
            exchange_id = await self._save_exchange(msg, text, erased)
        except StorageError as exc:
            # Answering what cannot be kept would make the character forget it silently.
            self.metrics.turns.labels("failed").inc()
            return TurnResult(None, str(exc), None, None, apology=STORAGE_DOWN_REPLY)
        if exchange_id is None:
            return TurnResult(None, "erased", None, None, apology=ERASED_REPLY)
        character = self.cast.get(msg.character)
        rules = self._rules.get(character.key, self.rules)
        share = await self.sharing(msg.user_id)
        story_block, story_detail = await self._story_context(
            msg.user_id, msg.story_id, text, self._specs.get(character.key, self.state_specs)
        )
        started = time.perf_counter()
        selection = await self.recall.select_for_turn(
            msg.user_id,
            story_id=msg.story_id,
            place=msg.place,
            query=text,
            rules=rules,
            share=share,
            story=story_detail,
            record=False,
        )
        memory_seconds = time.perf_counter() - started
        self.metrics.memory_seconds.observe(memory_seconds)
        history = bounded_history(
            list(msg.history),
            max_messages=self.settings.history_messages,
            max_chars=self.settings.history_chars,
        )
        self._note_scene(msg, history)
        lore = (
            character.lore.match(
                [line.text for line in history] + [text],
                budget_chars=self.settings.lore_budget_chars,
                scan_depth=self.settings.lore_scan_depth,
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
                answer = await self._chat(
                    "reply", messages, model=self.settings.llm_model, timeout=self.settings.llm_timeout_seconds
                )
            else:
                answer = await self._stream_reply(messages, on_text)
            reply = answer.text
        except LLMStreamCut as exc:
            # What the user already saw is the reply: kept, saved and reflected like any other.
            self.reply_outage.failed("streamed replies are cut off midway: %s", exc)
            cut, reply = exc, exc.partial
        except LLMError as exc:
            self.reply_outage.failed("replies fail, messages are kept unanswered: %s", exc)
            selection.figures = TurnFigures(
                failed=True, memory_ms=_ms(memory_seconds), reply_ms=_ms(time.perf_counter() - started)
            )
            self.metrics.turns.labels("failed").inc()
            self._record_later(selection, erased)
            with contextlib.suppress(StorageError):  # counted and logged by the database
                await self._exchange_failed(msg.user_id, exchange_id, str(exc))
            return TurnResult(None, str(exc), selection, exchange_id)
        # The selection (counters, /why) is written in the background: the reply never queues
        # behind another user's reflection for it.
        if cut is None:
            self.reply_outage.recovered("replies work again after %d failed turn(s)")
        usage = answer.usage if answer is not None else TokenUsage(None, None)
        selection.figures = TurnFigures(
            memory_ms=_ms(memory_seconds),
            reply_ms=_ms(time.perf_counter() - started),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            context_tokens=self.llm.context_tokens,
            context_full=answer is not None and self._context_full(answer),
        )
        self.metrics.turns.labels(selection.outcome).inc()
        self._record_later(selection, erased)
        reply = final_reply(reply)
        try:
            async with self.db.write() as conn:
                # After an erase the exchange row is gone: the answer is still given, never kept.
                kept = not erased()
                if kept:
                    await conn.execute(
                        "UPDATE exchanges SET reply = ?, answered_at = ? WHERE user_id = ? AND id = ?",
                        (reply, to_db(self.clock()), msg.user_id, exchange_id),
                    )
                    if msg.swipes:
                        await hold_reply(conn, msg.user_id, exchange_id, reply, messages, now=self.clock())
                    else:
                        await mark_settled_now(conn, msg.user_id, exchange_id, now=self.clock())
        except StorageError:
            # The user still gets the answer; the exchange stays unanswered, so it is not reflected.
            pass
        else:
            if msg.swipes and kept:
                self._arm_settle(msg.user_id, exchange_id)
        if cut is not None:
            return TurnResult(reply, str(cut), selection, exchange_id, cut=True)
        return TurnResult(reply, None, selection, exchange_id, usage=usage)

    def _note_scene(self, msg: Incoming, history: Sequence[ChannelLine]) -> None:
        """The people other than the author who spoke in the recent lines of the channel."""
        others = {
            line.author for line in history
            if not line.from_bot and line.author != msg.user_name and not self.cast.is_speaker(line.author)
        }
        self._scene[msg.story_id] = others

    async def _stream_reply(self, messages: list[dict[str, Any]], on_text: OnText) -> ChatReply:
        """The streamed reply, timed and counted like `_chat`; a runaway one is stopped once past
        MAX_REPLY_CHARS rather than read to the timeout, since no more of it would be shown."""
        latest = ""

        async def shown(text: str) -> None:
            nonlocal latest
            latest = text
            if len(text) > MAX_REPLY_CHARS:
                raise _LongEnough
            await on_text(text)

        started = time.perf_counter()
        try:
            answer = await self.llm.stream(
                messages, model=self.settings.llm_model, on_text=shown, timeout=self.settings.llm_timeout_seconds
            )
        except _LongEnough:
            answer = ChatReply(latest, TokenUsage(None, None), "length")
        finally:
            self.metrics.llm_seconds.labels("reply").observe(time.perf_counter() - started)
        self._count_tokens("reply", answer)
        return answer

    async def _chat(self, call: str, messages: Sequence[Mapping[str, str]], **options: Any) -> ChatReply:
        """One LLM call, timed and its tokens counted; a full context is logged once and counted."""
        started = time.perf_counter()
        try:
            answer = await self.llm.chat(messages, **options)
        finally:
            self.metrics.llm_seconds.labels(call).observe(time.perf_counter() - started)
        self._count_tokens(call, answer)
        return answer

    def _count_tokens(self, call: str, answer: ChatReply) -> None:
        usage = answer.usage
        if usage.prompt_tokens is not None:
            self.metrics.prompt_tokens.labels(call).observe(usage.prompt_tokens)
        if usage.completion_tokens is not None:
            self.metrics.completion_tokens.labels(call).inc(usage.completion_tokens)
        if self._context_full(answer):
            self.metrics.context_full.labels(call).inc()
            if call not in self._context_warned:
                self._context_warned.add(call)
                log.warning(
                    "a %s prompt of %d tokens reached the context size (LLM_CONTEXT_TOKENS=%d): the "
                    "server dropped its start, where the persona and the rules are. Raise "
                    "LLM_CONTEXT_TOKENS or lower HISTORY_CHARS; later cuts are counted "
                    "(echo_prompt_context_full, the owner's page), not logged",
                    call, usage.prompt_tokens, self.llm.context_tokens,
                )

    def _context_full(self, answer: ChatReply) -> bool:
        context, prompt = self.llm.context_tokens, answer.usage.prompt_tokens
        return context is not None and prompt is not None and prompt >= context * CONTEXT_FULL_RATIO

    async def _record(self, selection: TurnSelection, erased: Callable[[], bool]) -> None:
        with contextlib.suppress(StorageError):  # counted and logged by the database
            await self.recall.record(selection, cancelled=erased)

    def _record_later(self, selection: TurnSelection, erased: Callable[[], bool]) -> None:
        task = self.tasks.spawn(self._record(selection, erased), name=f"record-turn:{selection.user_id}")
        pending = self._recording.setdefault(selection.user_id, set())
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def wait_recorded(self, user_id: str) -> None:
        """Wait until the user's turns are recorded (before /why, stats, export or erase)."""
        pending = list(self._recording.get(user_id, ()))
        if pending:
            await asyncio.wait(pending)

    async def _save_exchange(self, msg: Incoming, text: str, erased: Callable[[], bool]) -> int | None:
        """The new exchange's id; None when the user erased their data since the message came."""
        async with self.db.write() as conn:
            if erased():
                return None
            cur = await conn.execute(
                "INSERT INTO exchanges (user_id, user_name, story_id, place, message_id, "
                "user_message, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (msg.user_id, msg.user_name, msg.story_id, msg.place, msg.message_id, text, to_db(self.clock())),
            )
            return int(cur.lastrowid or 0)

    async def _exchange_failed(self, user_id: str, exchange_id: int, error: str) -> None:
        async with self.db.write() as conn:
            await conn.execute(
                "UPDATE exchanges SET last_error = ? WHERE user_id = ? AND id = ?",
                (error[:500], user_id, exchange_id),
            )

    async def _story_context(
        self, user_id: str, story_id: str, query: str, specs: dict[str, StateSpec]
    ) -> tuple[str, dict[str, Any]]:
        story = await load_story(self.db, user_id, story_id)
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

    # --- regenerate, swipe, settle -------------------------------------------------------------

    async def reply_sent(self, user_id: str, exchange_id: int, message_id: str) -> None:
        """The front end's id of the message holding the reply: where its buttons and receipt go."""
        with contextlib.suppress(StorageError):  # only the later button edits are lost
            await set_reply_message(self.db, user_id, exchange_id, message_id)
        if (user_id, exchange_id) in self._settle_timers:
            self._arm_settle(user_id, exchange_id)  # the delay counts from when it is shown

    async def shown(self, user_id: str, exchange_id: int) -> Shown | None:
        """What an open exchange shows now; None once it is settled (or not the user's)."""
        ex = await open_exchange(self.db, user_id, exchange_id)
        if ex is None or not ex.replies:
            return None
        return Shown(exchange_id, ex.choice, ex.total, ex.replies[ex.choice - 1])

    async def regenerate(self, user_id: str, exchange_id: int, *, max_chars: int | None = None) -> Shown | None:
        """Ask the model again, with the very prompt of the turn (same memories, same history).

        None when the exchange is settled. LLMError when the model fails: nothing is stored.
        """
        ex = await open_exchange(self.db, user_id, exchange_id)
        if ex is None or ex.prompt is None:
            return None
        answer = await self._chat(
            "reply", ex.prompt, model=self.settings.llm_model, timeout=self.settings.llm_timeout_seconds
        )
        reply = final_reply(answer.text, max_chars=max_chars)
        async with self.db.write() as conn:
            n = await add_alternative(conn, user_id, exchange_id, reply, now=self.clock())
        if n is None:
            return None  # settled while the model was answering: that answer was kept
        self._arm_settle(user_id, exchange_id)
        return Shown(exchange_id, n, n, reply)

    async def swipe(self, user_id: str, exchange_id: int, step: int) -> Shown | None:
        """Show the previous (-1) or next (+1) answer; it becomes the one kept. None when settled."""
        ex = await open_exchange(self.db, user_id, exchange_id)
        if ex is None or not ex.replies:
            return None
        n = max(1, min(ex.total, ex.choice + step))
        async with self.db.write() as conn:
            if not await choose_alternative(conn, user_id, exchange_id, n):
                return None
        self._arm_settle(user_id, exchange_id)
        return Shown(exchange_id, n, ex.total, ex.replies[n - 1])

    async def settle(
        self, user_id: str, *, exchange_id: int | None = None, story_id: str | None = None
    ) -> list[SettledExchange]:
        """Keep the answers shown: the exchanges leave the open state and are reflected."""
        settled = await settle_exchanges(self.db, user_id, now=self.clock(), exchange_id=exchange_id, story_id=story_id)
        for ex in settled:
            timer = self._settle_timers.pop((user_id, ex.id), None)
            if timer is not None:
                timer.cancel()
        if settled:
            self.schedule_reflection(user_id)
            # In the background: a turn settling the previous exchange must not wait for the
            # front end to update that old reply.
            for ex in settled:
                self.tasks.spawn(self._notify(self.settle_listeners, ex), name=f"settled:{user_id}")
        return settled

    def _arm_settle(self, user_id: str, exchange_id: int) -> None:
        """(Re)start the exchange's settle delay: choosing among answers postpones it."""
        key = (user_id, exchange_id)
        timer = self._settle_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if self._closing:
            return
        loop = asyncio.get_running_loop()
        self._settle_timers[key] = loop.call_later(self.settings.settle_seconds, self._settle_due, user_id, exchange_id)

    def _settle_due(self, user_id: str, exchange_id: int) -> None:
        self._settle_timers.pop((user_id, exchange_id), None)
        if not self._closing:
            self.tasks.spawn(self._settle_quietly(user_id, exchange_id), name=f"settle:{user_id}")

    async def _settle_quietly(self, user_id: str, exchange_id: int) -> None:
        try:
            await self.settle(user_id, exchange_id=exchange_id)
        except StorageError:
            self._arm_settle(user_id, exchange_id)  # logged by the database; tried again later

    def listen(
        self,
        *,
        settled: Callable[[SettledExchange], Awaitable[None]] | None = None,
        receipt: Callable[[Receipt], Awaitable[None]] | None = None,
    ) -> None:
        """A front end follows settled exchanges and receipts. What happened before any front end
        listened (the start-up settles open replies and resumes reflections before Discord is
        up) is delivered now, so a receipt earned during a restart still shows."""
        if settled is not None:
            self.settle_listeners.append(settled)
        if receipt is not None:
            self.receipt_listeners.append(receipt)
        early, self._unheard = self._unheard, []
        for listeners, event in early:
            self.tasks.spawn(self._notify(listeners, event), name=f"early:{type(event).__name__}")

    async def _notify(self, listeners: Sequence[Callable[[Any], Awaitable[None]]], event: object) -> None:
        if not listeners:
            # Bounded: a terminal chat never listens, and must not grow this forever.
            if len(self._unheard) < MAX_UNHEARD_EVENTS:
                self._unheard.append((listeners, event))
            return
        for listener in list(listeners):
            try:
                await listener(event)
            except Exception:
                log.exception("a front end failed to show %s", type(event).__name__)

    # --- the user's message edited or deleted -------------------------------------------------

    async def message_edited(self, message_id: str, text: str, *, user_id: str | None = None) -> str:
        """The user edited a message the character answered. Returns what happens:
        "unknown" (no exchange), "unchanged", "reflected as edited" (not reflected yet), or
        "correction" (already reflected: reflected again as a correction of its memories)."""
        owner = await message_owner(self.db, message_id)
        # The author's id, when given, must be the person of the owner key (their own id, or
        # `<id>@<character>` for a character with its own memory of them).
        if owner is None or (user_id is not None and self.cast.user_of_key(owner) != user_id):
            return "unknown"
        ex = await message_exchange(self.db, owner, message_id)
        text = storable(text).strip()[: self.settings.max_message_chars]
        if ex is None or ex.deleted:
            return "unknown"
        if not text or not await edit_message(self.db, owner, ex.id, text):
            return "unchanged"
        if ex.settled:
            self.schedule_reflection(owner)
        return "correction" if ex.reflected else "reflected as edited"

    async def message_deleted(self, message_id: str) -> DeleteOutcome:
        """The user deleted a message: the memories it alone produced are archived (pinned ones
        stay), and its text leaves the exchanges. A reflection of it in flight rolls back."""
        owner = await message_owner(self.db, message_id)
        if owner is None:
            return DeleteOutcome(None)
        ex = await message_exchange(self.db, owner, message_id)
        if ex is None or ex.deleted:
            return DeleteOutcome(owner)
        outcome = DeleteOutcome(owner)
        now = self.clock()
        async with self.db.write() as conn:
            for memory_id, pinned in await memories_only_from(conn, owner, ex.id):
                if pinned:
                    outcome.kept_pinned.append(memory_id)
                elif await delete_memory(conn, owner, memory_id, cause=MESSAGE_DELETED, now=now):
                    outcome.archived.append(memory_id)
            await forget_message_text(conn, owner, ex.id, now=now)
        timer = self._settle_timers.pop((owner, ex.id), None)
        if timer is not None:
            timer.cancel()
        self.cache.invalidate(owner)
        return outcome

    # --- reflection --------------------------------------------------------------------------

    def schedule_reflection(self, user_id: str) -> asyncio.Task[None]:
        """Reflect the user's answered exchanges in the background, one worker per user."""
        self._workers.dirty.add(user_id)
        running = self._workers.tasks.get(user_id)
        if running is not None and not running.done():
            return running
        task = self.tasks.spawn(self._reflect_worker(user_id), name=f"reflect:{user_id}")
        self._workers.tasks[user_id] = task
        return task

    async def wait_reflections(self, user_id: str) -> None:
        """Wait until the user's reflection worker is idle (whatever became of its batch)."""
        task = self._workers.tasks.get(user_id)
        if task is not None:
            await asyncio.wait([task])

    async def resume_pending_reflections(self) -> int:
        """After a restart (and periodically): reflect every answered, unreflected exchange."""
        rows = await fetch_all(
            self.db.reader,
            "SELECT DISTINCT user_id FROM exchanges WHERE reflected_at IS NULL AND reply IS NOT NULL",
        )
        users = [r[0] for r in rows]
        for user_id in users:
            self.schedule_reflection(user_id)
        if users:
            log.info("resuming pending reflections for %d user(s)", len(users))
        return len(users)

    async def _pending(self, user_id: str) -> list[_Exchange]:
        rows = await fetch_all(
            self.db.reader,
            "SELECT id, user_id, user_name, story_id, place, message_id, user_message, reply, "
            "reflection_attempts, edited_from, reply_message_id FROM exchanges "
            "WHERE user_id = ? AND reflected_at IS NULL AND reply IS NOT NULL AND settled_at IS NOT NULL "
            "ORDER BY id LIMIT ?",
            (user_id, REFLECTION_BATCH),
        )
        exchanges = [_Exchange(*row) for row in rows]
        if exchanges and exchanges[0].edited_from is not None:
            return exchanges[:1]  # a correction is reflected alone, with what it produced
        # One call reflects one story: later exchanges of another story wait for the next round.
        batch = []
        for e in exchanges:
            if e.edited_from is not None or e.story_id != exchanges[0].story_id or e.place != exchanges[0].place:
                break
            batch.append(e)
        return batch

    def _user_lock(self, user_id: str) -> asyncio.Lock:
        return self._workers.locks.setdefault(user_id, asyncio.Lock())

    async def _reflect_worker(self, user_id: str) -> None:
        try:
            while not self._closing:
                self._workers.dirty.discard(user_id)
                batch = await self._pending(user_id)
                if not batch:
                    if user_id in self._workers.dirty:
                        continue
                    break
                async with self._reflection_slots, self._user_lock(user_id):
                    async with self.db.exclusive(f"reflect:{user_id}") as mine:
                        ok = await self._reflect_safely(batch) if mine else None
                if ok is None:
                    # Another bot process reflects this user now; what it leaves is seen here next.
                    await asyncio.sleep(OTHER_PROCESS_POLL_SECONDS)
                    continue
                if not ok:
                    break  # the LLM is failing: the periodic sweep retries later
        finally:
            if self._workers.tasks.get(user_id) is asyncio.current_task():
                del self._workers.tasks[user_id]

    async def _reflect_safely(self, batch: list[_Exchange]) -> bool:
        """A reflection that fails for any other reason counts as a failed attempt: a batch
        that always fails is set aside after MAX_REFLECTION_ATTEMPTS instead of blocking the
        user's later exchanges forever."""
        try:
            return await self._reflect(batch)
        except StorageError:
            return False  # not the batch's fault: it stays pending, the periodic sweep retries
        except ExchangesGone as exc:
            log.info("a reflection was rolled back: %s", exc)
            return True
        except Exception as exc:
            self.metrics.reflections.labels("crashed").inc()
            log.exception("reflection of %d exchange(s) crashed", len(batch))
            await self._reflection_failed(batch, f"{type(exc).__name__}: {exc}", give_up=True)
            return True

    async def _reflect(self, batch: list[_Exchange]) -> bool:
        """Reflect one batch. False when the LLM failed (the batch stays pending)."""
        first, last = batch[0], batch[-1]
        ids = [e.id for e in batch]
        character = self.cast.character_of_key(first.user_id)
        specs = self._specs.get(character.key, self.state_specs)
        others = sorted(self._scene.get(first.story_id, set()) - {first.user_name})
        user_text = "\n".join(e.user_message for e in batch)
        known = await self._nearest_memories(first.user_id, user_text, first.story_id, first.place)
        correction: Correction | None = None
        correctable: frozenset[int] = frozenset()
        if first.edited_from is not None:
            produced = [
                m for m in [await self.store.get(first.user_id, i) for i in await produced_by(self.db, first.user_id, first.id)]
                if m is not None
            ]
            correction = Correction(first.edited_from, [m.id for m in produced])
            known = produced + [m for m in known if m.id not in correction.produced]
            correctable = frozenset(
                [m.id for m in produced if await sources_of(self.db, first.user_id, m.id) == [first.id]]
            )
        story = await load_story(self.db, first.user_id, first.story_id)
        story_block = render_story_context(
            story.anchors,
            story.summary,
            story.positions,
            state_values(specs, story.state),
            specs,
            show_ids=True,
        )
        messages = build_reflection_messages(
            character=character.name,
            user=first.user_name,
            exchanges=[(e.user_message, e.reply) for e in batch],
            known=known,
            today=self.clock().date(),
            story_context=story_block,
            state_keys=list(specs),
            correction=correction,
            others=others,
            lore=[e.name for e in character.lore.entries] if character.lore is not None else [],
        )
        try:
            answer = await self._chat(
                "reflection",
                messages,
                model=self.settings.reflection_model,
                json_schema=reflection_json_schema(),
                timeout=self.settings.reflection_timeout_seconds,
            )
            parsed = parse_reflection(answer.text)
        except LLMTooLarge as exc:
            # Not an outage: the same prompt would run away again, so it counts towards giving up.
            self.metrics.reflections.labels("rejected").inc()
            await self._reflection_failed(batch, f"LLM: {exc}", give_up=True)
            return True
        except LLMError as exc:
            self.metrics.reflections.labels("llm_failed").inc()
            self.reflection_outage.failed("reflections fail, exchanges stay pending: %s", exc)
            await self._reflection_failed(batch, f"LLM: {exc}", give_up=False)
            return False
        except ReflectionParseError as exc:
            self.metrics.reflections.labels("rejected").inc()
            await self._reflection_failed(batch, f"unparseable reflection: {exc}", give_up=True)
            return True
        ctx = ReflectionContext(
            user_id=first.user_id,
            allowed_ids=frozenset(m.id for m in known),
            character_name=character.name,
            user_message=user_text,
            user_name=first.user_name,
            story_id=first.story_id,
            place=first.place,
            source=last.message_id or f"exchange {last.id}",
            state_specs=specs,
            max_memories=self.settings.max_memories_per_user,
            exchange_ids=tuple(ids),
            correctable=correctable,
            other_names=tuple(others),
        )

        async def mark_reflected(conn: aiosqlite.Connection) -> None:
            marked = 0
            for e in batch:
                # The text read is still the message's: an edit meanwhile makes it pending again.
                cur = await conn.execute(
                    "UPDATE exchanges SET reflected_at = ?, last_error = NULL, edited_from = NULL "
                    "WHERE user_id = ? AND id = ? AND reflected_at IS NULL AND user_message = ?",
                    (to_db(self.clock()), first.user_id, e.id, e.user_message),
                )
                marked += cur.rowcount
            if marked != len(ids):
                raise ExchangesGone(f"{len(ids) - marked} exchange(s) erased, edited or already reflected")

        self.reflection_outage.recovered("reflections work again after %d failed attempt(s)")
        report: ReflectionReport = await apply_reflection(
            self.db, parsed.reflection, ctx, problems=parsed.problems, clock=self.clock, finalize=mark_reflected
        )
        self.cache.invalidate(first.user_id)
        self.last_reports[first.user_id] = report
        self.metrics.reflections.labels("applied").inc()
        if any(d.action in CHANGE_ACTIONS and d.memory_id is not None for d in report.decisions):
            # The count covers every reflection of this exchange (a correction adds to it).
            changes = len(await changes_of(self.db, first.user_id, last.id))
            await self._notify(
                self.receipt_listeners,
                Receipt(first.user_id, last.id, last.story_id, last.reply_message_id, changes),
            )
        return True

    async def _reflection_failed(self, batch: list[_Exchange], error: str, *, give_up: bool) -> None:
        """Count the attempt; after MAX_REFLECTION_ATTEMPTS the exchanges are set aside, logged."""
        if give_up:  # the batch's own fault (an LLM outage is logged once, by its Outage)
            log.warning("reflection of %d exchange(s) failed: %s", len(batch), error)
        async with self.db.write() as conn:
            for e in batch:
                attempts = e.attempts + 1
                done = to_db(self.clock()) if (give_up and attempts >= MAX_REFLECTION_ATTEMPTS) else None
                await conn.execute(
                    "UPDATE exchanges SET reflection_attempts = ?, last_error = ?, "
                    "reflected_at = COALESCE(?, reflected_at) WHERE user_id = ? AND id = ?",
                    (attempts, error[:500], done, e.user_id, e.id),
                )
        if give_up and all(e.attempts + 1 >= MAX_REFLECTION_ATTEMPTS for e in batch):
            log.error("gave up reflecting %d exchange(s) after %d attempts", len(batch), MAX_REFLECTION_ATTEMPTS)

    async def _nearest_memories(self, user_id: str, text: str, story_id: str, place: str) -> list[Memory]:
        """The memories shown to the reflection with their ids: closest to the exchange first.

        share=False: a reflection in a guild must not be able to touch what was said in a DM.
        """
        memories = await self.recall.candidates(user_id, story_id=story_id, place=place, share=False)
        if not memories:
            return []
        by_id = {m.id: m for m in memories}
        scores: dict[int, float] = {}
        try:
            semantic = await self.recall.semantic_scores(user_id, text, timeout=REFLECTION_EMBED_TIMEOUT)
            scores = {i: s for i, s in semantic.items() if i in by_id}
        except EmbeddingError as exc:
            log.info("reflection shows lexical neighbours only: %s", exc)
        lexical = await lexical_matches(
            self.db, user_id, text, REFLECTION_KNOWN, now=self.clock(), among=list(by_id)
        )
        ranked = sorted(scores, key=lambda i: -scores[i])[:REFLECTION_KNOWN]
        for memory_id in lexical:
            if memory_id in by_id and memory_id not in ranked:
                ranked.append(memory_id)
        if len(ranked) < REFLECTION_KNOWN:
            recent = sorted(memories, key=lambda m: (m.updated_at, m.id), reverse=True)
            ranked.extend(m.id for m in recent if m.id not in ranked)
        return [by_id[i] for i in ranked[: REFLECTION_KNOWN + len(lexical)]]

    # --- commands ----------------------------------------------------------------------------

    async def sharing(self, user_id: str) -> bool:
        row = await fetch_one(
            self.db.reader, "SELECT share_memories FROM user_settings WHERE user_id = ?", (user_id,)
        )
        return bool(row and row[0])

    async def set_sharing(self, user_id: str, share: bool) -> None:
        async with self.db.write() as conn:
            await conn.execute(
                "INSERT INTO user_settings (user_id, share_memories) VALUES (?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET share_memories = excluded.share_memories",
                (user_id, int(share)),
            )

    async def remember(
        self, user_id: str, text: str, *, story_id: str, place: str, type_: str = "fact", source: str | None = None
    ) -> int:
        if type_ == "rule":
            raise InvalidMemory("rules come from the character file only, never from a user")
        memory_id = await self.store.add(
            user_id,
            NewMemory(text=storable(text), type=type_, scope="global", story_id=story_id, place=place, source=source),
            cap=self.settings.max_memories_per_user,
        )
        self.cache.invalidate(user_id)
        return memory_id

    async def pin(self, user_id: str, memory_id: int, pinned: bool = True) -> bool:
        return await self.store.set_pinned(user_id, memory_id, pinned)

    async def forget(self, user_id: str, memory_id: int) -> bool:
        done = await self.store.forget(user_id, memory_id, cause="user: /forget")
        self.cache.invalidate(user_id)
        return done

    async def edit_memory(self, user_id: str, memory_id: int, text: str) -> int | None:
        """The user rewrites one of their memories. The previous version is archived first:
        returns its history id (for /restore), or None when the memory is not one of theirs."""
        history_id = await self.store.edit(user_id, memory_id, storable(text), cause="user: edit")
        self.cache.invalidate(user_id)
        return history_id

    async def receipt_size(self, user_id: str, exchange_id: int) -> int:
        """How many changes the receipt of this exchange lists (0: no receipt)."""
        return len(await changes_of(self.db, user_id, exchange_id))

    async def receipt(self, user_id: str, exchange_id: int) -> list[ReceiptLine]:
        """What the reflection of this exchange changed in the user's memories, each with the
        memory as it is now."""
        return [
            ReceiptLine(change, await self.store.get(user_id, change.memory_id))
            for change in await changes_of(self.db, user_id, exchange_id)
        ]

    async def restore(self, user_id: str, history_id: int) -> int | None:
        memory_id = await self.store.restore(user_id, history_id, cause="user: /restore")
        self.cache.invalidate(user_id)
        return memory_id

    async def why(self, user_id: str, story_id: str) -> TurnSelection | None:
        await self.wait_recorded(user_id)
        return await last_turn(self.db, user_id, story_id)

    async def stats(self, user_id: str) -> MemoryStats:
        await self.wait_recorded(user_id)
        memories = await self.store.list(user_id)
        now = self.clock()
        by_type: dict[str, int] = {}
        for m in memories:
            by_type[m.type] = by_type.get(m.type, 0) + 1
        turns, degraded = await turn_stats(self.db, user_id)
        row = await fetch_one(
            self.db.reader,
            "SELECT COUNT(*) FROM exchanges WHERE user_id = ? AND reflected_at IS NULL AND reply IS NOT NULL",
            (user_id,),
        )
        return MemoryStats(
            total=len(memories),
            cap=self.settings.max_memories_per_user,
            by_type=by_type,
            pinned=sum(m.pinned for m in memories),
            expired=sum(m.is_expired(now) for m in memories),
            never_surfaced=[
                m for m in memories if m.times_served == 0 and m.times_candidate >= NEVER_SURFACED_AFTER
            ],
            never_semantic=sum(1 for m in memories if m.times_semantic == 0),
            turns=turns,
            degraded_turns=degraded,
            pending_reflections=int(row[0]) if row else 0,
        )

    async def export(self, user_id: str) -> dict[str, Any]:
        """Everything stored about one user, as plain JSON-able data."""
        answers, sources = await export_rows(self.db, user_id)

        def memory_json(m: Memory) -> dict[str, Any]:
            return {
                "id": m.id,
                "text": m.text,
                "type": m.type,
                "scope": m.scope,
                "story_id": m.story_id,
                "place": m.place,
                "confidence": m.confidence,
                "pinned": m.pinned,
                "created_at": to_db(m.created_at),
                "updated_at": to_db(m.updated_at),
                "expires_at": to_db(m.expires_at),
                "source": m.source,
                "times_candidate": m.times_candidate,
                "times_served": m.times_served,
                "times_semantic": m.times_semantic,
                "from_exchanges": sources.get(m.id, []),
            }

        await self.wait_recorded(user_id)
        history = await self.store.history(user_id, limit=100_000)
        story = await story_history(self.db, user_id, None, limit=100_000)
        rows = await fetch_all(
            self.db.reader,
            "SELECT id, story_id, user_message, reply, created_at FROM exchanges WHERE user_id = ? ORDER BY id",
            (user_id,),
        )
        exchanges = [
            {"id": r[0], "story_id": r[1], "message": r[2], "reply": r[3], "answers": answers.get(r[0], []), "at": r[4]}
            for r in rows
        ]
        stories = []
        for story_id in await user_story_ids(self.db, user_id):
            story_state = await load_story(self.db, user_id, story_id)
            stories.append(
                {
                    "story_id": story_id,
                    "summary": story_state.summary,
                    "anchors": [{"id": a.id, "text": a.text, "created_at": to_db(a.created_at)} for a in story_state.anchors],
                    "positions": [
                        {
                            "id": p.id,
                            "subject": p.subject,
                            "stance": p.stance,
                            "justification": p.justification,
                            "updated_at": to_db(p.updated_at),
                        }
                        for p in story_state.positions
                    ],
                    "state": story_state.state,
                }
            )
        rows = await fetch_all(
            self.db.reader,
            "SELECT story_id, query, degraded, detail, created_at FROM turns WHERE user_id = ? ORDER BY id",
            (user_id,),
        )
        turns = [
            {"story_id": r[0], "message": r[1], "degraded": bool(r[2]), "selection": json.loads(r[3]), "at": r[4]}
            for r in rows
        ]
        figures = await user_turn_log(self.db, user_id, datetime.min.replace(tzinfo=timezone.utc), limit=-1)
        return {
            "user_id": user_id,
            "exported_at": to_db(self.clock()),
            "settings": {"share_memories": await self.sharing(user_id)},
            "stories": stories,
            "turns": turns,
            "turn_log": [
                {
                    "story_id": e.story_id,
                    "outcome": e.outcome,
                    "memory_ms": e.memory_ms,
                    "reply_ms": e.reply_ms,
                    "prompt_tokens": e.prompt_tokens,
                    "completion_tokens": e.completion_tokens,
                    "context_tokens": e.context_tokens,
                    "context_full": e.context_full,
                    "at": to_db(e.created_at),
                }
                for e in figures
            ],
            "memories": [memory_json(m) for m in await self.store.list(user_id)],
            "history": [
                {
                    "history_id": h.id,
                    "memory_id": h.memory_id,
                    "operation": h.operation,
                    "archived_at": to_db(h.archived_at),
                    "cause": h.cause,
                    "text": h.text,
                    "type": h.type,
                    "restored": h.restored,
                }
                for h in history
            ],
            "story_history": [
                {
                    "story_id": s.story_id,
                    "operation": s.operation,
                    "payload": s.payload,
                    "reason": s.reason,
                    "cause": s.cause,
                    "at": to_db(s.at),
                }
                for s in story
            ],
            "exchanges": exchanges,
        }

    async def erase(self, user_id: str) -> EraseReport:
        """Real deletion of everything about one user, in one transaction.

        A reflection of that user still running would write its memories back after the erase:
        it is cancelled first (its transaction rolls back), and the user's lock is held. A turn
        still under way (waiting for the LLM) would record its exchange, /why row and counts
        after it: every write of a turn checks, inside its transaction, that no erase was asked
        since the turn began, and writes nothing when one was.
        """
        # First: from now on, a turn of this user already under way writes nothing more.
        person = self.cast.user_of_key(user_id)
        self._erasures[person] = self._erasures.get(person, 0) + 1
        await self.wait_recorded(user_id)
        worker = self._workers.tasks.get(user_id)
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.wait([worker])
        async with self._user_lock(user_id), self.db.write() as conn:
            report = await erase_user_memories(conn, user_id)
            await erase_user_story_data(conn, user_id)
            await erase_user_exchange_data(conn, user_id)
            for statement in (
                "DELETE FROM exchanges WHERE user_id = ?",
                "DELETE FROM turns WHERE user_id = ?",
                "DELETE FROM turn_stats WHERE user_id = ?",
                "DELETE FROM turn_log WHERE user_id = ?",
                "DELETE FROM user_settings WHERE user_id = ?",
            ):
                await conn.execute(statement, (user_id,))
        # The deleted rows' earlier versions are still pages of the WAL file until it is copied back.
        await self.db.checkpoint()
        self.cache.invalidate(user_id)
        self.last_reports.pop(user_id, None)
        log.info("erased all data of one user on request (%d memories)", report.memories)
        return report

    async def export_person(self, user_id: str) -> dict[str, Any]:
        """`export` of the person's own key, with what each character of its own memory keeps
        (their derived keys) under "characters"."""
        keys = await owner_keys(self.db, user_id)
        data = await self.export(user_id)
        data["characters"] = {
            self.cast.character_of_key(key).key if key != user_id else "": await self.export(key)
            for key in keys[1:]
        }
        return data

    async def erase_person(self, user_id: str) -> EraseReport:
        """`erase` of every key of the person: their id and every derived key."""
        total = EraseReport(memories=0, history=0)
        for key in await owner_keys(self.db, user_id):
            report = await self.erase(key)
            total = EraseReport(memories=total.memories + report.memories, history=total.history + report.history)
        return total


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def final_reply(reply: str, *, max_chars: int | None = None) -> str:
    """The model's answer as sent: never empty, never a runaway (a runaway generation must not
    become hundreds of Discord messages)."""
    limit = min(MAX_REPLY_CHARS, max_chars or MAX_REPLY_CHARS)
    reply = storable(reply).strip() or "…"
    if len(reply) > limit:
        if limit == MAX_REPLY_CHARS:
            log.warning("a reply of %d characters was cut to %d", len(reply), limit)
        reply = reply[: limit - 1] + "…"
    return reply


def export_json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)

