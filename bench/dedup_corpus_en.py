"""Corpus of English user memories for the dedup bench (and the English dedup tests).

How it was written: the French corpus's method, for an English-speaking user (Sam, a primary
school teacher in Leeds) followed over several weeks, written by hand. Each entry of
``FACTS_EN`` is one fact; its tuple holds the wordings a reflection model gives the same fact on
different days: a verb swapped ("lives"/"resides"), a complement moved to the front ("On
Wednesdays, the user…"), the possessive turned around ("The user's cat is called…" / "The user
has a cat called…"), a detail added later, a number in letters, "is"/"works as". Every pair
inside a tuple is a true variant (merging it is right); every pair across tuples is two distinct
facts (merging it erases one). Distinct facts share sentence frames on purpose: two allergies,
two siblings, two appointments on different days, a taste and its negation, one-attribute
memories ("The user is diabetic." / "… is an insomniac."), a relation word ("lives with / near
their mother"), a name against a common noun ("with her husband" / "with Mary").

Nothing here was produced by the code under test; the labels are the author's judgement.
"""

from __future__ import annotations

FACTS_EN: dict[str, tuple[str, ...]] = {
    "name": (
        "The user's name is Sam.",
        "The user's name is Sam Taylor.",
        "The user is called Sam.",
    ),
    "age": (
        "The user is 34 years old.",
        "The user is 34.",
        "The user is thirty-four years old.",
    ),
    "job": (
        "The user works as a primary school teacher in Leeds.",
        "The user is a primary school teacher in Leeds.",
        "The user teaches at a primary school in Leeds.",
    ),
    "home": (
        "The user lives in Leeds.",
        "The user lives in Leeds, in Headingley.",
        "The user resides in Leeds.",
    ),
    "cat": (
        "The user has a cat called Pixel.",
        "The user has a cat named Pixel.",
        "The user's cat is called Pixel.",
    ),
    "dog": (
        "The user has a dog named Rex.",
        "The user's dog is named Rex.",
    ),
    "peanuts": (
        "The user is allergic to peanuts.",
        "The user has a peanut allergy.",
        "The user is severely allergic to peanuts.",
    ),
    "shellfish": ("The user is allergic to shellfish.",),
    "coriander dislike": (
        "The user does not like coriander.",
        "The user doesn't like coriander.",
        "The user dislikes coriander.",
    ),
    "coriander like": ("The user likes coriander.",),
    "sister": (
        "The user has a sister named Anna who lives in York.",
        "The user's sister Anna lives in York.",
    ),
    "brother": (
        "The user has a brother named Tom who lives in Bristol.",
        "The user's brother Tom lives in Bristol.",
    ),
    "dentist tuesday": (
        "The user has a dentist appointment next Tuesday.",
        "The user has an appointment with the dentist next Tuesday.",
    ),
    "dentist thursday": ("The user has a dentist appointment next Thursday.",),
    "climbing": (
        "The user goes climbing on Wednesdays.",
        "On Wednesdays, the user goes climbing.",
        "The user goes climbing every Wednesday.",
    ),
    "running": (
        "The user runs 10 km on Sundays.",
        "The user runs ten kilometres every Sunday.",
    ),
    "diabetic": (
        "The user is diabetic.",
        "The user has diabetes.",
    ),
    "insomniac": ("The user is an insomniac.",),
    "vegetarian": (
        "The user is vegetarian.",
        "The user is a vegetarian.",
        "The user has been vegetarian for five years.",
    ),
    "mother near": ("The user lives near their mother.",),
    "mother with": ("The user lives with their mother.",),
    "holiday husband": ("The user is going on holiday with her husband.",),
    "holiday Mary": (
        "The user is going on holiday with Mary.",
        "The user is going on holiday with Mary, her best friend.",
    ),
    "guitar": (
        "The user plays the guitar in a band.",
        "The user plays guitar in a band.",
    ),
    "japanese": (
        "The user has been learning Japanese for two years.",
        "The user has been studying Japanese for two years.",
    ),
    "coffee": (
        "The user drinks three coffees a day.",
        "The user drinks three cups of coffee a day.",
    ),
    "marathon": (
        "The user is training for a marathon in April.",
        "The user is preparing for a marathon in April.",
    ),
    "promise": (
        "The user promised to send the report on Friday.",
        "The user promised to send the report by Friday.",
    ),
}

# The French traps, said in English. Each must stay under the threshold.
TRAPS_EN: tuple[tuple[str, str, str], ...] = (
    (
        "10 sessions at 200 / 3 sessions at 50",
        "The contract covers 10 sessions at 200 pounds each.",
        "The contract covers 3 sessions at 50 pounds each.",
    ),
    (
        "next Tuesday / next Thursday",
        "The user has a dentist appointment next Tuesday.",
        "The user has a dentist appointment next Thursday.",
    ),
    (
        "tonight / tomorrow night",
        "The user is seeing Mark tonight.",
        "The user is seeing Mark tomorrow night.",
    ),
    (
        "tomorrow / the day after tomorrow",
        "The user has a doctor's appointment tomorrow.",
        "The user has a doctor's appointment the day after tomorrow.",
    ),
    (
        "word-subset inclusion",
        "The user loves Mark.",
        "The user loves talking about their problems with Mark.",
    ),
    (
        "one content word swapped",
        "The user is allergic to peanuts.",
        "The user is allergic to shellfish.",
    ),
    (
        "negation flipped while copying",
        "The user does not like coriander.",
        "The user likes coriander.",
    ),
)
