"""A turn's passes on the event loop or in a thread, by the person's number of memories: where
the thread's hop (bot/memory/read/off_loop.py, IN_THREAD_MEMORIES) starts to pay.

Run from the repository root: `python bench/off_loop.py` (options: --sizes, --repeat, --busy N
for N spinning processes meanwhile, as in bench/load.py). Each size is one person's cache entry
filled from generated rows and 384-dimension unit vectors (no database, no model); the turn's
passes are the product's own: the scoring pass (candidates, the cosines of two query vectors,
their fusion, the selection's columns) and the choice of 24 (`select_columns`), in one hop as a
turn makes them. Printed per size, medians over --repeat turns: the passes run on the loop (what
the loop is held for), the same run in a thread (its wall time, and the loop thread's own CPU for
it: what the loop still pays), and the bare hop (`asyncio.to_thread` of nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import busy_processes, load_average

from bot.clients.storage import to_db
from bot.memory.cache.entry import UserMemories, Vector, micros
from bot.memory.cache.slices import Slices
from bot.memory.model import USER_MEMORY_TYPES, OwnerKey, StoryId, content_hash, utcnow
from bot.memory.read.off_loop import IN_THREAD_MEMORIES, OffLoop
from bot.memory.read.passes import scoring_pass
from bot.memory.read.selection import select_columns
from bot.memory.stores.memories import MemoryRow
from bot.memory.stores.vectors import VECTOR_DTYPE

SIZES = (1_000, 3_000, 10_000, 20_000, 50_000, 100_000)
REPEAT = 30
DIM = 384
STORY = StoryId("story")
PLACE = "guild"


async def entry_of(n: int) -> UserMemories:
    rng = np.random.default_rng(n)
    now = utcnow()
    vectors = rng.standard_normal((n, DIM)).astype(VECTOR_DTYPE)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = []
    stored = {}
    for i in range(n):
        text = f"fait numéro {i}"
        stamp = to_db(now - timedelta(seconds=int(rng.integers(365 * 86_400))))
        story = i % 7 == 0
        rows.append(
            MemoryRow(
                i + 1, OwnerKey("heavy"), text, USER_MEMORY_TYPES[i % len(USER_MEMORY_TYPES)],
                "story" if story else "global", STORY if story else None, PLACE, (0.85, 0.9, 0.95, 1.0)[i % 4],
                int(i % 500 == 0), stamp, stamp, None, None, content_hash(text), 0, 0, 0,
            )
        )  # fmt: skip
        stored[i + 1] = Vector(content_hash(text), DIM, vectors[i].tobytes(), stamp)
    entry = UserMemories(OwnerKey("heavy"), "bench", (1, 1))
    await entry.fill(rows, stored, Slices())
    return entry


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def timed(work: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        out.append(time.perf_counter() - start)
        await asyncio.sleep(0)
    return out


async def size_row(n: int, repeat: int) -> str:
    entry = await entry_of(n)
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((2, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    now = utcnow()

    def turn() -> object:
        # As the product's turn: scored and chosen in one pass, the memories built from the rows.
        scored = scoring_pass(entry, now, story_id=STORY, place=PLACE, share=False, queries=queries, live_rows=True)
        return select_columns(scored.candidates, 24, threshold=0.0, now_us=micros(now))

    on_loop = await timed(turn, repeat)
    threaded = OffLoop(threshold=0)
    walls, loop_cpu = [], []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.thread_time()
        await threaded.guarded(entry, turn)
        walls.append(time.perf_counter() - start)
        loop_cpu.append(time.thread_time() - cpu)
    hops = []
    for _ in range(repeat):
        start = time.perf_counter()
        await asyncio.to_thread(lambda: None)
        hops.append(time.perf_counter() - start)
    return (
        f"{n:>8,} {median_ms(on_loop):>10.2f} {median_ms(walls):>12.2f} {median_ms(loop_cpu):>12.2f} "
        f"{median_ms(hops):>8.2f}"
    )


async def bench(sizes: list[int], repeat: int) -> None:
    print(f"a turn's passes (scoring, choice of 24) by memories, medians of {repeat} turns, ms; "
          f"IN_THREAD_MEMORIES = {IN_THREAD_MEMORIES:,}; load average {load_average()}")  # fmt: skip
    print(f"{'memories':>8} {'on loop':>10} {'thread wall':>12} {'loop CPU':>12} {'bare hop':>8}")
    for n in sizes:
        print(await size_row(n, repeat), flush=True)
    print(f"load average at the end: {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning at normal priority meanwhile")
    args = parser.parse_args()
    with busy_processes(args.busy):
        print(f"background load: {args.busy} busy process(es)")
        asyncio.run(bench(args.sizes, args.repeat))


if __name__ == "__main__":
    main()
