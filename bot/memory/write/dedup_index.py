"""The dedup index: which held memories a new text may duplicate, found without scoring them all
(word signatures and a bound on their longest common subsequence), giving the exhaustive
score's answer (bot/memory/write/dedup.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from bot.memory.cache.slices import SHARDS, Posting, ShardedDict, post
from bot.memory.write.dedup import (
    MIN_RATIO_CHARS,
    SIMILARITY_THRESHOLD,
    TextFeatures,
    one_word_substituted,
    raw_score,
    text_features,
)

_WORD_BITS = 64


# Characters kept per memory for the LCS bound (uint16 codes: 10 000 memories take 5 MB). A longer
# memory gets no bound: it is scored whenever its length fits the ratio's length window.
_CODE_WIDTH = 256


_MAX_CODE = 0xFFFF


def text_codes(norm: str) -> np.ndarray:
    """The characters of ``norm`` (its first _CODE_WIDTH) as LCS codes: the code point plus one
    (0 is padding and matches no character), every character from U+FFFE on sharing the last
    code. Merging characters can only lengthen a common subsequence, so the bound stays an upper
    bound; the codes are the same in every process (a worker computes them, see ``dedup_facts``)."""
    return _codes(norm[:_CODE_WIDTH])


def _codes(text: str) -> np.ndarray:
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return (np.minimum(points, _MAX_CODE - 1) + 1).astype(np.uint16)


# What the index keeps of a text, as plain values a worker process can send back (tuples, not
# TextFeatures, whose unpickling costs more): norm, fact words, carriers, names.
DedupFacts = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def dedup_facts(text: str) -> DedupFacts:
    """The text's features as ``text_features`` computes them, uncached (the bulk of a build runs
    in a worker, whose cache would only hold each text once), word sets sorted: the same values
    from any process, whatever its hash seed."""
    features = text_features.__wrapped__(text)
    return features.norm, tuple(sorted(features.content)), features.carriers, tuple(sorted(features.names))


def _from_facts(facts: DedupFacts) -> TextFeatures:
    norm, content, carriers, names = facts
    return TextFeatures(norm, frozenset(content), carriers, frozenset(names))


_ALL_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


class DedupIndex:
    """Finds the best merge target among many memories without scoring every one of them.

    A stored memory is scored only if no proven upper bound rules it out; the result is the same
    as ``best_match_exhaustive`` (the tests check it):

    * carrier tokens must be identical, otherwise the score is capped under the threshold:
      memories are grouped by carrier signature;
    * Jaccard >= threshold or containment needs shared fact words (containment puts every
      word of the shorter text in the longer): an inverted index on fact words gives the
      shared count, hence the exact Jaccard and whether containment is possible;
    * the sequence ratio is ``2*M/(la+lb)`` with ``M`` at most the longest common subsequence of
      the two texts: a length window first (``M <= min(la, lb)``), then the exact LCS length
      computed bit-parallel over all remaining memories at once with numpy.

    Survivors then pass the substitution check, and only those are scored for real.
    """

    def __init__(self, items: Iterable[tuple[int, str]] = ()) -> None:
        # In shards (bot/memory/cache/slices.py): each of these holds an entry per memory, or
        # millions for the postings when carriers vary (numbers are carriers).
        self._row_of: ShardedDict[int, int] = ShardedDict()
        self._ids: list[int] = []
        self.text_features: list[TextFeatures | None] = []
        self._free: list[int] = []
        self._signature_of: ShardedDict[tuple[str, ...], int] = ShardedDict()
        self._signatures = 0
        self._postings: list[dict[tuple[int, str], Posting]] = [{} for _ in range(SHARDS)]
        self._wordless: dict[int, Posting] = {}
        capacity = 64
        self._active = np.zeros(capacity, dtype=bool)
        self._length = np.zeros(capacity, dtype=np.int64)
        self._signature = np.full(capacity, -1, dtype=np.int64)
        self._codes = np.zeros((capacity, _CODE_WIDTH), dtype=np.uint16)
        for item_id, text in items:
            self.add(item_id, text)

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._row_of

    def add(self, item_id: int, text: str, facts: DedupFacts | None = None) -> None:
        """Index a memory; an id already present is re-indexed with its new text. `facts`: the
        text's ``dedup_facts``, when they were computed elsewhere."""
        if item_id in self._row_of:
            self.remove(item_id)
        features = text_features(text) if facts is None else _from_facts(facts)
        row = self._free.pop() if self._free else self._new_row()
        signature = self._signature_of.get(features.carriers)
        if signature is None:
            signature = self._signature_of[features.carriers] = self._signatures
            self._signatures += 1
        self._row_of[item_id] = row
        self._ids[row] = item_id
        self.text_features[row] = features
        for word in features.content:
            key = (signature, word)
            post(self._shard(key), key, row)
        if not features.content:
            post(self._wordless, signature, row)
        codes = text_codes(features.norm)
        self._codes[row, :] = 0
        self._codes[row, : codes.size] = codes
        self._length[row] = len(features.norm)
        self._signature[row] = signature
        self._active[row] = True

    def remove(self, item_id: int) -> None:
        """Forget a memory. Raises KeyError for an id that is not indexed."""
        row = self._row_of.pop(item_id)
        features = self.text_features[row]
        assert features is not None
        signature = int(self._signature[row])
        for word in features.content:
            key = (signature, word)
            self._shard(key)[key].discard(row)
        wordless = self._wordless.get(signature)
        if wordless is not None:
            wordless.discard(row)
        self.text_features[row] = None
        self._active[row] = False
        self._signature[row] = -1
        self._free.append(row)

    def best_match(self, text: str) -> tuple[int, float] | None:
        """Same answer as ``best_match_exhaustive`` over the indexed items."""
        features = text_features(text)
        signature = self._signature_of.get(features.carriers)
        if signature is None:
            return None
        rows = self._word_candidates(features, signature) | self._ratio_candidates(features, signature)
        best: tuple[int, float] | None = None
        for row in rows:
            stored = self.text_features[row]
            assert stored is not None
            if one_word_substituted(features, stored):
                continue
            # Same carriers (same group) and no substitution: the score is the uncapped one.
            score = raw_score(features, stored)
            item_id = self._ids[row]
            if score >= SIMILARITY_THRESHOLD and (
                best is None or score > best[1] or (score == best[1] and item_id < best[0])
            ):
                best = (item_id, score)
        return best

    # Candidates whose Jaccard can reach the threshold or that can contain / be contained.
    def _word_candidates(self, features: TextFeatures, signature: int) -> set[int]:
        shared: Counter[int] = Counter()
        for word in features.content:
            key = (signature, word)
            shared.update(self._shard(key).get(key, ()))
        size = len(features.content)
        out = set(self._wordless.get(signature, ()))
        for row, common in shared.items():
            stored = self.text_features[row]
            assert stored is not None
            other = len(stored.content)
            if common / (size + other - common) >= SIMILARITY_THRESHOLD or common == min(size, other):
                out.add(row)
        if not features.content:
            # A text without fact words can be contained in any text of its group.
            out.update(np.flatnonzero(self._active & (self._signature == signature)).tolist())
        return out

    # Candidates whose sequence ratio can reach the threshold.
    def _ratio_candidates(self, features: TextFeatures, signature: int) -> set[int]:
        la = len(features.norm)
        if la < MIN_RATIO_CHARS:
            return set()
        lengths = self._length
        window = (
            self._active
            & (self._signature == signature)
            & (lengths >= MIN_RATIO_CHARS)
            & (2.0 * np.minimum(lengths, la) / (lengths + la) >= SIMILARITY_THRESHOLD)
        )
        rows = np.flatnonzero(window)
        stored = lengths[rows] <= _CODE_WIDTH
        out = set(rows[~stored].tolist())  # texts too long to hold codes for: no bound, scored
        rows = rows[stored]
        if rows.size:
            lcs = self._lcs_lengths(features.norm, rows)
            bound = 2.0 * lcs / (lengths[rows] + la)
            out.update(rows[bound >= SIMILARITY_THRESHOLD].tolist())
        return out

    def _lcs_lengths(self, text: str, rows: np.ndarray) -> np.ndarray:
        """Longest common subsequence of ``text`` with each row, all rows at once.

        Bit-parallel algorithm (Allison–Dix, Crochemore et al. 2001; Hyyrö 2004): one bit per
        character of ``text``, ``V' = (V + (V & M[c])) | (V & ~M[c])`` for each character ``c`` of
        the other string, LCS = number of zero bits of ``V``. Bit vectors longer than 64 are
        split over several uint64 words with the carry of the addition propagated by hand.
        """
        m = len(text)
        n_words = (m + _WORD_BITS - 1) // _WORD_BITS
        # The masks of the text's own characters only; every other code reads the empty mask 0.
        distinct, local = np.unique(_codes(text), return_inverse=True)
        lookup = np.zeros(_MAX_CODE + 1, dtype=np.uint16)
        lookup[distinct] = np.arange(1, distinct.size + 1, dtype=np.uint16)
        masks = np.zeros((distinct.size + 1, n_words), dtype=np.uint64)
        for position, slot in enumerate(local.tolist()):
            masks[slot + 1, position // _WORD_BITS] |= np.uint64(1 << (position % _WORD_BITS))
        full = np.full(n_words, _ALL_ONES, dtype=np.uint64)
        if m % _WORD_BITS:
            full[-1] = np.uint64((1 << (m % _WORD_BITS)) - 1)
        steps = int(self._length[rows].max())
        codes = np.ascontiguousarray(lookup[self._codes[rows, :steps].T])
        v = [np.full(rows.size, full[w], dtype=np.uint64) for w in range(n_words)]
        for step in range(steps):
            match = masks[codes[step]]
            carry = None
            for w in range(n_words):
                m_w = match[:, w]
                u = v[w] & m_w
                total = v[w] + u
                overflow = total < u
                if carry is not None:
                    total += carry
                    overflow |= total < carry
                carry = overflow.astype(np.uint64)
                v[w] = total | (v[w] & ~m_w)
        ones = np.zeros(rows.size, dtype=np.int64)
        for w in range(n_words):
            ones += np.bitwise_count(v[w] & full[w])
        return m - ones

    def reserve(self, count: int) -> None:
        """Room for `count` items without growing: growing copies the code matrix (51 MB at
        100,000 items), a stall of the event loop the build is sliced to avoid. The new rows'
        pages are written here, so that a large index, reserved in a thread, is not faulted in
        by the adds on the loop: numpy asks huge pages for a large array, and the first write to
        each 2 MB of the codes took 12-20 ms of one add on a quiet machine, 130 ms on a loaded
        one (bench/load.py --cold)."""
        size = self._active.size
        if count > size:
            self._grow(count - size)
            self._codes[size:].fill(0)

    @property
    def capacity(self) -> int:
        """Items held before the arrays grow again."""
        return self._active.size

    @property
    def room(self) -> int:
        """Items that can be added before the arrays grow."""
        return self._active.size - len(self._ids) + len(self._free)

    def _grow(self, grow: int) -> None:
        size = self._active.size
        # np.zeros takes pages the system hands out zeroed when first written; concatenating
        # would write all of them at once (100 ms for the code matrix of 100,000 items).
        active, length = np.zeros(size + grow, dtype=bool), np.zeros(size + grow, dtype=np.int64)
        codes = np.zeros((size + grow, _CODE_WIDTH), dtype=np.uint16)
        signature = np.full(size + grow, -1, dtype=np.int64)
        active[:size], length[:size], codes[:size], signature[:size] = (
            self._active,
            self._length,
            self._codes,
            self._signature,
        )
        self._active, self._length, self._codes, self._signature = active, length, codes, signature

    def _shard(self, key: tuple[int, str]) -> dict[tuple[int, str], Posting]:
        # By the whole key, not the word: with a signature per memory, a word said in every
        # memory made one shard of 100,000 keys.
        return self._postings[hash(key) % SHARDS]

    def _new_row(self) -> int:
        row = len(self._ids)
        if row == self._active.size:
            self._grow(self._active.size)
        self._ids.append(-1)
        self.text_features.append(None)
        return row
