"""Background indexing: embed the memories whose text or embedding model changed.

Turns never embed memories (docs/design.md, "Read path"): this job does, every 45 s, and right
after a reflection wrote some (`Indexer.written`, those memories only), so that the person's next
message finds them with a vector. Until then a memory created a moment ago is served by the
deterministic passes (a lexical stand-in).
Switching the embedding model works the same way: the new model's vectors fill in over the
next ticks while turns go on; until then a memory without a vector for the current model just
has no semantic score, and the old model's vectors are never compared with a new query (they
are keyed by model). Once the new model covers everything, the old vectors are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.clients.embeddings import Embedder
from bot.clients.outage import Outage
from bot.clients.storage import Database
from bot.clients.tasks import quiet_when_cancelled
from bot.errors import EmbeddingError, StorageError
from bot.memory.model import OwnerKey, utcnow
from bot.memory.stores.vectors import (
    StaleMemory,
    VectorRow,
    delete_vectors_of_other_models,
    stale_among,
    stale_memories,
    store_vectors,
)

log = logging.getLogger(__name__)

INDEX_BATCH = 32
INDEX_INTERVAL_SECONDS = 45.0
# A run stops after this many batches and leaves the rest to the next tick, so one tick after
# a model switch cannot hold the embedder for the whole backlog.
MAX_BATCHES_PER_RUN = 64
JOB_ID = "memory-vector-indexer"


async def prune_other_models(db: Database, model: str) -> int:
    """Drop vectors of every other model, only once `model` covers every active memory.

    Returns how many were dropped (0 while `model` still has memories to index).
    """
    if await stale_memories(db, model, 1):
        return 0
    async with db.write() as conn:
        return await delete_vectors_of_other_models(conn, model)


class Indexer:
    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        *,
        batch_size: int = INDEX_BATCH,
        max_batches: int = MAX_BATCHES_PER_RUN,
    ):
        self._db = db
        self._embedder = embedder
        self._batch_size = batch_size
        self._max_batches = max_batches
        # Ticks that failed to embed (`outage.failures`: the count a `/stats`-like command can show).
        self.outage = Outage(log)
        self._pruned = False

    async def run_once(self) -> int:
        """Embed stale memories batch by batch; returns how many got a vector.

        A batch that cannot be embedded stops the run and stays stale for the next tick; the
        outage is logged once when it starts and once when it ends. Bot processes sharing a
        PostgreSQL database take turns: a tick finding another's run under way does nothing.
        """
        try:
            async with self._db.exclusive("indexer") as mine:
                return await self._run() if mine else 0
        except StorageError:
            return 0  # the database logs and counts it; the next tick retries

    async def written(self, user_id: OwnerKey, memory_ids: Sequence[int]) -> int:
        """Embed what one person's reflection just wrote (`memory_ids`, those still without a
        vector for the model), now rather than at the next tick; how many got one. Their rows
        are read by id: the tick's search for stale memories reads every person's rows on the
        shared reader, and after each reflection it held others' turns' reads for tens of ms."""
        try:
            stale = await stale_among(self._db, self._embedder.model, user_id, memory_ids)
        except StorageError:
            return 0  # the database logs and counts it; the next tick embeds them
        return await self._embed(stale) if stale else 0

    async def _embed(self, stale: list[StaleMemory]) -> int:
        """Embed and store these memories' vectors: how many got one, 0 when the embedder or
        the database failed (they stay stale for the next tick)."""
        try:
            vectors = await self._embedder.embed_passages([memory.text for memory in stale])
        except EmbeddingError as exc:
            self.outage.failed("memory indexing paused, retrying every tick: %s", exc)
            return 0
        model = self._embedder.model
        rows = [
            VectorRow(memory.id, memory.user_id, model, memory.content_hash, vector)
            for memory, vector in zip(stale, vectors, strict=True)
        ]
        try:
            async with self._db.write() as conn:
                await store_vectors(conn, rows)
        except StorageError:
            return 0  # the database logs and counts it; the next tick retries
        self.outage.recovered("memory indexing resumed after %d failed ticks")
        return len(rows)

    async def _run(self) -> int:
        model = self._embedder.model
        indexed = 0
        covered = False
        for _ in range(self._max_batches):
            stale = await stale_memories(self._db, model, self._batch_size)
            if not stale:
                covered = True
                break
            done = await self._embed(stale)
            if not done:
                return indexed  # this batch stays stale: the next tick retries
            indexed += done
        if covered and not self._pruned:
            # The model only changes with the configuration, i.e. at a restart: once per
            # process is enough, and spares a scan of every vector each tick.
            dropped = await prune_other_models(self._db, model)
            self._pruned = True
            if dropped:
                log.info("dropped %d vectors of previous embedding models", dropped)
        return indexed

    def schedule(self, scheduler: AsyncIOScheduler, seconds: float = INDEX_INTERVAL_SECONDS) -> Job:
        """An interval job, first run as soon as the scheduler starts (backfill at boot).

        One instance at a time, and missed runs collapse into one: a slow tick (a model
        switch, a slow server) delays the next instead of stacking runs behind it.
        """
        return scheduler.add_job(
            quiet_when_cancelled(self.run_once),
            "interval",
            seconds=seconds,
            id=JOB_ID,
            name="embed stale memories",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            replace_existing=True,
            next_run_time=utcnow(),
        )
