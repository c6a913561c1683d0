"""A large person's turn is scored and chosen in a thread (bot/memory/read/off_loop.py): the same
choice as on the event loop, and never one torn by a write the entry takes meanwhile.

The size from which the thread is used is lowered through `Recall(in_thread=...)`, so that a few
thousand memories stand for the 100,000 of bench/load.py --cold."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import OllamaEmbedder
from bot.memory.cache.entry import UserMemories
from bot.memory.choice import TurnSelection
from bot.memory.model import USER_MEMORY_TYPES, NewMemory, content_hash, utcnow
from bot.memory.read.conversation import Line
from bot.memory.read.off_loop import OffLoop
from bot.memory.read.recall import Recall
from bot.memory.stores.memories import insert_memory
from bot.memory.stores.vectors import VectorRow, store_vectors
from tests.builders import delete_memory
from tests.fakes.embedding_server import DEFAULT_DIM, EmbeddingServer, fake_vector

ALICE = "alice"
GUILD = "guild-1"
STORY = "chan-1"
MEMORIES = 2_000
# Past this many memories the threaded Recall of these tests scores in a thread.
LOWERED = 500
ON_THE_LOOP = 10**9
TOPICS = ("le vélo", "la cuisine", "son chat", "la montagne", "le piano", "ses voisins", "le travail")
QUERIES = ("Tu te souviens de mon chat ?", "On parle de cuisine ?", "Le piano, c'est dur", "numéro 12 et le vélo")
CONVERSATION = [Line("J'ai passé la journée à la montagne", own=True), Line("Ça devait être beau !")]


async def seed(db: SQLiteDatabase, model: str) -> list[int]:
    """MEMORIES memories of every type, scope, story and place, a few pinned; every 97th without
    a vector (the lexical stand-in's share of the turn)."""
    now = utcnow()
    rows: list[VectorRow] = []
    ids = []
    async with db.write() as conn:
        for i in range(MEMORIES):
            text = f"L'utilisateur a noté le fait numéro {i} sur {TOPICS[i % len(TOPICS)]}"
            new = NewMemory(
                text=text,
                type=USER_MEMORY_TYPES[i % len(USER_MEMORY_TYPES)],
                scope="story" if i % 5 == 0 else "global",
                story_id=STORY if i % 3 else "other",
                place=GUILD if i % 11 else "guild-2",
                pinned=i % 199 == 0,
                confidence=(0.85, 0.9, 0.95, 1.0)[i % 4],
            )
            memory_id = await insert_memory(conn, ALICE, new, now=now)
            ids.append(memory_id)
            if i % 97:
                vector = fake_vector(text, DEFAULT_DIM)
                rows.append(VectorRow(memory_id, ALICE, model, content_hash(text), vector / np.linalg.norm(vector)))
        await store_vectors(conn, rows)
    return ids


@pytest.fixture
def embedder(embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer) -> OllamaEmbedder:
    return OllamaEmbedder(embedding_http, base_url=embedding_server.url, model="fake-embed")


async def turn(recall: Recall, query: str, **kw: Any) -> TurnSelection:
    return await recall.select_for_turn(ALICE, story_id=STORY, place=GUILD, query=query, record=False, **kw)


def chosen(selection: TurnSelection) -> list[tuple[int, str, float | None, bool, int]]:
    return [(s.id, s.reason, s.score, s.lexical, s.series) for s in selection.slots]


async def test_a_large_person_is_chosen_in_a_thread_exactly_as_on_the_loop(
    db: SQLiteDatabase, embedder: OllamaEmbedder
) -> None:
    await seed(db, embedder.model)
    for series_slots in (None, 2):
        on_loop = Recall(db, embedder, in_thread=ON_THE_LOOP, series_slots=series_slots)
        threaded = Recall(db, embedder, in_thread=LOWERED, series_slots=series_slots)
        for query in QUERIES:
            for conversation in ((), CONVERSATION):
                expected = await turn(on_loop, query, conversation=conversation)
                got = await turn(threaded, query, conversation=conversation)
                assert chosen(got) == chosen(expected)
                np.testing.assert_array_equal(got.candidate_ids, expected.candidate_ids)
                assert (got.degraded, got.candidates) == (expected.degraded, expected.candidates)
        # The lexical stand-ins took part the same way: memories without a vector scored by it.
        where = {"story_id": STORY, "place": GUILD, "query": "numéro 97 sur le vélo"}
        scored, expected_scores = await threaded.score_turn(ALICE, **where), await on_loop.score_turn(ALICE, **where)
        assert scored.lexical_ids and scored.lexical_ids == expected_scores.lexical_ids
        np.testing.assert_array_equal(scored.fused.scores, expected_scores.fused.scores)
        # A turn scored ahead (a message held by the front end) is read the same way.
        await threaded.prepare_turn(ALICE, STORY, QUERIES[0], CONVERSATION)
        assert threaded.prepared(ALICE, STORY, QUERIES[0], CONVERSATION)
        prepared = await turn(threaded, QUERIES[0], conversation=CONVERSATION)
        assert chosen(prepared) == chosen(await turn(on_loop, QUERIES[0], conversation=CONVERSATION))
        for text in QUERIES:
            near = await threaded.neighbours(ALICE, text, story_id=STORY, place=GUILD, limit=8)
            assert near == await on_loop.neighbours(ALICE, text, story_id=STORY, place=GUILD, limit=8)
        assert on_loop.off_loop.runs == 0
        assert threaded.off_loop.runs >= 2 * len(QUERIES)


async def test_a_large_persons_turn_crosses_to_the_thread_once(db: SQLiteDatabase, embedder: OllamaEmbedder) -> None:
    """Scored, given its lexical stand-ins (searched while the model embedded) and chosen in one
    hop: each hop is the person's own wait, past the floor of what the turn embeds."""
    await seed(db, embedder.model)
    recall = Recall(db, embedder, in_thread=LOWERED)
    await turn(recall, QUERIES[0])
    before = recall.off_loop.runs
    for query in QUERIES:
        selection = await turn(recall, query, conversation=CONVERSATION)
        assert selection.memories and not selection.degraded
    assert recall.off_loop.runs - before == len(QUERIES)
    # Stand-ins took part: the search made while the model embedded was the one the hop used.
    scored = await recall.score_turn(ALICE, story_id=STORY, place=GUILD, query="numéro 97 sur le vélo")
    assert scored.lexical_ids
    assert recall.off_loop.runs - before == len(QUERIES) + 1
    assert recall.off_loop.redone == 0


async def test_a_person_of_a_few_thousand_memories_does_not_pay_for_the_thread(
    db: SQLiteDatabase, embedder: OllamaEmbedder
) -> None:
    await seed(db, embedder.model)
    recall = Recall(db, embedder)
    await turn(recall, QUERIES[0], conversation=CONVERSATION)
    await recall.neighbours(ALICE, QUERIES[0], story_id=STORY, place=GUILD, limit=8)
    assert recall.off_loop.runs == 0
    # The person the turn's overhead is measured on (bench/latency.py) stays on the loop.
    assert not OffLoop().wanted(3_000)


@pytest.fixture
def paused_scoring(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The first cosine pass run in a thread stops before reading the matrix until released:
    (started, release)."""
    started, release = threading.Event(), threading.Event()
    scores = UserMemories.scores

    def paused(self: UserMemories, query: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if threading.current_thread() is not threading.main_thread() and not started.is_set():
            started.set()
            assert release.wait(timeout=30)
        return scores(self, query, slots)

    monkeypatch.setattr(UserMemories, "scores", paused)
    yield started, release
    release.set()


async def test_a_write_applied_while_the_thread_scores_never_yields_a_torn_selection(
    db: SQLiteDatabase, embedder: OllamaEmbedder, paused_scoring: tuple[threading.Event, threading.Event]
) -> None:
    started, release = paused_scoring
    await seed(db, embedder.model)
    threaded = Recall(db, embedder, in_thread=LOWERED)
    query = QUERIES[0]
    before = await Recall(db, embedder, in_thread=ON_THE_LOOP).select_for_turn(
        ALICE, story_id=STORY, place=GUILD, query=query, record=False
    )
    entry = await threaded.cache.get(ALICE)

    pending = asyncio.create_task(turn(threaded, query))
    assert await asyncio.to_thread(started.wait, 30)
    # While the thread holds the candidates' slots: the memories it was about to choose are
    # forgotten, and the entry takes the write in place (a catch-up, the same entry).
    forgotten = {s.id for s in before.slots}
    for memory_id in forgotten:
        await delete_memory(db, ALICE, memory_id)
    assert await threaded.cache.get(ALICE) is entry
    assert threaded.cache.catch_ups == 1
    release.set()
    got = await pending

    after = await Recall(db, embedder, in_thread=ON_THE_LOOP).select_for_turn(
        ALICE, story_id=STORY, place=GUILD, query=query, record=False
    )
    assert not forgotten & {s.id for s in got.slots}
    assert chosen(got) == chosen(after)
    np.testing.assert_array_equal(got.candidate_ids, after.candidate_ids)
    assert threaded.off_loop.redone >= 1
