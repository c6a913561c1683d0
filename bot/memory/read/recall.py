"""The read path of one turn: candidates → semantic scores → selection of 24 → recorded turn.

A turn never waits for memory: the query embedding has one attempt bounded as a whole, and on
failure the selection runs without semantic scores (lexical FTS matches stand in), the turn is
counted as degraded and the outage is logged once.

Recording the choice (counters, turn stats, the /why row) is a write that can wait behind a
reflection's transaction, so a caller that must not wait selects with `record=False` and calls
`Recall.record(selection)` once the reply is out.

The turn's phases, in order: the vectors of the message and of the message read in its
conversation, in one model call or prepared while the front end held the message
(`start_vectors`, `prepare_turn`, bot/memory/read/columns.py), their cosines fused into one score
per candidate (`_scoring_pass`: bot/memory/read/passes.py, in a thread for a large person),
lexical stand-ins for memories without a vector (bot/memory/read/lexical.py), the selection, and
recording the choice
(bot/memory/read/recording.py, its SQL in bot/memory/stores/turn.py). While the model embeds,
what needs no vectors runs: the turn's writes, the cache entry catching up, the stand-ins' search.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from bot.clients.embeddings import (
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
from bot.memory.choice import DEFAULT_LIMIT, Selected, TurnSelection, slot_of
from bot.memory.model import Memory, OwnerKey, StoryId, utcnow
from bot.memory.read.columns import Column, PreparedTurns
from bot.memory.read.conversation import Fused, Line, QueryVectors, read_text, texts_key, threshold_for
from bot.memory.read.lexical import LexicalSearch, lexical_among, search
from bot.memory.read.off_loop import IN_THREAD_MEMORIES, OffLoop, Version, version
from bot.memory.read.passes import ScoringPass, held, nearest, scoring_pass, with_stand_ins
from bot.memory.read.recording import TurnRecords
from bot.memory.read.selection import Candidates, select_columns
from bot.memory.stores.memories import row_to_memory

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScoredTurn:
    """A turn's candidates (slots of the user's cache entry) and their scores, and the
    selection's columns of them (`candidates`: copies, and the rows as they were when scored)."""

    entry: UserMemories
    slots: np.ndarray
    fused: Fused
    lexical_ids: set[int]
    degraded: bool
    now: datetime
    candidates: Candidates


@dataclass(frozen=True, slots=True)
class TurnVectors:
    """The turn's query vectors, or why there are none: the message's, and the message read in
    its conversation's (None without a conversation: the same text)."""

    message: np.ndarray | None
    read: np.ndarray | None
    degraded: bool
    # The memories scored against them while the front end held the message, if they were.
    prepared: Column | None = None

    def stacked(self) -> np.ndarray:
        assert self.message is not None
        return np.stack([self.message] if self.read is None else [self.message, self.read])


# A turn's query vectors when it has none (its embedding failed).
UNSCORED = TurnVectors(None, None, degraded=True)

# What a turn chose (bot/memory/choice.py), and the ids the message read in its conversation
# brought; made by a `Choose` within the pass that scored the candidates.
Chosen = tuple[list[Selected], set[int]]
Choose = Callable[[ScoringPass, UserMemories, datetime], Chosen]


@dataclass(frozen=True, slots=True)
class _Where:
    """The entry a turn is scored over, at which time, and which of its memories may be candidates."""

    entry: UserMemories
    now: datetime
    story_id: StoryId
    place: str
    share: bool


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
        conversation: bool = True,
        series_slots: int | None = None,
        in_thread: int = IN_THREAD_MEMORIES,
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
        # False: the message alone is the query (what benches compare with).
        self.conversation = conversation
        self.outage = Outage(log)
        # Each turn's message vector by text: its reflection reads it again.
        self.queries = QueryVectors()
        # Per (user, story), the memories' cosines to a turn's query vectors, scored ahead.
        self.prepared_turns = PreparedTurns()
        # Per user, the candidate ids of turns whose times_candidate is not written yet.
        self._records = TurnRecords(db)
        # A person of `in_thread` memories or more is scored and chosen in a thread.
        self.off_loop = OffLoop(in_thread)

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
        vector = self.queries.get(self.embedder.model, query) if reuse else None
        if vector is None:
            vector = await embed_turn_query(self.embedder, query, timeout=timeout or self.timeout)
            self.queries.put(self.embedder.model, query, vector)
        return vector

    def start_vectors(
        self, user_id: OwnerKey, story_id: StoryId, query: str, conversation: Sequence[Line] = ()
    ) -> asyncio.Task[TurnVectors]:
        """The turn's query vectors, asked for now: the caller does what needs no vectors while
        the model embeds, passes the task to `select_for_turn`, and cancels it if the turn ends
        before."""
        return asyncio.ensure_future(self._turn_vectors(query, conversation, (user_id, story_id)))

    def query_texts(self, query: str, conversation: Sequence[Line]) -> list[str]:
        """What the turn embeds: the message, then the message read in its conversation when
        that is another text."""
        message = query_text(query)
        read = read_text(message, conversation) if self.conversation else message
        return [message] if read == message else [message, read]

    async def _turn_vectors(self, query: str, conversation: Sequence[Line], key: tuple[str, str]) -> TurnVectors:
        """The turn's query vectors: prepared while the front end held the message
        (`prepare_turn`), else asked of the embedder in one call, one attempt, the turn's bound
        around the whole. A turn not prepared always asks, even for a text it has seen: the
        embedder's health decides whether the turn is degraded."""
        # An empty message (an attachment, a sticker) has nothing to recall: not a failure.
        if not query_text(query):
            return TurnVectors(None, None, degraded=False)
        if self.embedder is None:
            self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", "no embedder")
            return TurnVectors(None, None, degraded=True)
        texts = self.query_texts(query, conversation)
        prepared = self.prepared_turns.take(key, texts_key(texts))
        if prepared is not None:
            rows = prepared.vectors
        else:
            try:
                rows = await embed_turn_queries(self.embedder, texts, timeout=self.timeout)
            except EmbeddingError as exc:
                self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", exc)
                return TurnVectors(None, None, degraded=True)
        # The reflection of the exchange reads the message's vector again.
        self.queries.put(self.embedder.model, texts[0], rows[0])
        return TurnVectors(rows[0], rows[1] if len(rows) > 1 else None, degraded=False, prepared=prepared)

    async def prepare_turn(
        self, user_id: OwnerKey, story_id: StoryId, query: str, conversation: Sequence[Line] = ()
    ) -> None:
        """While the front end holds a message (a burst's wait): its query texts embedded and
        the person's memories scored against them, so that its turn embeds nothing and reads
        the matrix only for the memories changed meanwhile. Beside every turn's query in the
        model's queue, since a person waits for that turn; a failure costs nothing but the turn
        doing it itself."""
        if self.embedder is None or not query_text(query):
            return
        texts = self.query_texts(query, conversation)
        try:
            rows = await self.embedder.embed_queries(texts)
        except EmbeddingError as exc:
            log.debug("a turn held by the front end is left to embed its query itself: %s", exc)
            return
        entry = await self.cache.get(user_id)
        if entry.dim and entry.dim != rows.shape[1]:
            return  # the model changed under its name: the turn says so
        self.prepared_turns.keep((user_id, story_id), entry, texts_key(texts), rows)

    def prepared(self, user_id: OwnerKey, story_id: StoryId, query: str, conversation: Sequence[Line] = ()) -> bool:
        """Whether this turn's query was prepared ahead (what bench/latency.py counts)."""
        return self.prepared_turns.matches((user_id, story_id), texts_key(self.query_texts(query, conversation)))

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
        now = self.clock()
        near = await self.off_loop.guarded(
            entry, lambda: nearest(entry, now, vector, story_id=story_id, place=place, limit=limit)
        )
        if near.error is not None:
            log.info("reflection shows lexical neighbours only: %s", near.error)
        if not near.ids.size:
            return []
        live_slots = entry.slot_of

        def candidate_slot(memory_id: int) -> int | None:
            slot = live_slots.get(memory_id)
            if slot is None or slot >= len(near.rows) or not near.is_candidate[slot] or near.row_ids[slot] != memory_id:
                return None
            return slot

        lexical = await lexical_among(self.db, user_id, text, limit, candidate_slot, near.ids, now=self.clock())
        slot_of = {**near.slot_of, **lexical}
        ranked = list(near.ranked)
        ranked.extend(i for i in lexical if i not in ranked)
        if len(ranked) < limit:
            ranked.extend(i for i in near.recent if i not in ranked)
        return [row_to_memory(held(near.rows, slot_of[i])) for i in ranked[: limit + len(lexical)]]

    async def select_for_turn(
        self,
        user_id: OwnerKey,
        *,
        story_id: StoryId,
        place: str,
        query: str,
        conversation: Sequence[Line] = (),
        rules: Sequence[Memory] = (),
        share: bool = False,
        story: Mapping[str, Any] | None = None,
        record: bool = True,
        vectors: asyncio.Task[TurnVectors] | None = None,
    ) -> TurnSelection:
        """The turn's memories, with reasons and scores. `conversation`: the story's lines
        before the message, oldest first, as the channel shows them, each marked when the
        person wrote it. `vectors`: the query's, from `start_vectors` (asked for here without).
        With `record=False` nothing is written: the caller then passes the selection to `record`
        (turn_id stays 0 until then)."""

        def choose(scored: ScoringPass, entry: UserMemories, now: datetime) -> Chosen:
            # Within the scoring's guarded pass: the memories are built from the entry's rows.
            chosen = select_columns(
                scored.candidates,
                self.limit,
                threshold=self.threshold,
                now_us=micros(now),
                series_slots=self.series_slots,
            )
            # Candidates are in slot order: the chosen ones' positions without a pass over them all.
            at = np.searchsorted(scored.slots, np.array([entry.slot_of[s.memory.id] for s in chosen], dtype=np.int64))
            return chosen, set(scored.candidates.ids[at[scored.fused.by_conversation[at]]].tolist())

        scored, made = await self._score(user_id, story_id, place, query, conversation, share, vectors, choose)
        assert made is not None, "a pass given a choice makes it"
        chosen, by_conversation = made
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
            candidates=int(scored.slots.size),
            place=place,
            share=share,
            candidate_ids=scored.candidates.ids,
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
        conversation: Sequence[Line] = (),
        share: bool = False,
        vectors: asyncio.Task[TurnVectors] | None = None,
    ) -> ScoredTurn:
        """The turn's candidates and their fused scores, lexical stand-ins included: what the
        selection chooses from (and what bench/recall_public.py ranks)."""
        scored, _ = await self._score(user_id, story_id, place, query, conversation, share, vectors, None)
        return scored

    async def _score(
        self,
        user_id: OwnerKey,
        story_id: StoryId,
        place: str,
        query: str,
        conversation: Sequence[Line],
        share: bool,
        vectors: asyncio.Task[TurnVectors] | None,
        choose: Choose | None,
    ) -> tuple[ScoredTurn, Chosen | None]:
        """The scored turn and what `choose` made of it, in one pass over the entry (a thread's
        single hop for a large person) unless stand-ins had to be searched for in between."""
        pending = vectors if vectors is not None else self.start_vectors(user_id, story_id, query, conversation)
        try:
            entry = await self.cache.get(user_id)
            now = self.clock()
            at = version(entry)
            slots = entry.candidates(now, story_id=story_id, place=place, share=share)
            # Which memories lack a vector does not depend on the query's: searched meanwhile.
            early = await search(
                self.db, user_id, query, entry.ids[slots[~entry.has_vector[slots]]], now=now, changes=entry.changes
            )
            turn_vectors = await pending
        finally:
            pending.cancel()
        where = _Where(entry, now, story_id, place, share)
        scored, chosen = await self._pass(where, turn_vectors, early, choose, slots=slots, at=at)
        degraded = turn_vectors.degraded or scored.error is not None
        if scored.needs_search:
            # The entry caught up with a write while the model embedded, or the query has no
            # vector: searched among exactly the unscored candidates, and scored again as the
            # first time (a turn whose cosines failed is not counted twice).
            found = await search(self.db, user_id, query, scored.unscored(), now=now, changes=entry.changes)
            again = turn_vectors if scored.error is None else UNSCORED
            scored, chosen = await self._pass(where, again, found, choose)
        result = ScoredTurn(entry, scored.slots, scored.fused, scored.lexical_ids, degraded, now, scored.candidates)
        return result, chosen

    async def _pass(
        self,
        where: _Where,
        vectors: TurnVectors,
        stand_ins: LexicalSearch,
        choose: Choose | None,
        *,
        slots: np.ndarray | None = None,
        at: Version | None = None,
    ) -> tuple[ScoringPass, Chosen | None]:
        """The candidates' fused scores (NaN without a vector or a stand-in) and columns, and
        what `choose` made of them: in a thread for a large person, guarded against a write
        applied meanwhile (bot/memory/read/off_loop.py). `slots`: the candidates as of version
        `at` of the entry. Without `slots`, the stand-ins are `stand_ins` whatever they were
        searched among."""
        entry, now = where.entry, where.now
        queries = None if vectors.message is None else vectors.stacked()

        def work() -> tuple[ScoringPass, Chosen | None]:
            scored = scoring_pass(
                entry,
                now,
                story_id=where.story_id,
                place=where.place,
                share=where.share,
                queries=queries,
                prepared=vectors.prepared,
                slots=slots if at is not None and version(entry) == at else None,
                live_rows=choose is not None,
            )
            scored = with_stand_ins(scored, stand_ins, entry.changes, self.threshold, exact=slots is not None)
            if choose is None or scored.needs_search:
                return scored, None
            return scored, choose(scored, entry, now)

        scored, chosen = await self.off_loop.guarded(entry, work)
        if scored.error is not None:
            self.outage.failed("memory runs without semantic scores (turns are counted as degraded): %s", scored.error)
        elif queries is not None:
            self.outage.recovered("semantic scores are back after %d degraded turn(s)")
        return scored, chosen

    async def record(
        self, selection: TurnSelection, *, cancelled: Callable[[Connection], Awaitable[bool]] | None = None
    ) -> int:
        """Count the turn and keep it for /why (bot/memory/read/recording.py)."""
        return await self._records.record(selection, cancelled=cancelled)

    async def flush_counts(self, user_id: OwnerKey | None = None) -> None:
        """Write the candidate counts held for `user_id` (everyone's without)."""
        await self._records.flush_counts(user_id)
