"""Long jobs on the event loop, cut so that turns go on between their slices, and the containers
they fill, split so that none grows by a whole person's memories in one step."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import Counter
from collections.abc import Iterable, Iterator, MutableMapping, MutableSet
from typing import TypeAlias, TypeVar, overload

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


# How long a long job waits at one of its ticks for other people's turns to finish their memory
# work: past it the job runs one more slice whatever the turns do, so that it never starves (it
# keeps one slice in every ~STEP_ASIDE_MOST of loop time when turns never stop coming).
STEP_ASIDE_MOST = 0.05


class Foreground:
    """The people whose turns are doing their memory work now (not waiting for the model).

    A long job on the loop for one person (their cold load, their write index, their series
    scan) steps aside for the others' turns: returning to the loop between slices was not
    enough, since each of a turn's two dozen awaits could wait for one of its slices (with a cold
    100,000-memory person filing their write index, everyone's p95 overhead doubled). The job may
    wait; the person it works for waits for it anyway.
    """

    def __init__(self, *, most: float = STEP_ASIDE_MOST) -> None:
        self.most = most
        self._turns: Counter[str] = Counter()
        self._count = 0
        self._left: asyncio.Event | None = None
        # Seconds long jobs spent stepped aside, for /metrics.
        self.stepped_aside = 0.0

    @contextlib.contextmanager
    def turn(self, person: str) -> Iterator[None]:
        """A turn of `person` doing memory work while the block runs."""
        self._turns[person] += 1
        self._count += 1
        try:
            yield
        finally:
            self._leave(person)

    @contextlib.contextmanager
    def aside(self, person: str) -> Iterator[None]:
        """Inside `turn`: the block is not memory work (the model answers)."""
        self._leave(person)
        try:
            yield
        finally:
            self._turns[person] += 1
            self._count += 1

    def _leave(self, person: str) -> None:
        self._turns[person] -= 1
        self._count -= 1
        if not self._turns[person]:
            del self._turns[person]
        if self._left is not None:
            self._left.set()
            self._left = None

    def busy(self, person: str | None) -> bool:
        """Whether a turn of anyone but `person` is doing memory work."""
        return self._count > self._turns.get(person, 0) if person is not None else self._count > 0

    def figures(self) -> tuple[int, float]:
        """Turns doing memory work now, and the seconds long jobs stepped aside for them."""
        return self._count, self.stepped_aside

    async def step_aside(self, person: str | None) -> None:
        """Until no turn but `person`'s does memory work, or `most` seconds."""
        started = time.perf_counter()
        deadline = started + self.most
        try:
            while self.busy(person):
                left = deadline - time.perf_counter()
                if left <= 0:
                    return
                if self._left is None:
                    self._left = asyncio.Event()
                # Not asyncio.wait_for: on 3.11 it can swallow a cancel that comes as a turn
                # leaves, and a job then outlives its cancel (shutdown, an erase).
                try:
                    async with asyncio.timeout(left):
                        await self._left.wait()
                except TimeoutError:
                    return
        finally:
            self.stepped_aside += time.perf_counter() - started


class Slices:
    """Where a long job on the event loop gives it back: `tick` returns to the loop once the job
    has run SLICE_SECONDS since it last did, so that turns go on between its slices. A job done
    for `person` with a `foreground` also steps aside there while other people's turns do their
    memory work."""

    def __init__(self, foreground: Foreground | None = None, person: str | None = None) -> None:
        self._foreground = foreground
        self._person = person
        self._started = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._started > SLICE_SECONDS:
            foreground = self._foreground
            if foreground is not None and foreground.busy(self._person):
                await foreground.step_aside(self._person)
            else:
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

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, default: V | T, /) -> V | T: ...

    def get(self, key: K, default: V | T | None = None, /) -> V | T | None:
        # The mapping's own goes through __getitem__ and its KeyError: a miss is the common
        # case of a build, and a turn asks a hundred of them.
        shards = self._shards
        return shards[hash(key) % len(shards)].get(key, default)

    def pop_or(self, key: K, default: V | None = None) -> V | None:
        """`pop` with a default, in one lookup."""
        shards = self._shards
        return shards[hash(key) % len(shards)].pop(key, default)

    async def release(self, slices: Slices) -> None:
        """Empty it a part at a time: what only it held is freed in slices. A cold load's 100,000
        vectors (150 MB of blobs) freed at once when its frame ended held the loop 33 ms."""
        shards, self._shards = self._shards, [{}]
        while shards:
            shards.pop().clear()
            await slices.tick()


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
