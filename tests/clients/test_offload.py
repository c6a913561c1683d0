"""Pure work that grows with a person's memories runs in a worker process, never on the event
loop for long: a large job goes to the worker and gives the answer the same function gives here;
a small one runs on the loop without starting a process; a worker that dies leaves the rest of
the job to the loop, answered all the same."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
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
