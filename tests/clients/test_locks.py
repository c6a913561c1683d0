"""One keyed-lock helper: one holder per key at a time, whoever arrives when, and a key's lock
gone once nobody holds or waits for it."""

from __future__ import annotations

import asyncio

import pytest

from bot.clients.locks import KeyedLocks
from bot.memory.cache.memory_cache import MemoryCache


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_newcomer_after_a_release_waits_for_the_holder_that_was_waiting() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    inside: list[str] = []
    peak = 0
    gates = {name: asyncio.Event() for name in "ABC"}

    async def hold(name: str) -> None:
        nonlocal peak
        async with locks.hold("alice"):
            inside.append(name)
            peak = max(peak, len(inside))
            await gates[name].wait()
            inside.remove(name)

    a, b = asyncio.create_task(hold("A")), asyncio.create_task(hold("B"))
    await _settle()
    gates["A"].set()  # A leaves while B waits: B holds next
    await _settle()
    c = asyncio.create_task(hold("C"))
    await _settle()
    assert inside == ["B"] and locks.locked("alice")
    gates["B"].set()
    gates["C"].set()
    await asyncio.gather(a, b, c)
    assert peak == 1
    assert len(locks) == 0


async def test_keys_are_independent_and_a_cancelled_waiter_leaves_nothing_behind() -> None:
    locks: KeyedLocks[int] = KeyedLocks()
    release = asyncio.Event()

    async def hold(key: int) -> None:
        async with locks.hold(key):
            await release.wait()

    first, other = asyncio.create_task(hold(1)), asyncio.create_task(hold(2))
    waiter = asyncio.create_task(hold(1))
    await _settle()
    assert locks.locked(1) and locks.locked(2) and len(locks) == 2
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await asyncio.gather(first, other)
    assert len(locks) == 0


async def test_the_memory_cache_reads_one_user_once_at_a_time(db) -> None:
    """A caller arriving just after a release used to make a second lock and read the user
    beside the caller that was waiting (the comment in `get` called it harmless)."""
    cache = MemoryCache(db, None)
    real = cache._current
    inside: list[int] = []
    peak = 0
    gates = [asyncio.Event() for _ in range(3)]
    order = iter(range(3))

    async def current(user_id, conn):  # type: ignore[no-untyped-def]
        nonlocal peak
        n = next(order)
        inside.append(n)
        peak = max(peak, len(inside))
        await gates[n].wait()
        inside.remove(n)
        return await real(user_id, conn)

    cache._current = current  # type: ignore[method-assign]
    a, b = asyncio.create_task(cache.get("alice")), asyncio.create_task(cache.get("alice"))
    await _settle()
    gates[0].set()
    while inside != [1]:  # the first read done (a database round trip), the second one in
        await asyncio.sleep(0.01)
    c = asyncio.create_task(cache.get("alice"))
    await _settle()
    for gate in gates:
        gate.set()
    await asyncio.gather(a, b, c)
    assert peak == 1
