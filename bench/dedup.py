"""Dedup bench: where the 0.80 threshold sits on real-looking memories, and what scale costs.

Run from the repository root: ``python bench/dedup.py``. Prints, on the corpus of
``bench/dedup_corpus.py``: the pair count, the lowest rewording score and the highest
distinct-fact score, every pair between 0.70 and 0.85, the prototype's traps before/after the caps,
what the substitution cap costs in rewordings, a MIN_RATIO_CHARS sweep, then the time to check one
candidate against N = 100, 1 000, 10 000 memories with ``DedupIndex`` next to the exhaustive
comparison measured in the same run, and whether both decisions are identical.
"""

from __future__ import annotations

import itertools
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bot.memory.write.dedup as dedup
from bench.dedup_corpus import FACTS, TRAPS
from bench.dedup_corpus_en import FACTS_EN, TRAPS_EN
from bot.memory.write.dedup import SIMILARITY_THRESHOLD, best_match_exhaustive, similarity_details
from bot.memory.write.dedup_index import DedupIndex

# --- generated memories for the scale part ---------------------------------------------------
# Realistic facts of many imagined users, one template per kind of memory the reflection writes,
# slots drawn from small pools: many memories share a sentence frame, which is the hard case for
# the index (the sequence ratio of two same-frame memories is high, only the caps reject them).
PRENOMS = (
    "Marc",
    "Léa",
    "Julien",
    "Inès",
    "Noé",
    "Sofia",
    "Hugo",
    "Chloé",
    "Yanis",
    "Manon",
    "Karim",
    "Élodie",
    "Bastien",
    "Amina",
    "Théo",
    "Zoé",
    "Lucas",
    "Anaïs",
    "Mehdi",
    "Clara",
)
VILLES = (
    "Nantes",
    "Lyon",
    "Rennes",
    "Bordeaux",
    "Lille",
    "Marseille",
    "Toulouse",
    "Brest",
    "Grenoble",
    "Strasbourg",
    "Montpellier",
    "Dijon",
    "Angers",
    "Nancy",
    "Tours",
    "Caen",
)
METIERS = (
    "infirmière",
    "développeur",
    "boulanger",
    "professeure de maths",
    "comptable",
    "kinésithérapeute",
    "architecte",
    "chauffeur de bus",
    "libraire",
    "ingénieure",
    "pharmacien",
    "graphiste",
    "électricien",
    "avocate",
    "vétérinaire",
    "cuisinier",
)
ANIMAUX = (
    "un chat",
    "une chatte",
    "un chien",
    "un lapin",
    "un perroquet",
    "un furet",
    "deux chats",
    "une tortue",
    "un hamster",
    "un cheval",
)
ALIMENTS = (
    "aux arachides",
    "aux crustacés",
    "au gluten",
    "au lactose",
    "aux noisettes",
    "au kiwi",
    "aux œufs",
    "au soja",
    "au sésame",
    "aux fraises",
    "au céleri",
)
DETESTE = (
    "la coriandre",
    "les endives",
    "le poisson cru",
    "les olives",
    "le fromage bleu",
    "les champignons",
    "le café froid",
    "les betteraves",
    "la réglisse",
    "les huîtres",
)
ACTIVITES = (
    "courir",
    "nager",
    "faire du yoga",
    "jouer aux échecs",
    "faire de l'escalade",
    "aller au cinéma",
    "jardiner",
    "faire du vélo",
    "peindre",
    "cuisiner",
    "lire",
)
JOURS = ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche")
MOIS = (
    "janvier",
    "février",
    "mars",
    "avril",
    "mai",
    "juin",
    "juillet",
    "août",
    "septembre",
    "octobre",
    "novembre",
    "décembre",
)
PROS = (
    "le dentiste",
    "le médecin",
    "l'ophtalmo",
    "le kiné",
    "la banque",
    "le garagiste",
    "le coiffeur",
    "l'ostéopathe",
    "la dermatologue",
    "le notaire",
)
HEURES = ("9h", "10h30", "11h", "14h", "14h30", "15h", "16h45", "17h30", "18h", "8h15")
PROCHES = (
    "sa mère",
    "son père",
    "sa sœur",
    "son frère",
    "sa fille",
    "son fils",
    "sa compagne",
    "son mari",
    "sa grand-mère",
    "son meilleur ami",
    "sa colocataire",
    "son oncle",
)
PROMESSES = (
    "raconter la fin de son voyage",
    "envoyer la recette du gratin",
    "montrer les photos du mariage",
    "donner des nouvelles de son entretien",
    "dire comment s'est passé son examen",
    "faire écouter sa nouvelle chanson",
    "expliquer comment marche son nouveau travail",
    "prêter son livre préféré",
)
LANGUES = (
    "le japonais",
    "l'espagnol",
    "l'allemand",
    "le coréen",
    "l'italien",
    "le russe",
    "le portugais",
    "l'arabe",
    "la langue des signes",
    "le néerlandais",
)
INSTRUMENTS = (
    "de la guitare",
    "du piano",
    "de la batterie",
    "du violon",
    "de la basse",
    "du saxophone",
    "de l'accordéon",
    "de la flûte",
)
GROUPES = (
    "un groupe de rock",
    "une fanfare",
    "un orchestre amateur",
    "un groupe de jazz",
    "une chorale",
    "un groupe de reggae",
)
SERIES = (
    "Le Bureau des légendes",
    "Kaamelott",
    "The Office",
    "Dark",
    "Lupin",
    "Severance",
    "Les Simpson",
    "Twin Peaks",
    "Breaking Bad",
    "Fleabag",
)
AUTEURS = (
    "Fred Vargas",
    "Annie Ernaux",
    "Victor Hugo",
    "Haruki Murakami",
    "Agatha Christie",
    "Alain Damasio",
    "Ursula Le Guin",
    "Émile Zola",
    "Amélie Nothomb",
    "Stephen King",
)
PEURS = (
    "de l'avion",
    "des araignées",
    "du noir",
    "des chiens",
    "de l'eau profonde",
    "de parler en public",
    "des hôpitaux",
    "de la foule",
    "des serpents",
)
SPORTS = (
    "du tennis",
    "de la natation",
    "du badminton",
    "de la course à pied",
    "du judo",
    "de la boxe",
    "du handball",
    "du ski",
    "de la randonnée",
)
FREQUENCES = (
    "deux fois par semaine",
    "tous les dimanches",
    "chaque matin",
    "le week-end",
    "tous les jours",
    "une fois par mois",
    "le mercredi soir",
)
OBJETS = (
    "un vélo électrique",
    "une guitare",
    "un appareil photo",
    "une voiture d'occasion",
    "un canapé",
    "une machine à café",
    "une tente",
    "un ordinateur portable",
)

TEMPLATES = (
    ("L'utilisateur a {a} qui s'appelle {p}.", {"a": ANIMAUX, "p": PRENOMS}),
    ("L'utilisateur travaille comme {m} à {v}.", {"m": METIERS, "v": VILLES}),
    ("L'utilisateur habite à {v} depuis {n} ans.", {"v": VILLES, "n": tuple(map(str, range(1, 25)))}),
    ("L'utilisateur est allergique {x}.", {"x": ALIMENTS}),
    ("L'utilisateur n'aime pas {x}.", {"x": DETESTE}),
    ("L'utilisateur aime {x} le {j}.", {"x": ACTIVITES, "j": JOURS}),
    ("L'utilisateur a rendez-vous chez {x} {j} à {h}.", {"x": PROS, "j": JOURS, "h": HEURES}),
    ("Le meilleur ami de l'utilisateur s'appelle {p} et vit à {v}.", {"p": PRENOMS, "v": VILLES}),
    ("L'utilisateur a promis de {x} à {p}.", {"x": PROMESSES, "p": PRENOMS}),
    (
        "L'utilisateur a visité {v} en {mo} {y}.",
        {"v": VILLES, "mo": MOIS, "y": ("2019", "2021", "2022", "2023", "2024")},
    ),
    ("L'utilisateur apprend {x} depuis {n} mois.", {"x": LANGUES, "n": tuple(map(str, range(2, 19)))}),
    ("L'utilisateur joue {i} dans {g}.", {"i": INSTRUMENTS, "g": GROUPES}),
    ("L'utilisateur regarde {s} avec {q}.", {"s": SERIES, "q": PROCHES}),
    ("L'utilisateur lit tous les romans de {a}.", {"a": AUTEURS}),
    ("L'utilisateur a peur {x}.", {"x": PEURS}),
    ("L'utilisateur fait {s} {f}.", {"s": SPORTS, "f": FREQUENCES}),
    ("L'utilisateur a un ami, {p}, qui est {m} à {v}.", {"p": PRENOMS, "m": METIERS, "v": VILLES}),
    ("L'utilisateur a acheté {o} pour {q}.", {"o": OBJETS, "q": PROCHES}),
    ("L'utilisateur appelle {q} tous les {j}s.", {"q": PROCHES, "j": JOURS}),
    ("L'utilisateur a rencontré {p} pendant ses études à {v}.", {"p": PRENOMS, "v": VILLES}),
    ("L'utilisateur a un collègue, {p}, qui habite à {v} et fait {s}.", {"p": PRENOMS, "v": VILLES, "s": SPORTS}),
    (
        "{q} de l'utilisateur vit à {v} et travaille comme {m}.",
        {"q": ("La sœur", "Le frère", "La mère", "Le père", "La cousine", "L'oncle"), "v": VILLES, "m": METIERS},
    ),
    ("L'utilisateur part en week-end à {v} avec {q} en {mo}.", {"v": VILLES, "q": PROCHES, "mo": MOIS}),
)


def generated_memories(count: int, rng: random.Random) -> list[str]:
    out: dict[str, None] = {}
    for _ in range(count * 20):
        template, pools = rng.choice(TEMPLATES)
        out[template.format(**{k: rng.choice(v) for k, v in pools.items()})] = None
        if len(out) == count:
            return list(out)
    raise ValueError(f"the templates cannot make {count} distinct memories")


def reworded(text: str, rng: random.Random) -> str:
    """A variant the reflection could write for the same fact on another day."""
    body = text.rstrip(".")
    choice = rng.randrange(4)
    if choice == 0:
        return body + ", d'après ce qu'il a dit."
    if choice == 1:
        return body.replace("é", "e", 1) + "."  # an accent dropped
    if choice == 2 and " à " in body:
        head, _, tail = body.rpartition(" à ")
        return f"À {tail}, {head[0].lower()}{head[1:]}."
    return body.replace("L'utilisateur", "L'utilisateur, lui,", 1) + "."


# --- report ----------------------------------------------------------------------------------


def corpus_pairs(
    facts: dict[str, tuple[str, ...]] = FACTS,
) -> list[tuple[bool, str, str, str, dict[str, float | bool]]]:
    memories = [(topic, text) for topic, texts in facts.items() for text in texts]
    out = []
    for (ta, a), (tb, b) in itertools.combinations(memories, 2):
        label = f"variant[{ta}]" if ta == tb else f"distinct[{ta} / {tb}]"
        out.append((ta == tb, label, a, b, similarity_details(a, b)))
    return out


def report_corpus(
    facts: dict[str, tuple[str, ...]] = FACTS, traps: tuple[tuple[str, str, str], ...] = TRAPS, language: str = "French"
) -> None:
    pairs = corpus_pairs(facts)
    n_memories = sum(len(t) for t in facts.values())
    variants = [p for p in pairs if p[0]]
    distinct = [p for p in pairs if not p[0]]
    print(f"=== {language} corpus ===")
    print(
        f"corpus: {n_memories} memories, {len(facts)} facts, {len(pairs)} pairs "
        f"({len(variants)} rewordings, {len(distinct)} distinct-fact pairs)"
    )
    low = min(variants, key=lambda p: p[4]["score"])
    high = max(distinct, key=lambda p: p[4]["score"])
    unprotected = [p for p in distinct if not (p[4]["carriers_differ"] or p[4]["substitution"])]
    print(f"lowest rewording score:      {low[4]['score']:.3f}  {low[2]!r} / {low[3]!r}")
    print(f"highest distinct-fact score: {high[4]['score']:.3f}  {high[2]!r} / {high[3]!r}")
    if unprotected:
        uncapped = max(unprotected, key=lambda p: p[4]["score"])
        print(f"  highest with no cap applying: {uncapped[4]['score']:.3f}  {uncapped[2]!r} / {uncapped[3]!r}")
    else:
        print("  every distinct-fact pair has a cap applying")
    merged_v = sum(p[4]["score"] >= SIMILARITY_THRESHOLD for p in variants)
    merged_d = sum(p[4]["score"] >= SIMILARITY_THRESHOLD for p in distinct)
    print(
        f"merged at >= {SIMILARITY_THRESHOLD}: {merged_v}/{len(variants)} rewordings, "
        f"{merged_d}/{len(distinct)} distinct-fact pairs"
    )

    print("\nevery pair between 0.70 and 0.85 (score after caps; [raw, caps] when a cap lowered it):")
    band = sorted((p for p in pairs if 0.70 <= p[4]["score"] <= 0.85), key=lambda p: p[4]["score"])
    for _, label, a, b, d in band:
        caps = "+".join(k for k in ("carriers_differ", "substitution") if d[k])
        lowered = f" [raw {d['raw']:.3f}, {caps}]" if d["raw"] > d["score"] else ""
        print(f"  {d['score']:.3f}{lowered} {label}: {a!r} / {b!r}")

    print(
        "\nprototype traps (raw = before any cap, carrier = carrier cap only, final = both caps;"
        " the prototype's figures were measured on its own sentences):"
    )
    for name, a, b in traps:
        d = similarity_details(a, b)
        print(f"  raw {d['raw']:.3f}  carrier {d['carrier_score']:.3f}  final {d['score']:.3f}  {name}")

    print(
        "\nsubstitution cap: rewordings the prototype's measure (carrier cap only, same MIN_RATIO_CHARS)"
        " merges and the final measure does not:"
    )
    lost = [p for p in variants if p[4]["carrier_score"] >= SIMILARITY_THRESHOLD > p[4]["score"]]
    saved = [p for p in distinct if p[4]["carrier_score"] >= SIMILARITY_THRESHOLD > p[4]["score"]]
    prototype_merged = sum(p[4]["carrier_score"] >= SIMILARITY_THRESHOLD for p in variants)
    for _, label, a, b, d in lost:
        print(f"  carrier {d['carrier_score']:.3f} -> {d['score']:.3f}  {label}: {a!r} / {b!r}")
    print(
        f"  cost: {len(lost)} of the {prototype_merged} rewordings the prototype's measure merged "
        f"({len(lost) / max(1, prototype_merged):.0%}) stay as duplicates"
    )
    print(f"  gain: {len(saved)} distinct-fact pairs the prototype's measure merged (a fact erased) no longer merge:")
    for _, label, _a, _b, d in saved:
        print(f"    carrier {d['carrier_score']:.3f} -> {d['score']:.3f}  {label}")

    print("\nMIN_RATIO_CHARS sweep (final measure; decisions on the corpus):")
    chosen = dedup.MIN_RATIO_CHARS
    try:
        for value in (0, 20, 23, 25, 30, 40, 50):
            dedup.MIN_RATIO_CHARS = value
            rerun = [(p[0], similarity_details(p[2], p[3])) for p in pairs]
            thr = SIMILARITY_THRESHOLD
            v = sum(is_variant and d["score"] >= thr for is_variant, d in rerun)
            d_final = sum(not is_variant and d["score"] >= thr for is_variant, d in rerun)
            d_prototype = sum(not is_variant and d["carrier_score"] >= thr for is_variant, d in rerun)
            mark = "  <- MIN_RATIO_CHARS" if value == chosen else ""
            print(
                f"  {value:>3}: rewordings merged {v:>3}, distinct merged {d_final} "
                f"(prototype's measure: {d_prototype}){mark}"
            )
    finally:
        dedup.MIN_RATIO_CHARS = chosen


def cached_scan(candidate: str, stored: list[tuple[int, object]]) -> tuple[int, float] | None:
    """The exhaustive comparison with every stored text's features computed in advance."""
    features = dedup.text_features(candidate)
    best: tuple[int, float] | None = None
    for item_id, item in stored:
        score = dedup._score(features, item)  # type: ignore[arg-type]
        if score >= SIMILARITY_THRESHOLD and (
            best is None or score > best[1] or (score == best[1] and item_id < best[0])
        ):
            best = (item_id, score)
    return best


def report_scale() -> None:
    rng = random.Random(20240601)
    corpus = [text for texts in FACTS.values() for text in texts]
    pool = generated_memories(12_000, rng)
    print("\nscale: one candidate checked against N memories, mean / p95 per candidate")
    print(
        "  index = DedupIndex.best_match; scan = every memory scored, features cached;"
        " exhaustive = best_match_exhaustive"
    )
    print(
        f"  {'N':>6} {'index':>16} {'scan':>18} {'exhaustive':>18}  {'scan/index':>10}"
        f" {'exh/index':>9}  identical  merges  build"
    )
    for n, n_baseline in ((100, 80), (1_000, 40), (10_000, 12)):
        memories = (corpus + pool)[:n] if n > len(corpus) else rng.sample(corpus, n)
        items = list(enumerate(memories, start=1))
        started = time.perf_counter()
        index = DedupIndex(items)
        build = time.perf_counter() - started
        cached = [(item_id, dedup.text_features(text)) for item_id, text in items]
        # Candidates: rewordings of stored memories (should merge), corpus memories (some have a
        # variant stored), fresh generated facts (new, or a fact already stored said again).
        candidates = (
            [reworded(t, rng) for t in rng.sample(memories, 40)]
            + rng.sample(corpus, 20)
            + generated_memories(12_040, random.Random(n))[-40:]
        )
        timed: dict[str, list[float]] = {"index": [], "scan": [], "exhaustive": []}
        identical = True
        merges = 0
        for i, candidate in enumerate(candidates):
            started = time.perf_counter()
            got = index.best_match(candidate)
            timed["index"].append(time.perf_counter() - started)
            merges += got is not None
            if i % (len(candidates) // n_baseline) == 0 and len(timed["scan"]) < n_baseline:
                started = time.perf_counter()
                scanned = cached_scan(candidate, cached)
                timed["scan"].append(time.perf_counter() - started)
                started = time.perf_counter()
                expected = best_match_exhaustive(candidate, items)
                timed["exhaustive"].append(time.perf_counter() - started)
                identical &= got == expected == scanned
        mean = {k: statistics.mean(v) * 1e3 for k, v in timed.items()}
        cells = "".join(f" {mean[k]:>7.2f} / {_p95(v) * 1e3:>6.2f} ms" for k, v in timed.items())
        print(
            f"  {n:>6}{cells}  {mean['scan'] / mean['index']:>9.1f}x"
            f" {mean['exhaustive'] / mean['index']:>8.1f}x  {identical!s:>9}"
            f" {merges:>4}/{len(candidates)}  {build:.2f} s"
            f"  (baselines on {len(timed['scan'])} candidates)"
        )


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


if __name__ == "__main__":
    started = time.perf_counter()
    report_corpus()
    print()
    report_corpus(FACTS_EN, TRAPS_EN, "English")
    report_scale()
    print(f"\nbench time: {time.perf_counter() - started:.1f} s")
