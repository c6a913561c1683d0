"""The consolidation's scan finds the series `find_series` finds among the person's memories, and
a later scan reads again only the memories changed since (the rest keep their keys); a large
person's keys are computed in the worker process, with the same series."""

from __future__ import annotations

import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.offload import Offload
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.consolidation.scan import ScanFigures, SeriesScan
from bot.memory.model import Cause, NewMemory, utcnow
from bot.memory.series import find_series
from bot.memory.stores.memory_store import MemoryStore

ALICE = "alice"


def texts() -> list[NewMemory]:
    visits = [NewMemory(text=f"L'utilisateur a visité Trieste en {2010 + i}.", place="g") for i in range(5)]
    runs = [NewMemory(text=f"L'utilisatrice a couru {5 + i} km dimanche.", place="g") for i in range(4)]
    elsewhere = [NewMemory(text=f"L'utilisateur a visité Porto en {2015 + i}.", place="dm") for i in range(3)]
    pinned = NewMemory(text="L'utilisateur a visité Trieste en 2030.", place="g")
    dated = NewMemory(text="L'utilisateur a visité Trieste en 2031.", place="g", expires_at=utcnow().replace(year=2099))
    alone = [NewMemory(text="L'utilisateur aime le jazz.", place="g"), NewMemory(text="Il a un chat.", place=None)]
    return [*visits, *runs, *elsewhere, pinned, dated, *alone]


def shape(found: object) -> list[tuple[object, list[int]]]:
    return [(s.key, [m.id for m in s.members]) for s in found]  # type: ignore[attr-defined]


async def scan_matches_find_series(db: SQLiteDatabase, offload: Offload) -> None:
    store = MemoryStore(db)
    ids = [await store.add(ALICE, memory) for memory in texts()]
    await store.set_pinned(ALICE, ids[12], True)
    cache = MemoryCache(db, None)
    scan = SeriesScan(cache, offload)
    first = ScanFigures()
    found = await scan.series(ALICE, 3, first)
    assert shape(found) == shape(find_series(await store.list(ALICE), 3))
    assert len(found) == 3 and first.computed == len(ids)

    # One member changed, one deleted, one added: only the changed and the new are read again.
    await store.replace(ALICE, ids[5], "L'utilisatrice a couru 42 km lundi.", cause=Cause("edit"))
    await store.forget(ALICE, ids[0], cause=Cause("forget"))
    await store.add(ALICE, NewMemory(text="L'utilisateur a visité Trieste en 2024.", place="g"))
    second = ScanFigures()
    found = await scan.series(ALICE, 3, second)
    assert second.computed == 2
    assert shape(found) == shape(find_series(await store.list(ALICE), 3))
    assert scan.nbytes(ALICE) > 0
    cache.forget(ALICE)
    assert scan.nbytes(ALICE) == 0  # the keys go with the person's entry


async def test_a_scan_finds_the_series_and_reads_again_only_what_changed(db: SQLiteDatabase) -> None:
    await scan_matches_find_series(db, Offload())


@pytest.mark.slow
async def test_a_scan_through_the_worker_process_finds_the_same_series(db: SQLiteDatabase) -> None:
    offload = Offload(inline_below=1)
    try:
        await scan_matches_find_series(db, offload)
        assert offload.offloaded > 0 and offload.inline == 0
    finally:
        offload.close()
