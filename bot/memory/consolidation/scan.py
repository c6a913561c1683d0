"""The consolidation job's scan: each person's series (bot/memory/series.py), from their cache entry.

A memory's series key needs its frame (its dedup text with the carrier tokens set aside: 50-200
microseconds of pure Python a text). Scanning a person of 100,000 memories computed them all on
the event loop at every run (3.8 s a run). Here each memory's key is kept beside the row it was
computed from, so a run computes only the rows that changed since (a row changed is a new row
object in the entry), and the first run of a large person computes them in the worker process
(bot/clients/offload.py). The keys follow the memory cache: dropped with the person's entry and
counted in its budget.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from bot.clients.offload import Offload
from bot.memory.cache.entry import UserMemories
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.slices import FILL_SLICE, ShardedDict, ShardedSet, Slices, freeze_long_lived
from bot.memory.model import OwnerKey
from bot.memory.series import KeyFields, Series, SeriesKey, keys_of
from bot.memory.stores.memories import MemoryRow, row_to_memory

# A kept key: a dictionary slot, the key's tuple and its frame (the type, scope, story and place
# strings are the row's own). Measured with tracemalloc on the load bench's texts.
KEY_BYTES = 260


@dataclass(slots=True)
class ScanFigures:
    """One scan: seconds from start to end (waiting for the worker included) and the longest
    stretch of CPU it held the loop for."""

    seconds: float = 0.0
    longest_slice_ms: float = 0.0
    computed: int = 0


def _fields(row: MemoryRow) -> KeyFields:
    return (row.type, row.scope, row.story_id, row.place, bool(row.pinned), row.expires_at is not None, row.text)


class SeriesScan:
    """Per person, the series key of every memory, kept with the row it was computed from."""

    def __init__(self, cache: MemoryCache, offload: Offload | None = None) -> None:
        self._cache = cache
        self._offload = offload if offload is not None else Offload(inline_below=1 << 62)
        # Per person, in shards (bot/memory/cache/slices.py): an entry per memory.
        self._keys: dict[OwnerKey, ShardedDict[int, tuple[MemoryRow, SeriesKey | None]]] = {}
        cache.follow(self)

    def caught_up(self, user_id: OwnerKey, entry: UserMemories, changed: Sequence[int]) -> None:
        """Nothing to do: a changed memory is a new row object, which its kept key does not match."""

    def dropped(self, user_id: OwnerKey) -> None:
        self._keys.pop(user_id, None)

    def nbytes(self, user_id: OwnerKey) -> int:
        return KEY_BYTES * len(self._keys.get(user_id, ()))

    async def series(self, user_id: OwnerKey, min_members: int, figures: ScanFigures | None = None) -> FoundSeries:
        """The person's series as their cache entry holds them now, the largest first."""
        figures = figures if figures is not None else ScanFigures()
        started = time.perf_counter()
        entry = await self._cache.get(user_id)
        rows = list(entry.rows)  # a catch-up may change the entry while the scan waits
        kept = self._keys.get(user_id)
        if kept is None:
            kept = ShardedDict()
        slices = Slices(self._cache.foreground, user_id)
        longest = 0.0
        # The rows whose kept key is not theirs (new, changed, or never scanned).
        missing: list[int] = []
        fields: list[KeyFields] = []
        for start in range(0, len(rows), FILL_SLICE):
            tick = time.thread_time()
            for slot in range(start, min(start + FILL_SLICE, len(rows))):
                row = rows[slot]
                if row is not None:
                    known = kept.get(row.id)
                    if known is None or known[0] is not row:
                        missing.append(slot)
                        fields.append(_fields(row))
            longest = max(longest, time.thread_time() - tick)
            await slices.tick()
        computed = 0
        async with contextlib.aclosing(self._offload.chunks(keys_of, fields)) as parts:
            async for keys in parts:
                for slot, key in zip(missing[computed : computed + len(keys)], keys):
                    row = rows[slot]
                    assert row is not None  # `missing` holds the slots of rows
                    kept[row.id] = (row, key)
                    # The clock after each key: consecutive ids fill the 64 parts of `kept`
                    # evenly, so all of them grow within a few dozen keys (5 MB at 100,000).
                    await slices.tick()
                computed += len(keys)
                # Out of the cyclic collector's walks (see freeze_long_lived): at 100,000 keys a
                # full collection over them stopped the loop for 100-200 ms.
                freeze_long_lived()
        slots: ShardedDict[SeriesKey, list[int]] = ShardedDict()
        first_id: ShardedDict[SeriesKey, int] = ShardedDict()
        alive = 0
        for start in range(0, len(rows), FILL_SLICE):
            tick = time.thread_time()
            for slot in range(start, min(start + FILL_SLICE, len(rows))):
                row = rows[slot]
                if row is not None:
                    memory_id = row.id
                    alive += 1
                    key = kept[memory_id][1]
                    if key is not None:
                        held = slots.get(key)
                        if held is None:
                            slots[key] = [slot]
                            first_id[key] = memory_id
                        else:
                            held.append(slot)
                            if first_id[key] > memory_id:
                                first_id[key] = memory_id
            longest = max(longest, time.thread_time() - tick)
            await slices.tick()
        if len(kept) > alive:
            # Memories deleted since: their keys go. Only then is a set of the live ids made (a
            # set of 100,000 grew by a 4 MB table in one step, 50 ms of page faults on the loop).
            live: ShardedSet[int] = ShardedSet()
            for start in range(0, len(rows), FILL_SLICE):
                for row in rows[start : start + FILL_SLICE]:
                    if row is not None:
                        live.add(row.id)
                await slices.tick()
            ids = list(kept)
            for start in range(0, len(ids), FILL_SLICE):
                for memory_id in ids[start : start + FILL_SLICE]:
                    if memory_id not in live:
                        del kept[memory_id]
                await slices.tick()
        if user_id in self._cache:
            # Not for an entry served once and not kept (larger than the whole budget), or
            # evicted meanwhile: its keys would be held outside the budget.
            self._keys[user_id] = kept
        freeze_long_lived()
        # The most members first, then the lowest first member id.
        found = sorted(
            ((key, held) for key, held in slots.items() if len(held) >= min_members),
            key=lambda kh: (-len(kh[1]), first_id[kh[0]]),
        )
        series = FoundSeries(found, rows)
        figures.seconds += time.perf_counter() - started
        figures.longest_slice_ms = max(figures.longest_slice_ms, longest * 1000)
        figures.computed += len(missing)
        return series


class FoundSeries(Sequence[Series]):
    """A scan's series, the largest first, each made when it is first read: a run reads the
    first few (its budget of model calls), and making every member of thousands of series
    would cost the loop a second and the cyclic collector tens of thousands of objects."""

    def __init__(self, found: list[tuple[SeriesKey, list[int]]], rows: list[MemoryRow | None]) -> None:
        self._found = found
        self._rows = rows  # as read: the apply compares the members with the database
        self._made: dict[int, Series] = {}

    def __len__(self) -> int:
        return len(self._found)

    @overload
    def __getitem__(self, index: int) -> Series: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Series]: ...

    def __getitem__(self, index: int | slice) -> Series | Sequence[Series]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self._found):
            raise IndexError(index)
        made = self._made.get(index)
        if made is None:
            key, held = self._found[index]
            # Slots are in id order within a load, not after a catch-up: sorted.
            members = sorted(
                (row_to_memory(row) for slot in held if (row := self._rows[slot]) is not None), key=lambda m: m.id
            )
            made = self._made[index] = Series(key, tuple(members))
        return made
