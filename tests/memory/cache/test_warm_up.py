"""The start-up warm-up reads the recent speakers' memories and write indexes ahead of them, within
the cache's budget; a build is never used half done, and an erase is never undone by a load."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import numpy as np
import pytest

import bot.memory.cache.memory_cache as cache_module
import bot.memory.cache.slices as slices_module
from bot.clients.db import SQLiteDatabase
from bot.clients.metrics import Metrics
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.warm_up import WARM_DAYS, WARM_SHARE, warm_up
from bot.memory.model import NewMemory, utcnow
from bot.memory.stores.exchanges import save_exchange
from bot.memory.stores.memories import erase_user_memories
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.dedup_index import DedupIndex
from bot.memory.write.index import WriteIndexes
from tests.builders import cache_reads, make_engine, msg

PLACE = "guild-1"

pytestmark = pytest.mark.both_stores


async def seed(db: SQLiteDatabase, user: str, count: int, *, days_ago: float = 1.0, place: str = PLACE) -> None:
    store = MemoryStore(db)
    for i in range(count):
        await store.add(
            user, NewMemory(text=f"{user} a noté le fait numéro {i} : sa couleur {i} est rare", place=place)
        )
    async with db.write() as conn:
        await save_exchange(
            conn, user, user_name=user, story_id="chan-1", place=place, message_id=None,
            text="Bonjour", now=utcnow() - timedelta(days=days_ago),
        )  # fmt: skip


async def test_recent_speakers_are_warmed_with_their_write_index_and_the_idle_are_not(db: SQLiteDatabase) -> None:
    await seed(db, "alice", 30, days_ago=1)
    await seed(db, "bob", 10, days_ago=WARM_DAYS + 1)
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    done = await warm_up(db, cache, utcnow, indexes.warm)
    assert (done.users, done.memories, done.stopped) == (1, 30, "")
    assert "alice" in cache and "bob" not in cache
    loads = cache.loads
    # The first reflection finds the index built: no load, the same 30 memories indexed.
    entry, index = await indexes.get("alice", PLACE, utcnow())
    assert cache.loads == loads and len(index) == 30 and len(entry) == 30


async def test_warming_stops_before_the_cache_would_evict_what_it_warmed(db: SQLiteDatabase) -> None:
    for user in ("alice", "bob", "carol"):
        await seed(db, user, 20)
    small = MemoryCache(db, None)
    small_indexes = WriteIndexes(small)
    one_user = (await small_indexes.get("alice", PLACE, utcnow()))[0]
    per_user = small.nbytes
    assert per_user > one_user.nbytes  # the write index counts too
    # Room for three users, of which warming fills its share: two, then it stops.
    cache = MemoryCache(db, None, max_bytes=int(1.5 * per_user / WARM_SHARE))
    indexes = WriteIndexes(cache)
    done = await warm_up(db, cache, utcnow, indexes.warm)
    assert done.users == 2 and "budget" in done.stopped
    assert len(cache) == 2


async def test_a_reflection_arriving_during_the_build_waits_for_the_whole_index(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(db, "alice", 200)
    # A slice of one memory: the build returns to the loop after every row.
    monkeypatch.setattr(slices_module, "SLICE_SECONDS", 0.0)
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    warming = asyncio.create_task(warm_up(db, cache, utcnow, indexes.warm))
    while "alice" not in cache:  # loaded: the build starts now
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    _, index = await indexes.get("alice", PLACE, utcnow())
    assert len(index) == 200
    assert (await warming).users == 1


async def test_a_build_cancelled_halfway_leaves_no_partial_index(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(db, "alice", 200)
    monkeypatch.setattr(slices_module, "SLICE_SECONDS", 0.0)
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    warming = asyncio.create_task(warm_up(db, cache, utcnow, indexes.warm))
    while "alice" not in cache:
        await asyncio.sleep(0)
    for _ in range(20):  # some rows in, far from all
        await asyncio.sleep(0)
    warming.cancel()
    with pytest.raises(asyncio.CancelledError):
        await warming
    _, index = await indexes.get("alice", PLACE, utcnow())
    assert len(index) == 200


async def test_a_load_under_way_when_the_user_is_erased_is_not_kept(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(db, "alice", 30)
    cache = MemoryCache(db, None)
    first_page, go_on = asyncio.Event(), asyncio.Event()
    read_rows = cache_module.memory_rows

    async def paused_after_the_first_page(*args: object, **kwargs: object) -> list[object]:
        rows = await read_rows(*args, **kwargs)  # type: ignore[arg-type]
        first_page.set()
        await go_on.wait()
        return rows

    monkeypatch.setattr(cache_module, "memory_rows", paused_after_the_first_page)
    loading = asyncio.create_task(cache.get("alice"))
    await first_page.wait()  # her rows are read, not yet kept
    async with db.write() as conn:
        await erase_user_memories(conn, "alice")
    cache.forget("alice")
    go_on.set()
    assert len(await loading) == 30  # served to the caller who asked before the erase
    assert "alice" not in cache
    monkeypatch.setattr(cache_module, "memory_rows", read_rows)
    assert len(await cache.get("alice")) == 0


async def test_the_engine_warms_at_start_and_stops_warming_at_close(db, http, llm_server, tmp_path) -> None:
    await seed(db, "alice", 40)
    metrics = Metrics()
    engine = make_engine(db, http, llm_server, tmp_path, metrics=metrics)
    await engine.start()
    done = await engine.operator.warmed()
    assert done is not None and (done.users, done.memories) == (1, 40)
    loads = cache_reads(metrics, "load")
    result = await engine.conversation.turn(msg("Tu te souviens de ma couleur rare ?"))
    assert result.reply is not None
    await engine.operator.wait_reflections("alice")
    assert cache_reads(metrics, "load") == loads  # neither the turn nor its reflection read her whole again
    await engine.close()


def test_reserving_room_keeps_the_dedup_arrays_through_the_adds() -> None:
    index = DedupIndex()
    index.reserve(500)
    codes = index._codes
    for i in range(500):
        index.add(i, f"fait numéro {i}")
    assert index._codes is codes
    assert np.count_nonzero(index._active) == 500


async def test_a_built_index_is_served_while_another_place_of_the_user_is_being_built(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a reflection inside the write lock relies on: it never waits for another place's build.
    await seed(db, "alice", 300, place="guild-1")
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    await indexes.get("alice", "guild-1", utcnow())
    monkeypatch.setattr(slices_module, "SLICE_SECONDS", 0.0)
    other = asyncio.create_task(indexes.get("alice", "guild-2", utcnow()))
    while "guild-2" not in indexes.held("alice"):
        await asyncio.sleep(0)
    _, index = await indexes.get("alice", "guild-1", utcnow())
    assert len(index) == 300 and not other.done()
    await other
