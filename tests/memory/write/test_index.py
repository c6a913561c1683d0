"""The write index kept per user and place gives the write path the answers a fresh scan gives:
the flip check looks only at memories that can reach its overlap, dedup finds the same target,
and the index follows every kind of write (reflection, command, another process) without being
rebuilt; a reflection that does not land leaves no trace in it."""

from __future__ import annotations

import asyncio
import itertools
import tracemalloc
from datetime import timedelta

import pytest

from bench.dedup_corpus import FACTS
from bench.dedup_corpus_en import FACTS_EN
from bot.clients.db import SQLiteDatabase
from bot.clients.offload import Offload
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.cache.slices import Foreground
from bot.memory.model import Cause, NewMemory, utcnow
from bot.memory.stores.memories import memory_rows, row_to_memory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.dedup import best_match_exhaustive
from bot.memory.write.index import FlipIndex, WriteIndex, WriteIndexes, write_facts
from bot.memory.write.negation import flipped_negation
from bot.memory.write.reflection import CandidateIn, Reflection
from tests.memory.write.test_filters import FLIPS, NOT_FLIPS

ALICE = "alice"
PLACE = "guild-1"

CORPUS = [t for texts in FACTS.values() for t in texts] + [t for texts in FACTS_EN.values() for t in texts]
FLIP_TEXTS = [t for pair in FLIPS + NOT_FLIPS for t in pair]


def test_flip_index_gives_the_full_scans_answer_on_the_corpora() -> None:
    texts = list(dict.fromkeys(CORPUS + FLIP_TEXTS))
    index = FlipIndex()
    for i, text in enumerate(texts):
        index.add(i, text)
    found = 0
    for i, text in enumerate(texts):
        others = [(j, t) for j, t in enumerate(texts) if j != i]
        full = flipped_negation(text, others)
        among = [(j, texts[j]) for j in index.candidates(text) if j != i]
        assert flipped_negation(text, among) == full, text
        index.remove(i)
        assert index.flipped(text) == full, text
        index.add(i, text)
        found += full is not None
        # The lookup must cut: a candidate is compared with a few memories, not all of them.
        assert len(among) < len(texts) // 2
    assert found >= len(FLIPS)  # the flips are really found through the index


def test_write_index_dedup_is_the_exhaustive_match_and_follows_places_and_expiry() -> None:
    now_us = 1_000
    index = WriteIndex(PLACE)
    live = {}
    for i, text in enumerate(CORPUS):
        place = (PLACE, None, "dm")[i % 3]
        expires = (None, None, 500, 2_000)[i % 4]
        index.put(i, text, place, expires, now_us)
        if place != "dm" and (expires is None or expires > now_us):
            live[i] = text
    assert index.texts == live
    for text in CORPUS[::7]:
        assert index.dedup.best_match(text) == best_match_exhaustive(text, live.items())
    index.expire(2_000)
    assert all(i % 4 != 3 for i in index.texts)


# A person as the load bench's cold one: words in every memory, a number (a carrier) in each.
LARGE = 10_000


def test_filing_a_large_person_grows_no_table_by_the_whole_person() -> None:
    """A dict or a set grows by allocating one table for all its entries and clearing it, in a
    single call that no slicing of the build can cut: at 100,000 memories, tables of 5 MB, and
    30-120 ms of page faults on the event loop where fresh memory is slow to touch. Filing only
    grows the index's containers (a container split in parts drops a table of SPLIT_AT entries,
    under the bound here), so the largest table it holds is the largest it allocated: none may
    take 16 bytes a memory (a list of the memories takes 8, a dict or set of them 24 or more).
    The facts come from elsewhere, as in a build (`write_facts` in the worker)."""
    texts = [f"Note {i} : l'utilisateur aime le thé vert du matin." for i in range(LARGE)]
    facts = write_facts(texts)
    index = WriteIndex(PLACE)
    index.reserve(LARGE)
    tracemalloc.start()
    try:
        for i, (text, known) in enumerate(zip(texts, facts, strict=True)):
            index.put(i, text, PLACE, None, 0, known)
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    python_blocks = snapshot.filter_traces([tracemalloc.DomainFilter(inclusive=True, domain=0)])  # not numpy's
    largest = max(python_blocks.traces, key=lambda trace: trace.size)
    assert largest.size < 16 * LARGE, largest.traceback.format()
    # Still the index it was: every memory held, found by dedup and by the flip lookup.
    assert len(index) == LARGE and len(index.texts) == LARGE
    assert index.dedup.best_match(texts[1234]) == (1234, 1.0)
    assert 4321 in index.flips.candidates("Note 4321 : l'utilisateur n'aime pas le thé vert du matin.")
    index.drop(1234)
    assert index.dedup.best_match(texts[1234]) != (1234, 1.0) and 1234 not in index.texts


def candidate(text: str) -> CandidateIn:
    return CandidateIn(text=text, type="fact", scope="global", confidence=0.95)


async def add(db: SQLiteDatabase, text: str, **fields: object) -> int:
    return await MemoryStore(db).add(ALICE, NewMemory(text=text, place=PLACE, **fields))  # type: ignore[arg-type]


def context(**fields: object) -> ReflectionContext:
    base: dict[str, object] = {
        "user_id": ALICE, "allowed_ids": frozenset(), "character_name": "Écho", "user_message": "", "user_name": "Alice",
        "story_id": "s1", "place": PLACE, "source": "test",
    }  # fmt: skip
    base.update(fields)
    return ReflectionContext(**base)  # type: ignore[arg-type]


async def live_texts(db: SQLiteDatabase) -> dict[int, str]:
    now = utcnow()
    return {
        m.id: m.text
        for m in map(row_to_memory, await memory_rows(db.reader, ALICE))
        if not m.is_expired(now) and m.place in (PLACE, None)
    }


async def test_the_index_follows_every_write_without_a_rebuild(db: SQLiteDatabase) -> None:
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    store = MemoryStore(db)
    nantes = await add(db, "L'utilisateur habite à Nantes depuis deux ans.")
    velo = await add(db, "L'utilisateur fait du vélo tous les dimanches.")
    _, index = await indexes.get(ALICE, PLACE, utcnow())

    # A reflection, each command, a memory that expires, one of another place.
    await apply_reflection(
        db,
        Reflection(memories=[candidate("L'utilisateur a un chat qui s'appelle Minou.")]),
        context(),
        indexes=indexes,
    )
    await store.replace(ALICE, nantes, "L'utilisateur habite à Lyon depuis deux ans.", cause=Cause("edit"))
    await store.forget(ALICE, velo, cause=Cause("forget"))
    history = (await store.history(ALICE))[0].id
    await add(db, "L'utilisateur part à Rome demain.", expires_at=utcnow() + timedelta(milliseconds=50))
    await MemoryStore(db).add(ALICE, NewMemory(text="L'utilisateur aime le jazz.", place="dm"))
    _, again = await indexes.get(ALICE, PLACE, utcnow())
    assert again is index
    assert index.texts == await live_texts(db)

    await store.restore(ALICE, history, cause=Cause("restore"))
    later = utcnow() + timedelta(seconds=1)
    _, again = await indexes.get(ALICE, PLACE, later)
    assert again is index
    assert index.texts == {i: t for i, t in (await live_texts(db)).items() if "Rome" not in t}


async def test_writes_of_another_process_reach_the_index(db: SQLiteDatabase) -> None:
    other = await SQLiteDatabase.open(db.path)
    try:
        cache = MemoryCache(db, None)
        indexes = WriteIndexes(cache)
        await add(db, "L'utilisateur habite à Nantes depuis deux ans.")
        _, index = await indexes.get(ALICE, PLACE, utcnow())
        await MemoryStore(other).add(ALICE, NewMemory(text="L'utilisateur joue du piano.", place=PLACE))
        _, again = await indexes.get(ALICE, PLACE, utcnow())
        assert again is index and index.texts == await live_texts(db)
    finally:
        await other.close()


async def test_a_reflection_that_does_not_land_leaves_nothing_in_the_index(db: SQLiteDatabase) -> None:
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    await add(db, "L'utilisateur habite à Nantes depuis deux ans.")
    await indexes.get(ALICE, PLACE, utcnow())

    async def refuse(conn: object) -> None:
        raise RuntimeError("the exchanges changed")

    with pytest.raises(RuntimeError):
        await apply_reflection(
            db,
            Reflection(memories=[candidate("L'utilisateur a un chien qui s'appelle Rex.")]),
            context(),
            indexes=indexes,
            finalize=refuse,  # type: ignore[arg-type]
        )
    _, index = await indexes.get(ALICE, PLACE, utcnow())
    assert index.texts == await live_texts(db)
    assert not any("Rex" in t for t in index.texts.values())


@pytest.mark.parametrize("places", list(itertools.product([PLACE, None], repeat=2)))
async def test_a_reflection_with_the_cache_decides_like_one_without(db: SQLiteDatabase, places: tuple) -> None:
    first, second = places
    for text in CORPUS[:40]:
        await MemoryStore(db).add(ALICE, NewMemory(text=text, place=first))
    reflection = Reflection(memories=[candidate(t) for t in CORPUS[40:60:2] + CORPUS[1:20:3]])
    cache = MemoryCache(db, None)
    indexes = WriteIndexes(cache)
    await indexes.get(ALICE, second, utcnow())
    path = db.path
    copy = await SQLiteDatabase.open(path.with_name("copy.sqlite3"))
    try:
        for text in CORPUS[:40]:
            await MemoryStore(copy).add(ALICE, NewMemory(text=text, place=first))
        with_cache = await apply_reflection(db, reflection, context(place=second), indexes=indexes)
        without = await apply_reflection(copy, reflection, context(place=second))
    finally:
        await copy.close()
    assert [(d.action, d.text, d.memory_id) for d in with_cache.decisions] == [
        (d.action, d.text, d.memory_id) for d in without.decisions
    ]


@pytest.mark.slow
async def test_an_index_built_in_the_worker_process_decides_like_one_built_here(db: SQLiteDatabase) -> None:
    """A large user's index reads its texts in the worker process (bot/clients/offload.py): it
    holds what an index built on the loop holds, finds the exhaustive scan's dedup target and flip,
    and a reflection through it decides as one without any index."""
    copy = await SQLiteDatabase.open(db.path.with_name("copy.sqlite3"))
    for text in CORPUS[:150]:
        await MemoryStore(db).add(ALICE, NewMemory(text=text, place=PLACE))
        await MemoryStore(copy).add(ALICE, NewMemory(text=text, place=PLACE))
    offload = Offload(inline_below=1)
    try:
        worker = WriteIndexes(MemoryCache(db, None), offload)
        _, built = await worker.get(ALICE, PLACE, utcnow())
        assert offload.offloaded == len(built) == 150 and offload.inline == 0
        _, here = await WriteIndexes(MemoryCache(db, None)).get(ALICE, PLACE, utcnow())
        live = await live_texts(db)
        assert built.texts == here.texts == live
        for text in CORPUS + FLIP_TEXTS:
            assert (
                built.dedup.best_match(text) == here.dedup.best_match(text) == best_match_exhaustive(text, live.items())
            )
            assert built.flips.flipped(text) == here.flips.flipped(text) == flipped_negation(text, live.items())
        reflection = Reflection(memories=[candidate(t) for t in CORPUS[150:188:2] + CORPUS[1:60:5] + FLIP_TEXTS[::3]])
        with_worker = await apply_reflection(db, reflection, context(), indexes=worker)
        without = await apply_reflection(copy, reflection, context())
        assert [(d.action, d.text, d.memory_id) for d in with_worker.decisions] == [
            (d.action, d.text, d.memory_id) for d in without.decisions
        ]
    finally:
        offload.close()
        await copy.close()


async def test_a_build_steps_aside_while_another_persons_turn_does_memory_work(db: SQLiteDatabase) -> None:
    """Filing a large person's index on the loop waits while someone else's turn does its memory
    work (everyone's overhead doubled beside a cold 100,000-memory build), then finishes whole;
    the person's own turn does not hold it, nor does anyone's inside the write lock."""
    for text in CORPUS[:200]:
        await MemoryStore(db).add(ALICE, NewMemory(text=text, place=PLACE))
    cache = MemoryCache(db, None, foreground=Foreground(most=60.0))
    with cache.foreground.turn("bob"):
        build = asyncio.create_task(WriteIndexes(cache).get(ALICE, PLACE, utcnow()))
        await asyncio.sleep(1.0)
        assert not build.done()
    _, index = await asyncio.wait_for(build, 30)
    assert index.texts == await live_texts(db)
    assert cache.foreground.stepped_aside >= 0.9
    with cache.foreground.turn(ALICE):
        _, again = await asyncio.wait_for(WriteIndexes(cache).get(ALICE, PLACE, utcnow()), 30)
    assert again.texts == index.texts
    # Built inside the write lock (a caller passing its connection), it steps aside for no one:
    # the turns it would wait for may be waiting for that lock.
    waited = cache.foreground.stepped_aside
    with cache.foreground.turn("bob"):
        async with db.write() as conn:
            _, locked = await asyncio.wait_for(WriteIndexes(cache).get(ALICE, PLACE, utcnow(), conn), 30)
    assert locked.texts == index.texts
    assert cache.foreground.stepped_aside == waited
