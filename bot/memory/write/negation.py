"""The flip check: a new memory that says the opposite of one already held ("n'aime pas X" for
"aime X"), refused unless the user's own message says it, so a reflection misreading a negation
never overwrites a fact."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from bot.memory.text import (
    BARE_NEGATIONS,
    CHANGE_MARKERS,
    CHANGE_PHRASES,
    NE_PARTNERS,
    expand,
    fact_words,
    fold,
    fold_tokens,
    same_word_inflected,
)

# Share of content words (negation markers removed) two texts must have in common to be "the
# same fact": the prototype's flips are verbatim copies ("n'aime pas X" → "aime X", overlap 1.0);
# 0.75 still tolerates one extra or missing word out of four ("vraiment", "beaucoup"). The
# closest pair of distinct facts in the tests, "n'aime pas le thé vert" / "aime le thé noir",
# scores 0.50.
FLIP_MIN_OVERLAP = 0.75


# Removed before comparing two texts: the negation itself, and the adverbs that come and go
# with it ("ne fume plus" / "fume toujours", "no longer" / "still", "anymore", "now").
_POLARITY_WORDS = (
    NE_PARTNERS
    | BARE_NEGATIONS
    | frozenset(
        {
            "ne", "neither", "longer", "anymore", "any", "ever", "toujours", "desormais", "maintenant",
            "dorenavant", "vraiment", "finalement", "still", "always", "now", "really", "actually",
        }
    )
)  # fmt: skip


# Verbs that frame a preference or a habit; the subject of "aime les épinards" is "épinards".
_FRAME_VERBS = frozenset(
    {
        "aime", "adore", "apprecie", "deteste", "prefere", "mange", "boit", "fait", "veut", "fume",
        "like", "love", "enjoy", "hate", "prefer", "eat", "drink", "want", "does",
    }
)  # fmt: skip


_SENTENCES = re.compile(r"[.!?…\n]+")


_CLAUSES = re.compile(r"[,;]|\b(?:mais|but|sauf|except|however|cependant)\b", re.IGNORECASE)


def _negative(tokens: Sequence[str]) -> bool:
    if any(t in BARE_NEGATIONS for t in tokens):
        return True
    has_ne = any(t == "ne" or (t == "n'" and tokens[i + 1 : i + 2] != ["importe"]) for i, t in enumerate(tokens))
    if not has_ne:
        return False
    if any(t in NE_PARTNERS for t in tokens):
        return True
    return "que" not in tokens and "qu'" not in tokens


def _comparable(text: str) -> set[str]:
    """Fact words (relation words such as avec/pour/sur/sous included: "ne travaille pas avec
    Marc" does not flip "travaille pour Marc"), accents folded, negation and its adverbs removed."""
    return {fold(w) for w in fact_words(expand(text))} - _POLARITY_WORDS


def _shared(a: AbstractSet[str], b: AbstractSet[str]) -> int:
    """Words of `a` paired one-to-one with a word of `b` (exact pairs first)."""
    left = set(b)
    shared = 0
    # In one order whatever the sets' (hash seeds differ between processes, and a write index's
    # words come from a worker process): a word may pair with several, so the order counts.
    for word in sorted(a, key=lambda w: (w not in left, w)):
        match = word if word in left else next((w for w in sorted(left) if same_word_inflected(word, w)), None)
        if match is not None:
            left.discard(match)
            shared += 1
    return shared


def _overlap(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    shared = _shared(a, b)
    union = len(a) + len(b) - shared
    return shared / union if union else 0.0


def _message_supports(user_message: str, fact: frozenset[str], negative: bool) -> bool:
    """Does the user's message state the candidate's polarity about the candidate's subject?

    A sentence of the message must name the subject (a content word of the fact other than its
    frame verb), then either restate the fact with the new polarity in one clause ("finalement
    j'aime bien les épinards"), or carry a change marker ("désormais", "now", "j'ai arrêté",
    "j'ai changé d'avis"). Naming the subject alone is no evidence: the exchange that showed the
    old memory to the reflection usually names it ("je cuisine des épinards ce soir"). "plus"
    is a change marker only without "ne": in "je n'aime plus" it is the negation, which the
    restatement test already reads.
    """
    subject = {w for w in fact if not any(same_word_inflected(w, v) for v in _FRAME_VERBS)} or fact
    needed = min(2, len(fact))
    for sentence in _SENTENCES.split(user_message):
        if not _shared(_comparable(sentence), subject):
            continue
        for clause in _CLAUSES.split(sentence):
            words = _comparable(clause)
            if (
                _shared(words, subject)
                and _shared(words, fact) >= needed
                and _negative(fold_tokens(clause)) == negative
            ):
                return True
        tokens = fold_tokens(sentence)
        markers = CHANGE_MARKERS - {"plus"} if {"ne", "n'"} & set(tokens) else CHANGE_MARKERS
        if any(t in markers for t in tokens) or CHANGE_PHRASES.search(fold(sentence)):
            return True
    return False


# Each candidate of a reflection is compared with every memory of the user: a text is read
# once, not once per candidate (bench/load.py: 90 ms per candidate at 3 000 memories).
@functools.lru_cache(maxsize=1 << 15)
def _polarity(text: str) -> tuple[bool, frozenset[str]]:
    """Whether a text is negative, and its comparable words."""
    return _negative(fold_tokens(text)), frozenset(_comparable(text))


def flipped_negation(text: str, existing: Iterable[tuple[int, str]], user_message: str = "") -> int | None:
    """Id of the existing memory that `text` copies with its negation flipped, or None.

    Calibration, on the prototype: about one reflection in three flipped a negation while copying a
    memory it was shown ("n'aime pas X" became "aime X"), and both versions then lived side by
    side. A flip is: opposite polarity (French "ne/n' … pas, jamais, plus, rien, aucun", spoken
    "aime pas", English "not/n't, never, no longer, no") and the same content words once the
    negation is removed, compared with inflection tolerance, overlap ≥ FLIP_MIN_OVERLAP. The
    best-overlapping memory is returned.

    Evidence rule: a true change of mind is not a flip. When the user's message restates the
    new polarity about the subject, or announces a change next to it ("finalement", "maintenant",
    "désormais", "plus", "now", "actually", "changed my mind"), the candidate passes.

    Known false positives (a legitimate fact refused): a narrower fact that shares three words
    out of four with an opposite one ("n'aime pas le thé vert" / "aime le thé vert glacé"); a
    change of mind the user states without naming the subject ("j'ai changé d'avis, c'est bon");
    a change of tense, which inflection tolerance reads as the same verb ("aimait les épinards"
    against "n'aime pas les épinards"), unless the message restates it.
    Known false negatives (a flip let through): a change marker next to the subject is taken at
    its word ("je cuisine des épinards maintenant"), and spoken "j'aime plus les épinards" (no
    "ne": "no longer") counts as a change; flips by antonym rather than negation ("aime" →
    "déteste", "fumeur" → "non-fumeur"); "ne … plus que" ("now only") reads as negative.
    """
    return flipped_among(text, ((memory_id, *_polarity(old_text)) for memory_id, old_text in existing), user_message)


def flipped_among(
    text: str, polarities: Iterable[tuple[int, bool, frozenset[str]]], user_message: str = ""
) -> int | None:
    """`flipped_negation` given each existing memory's (id, negative, comparable words), as a
    caller that keeps them (bot.memory.write.index) has them."""
    negative, fact = _polarity(text)
    if not fact:
        return None
    best_id: int | None = None
    best = FLIP_MIN_OVERLAP
    for memory_id, old_negative, old_fact in polarities:
        # overlap <= smaller / larger word count: most memories are ruled out by size alone.
        if old_negative == negative or min(len(fact), len(old_fact)) < best * max(len(fact), len(old_fact)):
            continue
        score = _overlap(fact, old_fact)
        if score > best or (best_id is None and score >= best):
            best_id, best = memory_id, score
    if best_id is None or _message_supports(user_message, fact, negative):
        return None
    return best_id
