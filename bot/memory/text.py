"""Text shared by the memory core (French first, English too): normalisation, words, stop-words,
accent folding, the filters' tokens, negation vocabularies and change markers (the replace guard
reads the same markers), and the two rules for "the same word"."""

from __future__ import annotations

import functools
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
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
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


# --- folded tokens, negations and change markers (the filters and the replace guard) ----------

# "l'", "n'", "qu'"… stay tokens of their own: "n'" carries the negation.
TOKEN = re.compile(r"(?:jusqu|lorsqu|puisqu|qu|[cdjlmnst])'|[^\W_]+(?:-[^\W_]+)*|[,;]")


def _without_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


# Cached for dedup's index, which strips the same few thousand words over and over; whole texts
# (fold) are not cached, so they never push those words out.
strip_accents = functools.lru_cache(maxsize=1 << 16)(_without_accents)


def fold(text: str) -> str:
    """normalise() without accents: "Écho", "ECHO" and "Echo" are one name."""
    return _without_accents(normalise(text))


def expand(text: str) -> str:
    """Normalised text with English negative contractions spelt out ("doesn't" → "does not")."""
    return expand_contractions(normalise(text))


def fold_tokens(text: str) -> list[str]:
    return TOKEN.findall(fold(expand(text)))


# Partners of "ne" that make a negation ("ne … que" alone is a restriction, not a negation).
NE_PARTNERS = frozenset(
    {"pas", "jamais", "plus", "rien", "aucun", "aucune", "aucuns", "aucunes", "guere", "nullement", "personne"}
)
# Negations that stand without "ne" (spoken French "aime pas", and English).
BARE_NEGATIONS = frozenset(
    {"pas", "jamais", "aucun", "aucune", "nullement", "not", "never", "no", "none", "nothing", "nobody", "nor"}
)
# Words of the user's message that announce a change of mind about what they sit next to.
CHANGE_MARKERS = frozenset(
    {
        "finalement", "maintenant", "desormais", "dorenavant", "plus", "change", "arrete",
        "recommence", "remis", "repris", "now", "actually", "anymore", "longer", "nowadays",
        "lately", "changed", "stopped", "quit", "started", "again",
    }
)  # fmt: skip
CHANGE_PHRASES = re.compile(r"\b(?:en fait|au final|used to|these days|any more)\b")
# Words that announce that a fact changed value (team, town, job…): the replace guard's evidence.
_UPDATE_MARKERS = CHANGE_MARKERS | frozenset(
    {
        "quitte", "demenage", "demenagee", "nouveau", "nouvelle", "nouvel", "devenu", "devenue",
        "passe", "passee", "correction", "trompe", "trompee", "erreur", "left", "moved", "switched",
        "became", "new", "wrong", "mistake",
    }
)  # fmt: skip
# Words that announce an addition: "je suis AUSSI allergique aux crustacés" adds a fact.
_ADDITION_MARKERS = frozenset({"aussi", "egalement", "also", "too"})
_ADDITION_PHRASES = re.compile(r"\b(?:en plus|de plus|as well|in addition)\b")


def announces_change(user_message: str) -> bool:
    """The user's own words say that something changed value ("j'ai quitté…", "now…")."""
    folded = fold(expand(user_message))
    return bool(_UPDATE_MARKERS & set(fold_tokens(user_message))) or bool(CHANGE_PHRASES.search(folded))


def announces_addition(user_message: str) -> bool:
    """The user's own words say that a fact comes in addition to another ("aussi", "also")."""
    folded = fold(expand(user_message))
    return bool(_ADDITION_MARKERS & set(fold_tokens(user_message))) or bool(_ADDITION_PHRASES.search(folded))


# --- "the same word": two rules, each measured where it is used ------------------------------
# The flip detector (filters.py) pairs every word of a fact with a word of its copy, verbs
# included, so it reads an inflection down to a 3-letter stem ("aime" / "aimait"). The replace
# guard (replace_guard.py) compares subject words only, with a fixed 5-letter prefix
# ("allergique" / "allergie"). They are not merged: each is the rule its own corpus was measured
# with (tests/memory/write/test_filters.py, bench/replace_guard.py), and one rule for both would move
# those figures.

# Letters an inflection swaps at the end of a word: "aime" / "aimait", "likes" / "liking".
_INFLECTION_TAILS = frozenset({"e", "s"})


def same_word_inflected(a: str, b: str) -> bool:
    """Equal, or one is the other inflected: the shorter word, less up to two final "e"/"s",
    is a prefix of ≥ 3 letters of the longer ("aime" / "aimait", "smokes" / "smoking")."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    stem = short
    for _ in range(2):
        if long_.startswith(stem):
            break
        if stem[-1:] not in _INFLECTION_TAILS:
            return False
        stem = stem[:-1]
    return len(stem) >= 3 and long_.startswith(stem)


# Two words are the same when one is the other inflected ("habite" / "habitait",
# "allergique" / "allergie"): a shared prefix of this many characters.
STEM_CHARS = 5


def same_word_stem(a: str, b: str) -> bool:
    if a == b:
        return True
    return min(len(a), len(b)) >= STEM_CHARS and a[:STEM_CHARS] == b[:STEM_CHARS]
