"""The chat model's budget: LLM_CONCURRENCY places shared by every call, the next free place to
the most urgent waiting call, first come first served within a priority, nothing held back when
a place is free, nothing lost to a cancelled caller."""

from __future__ import annotations

import asyncio

import pytest

from bot.clients.model_queue import ModelBudget, Priority


class Calls:
    """Calls that enter the budget and hold their place until released, in the order they ran."""

    def __init__(self, budget: ModelBudget) -> None:
        self.budget = budget
        self.ran: list[str] = []
        self.release: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.waits: dict[str, float] = {}

    def start(self, name: str, priority: Priority) -> asyncio.Task[None]:
        self.release[name] = asyncio.Event()

        async def call() -> None:
            async with self.budget.place(priority, lambda seconds: self.waits.__setitem__(name, seconds)):
                self.ran.append(name)
                await self.release[name].wait()

        self.tasks[name] = asyncio.create_task(call(), name=name)
        return self.tasks[name]

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def finish(self, name: str) -> None:
        self.release[name].set()
        await self.tasks[name]
        await self.settle()


async def test_a_call_takes_a_free_place_at_once_and_no_more_than_capacity_run():
    calls = Calls(ModelBudget(2))
    calls.start("a", Priority.REFLECTION)
    calls.start("b", Priority.REFLECTION)
    calls.start("c", Priority.LIVE)
    await calls.settle()
    assert calls.ran == ["a", "b"] and calls.budget.running == 2 and calls.budget.waiting() == 1
    assert calls.waits["a"] < 0.05
    await calls.finish("a")
    assert calls.ran == ["a", "b", "c"]
    await calls.finish("b")
    await calls.finish("c")
    assert calls.budget.running == 0


async def test_a_live_call_takes_the_next_place_before_every_waiting_background_call():
    calls = Calls(ModelBudget(1))
    calls.start("reflection in progress", Priority.REFLECTION)
    await calls.settle()
    for name, priority in (
        ("consolidation", Priority.CONSOLIDATION),
        ("reflection 1", Priority.REFLECTION),
        ("import", Priority.IMPORT),
        ("reflection 2", Priority.REFLECTION),
        ("follow-up", Priority.FOLLOW_UP),
        ("live 1", Priority.LIVE),
        ("live 2", Priority.LIVE),
    ):
        calls.start(name, priority)
        await calls.settle()
    for event in calls.release.values():
        event.set()  # each waiting call returns at once when its turn comes
    await asyncio.gather(*calls.tasks.values())
    assert calls.ran == [
        "reflection in progress",  # a call in progress is never interrupted
        "live 1", "live 2", "follow-up", "reflection 1", "reflection 2", "consolidation", "import",
    ]  # fmt: skip


async def test_background_calls_all_run_when_no_live_call_waits():
    calls = Calls(ModelBudget(1))
    for n in range(5):
        calls.start(f"reflection {n}", Priority.REFLECTION)
    calls.start("consolidation", Priority.CONSOLIDATION)
    await calls.settle()
    for name in list(calls.release):
        await calls.finish(name)
    assert calls.ran == [*(f"reflection {n}" for n in range(5)), "consolidation"]
    assert calls.budget.running == 0 and calls.budget.waiting() == 0


async def test_a_caller_cancelled_while_it_waits_loses_its_turn_and_blocks_no_one():
    calls = Calls(ModelBudget(1))
    calls.start("holder", Priority.LIVE)
    calls.start("given up", Priority.LIVE)
    calls.start("next", Priority.REFLECTION)
    await calls.settle()
    calls.tasks["given up"].cancel()
    await calls.settle()
    assert calls.budget.waiting() == 1
    await calls.finish("holder")
    assert calls.ran == ["holder", "next"]
    await calls.finish("next")
    with pytest.raises(asyncio.CancelledError):
        await calls.tasks["given up"]
    assert calls.budget.running == 0


async def test_a_caller_cancelled_as_it_is_given_the_place_passes_it_on():
    budget = ModelBudget(1)
    calls = Calls(budget)
    async with budget.place(Priority.LIVE):
        calls.start("granted then cancelled", Priority.LIVE)
        calls.start("next", Priority.REFLECTION)
        await calls.settle()
    # Leaving the block gave the place to the first waiting call, which has not resumed yet.
    assert budget.running == 1 and calls.ran == []
    calls.tasks["granted then cancelled"].cancel()
    await calls.settle()
    assert calls.ran == ["next"] and budget.running == 1
    await calls.finish("next")
    assert budget.running == 0


def test_a_budget_has_at_least_one_place():
    with pytest.raises(ValueError, match="at least one place"):
        ModelBudget(0)
