"""The conversation engine: the one door of the front ends to the core — no discord.

Discord cogs, the terminal chat and the owner's page are thin translators over this class, so
all run the same code. It composes the parts that own the work: the turn, the open exchanges a
user may still regenerate or swipe, the reflection worker, and the stores that own the data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.characters.cast import Cast
from bot.characters.character import Character
from bot.clients.embeddings import Embedder
from bot.clients.llm import LLMClient, OnText
from bot.clients.metrics import Metrics
from bot.clients.storage import Database
from bot.clients.tasks import BackgroundTasks
from bot.config import EngineSettings
from bot.engine.consolidation_worker import Consolidations, RunFigures
from bot.engine.context import EngineContext
from bot.engine.events import Events, Receipt
from bot.engine.llm_calls import MAX_REPLY_CHARS, ModelCalls, final_reply
from bot.engine.open_exchanges import MESSAGE_DELETED, DeleteOutcome, OpenExchanges, Shown
from bot.engine.prompting import ChannelLine
from bot.engine.reflection_worker import MAX_REFLECTION_ATTEMPTS, REFLECTION_BATCH, Reflections
from bot.engine.turn import Incoming, TurnResult, Turns
from bot.errors import InvalidMemory, StorageError
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.warm_up import WarmUp, warm_up
from bot.memory.choice import TurnSelection
from bot.memory.model import HistoryEntry, Memory, utcnow
from bot.memory.read.indexing import Indexer
from bot.memory.read.recall import Recall
from bot.memory.reports.export import export_json, export_user
from bot.memory.reports.page import Report
from bot.memory.reports.stats import NEVER_SURFACED_AFTER, MemoryStats, memory_stats
from bot.memory.stores import settings as settings_store
from bot.memory.stores.epoch import end_epoch
from bot.memory.stores.exchanges import (
    MemoryChange,
    MessagePart,
    SettledExchange,
    changes_of,
    erase_user_exchange_data,
    join_parts,
    users_with_open_exchanges,
)
from bot.memory.stores.memories import (
    MAX_MEMORY_CHARS,
    Consolidation,
    EraseReport,
    MemoryStore,
    NewMemory,
    consolidations,
    erase_user_memories,
    owner_keys,
    replace_rules,
)
from bot.memory.stores.stories import StoryHistoryEntry, erase_user_story_data, story_history
from bot.memory.stores.turn import last_turn
from bot.memory.text import storable

# Re-exported: the front ends and tests name them from the engine, their one door.
__all__ = [
    "MAX_MEMORY_CHARS", "MAX_REFLECTION_ATTEMPTS",
    "MAX_REPLY_CHARS", "MESSAGE_DELETED", "NEVER_SURFACED_AFTER", "REFLECTION_BATCH",
    "DeleteOutcome", "Engine", "Incoming", "MemoryStats", "MessagePart", "Receipt", "ReceiptLine", "SettledExchange",
    "Shown", "TurnResult", "export_json", "final_reply", "join_parts",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReceiptLine:
    change: MemoryChange
    # The memory as it is now; None once it was forgotten (or the change itself forgot it).
    current: Memory | None


class Engine:
    def __init__(
        self,
        *,
        db: Database,
        llm: LLMClient,
        embedder: Embedder | None,
        settings: EngineSettings,
        character: Character,
        cast: Cast | None = None,
        clock: Callable[[], datetime] = utcnow,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.llm = llm
        self.embedder = embedder
        self.character = character
        self.cast = cast if cast is not None else Cast.single(character)
        self.clock = clock
        self.store = MemoryStore(db, clock=clock)
        # Kept in step with every write by the users' versions: no write path throws it away.
        self.cache = MemoryCache(db, embedder.model if embedder else None)
        self.recall = Recall(
            db, embedder, cache=self.cache, clock=clock,
            threshold=settings.semantic_threshold, series_slots=settings.series_max_slots,
        )
        self.tasks = BackgroundTasks()
        self.metrics = metrics if metrics is not None else Metrics()
        self.events = Events(self.tasks)
        self.report = Report(db)
        # Embeds what reflections and commands write; scheduled by the composition root.
        self.indexer = Indexer(db, embedder) if embedder is not None else None
        ctx = EngineContext(
            db=db, settings=settings, cast=self.cast, clock=clock, metrics=self.metrics, store=self.store,
            cache=self.cache, recall=self.recall, tasks=self.tasks, calls=ModelCalls(llm, self.metrics),
            events=self.events,
        )
        self._ctx = ctx
        self.state_specs = ctx.specs(self.cast.default_key)
        self.reflections = Reflections(ctx)
        self.consolidations = Consolidations(ctx, self.reflections)
        self.exchanges = OpenExchanges(ctx, self.reflections, self.wait_recorded)
        self.turns = Turns(ctx, self.exchanges, self.reflections)
        self.rules: list[Memory] = []
        # The start-up warm-up of the memory cache (bot/memory/cache/warm_up.py), once started.
        self.warming: asyncio.Task[WarmUp] | None = None
        self._rules: dict[str, list[Memory]] = {}
        # Shared with the parts that fill them, so the operator and front ends read them here.
        self.last_reports = self.reflections.last_reports
        self.reply_outage = self.turns.outage
        self.reflection_outage = self.reflections.outage
        self.settle_listeners = self.events.settle_listeners
        self.receipt_listeners = self.events.receipt_listeners
        self.erase_listeners = self.events.erase_listeners

    @property
    def settings(self) -> EngineSettings:
        return self._ctx.settings

    @settings.setter
    def settings(self, settings: EngineSettings) -> None:
        self._ctx.settings = settings
        self.recall.configure(settings.semantic_threshold, settings.series_max_slots)

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
        self.warming = self.tasks.spawn(warm_up(self.db, self.cache, self.clock, self._ctx.write_indexes.warm), name="warm-up")

    async def sync_rules(self) -> None:
        """Each character file's rules, stored as `rule` memories of the character itself: rewritten
        only when a file's rules changed, so a character keeps its rule ids (and vectors)."""
        for key, character in self.cast.characters.items():
            owner = f"character:{character.name}"
            stored = await self._stored_rules(owner)
            if [m.text for m in stored] != list(character.rules):
                async with self.db.write() as conn:
                    await replace_rules(conn, owner, character.rules, now=self.clock())
                stored = await self._stored_rules(owner)
            self._rules[key] = stored
        self.rules = self._rules[self.cast.default_key]

    async def _stored_rules(self, owner: str) -> list[Memory]:
        return sorted(await self.store.list(owner, types=["rule"], include_rules=True), key=lambda m: m.id)

    async def close(self, timeout: float = 20.0) -> None:
        """Let in-flight reflections finish; what does not finish stays pending for next start."""
        self.reflections.closing = True
        self.exchanges.close()
        if self.warming is not None:  # only a head start: what it did not read, the turns will
            self.warming.cancel()
        if not await self.tasks.wait(timeout):
            log.warning("shutting down with reflections in flight; they stay pending")
            await self.tasks.cancel_all()
        with contextlib.suppress(StorageError):  # counted and logged by the database
            await self.recall.flush_counts()
        self._ctx.offload.close()

    # --- one turn, and the answers a user may still choose among ---------------------------

    async def turn(self, msg: Incoming, *, on_text: OnText | None = None) -> TurnResult:
        """Answer one message, then schedule its reflection. With `on_text`, the answer is
        streamed: `on_text` sees the visible text as it grows, and a stream cut halfway keeps
        (and saves) what arrived."""
        rules = self._rules.get(self.cast.get(msg.character).key, self.rules)
        return await self.turns.run(msg, rules, on_text=on_text)

    def read_ahead(self, user_id: str, story_id: str, text: str, history: Sequence[ChannelLine]) -> None:
        """A message the front end holds (a burst's wait) and the lines before it: read now, its
        turn embeds nothing if its text is still `text` (`Recall.prepare_turn`)."""
        self.turns.read_ahead(user_id, story_id, text, history)

    async def wait_recorded(self, user_id: str) -> None:
        """Wait until the user's turns are recorded (before /why, stats, export or erase)."""
        await self.turns.wait_recorded(user_id)

    async def reply_sent(self, user_id: str, exchange_id: int, message_id: str) -> None:
        """The front end's id of the message holding the reply: where its buttons and receipt go."""
        await self.exchanges.reply_sent(user_id, exchange_id, message_id)

    async def shown(self, user_id: str, exchange_id: int) -> Shown | None:
        """What an open exchange shows now; None once it is settled (or not the user's)."""
        return await self.exchanges.shown(user_id, exchange_id)

    async def regenerate(self, user_id: str, exchange_id: int, *, max_chars: int | None = None) -> Shown | None:
        """Ask the model again, with the very prompt of the turn (same memories, same history);
        None when the exchange is settled. LLMError when the model fails: nothing is stored."""
        return await self.exchanges.regenerate(user_id, exchange_id, max_chars=max_chars)

    async def swipe(self, user_id: str, exchange_id: int, step: int) -> Shown | None:
        """Show the previous (-1) or next (+1) answer; it becomes the one kept. None when settled."""
        return await self.exchanges.swipe(user_id, exchange_id, step)

    async def settle(
        self, user_id: str, *, exchange_id: int | None = None, story_id: str | None = None
    ) -> list[SettledExchange]:
        """Keep the answers shown: the exchanges leave the open state and are reflected."""
        return await self.exchanges.settle(user_id, exchange_id=exchange_id, story_id=story_id)

    def listen(
        self,
        *,
        settled: Callable[[SettledExchange], Awaitable[None]] | None = None,
        receipt: Callable[[Receipt], Awaitable[None]] | None = None,
        erasing: Callable[[str], None] | None = None,
    ) -> None:
        """A front end follows settled exchanges, receipts and erasures (`erasing(person)`, called
        when an erase begins: drop what is queued for them). What happened before any front end
        listened (start-up settles and reflections) is delivered now."""
        self.events.listen(settled=settled, receipt=receipt, erasing=erasing)

    # --- the user's message edited or deleted -------------------------------------------------

    async def message_edited(self, message_id: str, text: str, *, user_id: str | None = None) -> str:
        """The user edited a message the character answered. Returns what happens:
        "unknown" (no exchange), "unchanged", "reflected as edited" (not reflected yet), or
        "correction" (already reflected: reflected again as a correction of its memories)."""
        return await self.exchanges.message_edited(message_id, text, user_id=user_id)

    async def message_deleted(self, message_id: str) -> DeleteOutcome:
        """The user deleted a message: the memories it alone produced are archived (pinned ones
        stay), and its text leaves the exchanges. A reflection of it in flight rolls back."""
        return await self.exchanges.message_deleted(message_id)

    # --- reflection --------------------------------------------------------------------------

    def schedule_reflection(self, user_id: str) -> asyncio.Task[None]:
        """Reflect the user's answered exchanges in the background (a turn already does)."""
        return self.reflections.schedule(user_id)

    async def wait_reflections(self, user_id: str) -> None:
        """Wait until the user's reflection worker is idle (whatever became of its batch)."""
        await self.reflections.wait(user_id)

    async def wait_idle(self, user_id: str) -> None:
        """Wait for the user's reflection, then embed what it wrote (a piped chat is repeatable)."""
        await self.reflections.wait(user_id)
        if self.indexer is not None:
            await self.indexer.run_once()

    async def resume_pending_reflections(self) -> int:
        """After a restart (and periodically): reflect every answered, unreflected exchange."""
        return await self.reflections.resume_pending()

    # --- commands ----------------------------------------------------------------------------

    async def sharing(self, user_id: str) -> bool:
        return await settings_store.sharing(self.db, user_id)

    async def set_sharing(self, user_id: str, share: bool) -> None:
        await settings_store.set_sharing(self.db, user_id, share)

    async def memories(self, user_id: str, *, types: list[str] | None = None) -> list[Memory]:
        """The user's memories (of these types, when given)."""
        return await self.store.list(user_id, types=types)

    async def memory(self, user_id: str, memory_id: int) -> Memory | None:
        return await self.store.get(user_id, memory_id)

    async def history(self, user_id: str) -> tuple[list[HistoryEntry], list[StoryHistoryEntry]]:
        """The archived versions of the user's memories, and the anchors removed from their stories."""
        entries = await self.store.history(user_id)
        return entries, await story_history(self.db, user_id, None, operations=("anchor_removed",))

    async def remember(
        self, user_id: str, text: str, *, story_id: str, place: str, type_: str = "fact", source: str | None = None
    ) -> int:
        if type_ == "rule":
            raise InvalidMemory("rules come from the character file only, never from a user", code="rule")
        return await self.store.add(
            user_id,
            NewMemory(text=storable(text), type=type_, scope="global", story_id=story_id, place=place, source=source),
            cap=self.settings.max_memories_per_user,
        )

    async def pin(self, user_id: str, memory_id: int, pinned: bool = True) -> bool:
        return await self.store.set_pinned(user_id, memory_id, pinned)

    async def forget(self, user_id: str, memory_id: int) -> bool:
        return await self.store.forget(user_id, memory_id, cause="user: /forget")

    async def edit_memory(self, user_id: str, memory_id: int, text: str) -> int | None:
        """The user rewrites a memory, archived first: its history id (/restore), None if not theirs."""
        return await self.store.edit(user_id, memory_id, storable(text), cause="user: edit")

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
        """Bring back an archived version; a consolidated member brings back its whole series."""
        return await self.store.restore(user_id, history_id, cause="user: /restore")

    async def consolidated(self, user_id: str) -> list[Consolidation]:
        """The user's consolidations of series, newest first (for /history and the owner's page)."""
        return await consolidations(self.db.reader, user_id)

    async def consolidate(self) -> RunFigures:
        """One run of the consolidation job (scheduled by the composition root, never in a turn)."""
        return await self.consolidations.run_once()

    async def why(self, user_id: str, story_id: str) -> TurnSelection | None:
        await self.wait_recorded(user_id)
        return await last_turn(self.db, user_id, story_id)

    async def stats(self, user_id: str) -> MemoryStats:
        await self.wait_recorded(user_id)
        cap = self.settings.max_memories_per_user
        return await memory_stats(self.db, self.store, user_id, cap=cap, now=self.clock())

    async def export(self, user_id: str) -> dict[str, Any]:
        """Everything stored about one user, as plain JSON-able data."""
        await self.wait_recorded(user_id)
        return await export_user(self.db, self.store, user_id, now=self.clock())

    async def erase(self, user_id: str) -> EraseReport:
        """Real deletion of everything about one user, in one transaction. The front ends are told
        first (`listen(erasing=…)`) and drop what no turn has begun on; a running reflection is
        cancelled (its transaction rolls back) and the user's lock held; a turn under way, here or
        in another process, writes nothing after it: the erase ends the person's epoch, which
        every write of a turn checks inside its own transaction."""
        self.events.erasing(self.cast.user_of_key(user_id))
        await self.wait_recorded(user_id)
        await self.reflections.stop(user_id)
        async with self.reflections.lock(user_id), self.db.write() as conn:
            await end_epoch(conn, self.cast.user_of_key(user_id))
            report = await erase_user_memories(conn, user_id)
            await erase_user_story_data(conn, user_id)
            await erase_user_exchange_data(conn, user_id)
            await settings_store.erase_user_settings(conn, user_id)
        # The deleted rows' earlier versions are still pages of the WAL file until it is copied back.
        await self.db.checkpoint()
        self.cache.forget(user_id)
        self.last_reports.pop(user_id, None)
        log.info("erased all data of one user on request (%d memories)", report.memories)
        return report

    async def export_person(self, user_id: str) -> dict[str, Any]:
        """`export` of the person's own key, with what each character of its own memory keeps
        under "characters", filed by the stored key (`<id>@<key>`): a character since removed
        from the folder has no name in the cast, and two of them must not share one entry."""
        keys = await owner_keys(self.db, user_id)
        data = await self.export(user_id)
        data["characters"] = {key: await self.export(key) for key in keys[1:]}
        return data

    async def erase_person(self, user_id: str) -> EraseReport:
        """`erase` of every key of the person: their id and every derived key."""
        keys = await owner_keys(self.db, user_id)
        reports = [await self.erase(key) for key in keys]
        # Read again once the first erase ended the person's epoch: a turn with another character
        # that saved its first message between the read and that erase writes nothing more, and
        # what it saved is found now.
        reports += [await self.erase(key) for key in await owner_keys(self.db, user_id) if key not in keys]
        return EraseReport(memories=sum(r.memories for r in reports), history=sum(r.history for r in reports))
