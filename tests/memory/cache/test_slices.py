"""The split containers of a long job (bot/memory/cache/slices.py) hold what a dict and a set
would, through any mix of writes: they only change how each grows. A long job steps aside for
other people's turns while they do memory work, for a bounded time."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import pytest

from bot.memory.cache.slices import (
    SHARDS,
    SLICE_SECONDS,
    SPLIT_AT,
    Foreground,
    Posting,
    ShardedDict,
    ShardedSet,
    Slices,
    post,
)


def test_a_sharded_dict_and_set_hold_what_a_dict_and_a_set_would() -> None:
    rng = random.Random(7)
    mapping, plain = ShardedDict[object, int](), dict[object, int]()
    items, same = ShardedSet[object](), set[object]()
    largest = 0
    for step in range(30_000):
        # Past SPLIT_AT entries, with removals before and after the split.
        key: object = rng.randrange(2 * SPLIT_AT) if step % 3 else ("text", rng.randrange(SPLIT_AT))
        action = rng.random()
        if action < 0.6:
            mapping[key] = plain[key] = step
            items.add(key)
            same.add(key)
        elif action < 0.8:
            assert mapping.pop_or(key) == plain.pop(key, None)
            items.discard(key)
            same.discard(key)
        else:
            assert mapping.get(key, -1) == plain.get(key, -1)
            assert (key in mapping, key in items) == (key in plain, key in same)
        largest = max(largest, len(plain))
    assert largest > SPLIT_AT
    assert mapping == plain and dict(mapping.items()) == plain and len(mapping) == len(plain)
    assert set(items) == same and len(items) == len(same)
    del mapping[next(iter(plain))]
    assert len(mapping) == len(plain) - 1


def test_a_posting_is_split_past_its_size_and_keeps_every_item() -> None:
    postings: dict[str, Posting] = {}
    for item in range(SPLIT_AT - 1):
        post(postings, "common", item)
        post(postings, "rare", item % 3)
    assert type(postings["common"]) is set and postings["rare"] == {0, 1, 2}
    for item in range(SPLIT_AT - 1, 3 * SPLIT_AT):
        post(postings, "common", item)
    common = postings["common"]
    assert isinstance(common, ShardedSet)
    assert set(common) == set(range(3 * SPLIT_AT)) and len(common) == 3 * SPLIT_AT
    common.discard(5)
    assert 5 not in common and 6 in common


def spin(seconds: float) -> None:
    """Hold the loop for `seconds`, as a slice of a long job does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def sliced_job(foreground: Foreground, person: str, steps: list[int]) -> None:
    slices = Slices(foreground, person)
    while True:
        spin(SLICE_SECONDS * 1.5)
        steps[0] += 1
        await slices.tick()


async def test_a_long_job_steps_aside_while_another_persons_turn_does_memory_work() -> None:
    """Alice's job waits for Bob's turn at its next tick, goes on while Bob's turn waits for the
    model (`aside`) and once it is over; her own turn never holds it."""
    foreground = Foreground(most=60.0)
    steps = [0]
    with foreground.turn("bob"):
        job = asyncio.create_task(sliced_job(foreground, "alice", steps))
        await asyncio.sleep(0.2)
        assert steps[0] == 1  # one slice, then it waits for Bob's memory work
        with foreground.aside("bob"):
            await asyncio.sleep(0.1)
            assert steps[0] > 2
        held = steps[0]
        await asyncio.sleep(0.2)
        assert steps[0] <= held + 1  # the slice under way when Bob came back, no more
    await asyncio.sleep(0.1)
    assert steps[0] > held + 2
    assert foreground.figures() == (0, pytest.approx(foreground.stepped_aside))
    assert foreground.stepped_aside >= 0.35
    with foreground.turn("alice"):
        mine = steps[0]
        await asyncio.sleep(0.1)
        assert steps[0] > mine + 2
        assert foreground.figures()[0] == 1
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job


async def test_a_long_job_never_waits_longer_than_the_bound_at_one_tick() -> None:
    """Turns that never stop still leave the job a slice per `most` seconds: it is late, not
    starved."""
    foreground = Foreground(most=0.02)
    steps = [0]
    with foreground.turn("bob"):
        job = asyncio.create_task(sliced_job(foreground, "alice", steps))
        await asyncio.sleep(0.5)
        # About one slice per 23 ms of a busy loop; a loaded machine gets fewer, never none.
        assert 4 <= steps[0] <= 30
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job


class CountedSlices(Slices):
    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0

    async def tick(self) -> None:
        self.ticks += 1
        await super().tick()


async def test_a_large_sharded_dict_is_released_a_part_at_a_time_and_stays_usable() -> None:
    """What a cold load read (100,000 vectors) is freed a 64th at a time, between looks at the
    clock, not in one callback when the load's frame ends."""
    mapping = ShardedDict[int, bytes]()
    for i in range(4 * SPLIT_AT):
        mapping[i] = bytes(64)
    slices = CountedSlices()
    await mapping.release(slices)
    assert len(mapping) == 0 and dict(mapping.items()) == {}
    assert slices.ticks == SHARDS
    mapping[7] = b"again"
    assert mapping[7] == b"again" and len(mapping) == 1
