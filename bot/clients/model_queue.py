"""A model shared by every caller, live work first: the in-process embedder's queue and the chat
model's budget.

The chat model (`ModelBudget`): a server takes LLM_CONCURRENCY requests at once (Ollama's
OLLAMA_NUM_PARALLEL, llama.cpp's slots); a request past them waits in the server's own queue,
first come first served, so a live reply would wait behind every reflection sent before it.
The bot therefore keeps the waiting on its side: every model call takes a place in one budget of
LLM_CONCURRENCY places, and a place that frees goes to the waiting call of the highest
`Priority` (first come first served within one). A call in progress is never interrupted, so a
live reply waits at most for the calls in progress and the live ones before it. Nothing waits
when a place is free: background work goes whenever no live call waits, and so progresses
whenever the conversation pauses; only a server kept busy by live replies alone holds it back
(reflections stay pending in the database, never lost).

The embedder (`ModelQueue`), one in-process model, one call at a time, turn queries first:

The local embedding model (a C engine that parallelises each call over every core) serves two
kinds of callers: turns, each waiting on one query text, and background work (indexing,
reflections) with passage batches. Calls run one at a time, since two would only fight for the
cores; the question is who goes next. Callers queue, and whenever the model is free one worker
thread gives it every waiting query in one call (rows bit-identical to single calls; one call
saves the per-call overhead, not the per-text work: on an idle 2-core host one 19-token query
took 26 ms, two 47 ms, three 69 ms, since one text already keeps both cores busy), or else
the next chunk of the oldest passage request. A turn query thus waits for one chunk at most, a
query arriving while the model is idle goes at once, and passages run whenever no query waits.

Nothing here is bound to an event loop: the model outlives loops (tests, a loop in another
thread), so each request carries its own and gets its rows back on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from bot.errors import EmbeddingError

log = logging.getLogger(__name__)

# texts, is_query -> (len(texts), d) float32; called in the worker thread only.
Encode = Callable[[list[str], bool], np.ndarray]


@dataclass(eq=False)  # identity, not field equality: requests are found in and removed from queues
class _Request:
    """One caller's texts, waiting for the model or going through it chunk by chunk."""

    texts: list[str]
    is_query: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[np.ndarray]
    queued_at: float = field(default_factory=time.monotonic)
    # Texts handed to the model so far, and the rows they gave, in order.
    taken: int = 0
    rows: list[np.ndarray] = field(default_factory=list)


@dataclass
class _Call:
    """One model call: every waiting query, or the next chunk of one passage request."""

    requests: list[_Request]
    # How many of the call's texts (and so of its rows) belong to each request, in order.
    sizes: list[int]
    texts: list[str]
    is_query: bool


class ModelQueue:
    def __init__(self, encode: Encode, *, name: str, batch_size: int, chunk: int) -> None:
        self._encode = encode
        self._name = name
        self._batch_size = batch_size
        self._chunk = chunk
        # Held for queue bookkeeping only, never across a model call.
        self._state = threading.Lock()
        self._queries: deque[_Request] = deque()
        self._passages: deque[_Request] = deque()
        # True while a worker thread runs; that thread alone calls the model.
        self._serving = False
        # For benches and operators: model calls, those that served queries, queries that shared
        # a call with another, requests dropped before all their texts reached the model.
        self.calls = 0
        self.query_calls = 0
        self.coalesced = 0
        self.skipped = 0
        # Told, from the worker thread, how long each request waited before the model took its
        # first text ("query" or "passages", seconds): the owner's page shows it.
        self.on_wait: Callable[[str, float], None] | None = None

    async def queries(self, texts: list[str], is_query: bool) -> np.ndarray:
        """(n, d): the rows of one turn's texts (its message, and the conversation lines it
        brings that were not embedded yet), served before any waiting passage, in one call
        with the other waiting queries."""
        return await self._submit(texts, is_query, self._queries)

    async def passages(self, texts: list[str], is_query: bool) -> np.ndarray:
        """(n, d), in the order of `texts` (not empty): chunk after chunk, after every earlier
        passage request, each chunk once no query waits."""
        return await self._submit(texts, is_query, self._passages)

    async def _submit(self, texts: list[str], is_query: bool, queue: deque[_Request]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        request = _Request(texts, is_query, loop, loop.create_future())
        with self._state:
            queue.append(request)
            start, self._serving = not self._serving, True
        if start:
            # A thread per busy period, not a long-lived one: nothing idles or needs stopping
            # when the bot is quiet or a loop closes. Not `asyncio.to_thread`: the worker serves
            # the callers of every loop, and would hold a slot of one loop's executor.
            try:
                threading.Thread(target=self._serve, name=f"{self._name} worker").start()
            except RuntimeError as exc:
                with self._state:
                    self._serving = False
                    self._drop(request, queue)
                raise EmbeddingError(f"{self._name}: cannot start the model's thread: {exc}") from exc
        try:
            return await request.future
        except asyncio.CancelledError:
            # A call in progress cannot be interrupted (its rows are dropped), but texts that
            # have not reached the model never will.
            with self._state:
                self._drop(request, queue)
            raise

    def _drop(self, request: _Request, queue: deque[_Request]) -> None:
        """Take a request out of its queue if it is still there. Called with `_state` held."""
        if request in queue:
            queue.remove(request)
            self.skipped += 1

    def _serve(self) -> None:
        """The worker thread: model calls one after another while anything waits, then it ends."""
        try:
            while True:
                with self._state:
                    call = self._next_call()
                    if call is None:
                        self._serving = False
                        return
                self._run(call)
        except Exception:
            # Only if this code is wrong; then the next request starts a new worker instead of
            # every later one waiting forever for this one.
            with self._state:
                self._serving = False
            log.exception("the %s worker stopped", self._name)

    def _next_call(self) -> _Call | None:
        """Waiting queries first, all in one call (up to a batch); else the next chunk of the
        oldest passage request, which stays first until its last chunk. Called with `_state` held."""
        for queue in (self._queries, self._passages):
            while queue and queue[0].loop.is_closed():
                queue.popleft()  # its caller's loop is gone: nobody can take the rows
                self.skipped += 1
        if self._queries:
            is_query = self._queries[0].is_query
            requests: list[_Request] = []
            size = 0
            # Bounded by texts, not requests: a turn may bring a few conversation lines.
            while (
                self._queries
                and self._queries[0].is_query == is_query
                and (not requests or size + len(self._queries[0].texts) <= self._batch_size)
            ):
                size += len(self._queries[0].texts)
                requests.append(self._queries.popleft())
            sizes = [len(request.texts) for request in requests]
            texts = [text for request in requests for text in request.texts]
            self.query_calls += 1
            kind = "query"
            if len(requests) > 1:
                self.coalesced += len(requests)
        elif self._passages:
            request = self._passages[0]
            texts = request.texts[request.taken : request.taken + self._chunk]
            if request.taken + len(texts) == len(request.texts):
                self._passages.popleft()
            requests, sizes = [request], [len(texts)]
            kind = "passages"
        else:
            return None
        for request, size in zip(requests, sizes):
            if not request.taken and self.on_wait is not None:
                self.on_wait(kind, time.monotonic() - request.queued_at)
            request.taken += size
        self.calls += 1
        return _Call(requests, sizes, texts, requests[0].is_query)

    def _run(self, call: _Call) -> None:
        """One model call, in the worker thread; each of its callers gets its rows or the error."""
        try:
            matrix = self._encode(call.texts, call.is_query)
            if matrix.ndim != 2 or matrix.shape[0] != len(call.texts):
                raise ValueError(f"the model returned {matrix.shape} for {len(call.texts)} texts")
        except Exception as exc:
            with self._state:
                # The rest of a failed passage request is not worth the model's time.
                for request in call.requests:
                    if request in self._passages:
                        self._passages.remove(request)
            for request in call.requests:
                # One exception per caller: each awaiting task adds its own traceback to it.
                error = EmbeddingError(f"{self._name}: local embedding failed: {exc}")
                error.__cause__ = exc
                _deliver(request, None, error)
            return
        offset = 0
        for request, size in zip(call.requests, call.sizes):
            request.rows.append(matrix[offset : offset + size])
            offset += size
            if request.taken == len(request.texts):
                rows = request.rows[0] if len(request.rows) == 1 else np.concatenate(request.rows)
                _deliver(request, rows, None)


def _deliver(request: _Request, rows: np.ndarray | None, error: EmbeddingError | None) -> None:
    """Settle a request's future from the worker thread, on the loop that awaits it."""

    def settle() -> None:
        if request.future.done():  # its caller was cancelled
            return
        if error is not None:
            request.future.set_exception(error)
        else:
            assert rows is not None
            request.future.set_result(rows)

    with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits for these rows any more
        request.loop.call_soon_threadsafe(settle)


class Priority(IntEnum):
    """Who gets the chat model's next free place, most urgent first."""

    LIVE = 0  # a reply someone is waiting for (and its regenerations)
    FOLLOW_UP = 1  # a message the character starts itself: follow-ups, check-ins
    REFLECTION = 2  # what an exchange taught, written after the reply
    CONSOLIDATION = 3  # a series of look-alike memories rewritten into one
    IMPORT = 4  # memories brought in from elsewhere

    @property
    def label(self) -> str:
        return self.name.lower()


class ModelBudget:
    """`capacity` model calls at once, shared by every caller; a free place goes to the waiting
    call of the highest priority, first come first served within one. Bound to no event loop
    until used, then to the loop of its callers."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a model budget needs at least one place, not {capacity}")
        self.capacity = capacity
        self.running = 0
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def waiting(self, priority: Priority | None = None) -> int:
        """Calls waiting for a place (of one priority)."""
        return sum(1 for p, _, f in self._waiting if not f.done() and (priority is None or p == priority))

    @asynccontextmanager
    async def place(self, priority: Priority, waited: Callable[[float], None] | None = None) -> AsyncIterator[None]:
        """Hold one place while the block runs; `waited` is told how long the call waited."""
        started = time.perf_counter()
        if self.running < self.capacity and not self.waiting():
            self.running += 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (int(priority), next(self._order), future))
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release()  # granted as it was cancelled: the place goes on
                raise
        if waited is not None:
            waited(time.perf_counter() - started)
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        """A place is free: it goes to the most urgent waiting call still waiting."""
        self.running -= 1
        while self._waiting and self.running < self.capacity:
            _, _, future = heapq.heappop(self._waiting)
            if not future.done():
                future.set_result(None)
                self.running += 1
