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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiosqlite

from bot.cast import Cast
from bot.character import Character, fill_user, render_character_prompt
from bot.config import Settings
from bot.db import Database, StorageError, fetch_all, fetch_one, to_db
from bot.embeddings import Embedder, EmbeddingError
from bot.llm import Image, LLMClient, LLMError, LLMStreamCut, LLMTooLarge, OnText, TokenUsage
from bot.memory.model import Memory, utcnow
from bot.memory.recall import Recall, TurnSelection, last_turn, turn_stats
from bot.memory.reflection import (
    ReflectionParseError,
    build_reflection_messages,
    parse_reflection,
    reflection_json_schema,
)
from bot.memory.scoring import VectorCache
from bot.memory.store import (
    EraseReport,
    InvalidMemory,
    MemoryStore,
    NewMemory,
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
from bot.memory.vectors import lexical_matches
from bot.memory.write import ReflectionContext, ReflectionReport, apply_reflection
from bot.outage import Outage
from bot.prompting import ChannelLine, bounded_history, build_reply_messages, speaker_name
from bot.tasks import BackgroundTasks

log = logging.getLogger(__name__)

# Memories shown to the reflection with their ids (its allowed_ids).
REFLECTION_KNOWN = 12
# Exchanges of one user reflected in one call: a burst of 30 messages costs ~8 calls, in turn.
REFLECTION_BATCH = 4
MAX_REFLECTION_ATTEMPTS = 3
# Reflections of different users running at once (one user's never run concurrently).
REFLECTION_CONCURRENCY = 2
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
# A reply longer than this is cut: a runaway generation must not become hundreds of Discord
# messages: this is two or three of them.
MAX_REPLY_CHARS = 4000


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


class ExchangesGone(RuntimeError):
    """The exchanges a reflection was about were deleted (erase) or already reflected by the
    time it would commit: its transaction is rolled back, nothing is applied twice."""


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
        self.reply_outage = Outage(log)
        self.reflection_outage = Outage(log)

    @property
    def character_user_id(self) -> str:
        return f"character:{self.character.name}"

    # --- start-up and shutdown -------------------------------------------------------------

    async def start(self) -> None:
        await self.sync_rules()
        await self.resume_pending_reflections()

    async def sync_rules(self) -> None:
        """Each character file's rules, stored as `rule` memories of the character itself."""
        now = self.clock()
        for key, character in self.cast.characters.items():
            owner = f"character:{character.name}"
            async with self.db.write() as conn:
                await conn.execute("DELETE FROM memories WHERE user_id = ? AND type = 'rule'", (owner,))
                for rule in character.rules:
                    await insert_memory(conn, owner, NewMemory(text=rule, type="rule"), now=now)
            self._rules[key] = await self.store.list(owner, types=["rule"], include_rules=True)
        self.rules = self._rules[self.cast.default_key]

    async def close(self, timeout: float = 20.0) -> None:
        """Let in-flight reflections finish; what does not finish stays pending for next start."""
        self._closing = True
        if not await self.tasks.wait(timeout):
            log.warning("shutting down with reflections in flight; they stay pending")
            await self.tasks.cancel_all()

    # --- one turn ----------------------------------------------------------------------------

    async def turn(self, msg: Incoming, *, on_text: OnText | None = None) -> TurnResult:
        """Answer one message. With `on_text`, the answer is streamed: `on_text` sees the
        visible text as it grows, and a stream cut halfway keeps (and saves) what arrived."""
        text = msg.text.strip()[: self.settings.max_message_chars]
        try:
            exchange_id = await self._save_exchange(msg, text)
        except StorageError as exc:
            # Answering what cannot be kept would make the character forget it silently.
            return TurnResult(None, str(exc), None, None, apology=STORAGE_DOWN_REPLY)
        character = self.cast.get(msg.character)
        rules = self._rules.get(character.key, self.rules)
        share = await self.sharing(msg.user_id)
        story_block, story_detail = await self._story_context(
            msg.user_id, msg.story_id, text, self._specs.get(character.key, self.state_specs)
        )
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
        cut: LLMStreamCut | None = None
        usage: TokenUsage | None = None
        try:
            if on_text is None:
                reply = await self.llm.chat(
                    messages, model=self.settings.llm_model, timeout=self.settings.llm_timeout_seconds
                )
            else:
                streamed = await self.llm.stream(
                    messages,
                    model=self.settings.llm_model,
                    on_text=on_text,
                    timeout=self.settings.llm_timeout_seconds,
                )
                reply, usage = streamed.text, streamed.usage
        except LLMStreamCut as exc:
            # What the user already saw is the reply: kept, saved and reflected like any other.
            self.reply_outage.failed("replies fail, messages are kept unanswered: %s", exc)
            cut, reply = exc, exc.partial
        except LLMError as exc:
            self.reply_outage.failed("replies fail, messages are kept unanswered: %s", exc)
            self._record_later(selection)
            with contextlib.suppress(StorageError):  # counted and logged by the database
                await self._exchange_failed(msg.user_id, exchange_id, str(exc))
            return TurnResult(None, str(exc), selection, exchange_id)
        # The selection (counters, /why) is written in the background: the reply never queues
        # behind another user's reflection for it.
        if cut is None:
            self.reply_outage.recovered("replies work again after %d failed turn(s)")
        self._record_later(selection)
        reply = reply.strip() or "…"
        if len(reply) > MAX_REPLY_CHARS:
            log.warning("a reply of %d characters was cut to %d", len(reply), MAX_REPLY_CHARS)
            reply = reply[: MAX_REPLY_CHARS - 1] + "…"
        try:
            async with self.db.write() as conn:
                await conn.execute(
                    "UPDATE exchanges SET reply = ?, answered_at = ? WHERE user_id = ? AND id = ?",
                    (reply, to_db(self.clock()), msg.user_id, exchange_id),
                )
        except StorageError:
            # The user still gets the answer; the exchange stays unanswered, so it is not reflected.
            pass
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

    async def _record(self, selection: TurnSelection) -> None:
        with contextlib.suppress(StorageError):  # counted and logged by the database
            await self.recall.record(selection)

    def _record_later(self, selection: TurnSelection) -> None:
        task = self.tasks.spawn(self._record(selection), name=f"record-turn:{selection.user_id}")
        pending = self._recording.setdefault(selection.user_id, set())
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def wait_recorded(self, user_id: str) -> None:
        """Wait until the user's turns are recorded (before /why, stats, export or erase)."""
        pending = list(self._recording.get(user_id, ()))
        if pending:
            await asyncio.wait(pending)

    async def _save_exchange(self, msg: Incoming, text: str) -> int:
        async with self.db.write() as conn:
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
            "reflection_attempts FROM exchanges "
            "WHERE user_id = ? AND reflected_at IS NULL AND reply IS NOT NULL ORDER BY id LIMIT ?",
            (user_id, REFLECTION_BATCH),
        )
        exchanges = [_Exchange(*row) for row in rows]
        # One call reflects one story: later exchanges of another story wait for the next round.
        return [e for e in exchanges if e.story_id == exchanges[0].story_id and e.place == exchanges[0].place]

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
                    ok = await self._reflect_safely(batch)
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
            others=others,
            lore=[e.name for e in character.lore.entries] if character.lore is not None else [],
        )
        try:
            raw = await self.llm.chat(
                messages,
                model=self.settings.reflection_model,
                json_schema=reflection_json_schema(),
                timeout=self.settings.reflection_timeout_seconds,
            )
            parsed = parse_reflection(raw)
        except LLMTooLarge as exc:
            # Not an outage: the same prompt would run away again, so it counts towards giving up.
            await self._reflection_failed(batch, f"LLM: {exc}", give_up=True)
            return True
        except LLMError as exc:
            self.reflection_outage.failed("reflections fail, exchanges stay pending: %s", exc)
            await self._reflection_failed(batch, f"LLM: {exc}", give_up=False)
            return False
        except ReflectionParseError as exc:
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
            other_names=tuple(others),
        )

        async def mark_reflected(conn: aiosqlite.Connection) -> None:
            marked = 0
            for exchange_id in ids:
                cur = await conn.execute(
                    "UPDATE exchanges SET reflected_at = ?, last_error = NULL "
                    "WHERE user_id = ? AND id = ? AND reflected_at IS NULL",
                    (to_db(self.clock()), first.user_id, exchange_id),
                )
                marked += cur.rowcount
            if marked != len(ids):
                raise ExchangesGone(f"{len(ids) - marked} exchange(s) erased or already reflected")

        self.reflection_outage.recovered("reflections work again after %d failed attempt(s)")
        report: ReflectionReport = await apply_reflection(
            self.db, parsed.reflection, ctx, problems=parsed.problems, clock=self.clock, finalize=mark_reflected
        )
        self.cache.invalidate(first.user_id)
        self.last_reports[first.user_id] = report
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
            NewMemory(text=text, type=type_, scope="global", story_id=story_id, place=place, source=source),
        )
        self.cache.invalidate(user_id)
        return memory_id

    async def pin(self, user_id: str, memory_id: int, pinned: bool = True) -> bool:
        return await self.store.set_pinned(user_id, memory_id, pinned)

    async def forget(self, user_id: str, memory_id: int) -> bool:
        done = await self.store.forget(user_id, memory_id, cause="user: /forget")
        self.cache.invalidate(user_id)
        return done

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
            }

        await self.wait_recorded(user_id)
        history = await self.store.history(user_id, limit=100_000)
        story = await story_history(self.db, user_id, None, limit=100_000)
        rows = await fetch_all(
            self.db.reader,
            "SELECT story_id, user_message, reply, created_at FROM exchanges WHERE user_id = ? ORDER BY id",
            (user_id,),
        )
        exchanges = [{"story_id": r[0], "message": r[1], "reply": r[2], "at": r[3]} for r in rows]
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
        return {
            "user_id": user_id,
            "exported_at": to_db(self.clock()),
            "settings": {"share_memories": await self.sharing(user_id)},
            "stories": stories,
            "turns": turns,
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
        it is cancelled first (its transaction rolls back), and the user's lock is held.
        """
        await self.wait_recorded(user_id)
        worker = self._workers.tasks.get(user_id)
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.wait([worker])
        async with self._user_lock(user_id), self.db.write() as conn:
            report = await erase_user_memories(conn, user_id)
            await erase_user_story_data(conn, user_id)
            for statement in (
                "DELETE FROM exchanges WHERE user_id = ?",
                "DELETE FROM turns WHERE user_id = ?",
                "DELETE FROM turn_stats WHERE user_id = ?",
                "DELETE FROM user_settings WHERE user_id = ?",
            ):
                await conn.execute(statement, (user_id,))
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


def export_json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)

