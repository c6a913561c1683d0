"""Data of the load bench (bench/load.py): what each simulated user says, and the scripted
reflection a zero-latency LLM answers for it.

Every user has seven facts of their own (job, pet, band, allergy, child, collection, trip), drawn
from small vocabularies with a seeded generator, and a 20-turn script in which each fact is told
two or three times, in different batches of the reflection, and some turns are small talk. The
scripted reflection turns every message it finds in the exchange into that message's memory:
the first telling gives the canonical sentence, a retelling gives the same sentence without its
final period (the same text once `bot.memory.text.normalise`d). So the write path must absorb
every retelling: a live memory appearing twice per user can only come from two reflections
racing, which is what the bench counts.

The seeded memories (300 or 3 000 per user) are the distractors of bench/recall_corpus.py.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from recall_corpus import Distractor, distractor_pool

_FIRST_NAMES = (
    "Alice Bastien Chloé David Emma Farid Gaëlle Hugo Inès Jules Karine Lucas Maëlle Nathan "
    "Olivia Paul Quentin Rose Simon Tania Ulysse Vanessa William Yasmine Zoé"
).split()
_JOBS = (
    "boulanger",
    "développeur",
    "pharmacien",
    "comptable",
    "menuisier",
    "professeur de maths",
    "ingénieur du son",
    "chauffeur de bus",
    "architecte",
    "bibliothécaire",
)
_CITIES = ("Lyon", "Lille", "Rennes", "Bordeaux", "Toulouse", "Brest", "Angers", "Dijon", "Caen", "Metz")
_PETS = (("chien", "Pixel"), ("chat", "Moustache"), ("lapin", "Caramel"), ("perroquet", "Kiwi"), ("furet", "Sushi"))
_INSTRUMENTS = ("de la batterie", "de la basse", "du saxophone", "du violon", "du clavier")
_WEEKDAYS = ("lundi", "mardi", "mercredi", "jeudi", "vendredi")
_ALLERGENS = ("aux crevettes", "au kiwi", "au lait de vache", "au sésame", "aux œufs")
_CHILDREN = ("Noé", "Léon", "Malo", "Timéo", "Sacha", "Gabin")
_COLLECTIONS = (
    "timbres",
    "vinyles de jazz",
    "capsules de bouteilles",
    "cartes postales anciennes",
    "montres mécaniques",
)
_TRIPS = ("Islande", "Écosse", "Norvège", "Andalousie", "Croatie")
_MONTHS = ("mars", "mai", "juillet", "septembre", "octobre")

SMALL_TALK = (
    "Tu as passé une bonne journée ?",
    "Haha, elle est bonne celle-là.",
    "Qu'est-ce que tu me conseilles de lire en ce moment ?",
    "Bon, je file, à plus tard !",
)
# Turn plan: a fact index (0-6) or None for small talk. Every fact is told 2 or 3 times, at
# least 4 turns apart, so its tellings land in different reflection batches (4 exchanges max).
PLAN: tuple[int | None, ...] = (0, 1, None, 2, 0, 3, 4, None, 1, 5, 2, 6, None, 0, 3, 4, None, 5, 6, 1)
FACTS_PER_USER = 7

_MESSAGE = re.compile(r'<message author="[^"]*">\n(.*?)\n</message>', re.DOTALL)


@dataclass(frozen=True, slots=True)
class Fact:
    message: str
    retold: str
    memory: str
    type: str


@dataclass(frozen=True, slots=True)
class SimUser:
    user_id: str
    name: str
    messages: tuple[str, ...]


def _facts(rng: random.Random) -> list[Fact]:
    job, city, year = rng.choice(_JOBS), rng.choice(_CITIES), rng.randrange(2008, 2022)
    pet, pet_name = rng.choice(_PETS)
    instrument, weekday = rng.choice(_INSTRUMENTS), rng.choice(_WEEKDAYS)
    allergen, child = rng.choice(_ALLERGENS), rng.choice(_CHILDREN)
    collection, trip, month = rng.choice(_COLLECTIONS), rng.choice(_TRIPS), rng.choice(_MONTHS)
    told = (
        (f"Au fait, je travaille comme {job} à {city} depuis {year}.",
         f"L'utilisateur travaille comme {job} à {city} depuis {year}.", "fact"),
        (f"J'ai un {pet} qui s'appelle {pet_name}, il est adorable.",
         f"L'utilisateur a un {pet} qui s'appelle {pet_name}.", "fact"),
        (f"Je joue {instrument} dans un groupe, on répète le {weekday} soir.",
         f"L'utilisateur joue {instrument} dans un groupe qui répète le {weekday} soir.", "fact"),
        (f"Je suis allergique {allergen}, fais attention si tu me proposes une recette.",
         f"L'utilisateur est allergique {allergen}.", "fact"),
        (f"Mon fils {child} entre en CE1 à la rentrée, il a hâte.",
         f"L'utilisateur a un fils, {child}, qui entre en CE1 à la rentrée.", "fact"),
        (f"Je collectionne les {collection} depuis que je suis petit.",
         f"L'utilisateur collectionne les {collection} depuis l'enfance.", "preference"),
        (f"Je pars en {trip} en {month} avec ma compagne, j'ai trop hâte.",
         f"L'utilisateur part en {trip} en {month} avec sa compagne.", "promise"),
    )  # fmt: skip
    return [
        Fact(message=m, retold=f"Comme je te disais : {m[0].lower()}{m[1:]}", memory=memory, type=t)
        for m, memory, t in told
    ]


def users_and_reflections(count: int, turns: int) -> tuple[list[SimUser], dict[str, tuple[str, str]]]:
    """`count` users with `turns` messages each, and message -> (memory text, type) for the
    scripted reflection. The same for the same arguments."""
    rng = random.Random(6)
    users: list[SimUser] = []
    memory_of: dict[str, tuple[str, str]] = {}
    for index in range(count):
        name = _FIRST_NAMES[index % len(_FIRST_NAMES)]
        user_id = f"load-{index:02d}"
        facts = _facts(rng)
        told: set[int] = set()
        messages: list[str] = []
        for turn in range(turns):
            fact_index = PLAN[turn % len(PLAN)]
            if fact_index is None:
                messages.append(SMALL_TALK[turn % len(SMALL_TALK)])
                continue
            fact = facts[fact_index]
            if fact_index in told:
                # A retelling: another message, the same fact, a reflection answering it with
                # the same memory text up to the final period.
                messages.append(fact.retold)
                memory_of[fact.retold] = (fact.memory.rstrip("."), fact.type)
            else:
                messages.append(fact.message)
                memory_of[fact.message] = (fact.memory, fact.type)
                told.add(fact_index)
        users.append(SimUser(user_id=user_id, name=name, messages=tuple(messages)))
    return users, memory_of


def scripted_reflection(prompt: str, memory_of: dict[str, tuple[str, str]]) -> str:
    """The reflection JSON for one reflection prompt: one memory per fact told in the exchange,
    a rewritten summary and a small mood delta, so that each reflection writes memories and
    story rows as a real one does."""
    messages = _MESSAGE.findall(prompt)
    memories = [
        {"text": memory_of[m][0], "type": memory_of[m][1], "scope": "global", "confidence": 0.95}
        for m in messages
        if m in memory_of
    ]
    summary = "Conversation libre. Derniers sujets : " + " / ".join(m[:60] for m in messages)
    return json.dumps({"memories": memories, "summary": summary, "state": {"mood": 1}}, ensure_ascii=False)


# A person's memory ids as a database shared by many people holds them: one row in ID_STRIDE
# (or one in the number of people seeded, when more) is theirs. numpy picks another method for
# ids spread that wide (np.isin sorted every candidate), so a pass over a person's ids is timed
# on such ids.
ID_STRIDE = 20


def seed_texts(size: int) -> list[Distractor]:
    """The memories every user is seeded with: the recall bench's distractors (distinct texts)."""
    return distractor_pool(size, seed=0)
