"""How responsive the process is, for the owner's page and /metrics: how late the event loop runs
what is due (its lag: work that held it, or a machine too busy to run the process) and how long a
turn's query waits for the local embedding model, over the last minutes.

The lag is read by a task that sleeps TICK_SECONDS and notes how late it woke; a wait, by the
model's queue when a request first reaches the model (bot/clients/model_queue.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TICK_SECONDS = 0.25
WINDOW_SECONDS = 600.0
# Samples kept per figure: a tick every 0.25 s for 10 minutes, and as many waits.
KEPT = 2_400


@dataclass(frozen=True, slots=True)
class Recently:
    """A figure's last WINDOW_SECONDS: how many samples, and its p50, p95 and max in ms."""

    samples: int
    p50_ms: float
    p95_ms: float
    max_ms: float


class Recent:
    """Samples in seconds of the last WINDOW_SECONDS (at most KEPT), from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=KEPT)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._samples.append((self._clock(), seconds))

    def figures(self) -> Recently:
        since = self._clock() - WINDOW_SECONDS
        with self._lock:
            values = np.array([s for at, s in self._samples if at >= since], dtype=np.float64) * 1000
        if not values.size:
            return Recently(0, 0.0, 0.0, 0.0)
        p50, p95 = np.percentile(values, [50, 95])
        return Recently(int(values.size), float(p50), float(p95), float(values.max()))


async def watch_loop(noted: Callable[[float], None], stop: asyncio.Event | None = None) -> None:
    """Note how late the event loop wakes a TICK_SECONDS sleep, until `stop` (or cancelled)."""
    loop = asyncio.get_running_loop()
    while stop is None or not stop.is_set():
        start = loop.time()
        await asyncio.sleep(TICK_SECONDS)
        noted(max(0.0, loop.time() - start - TICK_SECONDS))
