"""Carrier tokens: the tokens that are often the fact itself (numbers, times, weekdays, months,
relative days, parts of the day, "prochain"/"dernier", seasons, number words, negations), French
and English, and the dedup text they are read from. Two memories whose carrier tokens differ are
never merged (bot/memory/write/dedup.py caps their score under the threshold). Pure, no I/O.
"""

from __future__ import annotations

import re

from bot.memory.text import expand_contractions, normalise, words

# "14h30", "14 h 30", "14:30" are the same time, and so are "14h"/"14h00" and "2pm"/"14h": the
# dedup text writes each time one canonical way, so a time written two ways is one memory (the
# prototype accepted that duplicate; canonicalising costs nothing). A duration "3 h" is rewritten
# the same way on both sides. "10 000" is one number.
_TIME_12H = re.compile(r"(?<![\w.,:])(\d{1,2})(?: ?: ?(\d{2}))? ?(am|pm)(?!\w)")
_TIME = re.compile(r"(?<![\w.,:])(\d{1,2}) ?(?:h|:) ?(\d{2})?(?![\w:])")
_THOUSANDS = re.compile(r"(?<=\d) (?=\d{3}(?!\d))")
# A canonical time ("14h30", "9h") or a number ("200", "3,5"; "03" is "3").
_TIME_OR_NUMBER = re.compile(r"\d+h(?:\d{2})?(?![\w])|\d+(?:[.,]\d+)?")
_FRENCH_NEGATION = re.compile(r"(?:^|[\s(«\"\[])(?:ne\s|n')")
_ENGLISH_NEGATION = re.compile(r"n't\b")

_WEEKDAYS = {
    "lundi": "lundi",
    "mardi": "mardi",
    "mercredi": "mercredi",
    "jeudi": "jeudi",
    "vendredi": "vendredi",
    "samedi": "samedi",
    "dimanche": "dimanche",
    "monday": "monday",
    "tuesday": "tuesday",
    "wednesday": "wednesday",
    "thursday": "thursday",
    "friday": "friday",
    "saturday": "saturday",
    "sunday": "sunday",
}
_MONTHS = {
    m: m
    for m in (
        "janvier février mars avril mai juin juillet août septembre octobre novembre décembre "
        "january february april june july august september october november december"
    ).split()
}
# English "may" and "march" are also verbs: a month only next to a number or after these words.
AMBIGUOUS_MONTHS = {"may", "march"}
_MONTH_CONTEXT = {"in", "since", "until", "by", "early", "late", "mid", "next", "last", "this", "of"}
SINGLE_CARRIERS: dict[str, str] = {
    **_WEEKDAYS,
    **{day + "s": day for day in _WEEKDAYS},
    **_MONTHS,
    # Whole tokens only: "après-demain" is one word and never yields "demain".
    "demain": "demain",
    "après-demain": "après-demain",
    "hier": "hier",
    "avant-hier": "avant-hier",
    "soir": "soir",
    "soirs": "soir",
    "soirée": "soir",
    "matin": "matin",
    "matins": "matin",
    "matinée": "matin",
    "midi": "midi",
    "après-midi": "après-midi",
    "nuit": "nuit",
    "nuits": "nuit",
    "minuit": "minuit",
    "week-end": "week-end",
    "week-ends": "week-end",
    "weekend": "week-end",
    "weekends": "week-end",
    "prochain": "prochain",
    "prochaine": "prochain",
    "prochains": "prochain",
    "prochaines": "prochain",
    "dernier": "dernier",
    "dernière": "dernier",
    "derniers": "dernier",
    "dernières": "dernier",
    "printemps": "printemps",
    "automne": "automne",
    "hiver": "hiver",
    "tomorrow": "tomorrow",
    "tonight": "tonight",
    "today": "today",
    "yesterday": "yesterday",
    "morning": "morning",
    "mornings": "morning",
    "afternoon": "afternoon",
    "afternoons": "afternoon",
    "evening": "evening",
    "evenings": "evening",
    "night": "night",
    "nights": "night",
    "noon": "noon",
    "midnight": "midnight",
    "summer": "summer",
    "winter": "winter",
    "autumn": "autumn",
    # Number words. "un"/"une"/"one" are articles far more often than numbers; "neuf" is "new"
    # as often as "nine". A number swap written in words is still caught as a substitution.
    **{
        n: n
        for n in (
            "deux trois quatre cinq six sept huit dix onze douze treize quatorze quinze seize "
            "vingt trente quarante cinquante soixante cent cents mille deuxième troisième "
            "quatrième cinquième two three four five six seven eight nine ten eleven twelve "
            "twenty thirty forty fifty hundred thousand"
        ).split()
    },
    # Negations: "aime X" and "n'aime pas X" are two facts, not two wordings of one. Not the
    # vocabulary of bot/memory/text.py (NE_PARTNERS, BARE_NEGATIONS), which tells whether a
    # sentence is negative on folded tokens: here the words keep their accents ("guère") and
    # "sans"/"without" count, as read on the dedup corpus; merging the two would move its figures.
    "pas": "pas",
    "jamais": "jamais",
    "rien": "rien",
    "aucun": "aucun",
    "aucune": "aucun",
    "guère": "guère",
    "sans": "sans",
    "not": "not",
    "never": "never",
    "no": "no",
    "nothing": "nothing",
    "none": "none",
    "nobody": "nobody",
    "without": "without",
    "cannot": "not",
}
_TIME_NOUNS_EN = {"week", "weekend", "month", "year", *_WEEKDAYS, *_MONTHS, *AMBIGUOUS_MONTHS}
# Phrases mapped to "" are read whole and yield nothing: "la prochaine fois" is not a date.
_PHRASES: dict[tuple[str, ...], str] = {
    ("prochaine", "fois"): "",
    ("dernière", "fois"): "",
    ("après", "demain"): "après-demain",
    ("avant", "hier"): "avant-hier",
    ("aujourd", "hui"): "aujourd'hui",
    ("ce", "soir"): "ce soir",
    ("ce", "matin"): "ce matin",
    ("ce", "midi"): "ce midi",
    ("cet", "après-midi"): "cet après-midi",
    ("cet", "après", "midi"): "cet après-midi",
    ("cette", "nuit"): "cette nuit",
    ("ce", "week-end"): "ce week-end",
    ("ce", "weekend"): "ce week-end",
    ("cette", "semaine"): "cette semaine",
    ("ce", "mois-ci"): "ce mois",
    ("ce", "mois"): "ce mois",
    ("cette", "année"): "cette année",
    ("cet", "été"): "été",
    ("en", "été"): "été",
    ("semaine", "prochaine"): "semaine prochaine",
    ("semaine", "dernière"): "semaine dernière",
    ("mois", "prochain"): "mois prochain",
    ("mois", "dernier"): "mois dernier",
    ("année", "prochaine"): "année prochaine",
    ("année", "dernière"): "année dernière",
    ("an", "prochain"): "année prochaine",
    ("an", "dernier"): "année dernière",
    ("été", "dernier"): "été dernier",
    ("été", "prochain"): "été prochain",
    ("day", "after", "tomorrow"): "day after tomorrow",
    ("day", "before", "yesterday"): "day before yesterday",
    **{("this", w): "this " + w for w in ("morning", "afternoon", "evening", "week", "weekend", "month", "year")},
    **{(rel, w): f"{rel} {w}" for rel in ("next", "last") for w in _TIME_NOUNS_EN},
}
_LONGEST_PHRASE = max(len(p) for p in _PHRASES)


def _canonical_number(raw: str) -> str:
    if "h" in raw:
        return raw
    whole, _, fraction = raw.replace(",", ".").partition(".")
    whole = whole.lstrip("0") or "0"
    return f"{whole}.{fraction}" if fraction else whole


def _time_token(hours: int, minutes: str | None) -> str:
    return f"{hours}h{minutes}" if minutes and minutes != "00" else f"{hours}h"


def _twelve_hour(match: re.Match[str]) -> str:
    hours = int(match.group(1)) % 12 + (12 if match.group(3) == "pm" else 0)
    return _time_token(hours, match.group(2))


def dedup_text(text: str) -> str:
    """The text every measure is computed on: ``normalise`` plus one spelling per time and number,
    and English contractions spelt out."""
    norm = _TIME_12H.sub(_twelve_hour, expand_contractions(normalise(text)))
    norm = _TIME.sub(lambda m: _time_token(int(m.group(1)), m.group(2)), norm)
    return _THOUSANDS.sub("", norm)


def carrier_tokens(text: str) -> tuple[str, ...]:
    """The tokens that are often the fact itself, as a sorted multiset.

    Numbers, times, weekdays, months, relative days and parts of the day, "prochain"/"dernier",
    seasons, number words and negations, French and English. Two texts whose carrier tokens
    differ are never merged.
    """
    return carriers_of(dedup_text(text))


def carriers_of(canonical: str) -> tuple[str, ...]:
    found = [_canonical_number(n) for n in _TIME_OR_NUMBER.findall(canonical)]
    tokens = words(canonical)
    negated_fr = bool(_FRENCH_NEGATION.search(canonical))
    if negated_fr:
        found.append("ne")
    if _ENGLISH_NEGATION.search(canonical):
        found.append("not")
    i = 0
    while i < len(tokens):
        for size in range(_LONGEST_PHRASE, 1, -1):
            phrase = _PHRASES.get(tuple(tokens[i : i + size]))
            if phrase is not None:
                if phrase:
                    found.append(phrase)
                i += size
                break
        else:
            token = tokens[i]
            carrier = SINGLE_CARRIERS.get(token)
            if carrier is not None:
                found.append(carrier)
            elif token == "plus" and negated_fr:
                found.append("plus")  # "ne fume plus": no longer
            elif token in AMBIGUOUS_MONTHS and _month_context(tokens, i):
                found.append(token)
            i += 1
    return tuple(sorted(found))


def _month_context(tokens: list[str], i: int) -> bool:
    before = tokens[i - 1] if i > 0 else ""
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    return before in _MONTH_CONTEXT or before.isdigit() or after.isdigit()
