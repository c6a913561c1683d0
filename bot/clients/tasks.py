"""The one way to start a background task: it is referenced until done and its failure is logged."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("background task %s failed", task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running tasks (and those they start); True if all finished in time."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._tasks:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def quiet_when_cancelled(job: Callable[[], Awaitable[Any]]) -> Callable[[], Coroutine[Any, Any, None]]:
    """A scheduled job that ends quietly when the shutdown cancels it mid-run.

    The scheduler logs any exception of a job, CancelledError included, as an ERROR with its
    traceback: every short session would end with one. A job cancelled at shutdown has nothing
    to report; its unfinished work is picked up by the next run."""

    @functools.wraps(job)
    async def run() -> None:
        try:
            await job()
        except asyncio.CancelledError:
            log.debug("job %s cancelled at shutdown", getattr(job, "__name__", job))

    return run
