"""Text normalisation shared by dedup and the write-path filters (French first, English too)."""

from __future__ import annotations

import re
import unicodedata

from bot.clients.values import storable

__all__ = ["storable"]  # its home is the clients' leaf module; re-exported for the core

_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "`": "'", "´": "'", "ʼ": "'"})
_DASHES = str.maketrans({"–": "-", "—": "-", "‑": "-"})
_SPACES = re.compile(r"\s+")
# A word keeps its inner hyphens ("après-demain" stays one token) and its digits.
_WORD = re.compile(r"[^\W_]+(?:-[^\W_]+)*", re.UNICODE)
# French elisions are split off: "l'utilisateur" -> "utilisateur", "n'aime" -> "aime".
_ELISION = re.compile(r"^(?:l|d|j|n|m|t|s|c|qu|jusqu|lorsqu|puisqu)'", re.IGNORECASE)


# Characters that draw nothing: the format characters (soft hyphen, zero-width space and joiners,
# word joiner, BOM, bidi embeddings, overrides and isolates, invisible operators, tags), the
# variation selectors, the combining grapheme joiner and the Hangul fillers. Left out: the Arabic
# and Syriac number signs, format characters that are drawn. A copy of a text with any of these
# inserted is the same text; tests/memory/test_lookalike.py checks the list against unicodedata.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
INVISIBLE: dict[int, None] = {c: None for lo, hi in _INVISIBLE_RANGES for c in range(lo, hi + 1)}
_INVISIBLE_CHARS = frozenset(map(chr, INVISIBLE))


def canonical(text: str) -> str:
    """One spelling for text that looks the same: NFKC (full-width letters, ligatures,
    compatibility forms become the plain ones), invisible characters removed.

    Memory text is stored in this form and every comparison (dedup, filters, story keys) starts
    from it, so a full-width or soft-hyphenated copy of a memory is the memory itself. Known
    cost: an emoji sequence joined by U+200D falls apart into its emoji."""
    if text.isascii():
        return text
    if not _INVISIBLE_CHARS.isdisjoint(text):
        # Removed first: one between a letter and its accent would keep NFKC from composing them.
        text = text.translate(INVISIBLE)
    return unicodedata.normalize("NFKC", text)


def normalise(text: str) -> str:
    """``canonical``, lower-cased, one kind of apostrophe and dash, single spaces, no final
    punctuation: the form texts are compared in."""
    text = canonical(text).translate(_APOSTROPHES).translate(_DASHES)
    text = _SPACES.sub(" ", text.lower()).strip()
    return text.rstrip(" .!?;:…")


# English negative contractions, spelt out: "doesn't like" and "does not like" are one wording.
_CONTRACTIONS = (
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\b(?:can't|cannot)\b"), "can not"),
    (re.compile(r"\bshan't\b"), "shall not"),
    (re.compile(r"n't\b"), " not"),
)


def expand_contractions(normalised: str) -> str:
    """A normalised text with English negative contractions spelt out ("doesn't" → "does not")."""
    for pattern, replacement in _CONTRACTIONS:
        normalised = pattern.sub(replacement, normalised)
    return normalised


def words(text: str) -> list[str]:
    """Words of an already normalised text, elisions removed, hyphenated words kept whole."""
    out: list[str] = []
    for raw in normalise(text).split(" "):
        raw = _ELISION.sub("", raw)
        out.extend(_WORD.findall(raw))
    return out


# Function words of French and English: they carry grammar, not the topic. Negations ("pas",
# "jamais", "plus", "not", "never", "sans"…) and relations of time ("avant", "après") are
# deliberately absent: "aime X" / "n'aime pas X" and "avant le dîner" / "après le dîner" are
# different facts, so those words must stay visible to whoever compares content words.
# Some relation words ("avec", "pour", "sur", "chez", "with", "for"…) are here although they can
# change a fact: ``content_words`` answers "what is this text about?" (the replace guard's subject
# overlap, the FTS query, story subject keys), where "avec" would make any two texts share a word
# and re-key stored subjects. Whoever asks "is this the same fact?" uses ``fact_words``.
STOPWORDS: frozenset[str] = frozenset(
    """
    le la les l un une des du de d au aux à a ce cet cette ces ça cela ceci celui celle ceux
    celles c qui que qu quoi dont où et ou mais donc or car en y dans par pour sur sous avec
    chez vers entre depuis pendant lors je j me m moi tu te t toi il elle on nous vous ils elles
    se s lui leur leurs son sa ses mon ma mes ton ta tes notre nos votre vos soi ne est sont
    était étaient été être es suis sommes êtes sera seront serait seraient ai as avons avez ont
    avait avaient avoir eu aura auront aurait très trop tout tous toute toutes aussi bien comme
    si même encore déjà dont quand ainsi alors puis chaque quelque quelques autre autres
    the an of to in on at for with and or but is are was were be been being am has have had do
    does did his her hers their theirs its my your our he she it they we you i me him them this
    that these those as by from into about than then so very also just which who whom whose
    what there here will would can could should shall may might must s
    """.split()
)
# Every memory is about the user and says so; the word would make any two memories look alike.
_SUBJECT_WORDS = frozenset({"utilisateur", "utilisatrice", "user"})


def content_words(text: str) -> set[str]:
    """Words that say what a text is about: words(text) without stop-words and the subject."""
    return {w for w in words(text) if w not in STOPWORDS and w not in _SUBJECT_WORDS}


# Relation words that change the fact they sit in: "dort sur / sous le canapé", "travaille avec /
# pour Marc", "vit chez / près de sa mère", "works with / for Marc", "sleeps on / under". The
# neutral ones ("à", "de", "en", "dans", "par", "in", "at", "to", "of"…) stay out: rewordings swap
# them freely ("en vélo" / "à vélo", "works at / for Google" is the exception we do not chase).
# Known cost: a temporal "on" ("on Mondays" / "every Monday") and a regional "sur" ("habite sur
# Nantes" = "à Nantes") now read as relations, and such rewordings stay as two memories.
RELATION_WORDS: frozenset[str] = frozenset(
    """
    avec pour sur sous chez vers entre contre près loin devant derrière avant après parmi envers
    auprès autour malgré sans
    with for on under over near against before after behind between among toward towards around
    beside without
    """.split()
)
_FACT_STOPWORDS = STOPWORDS - RELATION_WORDS


def fact_words(text: str) -> set[str]:
    """``content_words`` plus the relation words: the words two wordings of one fact share."""
    return {w for w in words(text) if w not in _FACT_STOPWORDS and w not in _SUBJECT_WORDS}


def capitalised_words(text: str) -> set[str]:
    """Words written with a capital letter inside a sentence (names, places), as ``words`` spells
    them. The first word of a sentence is left out: its capital says nothing."""
    text = canonical(text).translate(_APOSTROPHES).translate(_DASHES)
    out: set[str] = set()
    sentence_start = True
    for raw in text.split():
        for word in _WORD.findall(_ELISION.sub("", raw)):
            if word[0].isupper() and not sentence_start:
                out.add(word.lower())
            sentence_start = False
        if raw.endswith((".", "!", "?", "…")):
            sentence_start = True
    return out
