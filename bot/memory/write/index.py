"""What the write path compares new text with, kept per user and place from one reflection to the next.

A reflection compares each candidate with the user's live memories of its place: dedup (the
merge target, `DedupIndex`) and the flipped-negation filter. Rebuilding both from every memory at
each reflection made a reflection cost O(memories) inside the write lock (14.5 s at 40,000
memories once the per-text caches thrashed). Here they are built once per (user, place) and
updated with the rows the memory cache reads again when the user's version moves
(bot/memory/cache/memory_cache.py), so a reflection only takes in what changed since the last one.

The flip check asks only the memories that can reach its overlap: an inverted index on the first
three letters of each comparable word (two words the filter pairs, inflections included, share
them), looked up on the rarest words the overlap cannot do without.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections.abc import Sequence
from datetime import datetime

from bot.clients.locks import KeyedLocks
from bot.clients.offload import Offload
from bot.clients.storage import Connection
from bot.memory.cache.entry import NO_EXPIRY, UserMemories, expiry_of, micros
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.slices import FILL_SLICE, Posting, ShardedDict, Slices, freeze_long_lived, post
from bot.memory.model import OwnerKey
from bot.memory.write.dedup_index import DedupFacts, DedupIndex, dedup_facts
from bot.memory.write.negation import FLIP_MIN_OVERLAP, _polarity, flipped_among

_KEY_LETTERS = 3
# Room made in a write index before each reflection's transaction: more than one reflection or
# consolidation adds (a dozen memories at most; past it the index grows inside, as it can).
ROOM = 256
# A dedup index of this many rows or more (10 MB of codes) grows in a thread.
IN_THREAD_ROWS = 20_000
# What a memory costs in a write index (dedup features and character codes, flip keys), measured
# with tracemalloc on the recall corpus (bench/latency.py --rss prints the RSS it takes).
WRITE_INDEX_BYTES_PER_MEMORY = 3000


def same_place(memory_place: str | None, place: str | None) -> bool:
    # Dedup stays inside one privacy boundary: a guild fact must not rewrite a DM memory.
    return memory_place == place or memory_place is None or place is None


# What a write index keeps of a text: its dedup features and its polarity (negative, comparable
# words), as plain values.
TextFacts = tuple[DedupFacts, bool, tuple[str, ...]]


def write_facts(texts: Sequence[str]) -> list[TextFacts]:
    """Each text's facts, as `DedupIndex.add` and `FlipIndex.add` would compute them: the pure
    work of a build, run in a worker process (bot/clients/offload.py)."""
    out: list[TextFacts] = []
    for text in texts:
        negative, fact = _polarity.__wrapped__(text)
        out.append((dedup_facts(text), negative, tuple(sorted(fact))))
    return out


class FlipIndex:
    """Memories by polarity and word prefix: the only ones `filters.flipped_negation` can return."""

    def __init__(self) -> None:
        # Per memory: its polarity, comparable words and their prefixes (computed once: the
        # filter's own cache holds 32,768 texts).
        self._keys: ShardedDict[int, tuple[bool, frozenset[str], frozenset[str]]] = ShardedDict()
        self._postings: dict[tuple[bool, str], Posting] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, memory_id: int, text: str, polarity: tuple[bool, frozenset[str]] | None = None) -> None:
        """Index a memory; `polarity`: the text's `_polarity`, when it was computed elsewhere."""
        self.remove(memory_id)
        negative, fact = _polarity(text) if polarity is None else polarity
        keys = frozenset(w[:_KEY_LETTERS] for w in fact)
        self._keys[memory_id] = (negative, fact, keys)
        for key in keys:
            post(self._postings, (negative, key), memory_id)

    def remove(self, memory_id: int) -> None:
        known = self._keys.pop_or(memory_id)
        if known is None:
            return
        negative, _, keys = known
        for key in keys:
            self._postings[(negative, key)].discard(memory_id)

    def candidates(self, text: str) -> list[int]:
        """Ids, in id order, of every memory whose flip overlap with `text` can reach
        FLIP_MIN_OVERLAP: opposite polarity, and one of the words the overlap needs.

        overlap = shared / union >= m needs shared >= m * len(fact); any memory sharing that many
        words shares one of the len(fact) - needed + 1 rarest ones.
        """
        negative, fact = _polarity(text)
        if not fact:
            return []
        opposite = not negative
        needed = max(1, math.ceil(FLIP_MIN_OVERLAP * len(fact) - 1e-9))
        sizes = sorted(fact, key=lambda w: len(self._postings.get((opposite, w[:_KEY_LETTERS]), ())))
        found: set[int] = set()
        for word in sizes[: len(fact) - needed + 1]:
            found.update(self._postings.get((opposite, word[:_KEY_LETTERS]), ()))
        return sorted(found)

    def flipped(self, text: str, user_message: str = "") -> int | None:
        """`filters.flipped_negation` of `text` against every indexed memory."""
        return flipped_among(
            text, ((i, self._keys[i][0], self._keys[i][1]) for i in self.candidates(text)), user_message
        )


class WriteIndex:
    """The live memories of one user in one place (`same_place`), as dedup and the flip check
    see them. Expired memories leave at the first lookup after their expiry."""

    def __init__(self, place: str | None) -> None:
        self.place = place
        self.dedup = DedupIndex()
        self.flips = FlipIndex()
        # In shards (bot/memory/cache/slices.py): an entry per memory.
        self.texts: ShardedDict[int, str] = ShardedDict()
        self._expiries: list[tuple[int, int]] = []
        self._expires_of: ShardedDict[int, int] = ShardedDict()
        # Ids the cache read again since the last lookup: taken in before the next one.
        self.pending: set[int] = set()

    def __len__(self) -> int:
        return len(self.texts)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self.texts

    def reserve(self, count: int) -> None:
        """Room for `count` memories at once, before a build that adds them one by one."""
        self.dedup.reserve(count)

    async def make_room(self, count: int) -> None:
        """Room for `count` more memories, made before the write transaction that adds them:
        growing copies the dedup index's code matrix (51 MB at 100,000 memories), which inside
        the transaction held the loop 10-200 ms. A large one grows in a thread (numpy copies
        without the GIL); only the person's own reflection, after this, changes it."""
        if self.dedup.room >= count:
            return
        target = self.dedup.capacity + max(count, self.dedup.capacity // 4)
        if self.dedup.capacity < IN_THREAD_ROWS:
            self.dedup.reserve(target)
        else:
            await asyncio.to_thread(self.dedup.reserve, target)

    def put(
        self,
        memory_id: int,
        text: str,
        place: str | None,
        expires_us: int | None,
        now_us: int,
        facts: TextFacts | None = None,
    ) -> None:
        """The memory as it now is (None for `expires_us`: no expiry): indexed if live and of
        this place, otherwise removed. `facts`: the text's `write_facts`, computed elsewhere."""
        if not self.wants(place, expires_us, now_us):
            self.drop(memory_id)
            return
        if self.texts.get(memory_id) != text:
            self.texts[memory_id] = text
            if facts is None:
                self.dedup.add(memory_id, text)
                self.flips.add(memory_id, text)
            else:
                self.dedup.add(memory_id, text, facts[0])
                self.flips.add(memory_id, text, (facts[1], frozenset(facts[2])))
        if expires_us is None:
            self._expires_of.pop_or(memory_id)
        elif self._expires_of.get(memory_id) != expires_us:
            self._expires_of[memory_id] = expires_us
            heapq.heappush(self._expiries, (expires_us, memory_id))

    def wants(self, place: str | None, expires_us: int | None, now_us: int) -> bool:
        """Whether a memory of `place` expiring then is one this index holds."""
        return same_place(place, self.place) and (expires_us is None or expires_us > now_us)

    def index_text(self, memory_id: int, text: str) -> None:
        """A text the write path stored in its transaction (a new memory, a merge, a replace),
        compared with the next candidates of the same reflection. Once committed, the cache
        reads the row again and `put` files it by its place and expiry."""
        self.texts[memory_id] = text
        self.dedup.add(memory_id, text)
        self.flips.add(memory_id, text)

    def drop(self, memory_id: int) -> None:
        if self.texts.pop_or(memory_id) is None:
            return
        self.dedup.remove(memory_id)
        self.flips.remove(memory_id)
        self._expires_of.pop_or(memory_id)

    def expire(self, now_us: int) -> None:
        while self._expiries and self._expiries[0][0] <= now_us:
            expires_us, memory_id = heapq.heappop(self._expiries)
            if self._expires_of.get(memory_id) == expires_us:
                self.drop(memory_id)


class WriteIndexes:
    """Per user and place, what the write path compares new text with: built on the first
    reflection, then fed the rows each of the cache's catch-ups reads. It follows the memory
    cache (`MemoryCache.follow`), so it goes when the user's entry goes and counts in its budget."""

    def __init__(self, cache: MemoryCache, offload: Offload | None = None) -> None:
        self._cache = cache
        # Where a large build's pure work runs (without one: on the loop, in slices).
        self._offload = offload if offload is not None else Offload(inline_below=1 << 62)
        # One builder per user and place at a time: the start-up warm-up and a reflection may
        # both ask for the same index, and a half-built one must never be used. Per place, so
        # that a reflection holding the write lock never waits for another place's build.
        self._index_locks: KeyedLocks[tuple[str, str | None]] = KeyedLocks()
        # Per user, the entry the indexes were built from and the index of each place.
        self._write_indexes: dict[str, tuple[UserMemories, dict[str | None, WriteIndex]]] = {}
        cache.follow(self)

    def caught_up(self, user_id: OwnerKey, entry: UserMemories, changed: Sequence[int]) -> None:
        for index in self._write_indexes.get(user_id, (None, {}))[1].values():
            index.pending.update(changed)

    def dropped(self, user_id: OwnerKey) -> None:
        self._write_indexes.pop(user_id, None)

    def nbytes(self, user_id: OwnerKey) -> int:
        held = self._write_indexes.get(user_id)
        indexed = sum(len(index) for index in held[1].values()) if held is not None else 0
        return WRITE_INDEX_BYTES_PER_MEMORY * indexed

    def held(self, user_id: OwnerKey) -> frozenset[str | None]:
        """The places whose index is built (or being built) for the user."""
        return frozenset(self._write_indexes.get(user_id, (None, {}))[1])

    async def warm(self, user_id: OwnerKey, place: str | None, now: datetime) -> UserMemories:
        """Build the index ahead of the person's first reflection (the start-up warm-up)."""
        return (await self.get(user_id, place, now))[0]

    async def get(
        self, user_id: OwnerKey, place: str | None, now: datetime, conn: Connection | None = None
    ) -> tuple[UserMemories, WriteIndex]:
        """The user's memories as of now and their write index for `place`, caught up with
        every change read since it was last used. The first one of a user and place is built
        once, not per reflection: its texts read in the worker process for a large user, filed
        on the event loop in slices.

        The write path may change the index in place while its transaction runs; if that
        transaction does not commit, it must call `drop`. `conn`: as for `MemoryCache.get`.
        """
        async with self._index_locks.hold((user_id, place)):
            return await self._build(user_id, place, now, conn)

    async def _build(
        self, user_id: OwnerKey, place: str | None, now: datetime, conn: Connection | None
    ) -> tuple[UserMemories, WriteIndex]:
        entry = await self._cache.get(user_id, conn)
        now_us = micros(now)
        held = self._write_indexes.get(user_id)
        if held is None or held[0] is not entry:
            held = (entry, {})
            self._write_indexes[user_id] = held
        index = held[1].get(place)
        if index is None:
            index = WriteIndex(place)
            held[1][place] = index
            try:
                # A caller passing its connection holds the write lock, which the turns a
                # build steps aside for may be waiting for.
                await self._fill(index, entry, now_us, step_aside=conn is None)
            except BaseException:
                # Cancelled halfway (shutdown, an erase): a partial index would miss duplicates.
                if held[1].get(place) is index:
                    del held[1][place]
                raise
            freeze_long_lived()
            entry = await self._cache.get(user_id, conn)  # what changed while it was built is in `pending`
            if self._write_indexes.get(user_id) is not held:
                # Reloaded whole meanwhile (another epoch, many changes): build from that one.
                return await self._build(user_id, place, now, conn)
        pending, index.pending = index.pending, set()
        for memory_id in sorted(pending):
            slot = entry.slot_of.get(memory_id)
            if slot is None:
                index.drop(memory_id)
            else:
                row = entry.row(slot)
                index.put(memory_id, row.text, row.place, expiry_of(entry.expires_us[slot]), now_us)
        index.expire(now_us)
        await index.make_room(ROOM)
        return entry, index

    async def _fill(self, index: WriteIndex, entry: UserMemories, now_us: int, *, step_aside: bool) -> None:
        """Every live memory of the index's place, from the entry as it is now. The texts' facts
        (the pure-Python part, 0.3-1 ms a memory) come from the worker process for a large
        user; what is left on the loop is filing them (tens of microseconds a memory), in slices."""
        # Copies: a catch-up may change the entry while the facts are computed (its ids go to
        # `pending`, taken in before the index is used). The expiries become Python ints a slice
        # at a time: 100,000 at once were 4 MB of new objects in one call.
        rows, expiries = list(entry.rows), entry.expires_us[: len(entry.rows)].copy()
        wanted: list[tuple[int, str, int | None]] = []
        slices = Slices(self._cache.foreground if step_aside else None, entry.user_id)
        for start in range(0, len(rows), FILL_SLICE):
            for row, expires_us in zip(rows[start : start + FILL_SLICE], expiries[start : start + FILL_SLICE].tolist()):
                expiry = None if expires_us == NO_EXPIRY else expires_us
                if row is not None and index.wants(row.place, expiry, now_us):
                    wanted.append((row.id, row.text, expiry))
            await slices.tick()
        if len(wanted) < IN_THREAD_ROWS:
            index.reserve(len(wanted) + ROOM)
        else:
            await asyncio.to_thread(index.reserve, len(wanted) + ROOM)
        filed = 0
        async with contextlib.aclosing(self._offload.chunks(write_facts, [text for _, text, _ in wanted])) as parts:
            async for facts in parts:
                for (memory_id, text, expiry), known in zip(wanted[filed : filed + len(facts)], facts):
                    index.put(memory_id, text, index.place, expiry, now_us, known)
                    filed += 1
                    if not filed % FILL_SLICE:
                        # Out of the cyclic collector's walks as it grows (see freeze_long_lived).
                        freeze_long_lived()
                    await slices.tick()

    def drop(self, user_id: OwnerKey) -> None:
        """After a write that changed the user's write indexes and did not commit."""
        self._write_indexes.pop(user_id, None)
