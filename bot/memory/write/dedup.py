"""Write-path deduplication: is a new memory the same fact as a stored one, and which wording stays.

Pure logic, no I/O. The measures and their traps were measured on the prototype (docs/design.md,
"Measured decisions"); the figures quoted below are printed by ``bench/dedup.py`` on the corpus
in ``bench/dedup_corpus.py``.

Score of two texts = max of three measures on their dedup text (``normalise`` with times and
numbers written one way, see ``dedup_text``):

* the sequence ratio ``2*LCS/(la+lb)`` (``sequence_ratio``), only when both texts have at least
  ``MIN_RATIO_CHARS`` characters;
* Jaccard of fact words (``text.fact_words``: content words plus the relation words "avec",
  "pour", "sur", "chez", "with", "for"…), which sees permutations;
* 1.0 when the shorter text appears verbatim, on word boundaries, in the longer one.

The score is capped just under the threshold when the two texts are different facts that the
measures cannot see:

* their **carrier tokens** differ (numbers, times, days, months, "demain", "ce soir", negations…:
  the tokens that are often the fact itself);
* one content word was **substituted** for another ("allergique aux arachides" / "allergique aux
  crustacés", "travaille avec / pour Marc"): each side has a fact word the other lacks that is not
  a mere re-spelling of one (accents, plural/feminine ending, one-letter typo inside a long word;
  a name written with a capital is re-spelt by its accents only, so "son mari" is not "Marie").
  A pure addition ("films de Miyazaki" → "films de Hayao Miyazaki") is not a substitution and
  still merges, unless all it adds is a relation of place or time ("vit à Nantes" → "vit près de
  Nantes": the "à" that no fact word shows was replaced).

Both caps lean the same way as the whole write path: a missed merge costs a duplicate, a wrong
merge silently erases a fact.

``DedupIndex`` finds the merge target of a new memory among thousands without scoring each one,
with the same answer as ``best_match_exhaustive``; ``merge`` says which wording the merged memory
keeps. Carrier tokens and the dedup text live in bot/memory/carriers.py.

Over 450 lines on purpose: the index must give the exhaustive score's answer, so the score, its
two caps and the index that bounds them are read and changed together.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from rapidfuzz.distance import Indel

from bot.memory.carriers import AMBIGUOUS_MONTHS, SINGLE_CARRIERS, carriers_of, dedup_text
from bot.memory.text import capitalised_words, fact_words, strip_accents

SIMILARITY_THRESHOLD = 0.80
# The sequence ratio says nothing when the sentence frame alone reaches the threshold: two texts
# of L characters sharing "l'utilisateur est " (18 characters, the most common frame) score at
# least 2*18/(2*L), which is >= 0.80 up to L = 22. From 23 characters the frame alone cannot merge.
# Measured on the corpus (bench/dedup.py, sweep): every value from 0 to 23 gives the same decisions
# (the substitution cap already rejects "est diabétique" / "est insomniaque"); 25 loses the
# "marié"/"mariée" rewording (23/24 characters, only the ratio sees it), 30 loses two, 50 nine.
MIN_RATIO_CHARS = 23
_CAPPED = SIMILARITY_THRESHOLD - 0.01


# --- substitution ---------------------------------------------------------------------------

_INFLECTIONS = ("", "s", "x", "e", "es", "y", "ies")




# Pure and called on the same few thousand word pairs over and over by the index.
@functools.lru_cache(maxsize=1 << 16)
def near_spelling(a: str, b: str) -> bool:
    """Same word written another way: accents, a plural/feminine ending, or a one-letter typo.

    The ending rule needs a stem of 4+ letters ("chat"/"chats", "arachide"/"arachides",
    "infirmier"/"infirmière"); the typo must sit inside a word of 7+ letters and not on its last
    letter ("alergique"/"allergique"), so "Julie"/"Julien", "poison"/"poisson", "chat"/"chant"
    stay different words. Words with digits are never near (numbers are carrier tokens).

    Words are compared lower-cased, so this conflates names too ("mari"/"Marie", "Louis"/"Louise",
    "Luca"/"Lucas"); ``is_substitution`` refuses the ending and typo rules when either word is a
    name. Known conflation, accepted: "cousin"/"cousine" (two people, one lower-case word).
    """
    if not (a.isalpha() and b.isalpha()):
        return False
    fa, fb = strip_accents(a), strip_accents(b)
    if fa == fb:
        return True
    for x, y in ((fa, fb), (fb, fa)):
        for ending in _INFLECTIONS:
            if x.endswith(ending):
                stem = x[: len(x) - len(ending)]
                if len(stem) >= 4 and any(y == stem + other for other in _INFLECTIONS):
                    return True
    return min(len(fa), len(fb)) >= 7 and _one_inner_edit(fa, fb)


def _one_inner_edit(a: str, b: str) -> bool:
    if len(a) > len(b):
        a, b = b, a
    if len(b) - len(a) > 1:
        return False
    first = next((i for i in range(len(a)) if a[i] != b[i]), len(a))
    if first >= len(a) - 1:  # the difference touches the last letter: an ending, not a typo
        return False
    if len(a) == len(b):
        if a[first + 1:] == b[first + 1:]:
            return True
        return a[first] == b[first + 1] and a[first + 1] == b[first] and a[first + 2:] == b[first + 2:]
    return a[first:] == b[first + 1:]


# Relation words of place and time. Added alone, one replaces the neutral "à", "en", "de",
# "dans", "in", "at" that no fact word shows: "vit à Nantes" / "vit près de Nantes", "se couche à
# minuit" / "après minuit". Added alone, "avec" and "pour" are more often a complement moved
# ("part en vacances en Islande" / "part en Islande pour ses vacances": a rewording of the
# corpus) and stay an addition; "on" is mostly a date ("works on Saturdays" / "works Saturdays").
_PLACE_AND_TIME = frozenset(
    """
    près loin sous sur devant derrière avant après contre vers entre autour
    near under over behind before after against around beside between
    """.split()
)


def is_substitution(
    a: frozenset[str] | set[str], b: frozenset[str] | set[str], names: frozenset[str] = frozenset()
) -> bool:
    """Each side has a fact word the other lacks that is not a re-spelling of one of its words, or
    all one side adds is relations of place or time.

    ``names`` are the words written as names (``capitalised_words``) on either side: a name is
    re-spelt by its accents only ("Léa"/"Lea"), never by an ending or a typo ("Marie" is not
    "mari", "Louise" is not "Louis"). A name that opens its sentence is not seen as one.
    """
    only_a, only_b = a - b, b - a
    if not only_a or not only_b:
        added = only_a or only_b
        return bool(added) and added <= _PLACE_AND_TIME

    def respelt(w: str, v: str) -> bool:
        if w in names or v in names:
            return strip_accents(w) == strip_accents(v)
        return near_spelling(w, v)

    return any(not any(respelt(w, v) for v in only_b) for w in only_a) and any(
        not any(respelt(v, w) for w in only_a) for v in only_b
    )


# --- score ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Features:
    norm: str
    content: frozenset[str]
    carriers: tuple[str, ...]
    names: frozenset[str]


# English capitalises weekdays and months: they are carrier tokens, compared as such, not names.
_NOT_NAMES = frozenset(SINGLE_CARRIERS) | AMBIGUOUS_MONTHS


# The index is rebuilt from a user's memories at each reflection: each text is read once.
@functools.lru_cache(maxsize=1 << 15)
def _features(text: str) -> _Features:
    canonical = dedup_text(text)
    content = frozenset(fact_words(canonical))
    names = frozenset((capitalised_words(text) & content) - _NOT_NAMES)
    return _Features(canonical, content, carriers_of(canonical), names)


def _substituted(a: _Features, b: _Features) -> bool:
    return is_substitution(a.content, b.content, a.names | b.names)


def _boundary_after(text: str, end: int) -> bool:
    return end == len(text) or not (text[end].isalnum() or text[end] in "-'")


def contained(shorter: str, longer: str) -> bool:
    """Verbatim containment of normalised ``shorter`` in ``longer``, on word boundaries.

    It starts at the beginning of a space-separated token and ends where no letter, digit, hyphen
    or apostrophe follows: "demain" is not in "après-demain", "marc" is not in "marcher". Words of
    ``shorter`` are then always words of ``longer`` (the index relies on it).
    """
    if not shorter:
        return False
    start = longer.find(shorter)
    while start != -1:
        starts_a_word = start == 0 or longer[start - 1].isspace()
        if starts_a_word and _boundary_after(longer, start + len(shorter)):
            return True
        start = longer.find(shorter, start + 1)
    return False


def sequence_ratio(a: str, b: str) -> float:
    """``2*M/(len(a)+len(b))`` with ``M`` the longest common subsequence (rapidfuzz's Indel).

    difflib's ``SequenceMatcher.ratio`` counts matching blocks found greedily, in each direction
    (it is not symmetric), so its ``M`` is at most this one; on both dedup corpora (every pair of
    bench/dedup_corpus.py and bench/dedup_corpus_en.py) the decisions are the same
    (tests/memory/write/test_dedup.py) and it is about 35 times faster.
    """
    return Indel.normalized_similarity(a, b)


def _raw_score(a: _Features, b: _Features) -> float:
    short, long_ = (a.norm, b.norm) if len(a.norm) <= len(b.norm) else (b.norm, a.norm)
    if contained(short, long_):
        return 1.0
    union = a.content | b.content
    jaccard = len(a.content & b.content) / len(union) if union else 0.0
    ratio = 0.0
    if min(len(a.norm), len(b.norm)) >= MIN_RATIO_CHARS:
        ratio = sequence_ratio(a.norm, b.norm)
    return max(ratio, jaccard)


def _capped(a: _Features, b: _Features) -> bool:
    return a.carriers != b.carriers or _substituted(a, b)


def _score(a: _Features, b: _Features) -> float:
    raw = _raw_score(a, b)
    return min(raw, _CAPPED) if _capped(a, b) else raw


def similarity(a: str, b: str) -> float:
    """Symmetric similarity in [0, 1]; two memories merge when it is >= SIMILARITY_THRESHOLD."""
    return _score(_features(a), _features(b))


def similarity_details(a: str, b: str) -> dict[str, float | bool]:
    """The score before and after each cap, for benches and diagnostics."""
    fa, fb = _features(a), _features(b)
    raw = _raw_score(fa, fb)
    carriers_differ = fa.carriers != fb.carriers
    substituted = _substituted(fa, fb)
    return {
        "raw": raw,
        "carriers_differ": carriers_differ,
        "substitution": substituted,
        "carrier_score": min(raw, _CAPPED) if carriers_differ else raw,
        "score": min(raw, _CAPPED) if carriers_differ or substituted else raw,
    }


def best_match_exhaustive(text: str, items: Iterable[tuple[int, str]]) -> tuple[int, float] | None:
    """The plain comparison: ``text`` scored against every item.

    Returns the best (id, score) with score >= threshold, the lowest id on ties, or None.
    """
    features = _features(text)
    best: tuple[int, float] | None = None
    for item_id, item_text in items:
        score = _score(features, _features(item_text))
        if score >= SIMILARITY_THRESHOLD and (
            best is None or score > best[1] or (score == best[1] and item_id < best[0])
        ):
            best = (item_id, score)
    return best


# --- merge direction ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MergeDecision:
    text: str
    rewrite: bool
    reason: str


def merge(existing_text: str, new_text: str) -> MergeDecision:
    """Which wording a merged memory keeps (docs/design.md, "Measured decisions": merge direction).

    The newer wording wins unless it is poorer: it is absorbed (``rewrite=False``, the stored text
    is kept) when it is the same dedup text ("14 h 30" is "14h30"), when it appears verbatim inside
    the stored one, or when it has fewer fact words ("poorer"; a strict subset of the stored
    fact words always has fewer). With as many fact words or more, the newer wording
    replaces the stored one.

    On absorption the caller must not refresh the memory's date: the date ranks memories on the
    read path, and a fact the user keeps repeating would otherwise monopolise the top of it. The
    store applies this; a rewrite archives the old wording in the history first.
    """
    old, new = dedup_text(existing_text), dedup_text(new_text)
    if old == new:
        return MergeDecision(existing_text, False, "same wording")
    if len(new) < len(old) and contained(new, old):
        return MergeDecision(existing_text, False, "new wording is contained in the stored one")
    old_words, new_words = fact_words(old), fact_words(new)
    if len(new_words) < len(old_words):
        return MergeDecision(
            existing_text,
            False,
            f"new wording is poorer ({len(new_words)} fact words against {len(old_words)})",
        )
    return MergeDecision(new_text, True, "newer wording wins")


# --- index ----------------------------------------------------------------------------------

_WORD_BITS = 64
# Characters kept per memory for the LCS bound (uint16 codes: 10 000 memories take 5 MB). A longer
# memory gets no bound: it is scored whenever its length fits the ratio's length window.
_CODE_WIDTH = 256
_POSTING_SHARDS = 64
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
# _Features, whose unpickling costs more): norm, fact words, carriers, names.
DedupFacts = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def dedup_facts(text: str) -> DedupFacts:
    """The text's features as ``_features`` computes them, uncached (the bulk of a build runs in a
    worker, whose cache would only hold each text once), word sets sorted: the same values from
    any process, whatever its hash seed."""
    features = _features.__wrapped__(text)
    return features.norm, tuple(sorted(features.content)), features.carriers, tuple(sorted(features.names))


def _from_facts(facts: DedupFacts) -> _Features:
    norm, content, carriers, names = facts
    return _Features(norm, frozenset(content), carriers, frozenset(names))


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
        self._row_of: dict[int, int] = {}
        self._ids: list[int] = []
        self._features: list[_Features | None] = []
        self._free: list[int] = []
        self._signature_of: dict[tuple[str, ...], int] = {}
        # In shards: one dict of every (carriers, word) pair reaches millions of keys when
        # carriers vary (numbers are carriers), and growing it stops the event loop for 25-100 ms.
        self._postings: list[dict[tuple[int, str], set[int]]] = [{} for _ in range(_POSTING_SHARDS)]
        self._wordless: dict[int, set[int]] = {}
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
        features = _features(text) if facts is None else _from_facts(facts)
        row = self._free.pop() if self._free else self._new_row()
        signature = self._signature_of.setdefault(features.carriers, len(self._signature_of))
        self._row_of[item_id] = row
        self._ids[row] = item_id
        self._features[row] = features
        for word in features.content:
            self._shard(word).setdefault((signature, word), set()).add(row)
        if not features.content:
            self._wordless.setdefault(signature, set()).add(row)
        codes = text_codes(features.norm)
        self._codes[row, :] = 0
        self._codes[row, : codes.size] = codes
        self._length[row] = len(features.norm)
        self._signature[row] = signature
        self._active[row] = True

    def remove(self, item_id: int) -> None:
        """Forget a memory. Raises KeyError for an id that is not indexed."""
        row = self._row_of.pop(item_id)
        features = self._features[row]
        assert features is not None
        signature = int(self._signature[row])
        for word in features.content:
            self._shard(word)[(signature, word)].discard(row)
        self._wordless.get(signature, set()).discard(row)
        self._features[row] = None
        self._active[row] = False
        self._signature[row] = -1
        self._free.append(row)

    def best_match(self, text: str) -> tuple[int, float] | None:
        """Same answer as ``best_match_exhaustive`` over the indexed items."""
        features = _features(text)
        signature = self._signature_of.get(features.carriers)
        if signature is None:
            return None
        rows = self._word_candidates(features, signature) | self._ratio_candidates(features, signature)
        best: tuple[int, float] | None = None
        for row in rows:
            stored = self._features[row]
            assert stored is not None
            if _substituted(features, stored):
                continue
            # Same carriers (same group) and no substitution: the score is the uncapped one.
            score = _raw_score(features, stored)
            item_id = self._ids[row]
            if score >= SIMILARITY_THRESHOLD and (
                best is None or score > best[1] or (score == best[1] and item_id < best[0])
            ):
                best = (item_id, score)
        return best

    # Candidates whose Jaccard can reach the threshold or that can contain / be contained.
    def _word_candidates(self, features: _Features, signature: int) -> set[int]:
        shared: Counter[int] = Counter()
        for word in features.content:
            shared.update(self._shard(word).get((signature, word), ()))
        size = len(features.content)
        out = set(self._wordless.get(signature, ()))
        for row, common in shared.items():
            stored = self._features[row]
            assert stored is not None
            other = len(stored.content)
            if common / (size + other - common) >= SIMILARITY_THRESHOLD or common == min(size, other):
                out.add(row)
        if not features.content:
            # A text without fact words can be contained in any text of its group.
            out.update(np.flatnonzero(self._active & (self._signature == signature)).tolist())
        return out

    # Candidates whose sequence ratio can reach the threshold.
    def _ratio_candidates(self, features: _Features, signature: int) -> set[int]:
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
        100,000 items), a stall of the event loop the build is sliced to avoid."""
        if count > self._active.size:
            self._grow(count - self._active.size)

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
            self._active, self._length, self._codes, self._signature
        )
        self._active, self._length, self._codes, self._signature = active, length, codes, signature

    def _shard(self, word: str) -> dict[tuple[int, str], set[int]]:
        return self._postings[hash(word) % _POSTING_SHARDS]

    def _new_row(self) -> int:
        row = len(self._ids)
        if row == self._active.size:
            self._grow(self._active.size)
        self._ids.append(-1)
        self._features.append(None)
        return row
