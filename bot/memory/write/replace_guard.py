"""The replace guard: a replacement must be about the same subject as the fact it replaces.

The failure it guards against (docs/design.md, "Write path": replace guard): shown
"L'utilisateur vient au bureau en vélo.", an extractor model answered the message
"Je ne suis jamais disponible le mercredi" with a *replace* of that id, and the vélo fact was gone.
`allowed_ids` could not help: the id was legitimate, the decision was wrong. A replacement that
does not share its subject with the old text is therefore applied as an add; the old fact stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.memory.text import announces_addition, announces_change, content_words, same_word_stem, words

# Verbs of attitude or possession are the frame of a sentence, not its subject: "aime le jazz"
# and "aime la randonnée" are two facts, "fait partie de l'équipe Paiements / Logistique" one.
# Polarity and frequency words are frame too ("n'aime plus le jazz" is still about jazz): the
# few negations here are not a negation test (bot/memory/text.py holds that vocabulary), only
# words that never name a subject.
FRAME_WORDS = frozenset(
    """
    aime aimait adore adorait préfère préférait déteste détestait apprécie appréciait veut voulait
    souhaite fait faisait joue jouait va allait peut pouvait doit devait dit pense trouve
    like likes liked love loves loved prefer prefers hate hates enjoys enjoy wants want does plays
    plus pas jamais toujours souvent not never always often no longer
    """.split()
)

# People a fact can be about besides the user. A message's change word ("moved", "started",
# "maintenant", "a déménagé") says that the fact of whoever the message names changed: when the
# old text alone names a person (the sister's town, the new text the brother's), the change is
# the other person's, and only a message naming the old person backs the replacement. A word
# joined by hyphens counts by its parts ("grand-mère", "mother-in-law").
PERSON_WORDS = frozenset(
    """
    mère père maman papa parents parent sœur sœurs soeur frère frères fils fille filles enfant
    enfants bébé femme mari époux épouse conjoint conjointe compagnon compagne copain copine
    petit-ami petite-amie ami amie amis amies pote potes collègue collègues patron patronne chef
    cousin cousine cousins tante oncle nièce neveu grand-mère grand-père mamie papi voisin voisine
    voisins coloc colocataire fiancé fiancée
    mother father mum mom mummy mommy dad daddy parents parent sister sisters brother brothers
    sons daughter daughters child children kid kids baby wife husband spouse partner boyfriend
    girlfriend fiance fiancee friend friends mate colleague colleagues coworker boss cousin
    cousins aunt uncle niece nephew grandmother grandfather grandma grandpa granny neighbour
    neighbor neighbours neighbors flatmate roommate
    """.split()
)
# "son" is a person in English and a possessive in French ("son chien"): read as a person only in
# a text about "the user".
_ENGLISH_ONLY_PERSONS = frozenset({"son"})


def people(text: str) -> set[str]:
    """The words of `text` that name a person other than the user."""
    found = set()
    tokens = words(text)
    english = "user" in tokens
    for word in tokens:
        parts = {word, *word.split("-")}
        if parts & PERSON_WORDS or (english and parts & _ENGLISH_ONLY_PERSONS):
            found.add(word)
    return found


# Read from bench/replace_guard.py on bench/replace_guard_corpus.py (labelled triples: old fact,
# proposed replacement, the user's message). Subject overlap alone does not separate the two
# kinds: a true correction ("habite à Nantes" → "habite à Lyon") and a neighbouring fact written
# over the old one ("habite à Nantes" → "habite avec sa sœur") both score 0.50. Overlap only
# rules out the clearly unrelated (every different-subject pair without a shared subject word
# scores <= 0.33, every true correction >= 0.50); the user's message decides the rest.
SAME_SUBJECT_CUTOFF = 0.5


def _subject_words(text: str) -> set[str]:
    return {w for w in content_words(text) if w not in FRAME_WORDS}


def unmatched(words: Iterable[str], others: Iterable[str]) -> set[str]:
    """The `words` that no word of `others` is the same as (`same_word_stem`: one inflected
    ("habite" / "habitait"), the only synonyms the write path accepts). The guard's test of
    what a rewrite loses, shared with the consolidation's check (bot/memory/consolidation/
    proposal.py), which must refuse what this refuses."""
    pool = list(others)
    return {w for w in words if not any(same_word_stem(w, x) for x in pool)}


def subject_overlap(old: str, new: str) -> float:
    """Share of the smaller subject vocabulary found in the other text (overlap coefficient)."""
    a, b = _subject_words(old), _subject_words(new)
    if not a or not b:
        return 0.0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    matched = sum(1 for w in small if any(same_word_stem(w, x) for x in large))
    return matched / len(small)


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    replace: bool
    why: str


def judge_replacement(old: str, new: str, user_message: str) -> GuardVerdict:
    """Whether a proposed replacement may overwrite `old`, or must be added beside it.

    A replacement keeps everything the old text said (an enrichment) or is backed by the
    user's own words: they name what is being replaced ("j'ai quitté l'équipe Paiements") or
    say that it changed ("maintenant", "j'ai déménagé"), and do not say it is in addition
    ("aussi"). A change word counts only for the words the old text alone has: when those name
    a person, the message must name that person, since "my brother just moved to Paris" says
    nothing of the sister's fact it would replace. Anything else is added and the old fact stays: a duplicate the user can forget
    costs less than a fact erased.
    """
    overlap = subject_overlap(old, new)
    if overlap < SAME_SUBJECT_CUTOFF:
        return GuardVerdict(False, f"not the same subject (overlap {overlap:.2f})")
    old_people = people(old) - people(new)
    if old_people:
        named = people(user_message) | content_words(user_message)
        if not any(same_word_stem(p, m) for p in old_people for m in named):
            listed = ", ".join(sorted(old_people))
            return GuardVerdict(False, f"the old fact is about {listed}, whom the message does not name")
    old_only = unmatched(_subject_words(old), _subject_words(new))
    if not old_only:
        return GuardVerdict(True, "the new text keeps everything the old one said")
    if announces_addition(user_message):
        return GuardVerdict(False, 'the message adds a fact ("aussi"), it does not correct one')
    message_words = content_words(user_message)
    if any(same_word_stem(w, m) for w in old_only for m in message_words):
        return GuardVerdict(True, "the message names what is replaced")
    if announces_change(user_message):
        return GuardVerdict(True, "the message says it changed")
    return GuardVerdict(False, f"the message does not say that {', '.join(sorted(old_only))} changed")
