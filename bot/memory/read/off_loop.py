"""A turn's passes over a large person's memories run in a thread, off the event loop, and never
return what a write applied meanwhile tore.

At 100,000 memories a turn's cosines, fusion and selection are 30-45 ms of CPU, and the event
loop serves everyone: on the loop, that is everyone's stall. numpy releases the GIL in its passes
over the arrays (the einsum, the comparisons, the partitions), so in a thread the loop keeps
turning meanwhile. Below IN_THREAD_MEMORIES the passes cost less than the hop (a 3,000-memory
person stays on the loop).

Only the event loop changes a cache entry, in place (`UserMemories.update`: a slot's row,
columns and vector rewritten, a dead slot, the arrays compacted), and the thread reads the
arrays as they are: the matrix is 150 MB at 100,000 memories, too much to copy each turn. So the
work is optimistic: the entry's version (its change counter, its layout, its dimension) is read
on the loop before the thread starts and again once it is done; if it moved, a write was applied
while the thread read, what it computed may mix both states (or fail on a slot that moved), and
the work is done again. A write lands on a person's entry at most a few times a minute, so a
second attempt is rare and a third rarer; after ATTEMPTS the work runs on the loop, where nothing
moves under it. What the work returns must be its own (copies, or a snapshot of the rows), never
a view of the entry that a later write would change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from bot.memory.cache.entry import UserMemories

T = TypeVar("T")

# Memories of one person from which a turn's passes run in a thread (bench/off_loop.py, load 1.0,
# medians, the turn scored and chosen in one hop): 1.3 ms on the loop at 3,000 memories, 2.0 at
# 10,000 against 2.3 through the thread, 3.8 against 4.4 at 20,000, 17 against 18 at 100,000 (the
# loop's own CPU then 0.2 ms). Below, the hop is a large share of a pass too short to stall anyone.
IN_THREAD_MEMORIES = 20_000
# Tries in a thread before the work runs on the loop.
ATTEMPTS = 3

Version = tuple[int, int, int]


def version(entry: UserMemories) -> Version:
    """What a write applied to the entry moves: every update counts a change, a compaction moves
    the layout, the first vectors set the dimension."""
    return entry.changes, entry.layout, entry.dim


class OffLoop:
    """Runs work over a person's cache entry in a thread from `threshold` memories, guarded
    against a write applied meanwhile; counts what it did, for benches and tests."""

    def __init__(self, threshold: int = IN_THREAD_MEMORIES) -> None:
        self.threshold = threshold
        # Works run in a thread, and done again because the entry moved under them.
        self.runs = 0
        self.redone = 0

    def wanted(self, size: int) -> bool:
        return size >= self.threshold

    async def guarded(self, entry: UserMemories, work: Callable[[], T]) -> T:
        """`work()` over `entry`: in a thread when the entry is large, done again while a write
        was applied during it; always the result of a pass no write interleaved with."""
        if not self.wanted(len(entry.rows)):
            return work()
        for _ in range(ATTEMPTS):
            before = version(entry)
            self.runs += 1
            try:
                result = await asyncio.to_thread(work)
            except Exception:
                # A slot that moved under the pass (an index past a compacted array): done again.
                if version(entry) == before:
                    raise
                self.redone += 1
                continue
            if version(entry) == before:
                return result
            self.redone += 1
        return work()
