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

The index that finds the candidates without scoring every memory (bot/memory/write/dedup_index.py)
must give the exhaustive score's answer: tests/memory/write/test_dedup.py holds them together.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

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
        if a[first + 1 :] == b[first + 1 :]:
            return True
        return a[first] == b[first + 1] and a[first + 1] == b[first] and a[first + 2 :] == b[first + 2 :]
    return a[first:] == b[first + 1 :]


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
class TextFeatures:
    norm: str
    content: frozenset[str]
    carriers: tuple[str, ...]
    names: frozenset[str]


# English capitalises weekdays and months: they are carrier tokens, compared as such, not names.
_NOT_NAMES = frozenset(SINGLE_CARRIERS) | AMBIGUOUS_MONTHS


# The index is rebuilt from a user's memories at each reflection: each text is read once.
@functools.lru_cache(maxsize=1 << 15)
def text_features(text: str) -> TextFeatures:
    canonical = dedup_text(text)
    content = frozenset(fact_words(canonical))
    names = frozenset((capitalised_words(text) & content) - _NOT_NAMES)
    return TextFeatures(canonical, content, carriers_of(canonical), names)


def one_word_substituted(a: TextFeatures, b: TextFeatures) -> bool:
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


def raw_score(a: TextFeatures, b: TextFeatures) -> float:
    short, long_ = (a.norm, b.norm) if len(a.norm) <= len(b.norm) else (b.norm, a.norm)
    if contained(short, long_):
        return 1.0
    union = a.content | b.content
    jaccard = len(a.content & b.content) / len(union) if union else 0.0
    ratio = 0.0
    if min(len(a.norm), len(b.norm)) >= MIN_RATIO_CHARS:
        ratio = sequence_ratio(a.norm, b.norm)
    return max(ratio, jaccard)


def _capped(a: TextFeatures, b: TextFeatures) -> bool:
    return a.carriers != b.carriers or one_word_substituted(a, b)


def _score(a: TextFeatures, b: TextFeatures) -> float:
    raw = raw_score(a, b)
    return min(raw, _CAPPED) if _capped(a, b) else raw


def similarity(a: str, b: str) -> float:
    """Symmetric similarity in [0, 1]; two memories merge when it is >= SIMILARITY_THRESHOLD."""
    return _score(text_features(a), text_features(b))


def similarity_details(a: str, b: str) -> dict[str, float | bool]:
    """The score before and after each cap, for benches and diagnostics."""
    fa, fb = text_features(a), text_features(b)
    raw = raw_score(fa, fb)
    carriers_differ = fa.carriers != fb.carriers
    substituted = one_word_substituted(fa, fb)
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
    features = text_features(text)
    best: tuple[int, float] | None = None
    for item_id, item_text in items:
        score = _score(features, text_features(item_text))
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
