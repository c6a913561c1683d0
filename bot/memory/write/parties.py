"""The two parties of a memory, as the write filters (bot/memory/write/filters.py) read them:
where a memory names the user and the character, and whether it is a line of the character
rather than a fact about the user (`character_speaks`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.memory.text import STOPWORDS, TOKEN, expand, fold, fold_tokens, normalise

# --- how a memory names the two parties ------------------------------------------------------


def is_word(token: str) -> bool:
    return token[-1].isalnum()


_FOLDED_STOPWORDS = frozenset(fold(w) for w in STOPWORDS)

# A name part shorter than this ("Le", "Al") is too common to count on its own.
NAME_PART_MIN_CHARS = 3


def name_positions(tokens: Sequence[str], name: str | None) -> list[int]:
    """Where a name occurs: its whole token sequence, or, for a multi-word name, any part of it
    that is long enough and not a function word ("Dame Écho" is also "Écho")."""
    parts = [t for t in fold_tokens(name or "") if is_word(t)]
    if not parts:
        return []
    n = len(parts)
    hits = {i for i in range(len(tokens) - n + 1) if list(tokens[i : i + n]) == parts}
    if n > 1:
        significant = {p for p in parts if len(p) >= NAME_PART_MIN_CHARS and p not in _FOLDED_STOPWORDS}
        hits |= {i for i, t in enumerate(tokens) if t in significant}
    return sorted(hits)


# How the reflection names the two parties when it does not use their names, in the catalogue's
# languages ("El usuario …", "Der Nutzer …", accents folded).
_USER_WORDS = frozenset(
    {
        "utilisateur", "utilisatrice", "user", "joueur", "joueuse", "player",
        "usuario", "usuaria", "jugador", "jugadora", "benutzer", "benutzerin", "nutzer", "nutzerin", "spieler", "spielerin",
    }
)  # fmt: skip
_CHARACTER_WORDS = frozenset({"personnage", "character", "bot", "personaje", "charakter"})
# A memory that opens on a subject pronoun is about the user: "Il travaille de nuit."
_SUBJECT_PRONOUNS = frozenset({"il", "elle", "iel", "he", "she", "they", "el", "ella", "er"})
# ...unless the pronoun is impersonal: "Il pleut sur le port.", "Il y a une cheminée."
IMPERSONAL_OPENINGS = frozenset({("il", "y"), ("il", "pleut"), ("il", "pleuvait"), ("il", "neige"), ("il", "neigeait")})
# An object pronoun next to the character is the user: "Écho lui a promis une chanson."
_OBJECT_PRONOUNS = frozenset({"lui", "him"})


def user_positions(tokens: Sequence[str], user_name: str | None) -> list[int]:
    hits = {i for i, t in enumerate(tokens) if t in _USER_WORDS or t in _OBJECT_PRONOUNS}
    hits.update(name_positions(tokens, user_name))
    if tokens and tokens[0] in _SUBJECT_PRONOUNS and tuple(tokens[:2]) not in IMPERSONAL_OPENINGS:
        hits.add(0)
    return sorted(hits)


def character_positions(tokens: Sequence[str], character_name: str) -> list[int]:
    hits = {i for i, t in enumerate(tokens) if t in _CHARACTER_WORDS}
    hits.update(name_positions(tokens, character_name))
    return sorted(hits)


# --- the character's own words ----------------------------------------------------------------

# The pronouns of the one who speaks and of the one spoken to, in the catalogue's languages
# (bot/locales/), read on the text lower-cased but not accent-folded: Spanish "té" (tea) is not
# "te" (you). These mean the same in every language of the catalogue where they are words...
_FIRST_SUBJECTS = frozenset({"i", "je", "j'", "yo", "ich"})
_FIRST_OTHERS = frozenset(
    {"me", "m'", "moi", "my", "mine", "myself", "conmigo", "mío", "mía", "mich", "mir", "mein", "meine", "meinen",
     "meinem", "meiner", "meines"}
)  # fmt: skip
_SECONDS = frozenset(
    {"you", "your", "yours", "yourself", "yourselves", "tu", "t'", "te", "toi", "vous", "votre", "vos", "tú", "ti",
     "tus", "contigo", "usted", "ustedes", "vosotros", "vosotras", "vuestro", "vuestra", "tuyo", "tuya", "verte",
     "contarte", "decirte", "ayudarte", "escucharte", "conocerte", "saludarte", "dich", "dir", "dein", "deine",
     "deinen", "deinem", "deiner", "deines", "euch", "euer", "eure"}
)  # fmt: skip
# ...these only in one: French "ton" is an English noun, "mes" a Spanish month, "du" French "of
# the". The text's language is the one whose common words it has most.
_LANGUAGES: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    # language: (telling words, first-person words, second-person words)
    "en": (frozenset("the a an and is are was were to of in on with for that this it has have his her their user likes".split()), frozenset(), frozenset()),
    "fr": (
        frozenset("le la les l' un une des du de d' et est sont au aux dans pour avec que qu' il elle son sa ses ne pas utilisateur utilisatrice".split()),
        frozenset({"mon", "ma", "mes"}),
        frozenset({"ton", "ta", "tes"}),
    ),
    "es": (
        frozenset("el la los las una y es está son de del que en con para por su sus le se no usuario usuaria".split()),
        frozenset({"mi", "mis"}),
        frozenset(),
    ),
    "de": (
        frozenset("der die das den dem des ein eine und ist sind hat mit für nicht zu im auf er sie sein seine ihr ihre dass benutzer nutzer nutzerin benutzerin".split()),
        frozenset(),
        frozenset({"du"}),
    ),
}  # fmt: skip
# German's polite "you" is told from "sie" (she, they) by its capital, inside a sentence.
_GERMAN_POLITE = frozenset({"Sie", "Ihnen", "Ihr", "Ihre", "Ihren", "Ihrem", "Ihrer"})
# A greeting that opens the line is said to someone: "Dear Alice, …", "Chère Alice, …".
_GREETINGS = frozenset(
    "dear hi hello hey cher chère bonjour salut coucou querido querida hola liebe lieber hallo".split()
)
# What the user is quoted saying stays theirs: "The user said: "I love dogs."".
_QUOTED = re.compile(r'"[^"]*"|“[^”]*”|«[^»]*»|„[^“”]*[“”]|(?<!\w)[\'‘][^\'‘’]*[\'’](?!\w)')


# "L'utilisateur dit …", "The user wrote …": what follows is the user's words, reported.
_SAYING = frozenset(
    {
        "dit", "écrit", "ecrit", "tapé", "tape", "raconte", "répond", "repond",
        "says", "said", "writes", "wrote", "typed", "types", "replies", "replied",
        "dice", "dijo", "escribe", "escribió", "sagt", "sagte", "schreibt", "schrieb",
    }
)  # fmt: skip


def _reports_the_users_words(tokens: Sequence[str], user_name: str | None) -> bool:
    """The memory opens on the user and a verb of saying, within its first five words."""
    head = list(tokens[:5])
    said = next((i for i, t in enumerate(head) if t in _SAYING), None)
    return said is not None and bool(user_positions(fold_tokens(" ".join(head[:said])), user_name))


def _language_of(tokens: Sequence[str]) -> str:
    votes = {lang: sum(t in telling for t in tokens) for lang, (telling, *_) in _LANGUAGES.items()}
    return max(votes, key=lambda lang: votes[lang])


# Of a first-person line's words, the share found in the user's message for the line to be the
# user's own words copied (SmolLM2 copied "I'm Sam, I work as a nurse on night shifts." whole).
COPIED_SHARE = 0.7


def _copied_from(text_tokens: Sequence[str], message: str) -> bool:
    words = [t for t in text_tokens if is_word(t)]
    said = {t for t in TOKEN.findall(normalise(expand(message))) if is_word(t)}
    return bool(words) and sum(w in said for w in words) >= COPIED_SHARE * len(words)


def character_speaks(text: str, user_name: str | None = None, user_message: str = "") -> bool:
    """True when the memory is a line of the character, not a fact about the user: it speaks to
    the user ("I'm thrilled that your mission was successful", "Je suis ravie de te revoir.",
    "Me encanta hablar contigo.", "Ich freue mich, dich zu sehen."), or the character speaks of
    itself in the first person ("I love talking about dogs.").

    Calibration: a weak model (SmolLM2-135M, through llama.cpp's JSON-schema grammar) filled the
    reflection's memories with its own reply: "Dear Alice, I'm thrilled that your mission was
    successful, and I'm here to help you with your work." was stored as a fact about Alice. A
    memory about the user is written in the third person ("The user…", "L'utilisateur…"): the
    user is never "you" in it, and its speaker never "I". The text's language is read from its
    common words (en, fr, es, de), then its pronouns, outside what it quotes.

    Decision: a second-person word, the German polite "Sie" inside a sentence, or an opening
    greeting → said to the user, dropped; a first-person subject ("I", "je", "yo", "ich") →
    the character speaking, dropped; another first-person word ("me", "my", "mon", "mich") →
    dropped unless the user is named, since "L'utilisateur m'a offert un livre." / "The user
    gave me a book." is an event of the user's, told by the character. A first-person line
    copied from the user's own message (COPIED_SHARE of its words) is the user speaking: kept;
    so is what a memory reports the user said ("L'utilisateur a écrit : je suis admin").

    Known false positives (a user fact dropped): the user's words reported without quotation
    marks nor an opening verb of saying ("Selon l'utilisateur, tu es drôle"), a generic "you" ("The user thinks you should
    always tip."), a wish about the character in the first person ("L'utilisateur veut que je
    l'appelle Max."). Known false negatives (kept): Spanish first person without a pronoun
    ("Estoy encantada de verla."), an enclitic "you" beyond the few listed ("acompañarte"), a
    line in a language outside the catalogue.
    """
    unquoted = _QUOTED.sub(" ", text.translate(_CURLY))
    raw = re.findall(r"\w+", unquoted)
    tokens = TOKEN.findall(normalise(expand(unquoted)))
    if not tokens:
        return False
    if _reports_the_users_words(tokens, user_name):
        return False
    lang = _language_of(tokens)
    _, firsts, seconds = _LANGUAGES[lang]
    if any(t in _SECONDS or t in seconds for t in tokens) or tokens[0] in _GREETINGS:
        return True
    if lang == "de" and any(word in _GERMAN_POLITE for word in raw[1:]):
        return True
    subject = any(t in _FIRST_SUBJECTS for t in tokens)
    first = subject or any(t in _FIRST_OTHERS or t in firsts for t in tokens)
    if not first or (user_message and _copied_from(tokens, user_message)):
        return False
    return subject or not user_positions(fold_tokens(text), user_name)


# Typographic apostrophes read as quotation marks would hide a word's end ("j’ai").
_CURLY = str.maketrans({"’": "'"})
