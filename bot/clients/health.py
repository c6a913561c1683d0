"""What /healthz reports: whether Discord, the LLM, the embedder and the database answer.

The LLM and the embedder are asked at most once per CACHE_SECONDS, each within CHECK_SECONDS:
a health probe every few seconds must neither load the LLM server nor wait behind a long
generation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.clients.db import ping
from bot.clients.embeddings import Embedder
from bot.clients.llm import LLMClient
from bot.clients.storage import Database

log = logging.getLogger(__name__)

CACHE_SECONDS = 30.0
CHECK_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    # For the owner's page only: /healthz, which anyone may read, shows `ok` alone.
    detail: str


class _Cached:
    def __init__(self, probe: Callable[[], Awaitable[object]], clock: Callable[[], float]) -> None:
        self._probe = probe
        self._clock = clock
        self._result: Check | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> Check:
        async with self._lock:  # concurrent probes share one call
            if self._result is None or self._clock() - self._at >= CACHE_SECONDS:
                self._result = await _run(self._probe)
                self._at = self._clock()
            return self._result


async def _run(probe: Callable[[], Awaitable[object]]) -> Check:
    try:
        await asyncio.wait_for(probe(), timeout=CHECK_SECONDS)
    except TimeoutError:
        return Check(False, f"no answer within {CHECK_SECONDS:g} s")
    except Exception as exc:  # any failure of the dependency is the answer, not a crash
        return Check(False, str(exc) or type(exc).__name__)
    return Check(True, "answers")


class Health:
    def __init__(
        self,
        *,
        db: Database,
        llm: LLMClient,
        model: str,
        embedder: Embedder | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        # Set by the Discord front end once the bot exists; None in the terminal chat.
        self.discord: Callable[[], bool] | None = None
        self._llm = _Cached(lambda: llm.check(model, quiet=True), clock)
        self._embedder = _Cached(lambda: embedder.embed_query("health check"), clock) if embedder else None

    async def checks(self) -> dict[str, Check]:
        results: dict[str, Check] = {}
        if self.discord is not None:
            connected = self.discord()
            results["discord"] = Check(connected, "connected" if connected else "not connected to the gateway")
        results["llm"] = await self._llm.get()
        if self._embedder is not None:
            results["embedder"] = await self._embedder.get()
        database = await _run(lambda: ping(self.db))
        if database.ok and self.db.storage.down:
            database = Check(False, "reads work, writes fail (see the log: disk full or read-only?)")
        results["database"] = database
        return results
