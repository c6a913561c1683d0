"""Background indexing on real SQLite files, with the real offline model or real HTTP."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import httpx
import numpy as np
import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder, OllamaEmbedder
from bot.memory.read.indexing import Indexer, prune_other_models
from bot.memory.stores.memories import memory_version
from bot.memory.stores.vectors import delete_all_vectors, load_user_matrix, stale_memories
from tests.builders import add_memory, set_text
from tests.fakes.embedding_server import EmbeddingServer
from tests.memory.stores.test_vectors import ALICE, BOB

VELO = "L'utilisateur fait du vélo tous les dimanches matin"
NURSE = "L'utilisateur travaille comme infirmière à Lyon"
PIANO = "L'utilisateur joue du piano depuis l'enfance"


async def versions(db: SQLiteDatabase, *users: str) -> list[tuple[int, int]]:
    """Each user's memory version: what a cache of any process compares to stay in step."""
    return [await memory_version(db.reader, user) for user in users]


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


def ollama(server: EmbeddingServer, http: httpx.AsyncClient) -> OllamaEmbedder:
    return OllamaEmbedder(http, base_url=server.url, model="fake-embed")


async def scores(db: SQLiteDatabase, embedder: LocalEmbedder, user_id: str, query: str) -> dict[int, float]:
    ids, matrix = await load_user_matrix(db, user_id, embedder.model)
    if not ids:
        return {}
    return dict(zip(ids, (matrix @ await embedder.embed_query(query)).tolist()))


async def test_run_once_embeds_every_stale_memory_and_bumps_their_users_versions(
    db: SQLiteDatabase, local: LocalEmbedder
) -> None:
    velo = await add_memory(db, ALICE, VELO)
    nurse = await add_memory(db, ALICE, NURSE)
    piano = await add_memory(db, BOB, PIANO)
    before = await versions(db, ALICE, BOB)

    assert await Indexer(db, local).run_once() == 3

    alice = await scores(db, local, ALICE, "Tu as fait du sport ce week-end ?")
    assert set(alice) == {velo, nurse}
    assert alice[velo] > alice[nurse]
    assert set(await scores(db, local, BOB, "musique")) == {piano}
    after = await versions(db, ALICE, BOB)
    assert all(a[0] == b[0] and a[1] > b[1] for a, b in zip(after, before, strict=True))
    assert await stale_memories(db, local.model, 10) == []


async def test_second_run_does_nothing_and_tells_nobody(db: SQLiteDatabase, local: LocalEmbedder) -> None:
    await add_memory(db, ALICE, VELO)
    indexer = Indexer(db, local)
    await indexer.run_once()
    before = await versions(db, ALICE)
    assert await indexer.run_once() == 0
    assert await versions(db, ALICE) == before


async def test_a_changed_text_is_embedded_again_and_only_it(db: SQLiteDatabase, local: LocalEmbedder) -> None:
    velo = await add_memory(db, ALICE, VELO)
    await add_memory(db, ALICE, NURSE)
    indexer = Indexer(db, local)
    await indexer.run_once()
    await set_text(db, ALICE, velo, "L'utilisateur fait de la natation le samedi")

    assert await indexer.run_once() == 1
    ids, matrix = await load_user_matrix(db, ALICE, local.model)
    swim = await local.embed_passages(["L'utilisateur fait de la natation le samedi"])
    np.testing.assert_allclose(matrix[ids.index(velo)], swim[0], atol=1e-6)


async def test_batches_cover_a_backlog_larger_than_one_batch(
    db: SQLiteDatabase, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    ids = [await add_memory(db, ALICE, f"souvenir numéro {i}") for i in range(5)]
    embedder = ollama(embedding_server, embedding_http)

    assert await Indexer(db, embedder, batch_size=2).run_once() == 5

    assert [len(r.body["input"]) for r in embedding_server.requests] == [2, 2, 1]
    assert (await load_user_matrix(db, ALICE, embedder.model))[0] == ids


async def test_what_a_reflection_wrote_is_embedded_by_id_and_only_the_persons(
    db: SQLiteDatabase, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    """After a reflection, only the memories it wrote: read by id and by person, never the
    scan of everyone's stale memories the tick makes (it held others' reads on the reader)."""
    older = await add_memory(db, ALICE, "souvenir plus ancien")  # stale, not written by it
    velo = await add_memory(db, ALICE, VELO)
    nurse = await add_memory(db, ALICE, NURSE)
    piano = await add_memory(db, BOB, PIANO)
    embedder = ollama(embedding_server, embedding_http)
    indexer = Indexer(db, embedder)

    assert await indexer.written(ALICE, [velo, nurse, piano]) == 2  # Bob's id is not Alice's
    assert [r.body["input"] for r in embedding_server.requests] == [[VELO, NURSE]]
    assert {m.id for m in await stale_memories(db, embedder.model, 10)} == {older, piano}
    assert await indexer.written(ALICE, [velo, nurse]) == 0  # nothing asked twice
    assert len(embedding_server.requests) == 1


async def test_a_run_stops_after_its_batch_budget_and_the_next_tick_continues(
    db: SQLiteDatabase, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    for i in range(5):
        await add_memory(db, ALICE, f"souvenir numéro {i}")
    indexer = Indexer(db, ollama(embedding_server, embedding_http), batch_size=2, max_batches=2)
    assert await indexer.run_once() == 4
    assert await indexer.run_once() == 1


async def test_failing_tick_leaves_everything_for_the_next_and_logs_once(
    db: SQLiteDatabase,
    embedding_server: EmbeddingServer,
    embedding_http: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = [await add_memory(db, ALICE, f"souvenir numéro {i}") for i in range(3)]
    embedder = ollama(embedding_server, embedding_http)
    indexer = Indexer(db, embedder)
    embedding_server.mode = "error"

    with caplog.at_level(logging.INFO, logger="bot.memory.read.indexing"):
        assert await indexer.run_once() == 0
        assert await indexer.run_once() == 0
        assert indexer.outage.failures == 2
        assert len(await stale_memories(db, embedder.model, 10)) == 3

        embedding_server.mode = "normal"
        assert await indexer.run_once() == 3

    assert sorted((await load_user_matrix(db, ALICE, embedder.model))[0]) == ids
    messages = [r.getMessage() for r in caplog.records if r.name == "bot.memory.read.indexing"]
    assert len([m for m in messages if "paused" in m]) == 1
    assert len([m for m in messages if "resumed after 2 failed ticks" in m]) == 1


async def test_failure_mid_run_keeps_the_batches_already_stored(
    db: SQLiteDatabase, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    for i in range(4):
        await add_memory(db, ALICE, f"souvenir numéro {i}")
    embedder = ollama(embedding_server, embedding_http)
    indexer = Indexer(db, embedder, batch_size=2)
    embedding_server.script = ["normal", "error"]

    assert await indexer.run_once() == 2
    assert len(await stale_memories(db, embedder.model, 10)) == 2
    assert await indexer.run_once() == 2


async def test_deleting_all_vectors_then_reindexing_restores_the_scores(
    db: SQLiteDatabase, local: LocalEmbedder
) -> None:
    await add_memory(db, ALICE, VELO)
    await add_memory(db, ALICE, NURSE)
    await add_memory(db, ALICE, PIANO)
    indexer = Indexer(db, local)
    await indexer.run_once()
    before = await scores(db, local, ALICE, "Tu as fait du sport ce week-end ?")

    await delete_all_vectors(db)
    assert await scores(db, local, ALICE, "Tu as fait du sport ce week-end ?") == {}
    assert await indexer.run_once() == 3

    after = await scores(db, local, ALICE, "Tu as fait du sport ce week-end ?")
    assert after.keys() == before.keys()
    np.testing.assert_allclose([after[k] for k in before], list(before.values()), atol=1e-6)


async def test_model_switch_fills_in_then_prunes_the_old_model(
    db: SQLiteDatabase,
    local: LocalEmbedder,
    embedding_server: EmbeddingServer,
    embedding_http: httpx.AsyncClient,
) -> None:
    ids = [await add_memory(db, ALICE, f"souvenir numéro {i}") for i in range(3)]
    await Indexer(db, local).run_once()
    new_model = ollama(embedding_server, embedding_http)
    switched = Indexer(db, new_model, batch_size=2, max_batches=1)

    # Part-way: both models have vectors; each is served only to its own queries.
    assert await switched.run_once() == 2
    assert len((await load_user_matrix(db, ALICE, new_model.model))[0]) == 2
    assert sorted((await load_user_matrix(db, ALICE, local.model))[0]) == ids
    assert await prune_other_models(db, new_model.model) == 0

    # Covered: the old model's vectors go.
    assert await switched.run_once() == 1
    assert await switched.run_once() == 0
    assert sorted((await load_user_matrix(db, ALICE, new_model.model))[0]) == ids
    assert (await load_user_matrix(db, ALICE, local.model))[0] == []


async def test_expired_memories_are_not_indexed(db: SQLiteDatabase, local: LocalEmbedder) -> None:
    await add_memory(db, ALICE, "a un rendez-vous hier", expires_in=timedelta(seconds=-1))
    assert await Indexer(db, local).run_once() == 0


async def test_scheduled_job_runs_once_at_start_with_one_instance_at_a_time(
    db: SQLiteDatabase, local: LocalEmbedder
) -> None:
    velo = await add_memory(db, ALICE, VELO)
    before = await versions(db, ALICE)
    scheduler = AsyncIOScheduler()
    job = Indexer(db, local).schedule(scheduler, seconds=3600)
    assert job.trigger.interval == timedelta(hours=1)
    assert job.max_instances == 1
    assert job.coalesce is True

    scheduler.start()
    try:

        async def indexed() -> None:
            while await versions(db, ALICE) == before:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(indexed(), timeout=30)
    finally:
        scheduler.shutdown(wait=False)
        await asyncio.sleep(0)  # the shutdown is scheduled on the loop
    assert (await load_user_matrix(db, ALICE, local.model))[0] == [velo]
