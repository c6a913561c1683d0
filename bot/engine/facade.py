"""The conversation engine: the one door of the front ends to the core — no discord.

Discord cogs, the terminal chat and the owner's page are thin translators over this class, so
all run the same code. Its doors are four ports, each the methods one kind of caller uses:
`conversation` (a message and its reply), `memories` (the memory commands), `privacy` (sharing,
export, erase) and `operator` (the scheduled jobs, the owner's page's report). Everything
behind them — the database, the cache, recall, the workers — is private.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from bot.characters.cast import Cast
from bot.characters.character import Character
from bot.clients.embeddings import Embedder
from bot.clients.erasures import Erasure
from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.clients.storage import Database
from bot.clients.tasks import BackgroundTasks
from bot.config import EngineSettings
from bot.engine.consolidation_worker import Consolidations
from bot.engine.context import EngineContext
from bot.engine.conversation import Conversation, ReceiptLine
from bot.engine.events import Events, Receipt
from bot.engine.llm_calls import MAX_REPLY_CHARS, ModelCalls, final_reply
from bot.engine.memories import Memories
from bot.engine.open_exchanges import DeleteOutcome, OpenExchanges, Shown
from bot.engine.operator import Operator
from bot.engine.privacy import Privacy
from bot.engine.reflection_worker import MAX_REFLECTION_ATTEMPTS, REFLECTION_BATCH, Reflections
from bot.engine.rules import CharacterRules
from bot.engine.turn import Turns
from bot.engine.turn_values import Incoming, TurnResult
from bot.errors import StorageError
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.model import MAX_MEMORY_CHARS, OwnerKey, utcnow
from bot.memory.read.indexing import Indexer
from bot.memory.read.recall import Recall
from bot.memory.reports.export import export_json
from bot.memory.reports.stats import NEVER_SURFACED_AFTER, MemoryStats
from bot.memory.stores.exchanges import MessagePart, SettledExchange, join_parts, users_with_open_exchanges
from bot.memory.stores.memory_store import MemoryStore

# Re-exported: the front ends and tests name them from the engine, their one door.
__all__ = [
    "MAX_MEMORY_CHARS",
    "MAX_REFLECTION_ATTEMPTS",
    "MAX_REPLY_CHARS",
    "NEVER_SURFACED_AFTER",
    "REFLECTION_BATCH",
    "DeleteOutcome",
    "Engine",
    "Incoming",
    "MemoryStats",
    "MessagePart",
    "Receipt",
    "ReceiptLine",
    "SettledExchange",
    "Shown",
    "TurnResult",
    "export_json",
    "final_reply",
    "join_parts",
]

log = logging.getLogger(__name__)


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
        erasures: Callable[[Erasure], None] | None = None,
    ) -> None:
        """`erasures`: where each erase is written outside the database before it runs (the
        composition root's ledger, bot/clients/erasures.py), so a restored backup erases again."""
        cast = cast if cast is not None else Cast.single(character)
        store = MemoryStore(db, clock=clock)
        # Kept in step with every write by the users' versions: no write path throws it away.
        cache = MemoryCache(db, embedder.model if embedder else None)
        recall = Recall(
            db, embedder, cache=cache, clock=clock,
            threshold=settings.semantic_threshold, series_slots=settings.series_max_slots,
        )  # fmt: skip
        tasks = BackgroundTasks()
        metrics = metrics if metrics is not None else Metrics()
        metrics.watch_cache(cache.reads, lambda: (len(cache), cache.nbytes))
        metrics.watch_foreground(cache.foreground.figures)
        self._ctx = ctx = EngineContext(
            db=db, settings=settings, cast=cast, clock=clock, metrics=metrics, store=store, cache=cache,
            recall=recall, tasks=tasks, calls=ModelCalls(llm, metrics, settings),
            events=Events(tasks, ledger=erasures),
        )  # fmt: skip
        self._character = character
        # Embeds what reflections and commands write: after each reflection that wrote, and at
        # the ticks the composition root schedules.
        indexer = Indexer(db, embedder) if embedder is not None else None
        self._rules = CharacterRules(db, cast, store, clock)
        self._reflections = reflections = Reflections(ctx, indexer)
        self._exchanges = exchanges = OpenExchanges(ctx, reflections, self._wait_recorded)
        self._turns = turns = Turns(ctx, exchanges, reflections)
        self.conversation = Conversation(ctx, turns, exchanges, reflections, self._rules, indexer)
        self.memories = Memories(ctx, turns)
        consolidations = Consolidations(ctx, reflections)
        self.privacy = Privacy(ctx, turns, reflections, consolidations)
        self.operator = Operator(ctx, reflections, consolidations, indexer)

    @property
    def cast(self) -> Cast:
        return self._ctx.cast

    @property
    def character(self) -> Character:
        """The default character (the only one without a cast)."""
        return self._character

    def clock(self) -> datetime:
        """The engine's now (a test's clock, or UTC)."""
        return self._ctx.clock()

    @property
    def settings(self) -> EngineSettings:
        return self._ctx.settings

    @settings.setter
    def settings(self, settings: EngineSettings) -> None:
        self._ctx.settings = settings
        self._ctx.recall.configure(settings.semantic_threshold, settings.series_max_slots)

    async def _wait_recorded(self, user_id: OwnerKey) -> None:
        await self._turns.wait_recorded(user_id)

    # --- start-up and shutdown -------------------------------------------------------------

    async def start(self) -> None:
        await self._rules.sync()
        # Nobody can still be choosing among the answers of a previous run: they are kept as shown.
        for user_id in await users_with_open_exchanges(self._ctx.db):
            await self._exchanges.settle(user_id)
        await self._reflections.resume_pending()
        self.operator.warm_up()

    async def close(self, timeout: float = 20.0) -> None:
        """Let in-flight reflections finish; what does not finish stays pending for next start."""
        self._reflections.closing = True
        self._exchanges.close()
        self.operator.stop_warm_up()
        tasks = self._ctx.tasks
        if not await tasks.wait(timeout):
            log.warning("shutting down with reflections in flight; they stay pending")
            await tasks.cancel_all()
        with contextlib.suppress(StorageError):  # counted and logged by the database
            await self._ctx.recall.flush_counts()
        self._ctx.offload.close()

    # --- what the front ends follow --------------------------------------------------------

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
        self._ctx.events.listen(settled=settled, receipt=receipt, erasing=erasing)

    def unlisten(
        self,
        *,
        settled: Callable[[SettledExchange], Awaitable[None]] | None = None,
        receipt: Callable[[Receipt], Awaitable[None]] | None = None,
        erasing: Callable[[str], None] | None = None,
    ) -> None:
        """The front end no longer follows what it registered with `listen` (a cog unloaded)."""
        self._ctx.events.unlisten(settled=settled, receipt=receipt, erasing=erasing)
