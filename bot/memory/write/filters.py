"""Write-path code filters: what the reflection proposes and the code refuses before dedup.

Measured on the prototype (docs/design.md, "Write path"): telling the model to leave out what
is not about the user *doubled* the rate of such memories (10 % → 20 %). What must be excluded
is therefore excluded here, in code, by small lexical detectors, French first, English too,
each calibrated on the cases the prototype reported and each with its false positives written down as
tests (tests/memory/write/test_filters.py, `test_known_false_positive_*`).

`check_candidate` runs them in a fixed order and returns the first rejection:
1. low_confidence      a number, the cheapest test;
2. not_about_user      the memory is the character's own words (first person, or said to the
                       user), or about the character or the setting;
   about_someone_else  it names another person of a shared channel, not the user;
3. flipped_negation    an existing memory copied with its negation flipped;
4. character_attitude  the character's feeling stored as a durable fact about the user.

Every detector is a pure function of its text; none does I/O or logs (the write path decides
and records). When a detector is unsure it lets the memory through: a wrong memory is visible
and can be forgotten, a memory dropped here is gone without a trace.

Each detector keeps its calibration and its known false positives beside its code; the flip
check is bot/memory/write/negation.py, the character's own words and how a memory names the two
parties bot/memory/write/parties.py. The shared vocabulary (folded tokens, negations, change
markers) is in bot/memory/text.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bot.memory.text import fold_tokens
from bot.memory.write.negation import flipped_negation
from bot.memory.write.parties import (
    IMPERSONAL_OPENINGS,
    character_positions,
    character_speaks,
    name_positions,
    user_positions,
)

# --- low_confidence ---------------------------------------------------------------------------

CONFIDENCE_THRESHOLD = 0.85


def low_confidence(confidence: float) -> bool:
    """True when the candidate's confidence is below CONFIDENCE_THRESHOLD (or not a number).

    Calibration (docs/design.md, "Write path": confidence filter): 24 invented exchanges (6
    clear facts, 6 hesitations, 6 hints, 6 small talk), two draws, every candidate captured
    before this filter. The 0.60–0.85 band was empty: clear facts came out 12/12, small talk
    0/12, hesitations 4/12, and the one hesitation emitted carried its doubt in the sentence
    ("je crois que…") with a confidence of 0.90. The model encodes doubt in words, never in the
    number, so this filter is measured as decorative; it is kept as a floor against a model that
    does use the scale.

    No lexical hedge filter ("je crois", "peut-être", "maybe") is added on purpose: a hedged
    memory still says what the user said, with its reserve, and is worth keeping as such.

    A NaN cannot be ranked against other memories, so it counts as low.
    """
    return not (confidence >= CONFIDENCE_THRESHOLD)


# --- not_about_user ---------------------------------------------------------------------------

# A sentence opening on a determiner or an impersonal subject describes a thing or a place.
_SETTING_OPENERS = frozenset(
    {
        "le", "la", "les", "l'", "un", "une", "des", "du", "ce", "cet", "cette", "ces",
        "the", "an", "this", "these", "those", "it", "there",
    }
)  # fmt: skip
# ...unless a person is in it: "Le café est sa boisson préférée." keeps its owner.
_PERSON_WORDS = frozenset(
    {
        "il", "elle", "ils", "elles", "iel", "lui", "son", "sa", "ses", "leur", "leurs",
        "je", "j'", "moi", "mon", "ma", "mes", "m'",
        "he", "she", "they", "him", "his", "her", "hers", "them", "their", "theirs",
        "i", "my", "me", "mine",
    }
)  # fmt: skip


def not_about_user(text: str, character_name: str, user_name: str | None = None, user_message: str = "") -> bool:
    """True when the memory is the character's own words (`character_speaks`), or about the
    character or the setting rather than the user.

    Calibration, on the prototype: 10 % of extracted memories were about the character or the setting
    ("Écho aime le thé au jasmin.", "Le personnage vit dans une taverne.", "La taverne est
    éclairée à la bougie."), and asking the model to abstain doubled the rate.

    Decision, in order:
    1. the user is named ("L'utilisateur…", "The user…", the display name `user_name`, an
       opening "Il/Elle/He/She/They…", "lui/him") → about the user, kept, even when the
       character is named too ("L'utilisateur offre des fleurs à Écho.");
    2. the character is named (its name, accents and case ignored, or "le personnage",
       "the character", "the bot") → dropped;
    3. the sentence opens on a determiner or an impersonal subject ("La taverne…", "Il pleut…",
       "There is…") and no person pronoun follows → the setting, dropped;
    4. anything else (a subjectless "Aime le jazz.", an unknown proper name) → kept.

    Known false positives (a user fact dropped): a user fact phrased impersonally with no person
    in it ("Le rendez-vous chez le dentiste est jeudi."); the user's name used without being
    passed as `user_name` next to the character's name ("Écho a rencontré Marie au port.").
    Known false negatives (kept): a possessive that belongs to the place ("La taverne ferme ses
    portes à minuit."), a setting opening on a proper name ("Port-Réal est une ville fortifiée.").
    """
    if character_speaks(text, user_name, user_message):
        return True
    tokens = fold_tokens(text)
    if not tokens or user_positions(tokens, user_name):
        return False
    if character_positions(tokens, character_name):
        return True
    opens_on_setting = tokens[0] in _SETTING_OPENERS or tuple(tokens[:2]) in IMPERSONAL_OPENINGS
    return opens_on_setting and not any(t in _PERSON_WORDS for t in tokens[1:])


# --- about_someone_else -----------------------------------------------------------------------


def about_someone_else(text: str, other_names: Iterable[str], user_name: str | None = None) -> bool:
    """True when the memory names another person of the scene and never the user: in a shared
    channel, "Bob a un chat nommé Pixel." read in Alice's exchange is Bob's fact, not hers.

    Known false positive: a fact of the user's that names someone else and leaves the user
    implicit ("Connaît Bob depuis l'école."). The reflection is asked to name the user.
    """
    tokens = fold_tokens(text)
    if not tokens or user_positions(tokens, user_name):
        return False
    return any(name_positions(tokens, name) for name in other_names if name != user_name)


# --- flipped_negation -------------------------------------------------------------------------


# --- character_attitude -----------------------------------------------------------------------

# The subject feels something about the object: "Écho apprécie / trouve / se méfie de …".
_FEELING_PREFIXES = (
    "apprec", "aim", "ador", "detest", "mepris", "admir", "estim", "respect", "mefi", "trouv",
    "consider", "confian", "affection", "tendresse", "sympath", "attach", "fier", "jalou", "crain",
    "soupconn", "amoureu", "faible",
    "dislik", "despis", "distrust", "mistrust", "apprecia", "jealous", "suspicious", "worr",
)  # fmt: skip
_FEELING_WORDS = frozenset(
    {
        "hais", "hait", "hai", "haie", "hair", "like", "likes", "liked", "love", "loves", "loved",
        "hate", "hates", "hated", "find", "finds", "found", "trust", "trusts", "trusted", "fond",
        "proud", "wary", "care", "cares", "cared", "enjoy", "enjoys", "enjoyed", "crush",
    }
)  # fmt: skip
# The subject does something to the object that is an attitude, not an event: teasing, mocking.
_TEASING_PREFIXES = ("taquin", "charri", "moqu", "flirt", "grond", "snob", "teas", "mock", "scold", "snub")
# The subject causes a feeling in the object: "L'utilisateur agace / amuse / plaît à …".
_CAUSING_PREFIXES = (
    "agac", "amus", "intrigu", "enerv", "irrit", "charm", "fascin", "impressionn", "exasper",
    "attendr", "inquiet", "rassur", "sedui", "ennui", "ennuy", "decoi", "decu", "emeu", "emu",
    "derang", "effray", "vex", "fach",
    "annoy", "impress", "delight", "pleas", "frustrat", "bother", "upset", "scare", "frighten",
    "disappoint",
)  # fmt: skip
_CAUSING_WORDS = frozenset({"plait", "plaisait", "plu", "plaire", "bore", "bores", "bored"})
# "fait rire Écho", "makes Echo laugh": the reaction word only counts after the causative verb.
_CAUSATIVE_VERBS = frozenset({"fait", "faire", "make", "makes", "made"})
_REACTIONS = frozenset({"rire", "sourire", "rougir", "laugh", "smile", "blush"})
# A copula or "se" before the word turns who feels around: "Écho est agacée par…".
_COPULAS = frozenset(
    {
        "est", "etait", "sera", "serait", "ete", "semble", "semblait", "parait", "reste", "devient",
        "is", "was", "were", "are", "be", "been", "being", "seems", "seemed", "gets", "got",
        "looks", "feels", "felt", "became", "becomes",
    }
)  # fmt: skip
_REFLEXIVES = frozenset({"se", "s'"})
_AGENT_MARKERS = frozenset({"par", "by"})
# A coordinator right before a party starts a new clause where that party is the subject.
_CLAUSE_BREAKS = frozenset({",", ";", "et", "mais", "ou", "puis", "comme", "and", "but", "or", "then", "as", "while"})
_DETERMINERS = frozenset({"l'", "le", "la", "les", "the", "ce", "cette", "this", "ton", "votre", "your", "d'"})


def _is_feeling(token: str) -> bool:
    return token in _FEELING_WORDS or token.startswith(_FEELING_PREFIXES) or token.startswith(_TEASING_PREFIXES)


def _is_causing(tokens: Sequence[str], i: int) -> bool:
    token = tokens[i]
    if token in _REACTIONS:
        return i > 0 and tokens[i - 1] in _CAUSATIVE_VERBS
    return token in _CAUSING_WORDS or token.startswith(_CAUSING_PREFIXES)


def _before_phrase(tokens: Sequence[str], position: int) -> str:
    """The word before the noun phrase that ends at `position` ("par" in "par le personnage")."""
    i = position - 1
    while i >= 0 and tokens[i] in _DETERMINERS:
        i -= 1
    return tokens[i] if i >= 0 else ""


def _character_feels(tokens: Sequence[str], character: int, user: int) -> bool:
    """Character first: "Écho trouve l'utilisateur…", "Écho est agacée par l'utilisateur"."""
    if _before_phrase(tokens, user) in _CLAUSE_BREAKS:
        return False
    if user == character + 1:  # clitic: "Écho lui fait confiance"
        span = list(tokens[user + 1 :])
        end = next((i for i, t in enumerate(span) if t in _CLAUSE_BREAKS), len(span))
        span, offset, agent = span[:end], user + 1, ""
    else:
        span, offset, agent = list(tokens[character + 1 : user]), character + 1, _before_phrase(tokens, user)
    for i, token in enumerate(span):
        turned = any(t in _COPULAS or t in _REFLEXIVES for t in span[:i])
        if _is_feeling(token) and not (turned and agent in _AGENT_MARKERS):
            return True  # "Écho est appréciée par l'utilisateur" is the user's feeling
        if _is_causing(tokens, offset + i) and turned:
            return True  # "Écho amuse l'utilisateur" is the user's feeling
    return False


def _feeling_put_on_character(tokens: Sequence[str], user: int, character: int) -> bool:
    """User first: "L'utilisateur est apprécié par Écho", "L'utilisateur agace le personnage"."""
    agent = _before_phrase(tokens, character)
    if agent in _CLAUSE_BREAKS:
        return False
    span = list(tokens[user + 1 : character])
    for i, token in enumerate(span):
        turned = any(t in _COPULAS or t in _REFLEXIVES for t in span[:i])
        if _is_feeling(token) and turned and agent in _AGENT_MARKERS:
            return True
        if _is_causing(tokens, user + 1 + i) and not turned:
            return True  # "L'utilisateur est agacé par Écho" is the user's feeling
    return False


def _makes_character_react(tokens: Sequence[str], character: int) -> bool:
    """English puts the character between the causative verb and the reaction: "makes Echo
    laugh", "made the character smile" (French says "fait rire Écho")."""
    return _before_phrase(tokens, character) in _CAUSATIVE_VERBS and any(
        t in _REACTIONS for t in tokens[character + 1 : character + 3]
    )


def character_attitude(text: str, character_name: str, user_name: str | None = None) -> bool:
    """True when the memory stores the character's attitude toward the user as a user fact.

    Calibration, on the prototype: the reflection sometimes stored an attitude of the character
    as a durable fact about the user ("L'utilisateur est apprécié par Écho.", "Écho trouve
    l'utilisateur attachant.", "L'utilisateur agace le personnage.", "Le personnage se méfie de
    l'utilisateur.", "L'utilisateur a été taquiné par Écho."). The character's feelings belong to
    the character's positions, not to the user's memory.

    Both parties must be named. Caught: the character feeling or teasing with the user as object
    ("Écho trouve/apprécie/se méfie de/taquine l'utilisateur", "Écho est agacée par…"); the user
    as the passive object of a feeling by the character ("est apprécié par Écho"); the user
    causing a feeling in the character ("agace le personnage", "plaît à Écho", "fait rire Écho").
    Not caught, on purpose: the user's own attitude toward the character ("L'utilisateur apprécie
    Écho.", "trouve Écho drôle", "est agacé par Écho", "Écho amuse l'utilisateur") and events
    ("L'utilisateur a raconté une blague à Écho.").

    Known false positives: a finding told with "trouver" ("Écho a trouvé une lettre de
    l'utilisateur.", "L'utilisateur a été trouvé par Écho…"); the user's wish to cause a feeling
    ("L'utilisateur aime amuser Écho."). Known false negatives: attitudes with no feeling word
    ("L'utilisateur est le chouchou d'Écho.").
    """
    tokens = fold_tokens(text)
    characters = character_positions(tokens, character_name)
    users = user_positions(tokens, user_name)
    if not characters or not users:
        return False
    if characters[0] < users[0]:
        return _character_feels(tokens, characters[0], users[0])
    character = next((c for c in characters if c > users[0]), None)
    return character is not None and (
        _feeling_put_on_character(tokens, users[0], character) or _makes_character_react(tokens, character)
    )


# --- the write path's entry point -------------------------------------------------------------


@dataclass(frozen=True)
class Rejection:
    filter: str
    detail: str


def check_candidate(
    text: str,
    confidence: float,
    *,
    character_name: str,
    existing: Iterable[tuple[int, str]] = (),
    user_message: str = "",
    user_name: str | None = None,
    other_names: Iterable[str] = (),
    flip_check: Callable[[str, str], int | None] | None = None,
) -> Rejection | None:
    """The first filter that rejects the candidate, in the module's documented order, or None.

    `flip_check(text, user_message)`, when given, answers the flip check instead of a scan of
    `existing` (an index that gives the same answer: bot.memory.write.index)."""
    if low_confidence(confidence):
        return Rejection("low_confidence", f"confidence {confidence:.2f} < {CONFIDENCE_THRESHOLD}")
    if character_speaks(text, user_name, user_message):
        return Rejection(
            "not_about_user", "the character's own words (first person, or said to the user), not a fact about the user"
        )
    if not_about_user(text, character_name, user_name=user_name, user_message=user_message):
        return Rejection("not_about_user", "about the character or the setting, not the user")
    if about_someone_else(text, other_names, user_name):
        return Rejection("about_someone_else", "names another person of the channel, not the user")
    if flip_check is not None:
        flipped = flip_check(text, user_message)
    else:
        flipped = flipped_negation(text, existing, user_message)
    if flipped is not None:
        return Rejection("flipped_negation", f"flips the negation of memory {flipped}")
    if character_attitude(text, character_name, user_name=user_name):
        return Rejection("character_attitude", f"an attitude of {character_name} stored as a user fact")
    return None
