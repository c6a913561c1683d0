"""Pure work that grows with a person's memories runs in a worker process, never on the event
loop for long: a large job goes to the worker and gives the answer the same function gives here;
a small one runs on the loop without starting a process; a worker that dies leaves the rest of
the job to the loop, answered all the same."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Sequence

import pytest

from bot.clients.offload import Offload
from bot.memory.write.index import write_facts
from tests.memory.write.test_index import CORPUS


def shout_or_die(items: Sequence[str]) -> list[str]:
    """Upper-cases the items; in a worker process, dies on the item "die" (the loop survives it)."""
    if "die" in items and multiprocessing.parent_process() is not None:
        os._exit(1)
    return [item.upper() for item in items]


async def test_a_small_job_runs_on_the_loop_and_starts_no_process() -> None:
    offload = Offload()
    assert await offload.map(write_facts, CORPUS[:10]) == write_facts(CORPUS[:10])
    assert (offload.inline, offload.offloaded, offload.starts, offload.running) == (10, 0, 0, False)


@pytest.mark.slow
async def test_a_large_job_runs_in_the_worker_with_the_same_answer_and_it_stops_when_idle() -> None:
    offload = Offload(inline_below=2, idle_seconds=0.2)
    try:
        parts = [part async for part in offload.chunks(write_facts, CORPUS, chunk=50)]
        assert [len(p) for p in parts] == [50, 50, 50, len(CORPUS) - 150]
        assert [facts for part in parts for facts in part] == write_facts(CORPUS)
        assert (offload.offloaded, offload.inline, offload.starts) == (len(CORPUS), 0, 1)
        assert offload.running
        await asyncio.sleep(1.0)
        assert not offload.running  # stopped once idle: its memory goes back
        assert await offload.map(write_facts, CORPUS[:5]) == write_facts(CORPUS[:5])
        assert offload.starts == 2
    finally:
        offload.close()


@pytest.mark.slow
async def test_a_worker_that_dies_leaves_the_rest_to_the_loop() -> None:
    offload = Offload(inline_below=1)
    items = ["a", "b", "die", "c", "d"]
    try:
        assert await offload.map(shout_or_die, items, chunk=2) == ["A", "B", "DIE", "C", "D"]
        assert (offload.offloaded, offload.inline) == (2, 3)
        assert offload.outage.failures == 1
        # The next job starts a new worker.
        assert await offload.map(shout_or_die, ["e", "f"]) == ["E", "F"]
        assert offload.offloaded == 4
    finally:
        offload.close()
    assert await offload.map(shout_or_die, ["g"] * 3) == ["G"] * 3  # closed: on the loop


def clock(items: Sequence[str]) -> list[float]:
    """When each item was worked on (time.monotonic(): one clock for every process)."""
    return [time.monotonic() for _ in items]


@pytest.mark.slow
async def test_a_large_job_pauses_while_a_turn_does_its_memory_work() -> None:
    """At any priority the worker's core slowed the others' turns (their embedding, their
    statements): while a turn works, the job waits between two pieces of a few items."""
    offload = Offload(inline_below=1)
    try:
        await offload.map(clock, ["started"])  # the worker is up: its start is not the wait
        asked = time.monotonic()
        offload.give_way(0.4)
        worked = await offload.map(clock, [str(i) for i in range(12)])
        assert min(worked) >= asked + 0.4
        assert time.monotonic() - asked < 0.4 + 2  # and goes on once the turn is done
    finally:
        offload.close()


@pytest.mark.slow
async def test_turns_without_a_gap_never_stop_a_large_job() -> None:
    """The heavy person's own reflection waits for the job: on a bot never idle it still runs a
    piece at least every `longest_pause`."""
    offload = Offload(inline_below=1)
    offload.longest_pause = 0.2
    try:
        await offload.map(clock, ["started"])
        offload.give_way(3600)
        asked = time.monotonic()
        worked = await offload.map(clock, [str(i) for i in range(12)])  # 3 pieces
        assert len(worked) == 12
        assert min(worked) >= asked + 0.2
        assert time.monotonic() - asked < 3 * 0.2 + 2
    finally:
        offload.close()
