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

import heapq
import math
from collections.abc import Sequence
from datetime import datetime

from bot.clients.locks import KeyedLocks
from bot.clients.storage import Connection
from bot.memory.cache.entry import NO_EXPIRY, UserMemories, expiry_of, micros
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.slices import FILL_SLICE, Slices, freeze_long_lived
from bot.memory.model import OwnerKey
from bot.memory.write.dedup_index import DedupIndex
from bot.memory.write.negation import FLIP_MIN_OVERLAP, _polarity, flipped_among

_KEY_LETTERS = 3
# What a memory costs in a write index (dedup features and character codes, flip keys), measured
# with tracemalloc on the recall corpus (bench/latency.py --rss prints the RSS it takes).
WRITE_INDEX_BYTES_PER_MEMORY = 3000


def same_place(memory_place: str | None, place: str | None) -> bool:
    # Dedup stays inside one privacy boundary: a guild fact must not rewrite a DM memory.
    return memory_place == place or memory_place is None or place is None


class FlipIndex:
    """Memories by polarity and word prefix: the only ones `filters.flipped_negation` can return."""

    def __init__(self) -> None:
        # Per memory: its polarity, comparable words and their prefixes (computed once: the
        # filter's own cache holds 32,768 texts).
        self._keys: dict[int, tuple[bool, frozenset[str], frozenset[str]]] = {}
        self._postings: dict[tuple[bool, str], set[int]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, memory_id: int, text: str) -> None:
        self.remove(memory_id)
        negative, fact = _polarity(text)
        keys = frozenset(w[:_KEY_LETTERS] for w in fact)
        self._keys[memory_id] = (negative, fact, keys)
        for key in keys:
            self._postings.setdefault((negative, key), set()).add(memory_id)

    def remove(self, memory_id: int) -> None:
        known = self._keys.pop(memory_id, None)
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
        self.texts: dict[int, str] = {}
        self._expiries: list[tuple[int, int]] = []
        self._expires_of: dict[int, int] = {}
        # Ids the cache read again since the last lookup: taken in before the next one.
        self.pending: set[int] = set()

    def __len__(self) -> int:
        return len(self.texts)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self.texts

    def reserve(self, count: int) -> None:
        """Room for `count` memories at once, before a build that adds them one by one."""
        self.dedup.reserve(count)

    def put(self, memory_id: int, text: str, place: str | None, expires_us: int | None, now_us: int) -> None:
        """The memory as it now is (None for `expires_us`: no expiry): indexed if live and of
        this place, otherwise removed."""
        if not same_place(place, self.place) or (expires_us is not None and expires_us <= now_us):
            self.drop(memory_id)
            return
        if self.texts.get(memory_id) != text:
            self.texts[memory_id] = text
            self.dedup.add(memory_id, text)
            self.flips.add(memory_id, text)
        if expires_us is None:
            self._expires_of.pop(memory_id, None)
        elif self._expires_of.get(memory_id) != expires_us:
            self._expires_of[memory_id] = expires_us
            heapq.heappush(self._expiries, (expires_us, memory_id))

    def index_text(self, memory_id: int, text: str) -> None:
        """A text the write path stored in its transaction (a new memory, a merge, a replace),
        compared with the next candidates of the same reflection. Once committed, the cache
        reads the row again and `put` files it by its place and expiry."""
        self.texts[memory_id] = text
        self.dedup.add(memory_id, text)
        self.flips.add(memory_id, text)

    def drop(self, memory_id: int) -> None:
        if self.texts.pop(memory_id, None) is None:
            return
        self.dedup.remove(memory_id)
        self.flips.remove(memory_id)
        self._expires_of.pop(memory_id, None)

    def expire(self, now_us: int) -> None:
        while self._expiries and self._expiries[0][0] <= now_us:
            expires_us, memory_id = heapq.heappop(self._expiries)
            if self._expires_of.get(memory_id) == expires_us:
                self.drop(memory_id)


class WriteIndexes:
    """Per user and place, what the write path compares new text with: built on the first
    reflection, then fed the rows each of the cache's catch-ups reads. It follows the memory
    cache (`MemoryCache.follow`), so it goes when the user's entry goes and counts in its budget."""

    def __init__(self, cache: MemoryCache) -> None:
        self._cache = cache
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
        every change read since it was last used. The first one of a user and place is built in
        slices on the event loop: one long job, not one per reflection.

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
            # Copies: a catch-up may change the entry between two slices (its ids go to `pending`).
            rows, expiries = list(entry.rows), entry.expires_us[: len(entry.rows)].tolist()
            index.reserve(len(rows))

            # On the loop in slices, not in a thread: a thread doing this pure-Python work holds
            # the GIL against the loop (750 ms of lag at 20,000 memories); slices hold it a few
            # milliseconds. The first index of a user with 100,000 memories takes 20-70 s of CPU
            # (by machine), once per process (the start-up warm-up does it ahead of the user);
            # turns go on meanwhile.
            slices = Slices()
            try:
                for done, (row, expires_us) in enumerate(zip(rows, expiries), 1):
                    if row is not None:
                        expiry = None if expires_us == NO_EXPIRY else expires_us
                        index.put(row.id, row.text, row.place, expiry, now_us)
                    if not done % FILL_SLICE:
                        freeze_long_lived()
                    await slices.tick()
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
        return entry, index

    def drop(self, user_id: OwnerKey) -> None:
        """After a write that changed the user's write indexes and did not commit."""
        self._write_indexes.pop(user_id, None)
