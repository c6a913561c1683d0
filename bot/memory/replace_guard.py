"""The replace guard: a replacement must be about the same subject as the fact it replaces.

Seed 001's failure: shown "L'utilisateur vient au bureau en vélo.", the model answered the message
"Je ne suis jamais disponible le mercredi" with a *replace* of that id, and the vélo fact was gone.
`allowed_ids` could not help: the id was legitimate, the decision was wrong. A replacement that
does not share its subject with the old text is therefore applied as an add; the old fact stays.
"""

from __future__ import annotations

from bot.memory.text import content_words

# Verbs of attitude or possession are the frame of a sentence, not its subject: "aime le jazz"
# and "aime la randonnée" are two facts, "fait partie de l'équipe Paiements / Logistique" one.
FRAME_WORDS = frozenset(
    """
    aime aimait adore adorait préfère préférait déteste détestait apprécie appréciait veut voulait
    souhaite fait faisait joue jouait va allait peut pouvait doit devait dit pense trouve
    like likes liked love loves loved prefer prefers hate hates enjoys enjoy wants want does plays
    plus pas jamais toujours souvent not never always often no longer
    """.split()
)
# Two words are the same when one is the other inflected ("habite" / "habitait",
# "allergique" / "allergie"): a shared prefix of this many characters.
STEM_CHARS = 5

# Read from bench/replace_guard.py (labelled corpus in bench/replace_guard_corpus.py): the highest
# different-subject pair scores 0.33 (one shared word out of three), the lowest same-subject pair
# kept 0.50. The cut-off sits just above the different-subject side, because replacing wrongly
# erases a fact while a refused replacement only adds a near-duplicate that the user can forget.
SAME_SUBJECT_CUTOFF = 0.5


def _subject_words(text: str) -> set[str]:
    return {w for w in content_words(text) if w not in FRAME_WORDS}


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    return min(len(a), len(b)) >= STEM_CHARS and a[:STEM_CHARS] == b[:STEM_CHARS]


def subject_overlap(old: str, new: str) -> float:
    """Share of the smaller subject vocabulary found in the other text (overlap coefficient)."""
    a, b = _subject_words(old), _subject_words(new)
    if not a or not b:
        return 0.0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    matched = sum(1 for w in small if any(_same_word(w, x) for x in large))
    return matched / len(small)


def same_subject(old: str, new: str) -> bool:
    return subject_overlap(old, new) >= SAME_SUBJECT_CUTOFF
