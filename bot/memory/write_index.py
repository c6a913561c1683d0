"""What the write path compares new text with, kept per user and place from one reflection to the next.

A reflection compares each candidate with the user's live memories of its place: dedup (the
merge target, `DedupIndex`) and the flipped-negation filter. Rebuilding both from every memory at
each reflection made a reflection cost O(memories) inside the write lock (14.5 s at 40,000
memories once the per-text caches thrashed). Here they are built once per (user, place) and
updated with the rows the memory cache reads again when the user's version moves
(bot/memory/cache.py), so a reflection only takes in what changed since the last one.

The flip check asks only the memories that can reach its overlap: an inverted index on the first
three letters of each comparable word (two words the filter pairs, inflections included, share
them), looked up on the rarest words the overlap cannot do without.
"""

from __future__ import annotations

import heapq
import math

from bot.memory.dedup import DedupIndex
from bot.memory.filters import FLIP_MIN_OVERLAP, _polarity, flipped_among

_KEY_LETTERS = 3


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
