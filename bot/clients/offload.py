"""Pure CPU work that grows with a person's memories, in a worker process rather than on the loop.

The write path's index and the consolidation's series scan read every memory of a person through
pure-Python text code (0.2-1 ms a memory: regular expressions, word sets). At 100,000 memories
that is 20-100 s of CPU. Run on the event loop in slices, it still took a slice of every loop
iteration from everyone's turns for as long (their overhead went to seconds); a thread holds the
GIL against the loop. A worker process holds neither: the loop only hands it chunks of texts and
takes back their results, a few microseconds a text.

One worker, started on the first large job and stopped after IDLE_SECONDS without work (its
interpreter and imports cost about 60 MB), lowered in priority so that the bot's own process (the
turns, the local embedding model) goes first on a busy machine. Jobs queue in chunks, so a small
person's job waits for one chunk of a large one at most. Fewer than `inline_below` items, or a
worker that cannot start or died, run on the loop instead, one short piece at a time: the answer
is the same function's, wherever it ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from bot.clients.outage import Outage

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# Items handed to the worker per call: about a second of its work at 1 ms an item, and what a
# small job queued behind a large one waits for at most.
CHUNK = 1_000
# Below this many items the work runs on the loop: starting the worker (an interpreter and its
# imports, a second or two) would cost more than it saves.
INLINE_BELOW = 400
IDLE_SECONDS = 120.0
# On the loop, the work gives the loop back after this long (as the cache's slices do).
SLICE_SECONDS = 0.002
# Items run on the loop between two looks at the clock (a few milliseconds at most).
INLINE_PIECE = 4
WORKER_NICENESS = 10


def _lower_priority() -> None:
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


class Offload:
    """Runs `fn(chunk) -> list` over chunks of items in one worker process (see the module)."""

    def __init__(self, *, inline_below: int = INLINE_BELOW, idle_seconds: float = IDLE_SECONDS) -> None:
        self.inline_below = inline_below
        self.idle_seconds = idle_seconds
        self.outage = Outage(log)
        self._pool: ProcessPoolExecutor | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._busy = 0
        self.closed = False
        # Items computed in the worker and on the loop: for benches and tests.
        self.offloaded = 0
        self.inline = 0
        self.starts = 0

    async def map(self, fn: Callable[[Sequence[T]], list[R]], items: Sequence[T], *, chunk: int = CHUNK) -> list[R]:
        """`fn` over `items`, every result at once (see `chunks`)."""
        out: list[R] = []
        async for part in self.chunks(fn, items, chunk=chunk):
            out.extend(part)
        return out

    async def chunks(
        self, fn: Callable[[Sequence[T]], list[R]], items: Sequence[T], *, chunk: int = CHUNK
    ) -> AsyncGenerator[list[R], None]:
        """`fn` over `items` (it takes a list and returns one result per item, in order), the
        results of consecutive items as they come: in the worker for a large job, on the loop in
        short pieces otherwise. `fn` must be a module's top-level function (the worker imports it
        by name). A caller files each part before the next arrives, so a large job's results are
        never all alive at once."""
        done = 0
        if len(items) >= self.inline_below and not self.closed:
            self._busy += 1
            try:
                while done < len(items):
                    part = await self._in_worker(fn, list(items[done : done + chunk]))
                    if part is None:
                        break  # the worker failed: the rest runs on the loop
                    done += len(part)
                    self.offloaded += len(part)
                    yield part
            finally:
                self._busy -= 1
                self._arm_idle()
        while done < len(items):
            part = await self._on_loop(fn, items[done : done + chunk])
            done += len(part)
            self.inline += len(part)
            yield part

    async def _in_worker(self, fn: Callable[[Sequence[T]], list[R]], part: list[T]) -> list[R] | None:
        loop = asyncio.get_running_loop()
        try:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_lower_priority
                )
                self.starts += 1
            result = await loop.run_in_executor(self._pool, fn, part)
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            # RuntimeError: the pool was shut down meanwhile (close, idle), or cannot start here.
            self.outage.failed("pure work runs on the event loop, in slices: the worker process failed: %s", exc)
            self._drop_pool()
            return None
        self.outage.recovered("the worker process works again after %d failure(s)")
        return result

    async def _on_loop(self, fn: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]:
        out: list[R] = []
        started = time.perf_counter()
        for start in range(0, len(items), INLINE_PIECE):
            out.extend(fn(items[start : start + INLINE_PIECE]))
            if time.perf_counter() - started > SLICE_SECONDS:
                await asyncio.sleep(0)
                started = time.perf_counter()
        return out

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._pool is not None and not self._busy:
            self._idle = asyncio.get_running_loop().call_later(self.idle_seconds, self._stop_if_idle)

    def _stop_if_idle(self) -> None:
        self._idle = None
        if not self._busy:
            self._drop_pool()

    def _drop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            # Not waiting: a chunk under way finishes in the worker, and its answer is dropped.
            pool.shutdown(wait=False, cancel_futures=True)

    @property
    def running(self) -> bool:
        return self._pool is not None

    def close(self) -> None:
        """Stop the worker; later jobs run on the loop."""
        self.closed = True
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._drop_pool()
