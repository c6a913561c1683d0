"""The per-user memory cache stays in step with the database: writes of this process and of
another one sharing the file reach it as row updates, not reloads; an erase leaves nothing."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

import bot.memory.cache.entry as entry_module
import bot.memory.cache.memory_cache as cache_module
import bot.memory.cache.slices as slices_module
from bot.clients.databases import open_database
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.metrics import Metrics
from bot.clients.storage import to_db
from bot.memory.cache.entry import UserMemories, Vector
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.slices import Foreground, Slices
from bot.memory.model import Cause, NewMemory, OwnerKey, content_hash, utcnow
from bot.memory.read.indexing import Indexer
from bot.memory.stores.memories import MemoryRow, erase_user_memories, memory_rows, row_to_memory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.vectors import VectorRow, load_user_matrix, store_vectors
from tests.builders import cache_held, cache_reads, http_client, make_engine, msg
from tests.fakes.llm_server import FakeLLMServer

ALICE = "alice"
BOB = "bob"
MODEL = "test-model"

# The versions come from triggers (migration 0007 on each store): both must keep the cache in step.
pytestmark = pytest.mark.both_stores


async def add(store: MemoryStore, text: str, **fields: object) -> int:
    return await store.add(ALICE, NewMemory(text=text, **fields))  # type: ignore[arg-type]


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return v / np.linalg.norm(v)


async def vector(db: SQLiteDatabase, memory_id: int, seed: int) -> None:
    row = await db.reader.execute_fetchall("SELECT content_hash FROM memories WHERE id = ?", (memory_id,))
    async with db.write() as conn:
        await store_vectors(conn, [VectorRow(memory_id, ALICE, MODEL, row[0][0], unit(seed))])


async def texts(cache: MemoryCache, user: str = ALICE) -> dict[int, str]:
    entry = await cache.get(user)
    return {m.id: m.text for m in entry.memories(sorted(entry.slot_of.values()))}


async def truth(db: SQLiteDatabase, user: str = ALICE) -> dict[int, str]:
    return {m.id: m.text for m in map(row_to_memory, await memory_rows(db.reader, user))}


async def test_every_write_is_read_back_as_a_row_update(db: SQLiteDatabase) -> None:
    store = MemoryStore(db)
    cache = MemoryCache(db, MODEL)
    first = await add(store, "L'utilisateur habite à Nantes")
    second = await add(store, "L'utilisateur fait du vélo")
    assert await texts(cache) == await truth(db)

    await add(store, "L'utilisateur a un chat")
    await store.replace(ALICE, first, "L'utilisateur habite à Rennes", cause=Cause("edit"))
    await store.forget(ALICE, second, cause=Cause("forget"))
    await store.set_pinned(ALICE, first, True)
    await vector(db, first, 1)
    assert await texts(cache) == await truth(db)
    entry = await cache.get(ALICE)
    assert bool(entry.pinned[entry.slot_of[first]])
    assert np.allclose(entry.matrix[entry.slot_of[first]], unit(1))
    assert (cache.loads, cache.catch_ups) == (1, 1)

    # A text change makes the vector stale: it is no longer served.
    await store.replace(ALICE, first, "L'utilisateur habite à Brest", cause=Cause("edit"))
    entry = await cache.get(ALICE)
    assert not entry.has_vector[entry.slot_of[first]]
    # Counting a turn changes no served column: no catch-up.
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET times_served = times_served + 1 WHERE user_id = ?", (ALICE,))
    hits = cache.hits
    await cache.get(ALICE)
    assert (cache.loads, cache.catch_ups, cache.hits) == (1, 2, hits + 1)


async def test_a_second_process_sees_the_writes_of_the_first(db: SQLiteDatabase, database_url: str) -> None:
    other = await open_database(database_url)
    try:
        mine, theirs = MemoryCache(db, MODEL), MemoryCache(other, MODEL)
        memory_id = await add(MemoryStore(db), "L'utilisateur habite à Nantes")
        assert await texts(theirs) == {memory_id: "L'utilisateur habite à Nantes"}
        await MemoryStore(other).replace(ALICE, memory_id, "L'utilisateur habite à Lyon", cause=Cause("edit"))
        assert await texts(mine) == await texts(theirs) == await truth(db)
    finally:
        await other.close()


async def test_an_erase_leaves_nothing_and_a_new_life_is_not_taken_for_the_old(db: SQLiteDatabase) -> None:
    store = MemoryStore(db)
    cache = MemoryCache(db, MODEL)
    for i in range(3):
        await add(store, f"L'utilisateur a {i + 2} chats")
    await texts(cache)
    async with db.write() as conn:
        await erase_user_memories(conn, ALICE)
    assert await texts(cache) == {}
    again = await add(store, "L'utilisateur a un chien")
    assert await texts(cache) == {again: "L'utilisateur a un chien"}


async def test_candidates_are_the_stores_filter(db: SQLiteDatabase) -> None:
    store = MemoryStore(db)
    cache = MemoryCache(db, MODEL)
    now = utcnow()
    kept = {
        await add(store, "global partout", scope="global", place="guild"),
        await add(store, "de cette histoire", scope="story", story_id="s1", place=None),
    }
    await add(store, "d'une autre histoire", scope="story", story_id="s2")
    await add(store, "d'un autre lieu", place="dm")
    await add(store, "expiré", expires_at=now - timedelta(seconds=1))
    entry = await cache.get(ALICE)
    slots = entry.candidates(now, story_id="s1", place="guild", share=False)
    assert set(entry.ids_of(slots)) == kept
    shared = entry.candidates(now, story_id="s1", place="guild", share=True)
    assert len(shared) == 3
    # Asked at some slots only (a prompt's notes), the same filter.
    every = np.array(sorted(entry.slot_of.values()), dtype=np.int64)
    for story, place, share in (("s1", "guild", False), ("s1", "guild", True), ("s2", "dm", False)):
        candidates = entry.candidates(now, story_id=story, place=place, share=share)
        reach = entry.in_reach(every[::-1], now, story_id=story, place=place, share=share)
        assert reach.tolist() == np.isin(every[::-1], candidates).tolist()
    assert to_db(now)  # the filter reads the same UTC instants the store writes


async def test_bounded_by_bytes_the_big_entry_cheap_to_reload_goes_first(db: SQLiteDatabase) -> None:
    store = MemoryStore(db)
    for i in range(200):
        await add(store, f"L'utilisateur note le fait numéro {i}")
    await MemoryStore(db).add(BOB, NewMemory(text="L'utilisateur joue du piano"))
    cache = MemoryCache(db, MODEL)
    alice = await cache.get(ALICE)
    bob = await cache.get(BOB)
    cache.max_bytes = alice.nbytes + bob.nbytes - 1
    await MemoryStore(db).add("carol", NewMemory(text="L'utilisateur court"))
    await cache.get("carol")
    assert cache.nbytes <= cache.max_bytes
    assert "carol" in cache and len(cache) == 2

    tiny = MemoryCache(db, MODEL, max_bytes=10)
    assert await texts(tiny) == await truth(db)  # served, not kept
    assert len(tiny) == 0


async def test_the_engines_cache_follows_every_kind_of_write_without_a_reload(
    db: SQLiteDatabase, tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    async with http_client() as http:
        embedder = LocalEmbedder()
        metrics = Metrics()
        engine = make_engine(db, http, llm_server, tmp_path, embedder=embedder, metrics=metrics)
        # Another process's cache over the same database: every write must bump the person's
        # version, or it would miss the change.
        cache = MemoryCache(db, embedder.model)
        user = "alice"

        async def in_step() -> None:
            entry = await cache.get(user)
            cached = {m.id: (m.text, m.pinned, m.expires_at) for m in entry.memories(sorted(entry.slot_of.values()))}
            stored = {
                m.id: (m.text, m.pinned, m.expires_at) for m in map(row_to_memory, await memory_rows(db.reader, user))
            }
            assert cached == stored
            with_vector = {int(i) for i in entry.ids[: len(entry.rows)][entry.has_vector[: len(entry.rows)]]}
            assert with_vector == set((await load_user_matrix(db, user, embedder.model))[0])

        first = await engine.memories.remember(
            user, "L'utilisateur habite à Nantes.", story_id="chan-1", place="guild-1"
        )
        await in_step()  # the one load
        llm_server.handler = lambda r: (
            json.dumps({"memories": [{"text": "L'utilisateur a un chat qui s'appelle Minou.", "type": "fact",
                                      "confidence": 0.95}]})
            if r.json_schema is not None else "ok"
        )  # fmt: skip
        await engine.conversation.turn(msg("J'ai un chat, il s'appelle Minou."))
        engine.operator.schedule_reflection(user)
        await engine.operator.wait_reflections(user)
        await engine.operator.wait_background()  # the reflection's memories embedded after it
        await in_step()
        history = await engine.memories.edit(user, first, "L'utilisateur habite à Lyon.")
        await in_step()
        assert await Indexer(db, embedder).run_once() == 1  # the edited text's vector
        await in_step()
        await engine.memories.pin(user, first)
        await in_step()
        assert await engine.memories.forget(user, first)
        await in_step()
        assert history is not None and await engine.memories.restore(user, history) == first
        await in_step()
        assert cache.loads == 1
        assert cache.catch_ups >= 6
        assert cache_reads(metrics, "load") == 1  # the engine's own, for the turn and its reflection

        await engine.privacy.erase(user)
        assert cache_held(metrics) == (0, 0)  # nothing of hers stays in the engine's memory
        assert len((await cache.get(user)).slot_of) == 0
        await engine.close()


async def test_a_user_is_loaded_page_by_page_whole(db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "LOAD_PAGE", 3)
    store = MemoryStore(db)
    ids = [await add(store, f"L'utilisateur note le fait numéro {i}") for i in range(10)]
    await MemoryStore(db).add(BOB, NewMemory(text="L'utilisateur joue du piano"))
    for seed, memory_id in enumerate(ids[::2]):
        await vector(db, memory_id, seed)
    cache = MemoryCache(db, MODEL)
    assert await texts(cache) == await truth(db)
    entry = await cache.get(ALICE)
    assert {int(i) for i in entry.ids[entry.has_vector[: len(entry.rows)].nonzero()[0]]} == set(ids[::2])


async def test_a_large_person_is_read_beside_the_shared_reader_in_one_snapshot(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past LOAD_PAGE memories, the load runs on a connection of its own: the shared reader,
    which every turn's reads go through, runs none of its statements (on it, others' turns
    queued seconds behind a 100,000-memory person's pages). Its rows and vectors are one
    snapshot, labelled with that snapshot's version: a write committed halfway is not half in
    it, and the next read catches up with it."""
    monkeypatch.setattr(cache_module, "LOAD_PAGE", 3)
    store = MemoryStore(db)
    ids = [await add(store, f"L'utilisateur note le fait numéro {i}") for i in range(10)]
    for seed, memory_id in enumerate(ids):
        await vector(db, memory_id, seed)
    on_reader: list[int] = []
    read = db.reader.execute_fetchall

    async def counted(*args: object) -> list[object]:
        rows = list(await read(*args))  # type: ignore[arg-type]
        on_reader.append(len(rows))
        return rows

    monkeypatch.setattr(db.reader, "execute_fetchall", counted)
    first_page, go_on = asyncio.Event(), asyncio.Event()
    pages = cache_module.memory_pages

    async def paused_after_the_first_page(*args: object):  # type: ignore[no-untyped-def]
        async for page in pages(*args):  # type: ignore[arg-type]
            yield page
            first_page.set()
            await go_on.wait()

    monkeypatch.setattr(cache_module, "memory_pages", paused_after_the_first_page)
    cache = MemoryCache(db, MODEL)
    loading = asyncio.create_task(cache.get(ALICE))
    await first_page.wait()
    await store.replace(ALICE, ids[-1], "L'utilisateur a changé le dernier fait", cause=Cause("edit"))
    newer = await add(store, "L'utilisateur arrive avec un fait de plus")
    await vector(db, newer, 99)
    go_on.set()
    entry = await loading
    assert max(on_reader) <= 1  # its version and whether it holds more than a page: one row each
    assert {m.id: m.text for m in entry.memories(sorted(entry.slot_of.values()))} == {
        i: f"L'utilisateur note le fait numéro {n}" for n, i in enumerate(ids)
    }
    assert entry.has_vector[: len(entry.rows)].all()
    monkeypatch.setattr(db.reader, "execute_fetchall", read)
    assert await texts(cache) == await truth(db)
    entry = await cache.get(ALICE)
    assert (cache.loads, cache.catch_ups) == (1, 1)
    assert np.allclose(entry.matrix[entry.slot_of[newer]], unit(99))


async def test_a_large_persons_load_steps_aside_while_another_persons_turn_does_memory_work(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past LOAD_PAGE memories the next page is read only once no one else's turn does its memory
    work (the reading thread holds the GIL against them while it makes the rows); the person's
    own turn, which waits for this load, does not hold it, nor does anyone's when the load runs
    for a caller holding the write lock."""
    monkeypatch.setattr(cache_module, "LOAD_PAGE", 3)
    monkeypatch.setattr(slices_module, "SLICE_SECONDS", 0.0)  # every tick looks at the turns
    store = MemoryStore(db)
    for i in range(10):
        await add(store, f"L'utilisateur note le fait numéro {i}")
    read: list[int] = []
    pages = cache_module.memory_pages

    async def counted(*args: object):  # type: ignore[no-untyped-def]
        async for page in pages(*args):  # type: ignore[arg-type]
            read.append(len(page))
            yield page

    monkeypatch.setattr(cache_module, "memory_pages", counted)
    cache = MemoryCache(db, MODEL, foreground=Foreground(most=60.0))
    with cache.foreground.turn(BOB):
        loading = asyncio.create_task(cache.get(ALICE))
        await asyncio.sleep(0.5)
        assert read == [3] and not loading.done()
    await asyncio.wait_for(loading, 30)
    assert read == [3, 3, 3, 1]
    assert await texts(cache) == await truth(db)
    read.clear()
    cache = MemoryCache(db, MODEL, foreground=Foreground(most=60.0))
    with cache.foreground.turn(ALICE):
        await asyncio.wait_for(cache.get(ALICE), 30)
    assert read == [3, 3, 3, 1]
    # Nor for a caller holding the write lock: Bob's turn may be waiting for it.
    read.clear()
    cache = MemoryCache(db, MODEL, foreground=Foreground(most=60.0))
    with cache.foreground.turn(BOB):
        async with db.write() as conn:
            await asyncio.wait_for(cache.get(ALICE, conn), 30)
    assert read == [3, 3, 3, 1]
    assert cache.foreground.stepped_aside == 0


async def test_a_large_entry_grown_off_the_loop_keeps_every_memory(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every entry grows the way a large one does (its arrays copied in a thread): each memory
    keeps its row, columns and vector, and the new ones join them."""
    monkeypatch.setattr(entry_module, "IN_THREAD_BYTES", 0)
    store = MemoryStore(db)
    ids = [await add(store, f"L'utilisateur note le fait numéro {i}", pinned=i == 3) for i in range(5)]
    for memory_id in ids:
        await vector(db, memory_id, memory_id)
    cache = MemoryCache(db, MODEL)
    capacity = (await cache.get(ALICE)).ids.shape[0]
    for i in range(5, 5 + 2 * capacity):
        memory_id = await add(store, f"L'utilisateur ajoute le fait numéro {i}")
        await vector(db, memory_id, memory_id)
        ids.append(memory_id)
        assert await texts(cache) == await truth(db)
    entry = await cache.get(ALICE)
    assert entry.ids.shape[0] > capacity and cache.loads == 1
    for memory_id in ids:
        slot = entry.slot_of[memory_id]
        assert np.allclose(entry.matrix[slot], unit(memory_id))
        assert bool(entry.pinned[slot]) == (memory_id == ids[3])


async def test_filling_a_large_person_grows_no_table_by_the_whole_person() -> None:
    """A dict grows by allocating one table for all its entries and clearing it in a single call
    that no slicing of the fill can cut: the id map of a 100,000-memory person was a 5 MB table,
    40-52 ms of page faults on the event loop where fresh memory is slow to touch. The entry
    only grows while it is filled, so the largest Python block it holds is the largest it
    allocated: none may take 16 bytes a memory (the list of rows takes 8, a dict of ids 24 or
    more). numpy's arrays are another domain of tracemalloc's, reserved whole on purpose."""
    size = 10_000
    stamp = to_db(utcnow())
    rows = [
        MemoryRow(
            i, OwnerKey(ALICE), f"fait numéro {i}", "fact", "global", None, None, 0.9, 0, stamp, stamp, None,
            None, content_hash(f"fait numéro {i}"), 0, 0, 0,
        )
        for i in range(1, size + 1)
    ]  # fmt: skip
    vectors = {
        row.id: Vector(row.content_hash, 4, unit(row.id)[:4].astype(np.float32).tobytes(), stamp) for row in rows
    }
    entry = UserMemories(OwnerKey(ALICE), "model", (1, 1))
    tracemalloc.start()
    try:
        await entry.fill(rows, vectors, Slices())
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    python_blocks = snapshot.filter_traces([tracemalloc.DomainFilter(inclusive=True, domain=0)])
    largest = max(python_blocks.traces, key=lambda trace: trace.size)
    assert largest.size < 16 * size, largest.traceback.format()
    # Still the entry it was: every memory at its slot, with its vector.
    assert len(entry) == size and all(entry.slot_of[row.id] == slot for slot, row in enumerate(rows))
    assert entry.has_vector[:size].all() and entry.memory(entry.slot_of[1234]).text == "fait numéro 1234"


async def test_a_reflections_memories_reach_the_cache_before_the_persons_next_turn(
    db: SQLiteDatabase, tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The next message finds the entry current: the rows and vectors a reflection wrote are read
    in the background after it, and the person's turn reads their version alone."""
    llm_server.handler = lambda r: (
        json.dumps({"memories": [{"text": "L'utilisateur a un chat qui s'appelle Minou.", "type": "fact",
                                  "confidence": 0.95}]})
        if r.json_schema is not None else "Un chat ! Raconte."
    )  # fmt: skip
    async with http_client() as http:
        metrics = Metrics()
        engine = make_engine(db, http, llm_server, tmp_path, embedder=LocalEmbedder(), metrics=metrics)
        await engine.start()
        await engine.memories.remember(ALICE, "L'utilisateur habite à Nantes.", story_id="chan-1", place="guild-1")
        assert (await engine.conversation.turn(msg("J'ai un chat, il s'appelle Minou."))).reply is not None
        await engine.operator.wait_reflections(ALICE)
        await engine.operator.wait_background()
        memories = await engine.memories.list(ALICE)
        assert any("Minou" in m.text for m in memories)  # the reflection wrote it
        caught_up, hits = cache_reads(metrics, "catch_up"), cache_reads(metrics, "hit")

        assert (await engine.conversation.turn(msg("Tu te souviens de mon chat ?"))).reply is not None
        assert cache_reads(metrics, "catch_up") == caught_up  # nothing left to read for the turn
        assert cache_reads(metrics, "hit") > hits
        await engine.close()


async def test_a_catch_up_under_way_when_the_user_is_erased_is_not_kept(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reflection's background catch-up reads the changed rows while the person is erased:
    what it read is not put back in the cache."""
    store = MemoryStore(db)
    cache = MemoryCache(db, MODEL)
    await add(store, "L'utilisateur habite à Nantes")
    await cache.get(ALICE)
    await add(store, "L'utilisateur a un chat")
    reading, go_on = asyncio.Event(), asyncio.Event()
    read_rows = cache_module.memory_rows

    async def paused(*args: object, **kwargs: object) -> list[MemoryRow]:
        rows = await read_rows(*args, **kwargs)  # type: ignore[arg-type]
        reading.set()
        await go_on.wait()
        return rows

    monkeypatch.setattr(cache_module, "memory_rows", paused)
    catching_up = asyncio.create_task(cache.catch_up(ALICE))
    await reading.wait()  # the new row is read, not yet in the entry
    async with db.write() as conn:
        await erase_user_memories(conn, ALICE)
    cache.forget(ALICE)
    go_on.set()
    await catching_up
    assert ALICE not in cache
    monkeypatch.setattr(cache_module, "memory_rows", read_rows)
    assert len(await cache.get(ALICE)) == 0


async def test_a_catch_up_leaves_an_entry_not_held_unloaded(db: SQLiteDatabase) -> None:
    cache = MemoryCache(db, MODEL)
    await add(MemoryStore(db), "L'utilisateur habite à Nantes")
    await cache.catch_up(ALICE)
    assert ALICE not in cache and cache.loads == 0
