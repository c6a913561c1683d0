"""Long jobs on the event loop, cut so that turns go on between their slices, and the containers
they fill, split so that none grows by a whole person's memories in one step."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterable, Iterator, MutableMapping, MutableSet
from typing import TypeAlias, TypeVar

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

# Long jobs on the event loop (filling an entry, filing a write index) return to it once they
# have run this long. Each of a turn's awaits (a read, each statement of a write, the embedding)
# may wait for one slice of each such job: at 5 ms, the 20 others' turns during a cold 100,000-
# memory user's start took tens of milliseconds more each.
SLICE_SECONDS = 0.002
# Rows an entry is filled by between two looks at the clock (well under a millisecond of work).
FILL_SLICE = 250


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic collector's reach (`gc.freeze`).

    A full collection walks every tracked object: with a user's 100,000 rows, vectors and write
    index alive, each one stopped the event loop for seconds (0.6 s already at 20,000 memories),
    however the work around it was sliced. What the cache holds lives until evicted and holds no
    reference cycle, so reference counting still frees it then; a garbage cycle of other code
    frozen along with it stays until exit.
    """
    gc.freeze()


class Slices:
    """Where a long job on the event loop gives it back: `tick` returns to the loop once the job
    has run SLICE_SECONDS since it last did, so that turns go on between its slices."""

    def __init__(self) -> None:
        self._started = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._started > SLICE_SECONDS:
            await asyncio.sleep(0)
            self._started = time.perf_counter()


# A dict or a set grows by allocating a table for all its entries and clearing it in one C call,
# which the loop cannot cut: at 100,000 entries a dict's is 5 MB, and on a machine whose fresh
# memory is slow to touch (a VM that hands pages back to its host) its page faults held the loop
# 30-120 ms (perf on bench/load.py --cold: memset in clear_page). Split by hash past SPLIT_AT
# entries, each part grows by a SHARDS-th of that. Consecutive ids fill the parts evenly, so
# they all grow within a few dozen entries: a job that fills one must look at its clock after
# each entry (Slices.tick), so that those growths fall in different slices.
SHARDS = 64
# Below it a container stays whole: most people's are small, and 64 empty parts cost more than
# their entries (its last growth whole clears 200 KB at most).
SPLIT_AT = 4096


class ShardedDict(MutableMapping[K, V]):
    """A dict split in SHARDS dicts by the key's hash once it holds SPLIT_AT entries, for one
    that may hold an entry per memory. Iterates shard by shard, not in insertion order."""

    __slots__ = ("_shards",)

    def __init__(self) -> None:
        self._shards: list[dict[K, V]] = [{}]

    def __getitem__(self, key: K) -> V:
        shards = self._shards
        return shards[hash(key) % len(shards)][key]

    def __setitem__(self, key: K, value: V) -> None:
        shards = self._shards
        if len(shards) > 1:
            shards[hash(key) % SHARDS][key] = value
            return
        whole = shards[0]
        whole[key] = value
        if len(whole) >= SPLIT_AT:
            self._shards = [{} for _ in range(SHARDS)]
            for known, held in whole.items():
                self._shards[hash(known) % SHARDS][known] = held

    def __delitem__(self, key: K) -> None:
        shards = self._shards
        del shards[hash(key) % len(shards)][key]

    def __contains__(self, key: object) -> bool:
        shards = self._shards
        return key in shards[hash(key) % len(shards)]

    def __iter__(self) -> Iterator[K]:
        for shard in self._shards:
            yield from shard

    def __len__(self) -> int:
        return sum(map(len, self._shards))

    def get_or(self, key: K, default: V | None = None) -> V | None:
        """`get` without the mapping's KeyError path (a miss is the common case of a build)."""
        shards = self._shards
        return shards[hash(key) % len(shards)].get(key, default)

    def pop_or(self, key: K, default: V | None = None) -> V | None:
        """`pop` with a default, in one lookup."""
        shards = self._shards
        return shards[hash(key) % len(shards)].pop(key, default)


class ShardedSet(MutableSet[T]):
    """A set split in SHARDS sets by the item's hash once it holds SPLIT_AT items (see
    ShardedDict)."""

    __slots__ = ("_shards",)

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._shards: list[set[T]] = [set()]
        for item in items:
            self.add(item)

    def add(self, item: T) -> None:
        shards = self._shards
        if len(shards) > 1:
            shards[hash(item) % SHARDS].add(item)
            return
        whole = shards[0]
        whole.add(item)
        if len(whole) >= SPLIT_AT:
            self._shards = [set() for _ in range(SHARDS)]
            for known in whole:
                self._shards[hash(known) % SHARDS].add(known)

    def discard(self, item: T) -> None:
        shards = self._shards
        shards[hash(item) % len(shards)].discard(item)

    def __contains__(self, item: object) -> bool:
        shards = self._shards
        return item in shards[hash(item) % len(shards)]

    def __iter__(self) -> Iterator[T]:
        for shard in self._shards:
            yield from shard

    def __len__(self) -> int:
        return sum(map(len, self._shards))


# A posting: the ids or rows of one key. Most are a few items, kept a plain set (a ShardedSet
# costs two objects more); one is made a ShardedSet once it holds SPLIT_AT.
Posting: TypeAlias = set[int] | ShardedSet[int]


def post(postings: MutableMapping[K, Posting], key: K, item: int) -> None:
    """Add `item` to the posting of `key`, split once it holds SPLIT_AT items."""
    posting = postings.get(key)
    if posting is None:
        postings[key] = {item}
    elif isinstance(posting, set):
        posting.add(item)
        if len(posting) >= SPLIT_AT:
            postings[key] = ShardedSet(posting)
    else:
        posting.add(item)
