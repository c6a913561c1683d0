"""Per-user sliding-window rate limit of the replies (pure: the clock is injected)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from enum import Enum

# Forgetting users whose window has emptied keeps the limiter's memory bounded.
_SWEEP_EVERY = 256


class Verdict(Enum):
    ALLOWED = "allowed"
    LIMITED = "limited"  # first refusal of a burst: tell the person once
    LIMITED_AGAIN = "limited again"  # later refusals of the same burst: stay silent


class RateLimiter:
    """At most `max_events` allowed events per key within any `window` seconds.

    Refused events are not counted: someone who keeps writing is answered again as soon as
    their earlier answered messages leave the window. `max_events == 0` means no limit.
    """

    def __init__(self, max_events: int, window: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if max_events < 0 or window <= 0:
            raise ValueError("max_events must be >= 0 and window > 0")
        self.max_events = max_events
        self.window = window
        self._clock = clock
        self._events: dict[str, deque[float]] = {}
        self._warned: set[str] = set()
        self._checks = 0

    def hit(self, key: str) -> Verdict:
        if self.max_events == 0:
            return Verdict.ALLOWED
        now = self._clock()
        self._checks += 1
        if self._checks % _SWEEP_EVERY == 0:
            self._sweep(now)
        events = self._events.setdefault(key, deque())
        while events and events[0] <= now - self.window:
            events.popleft()
        if len(events) < self.max_events:
            events.append(now)
            self._warned.discard(key)
            return Verdict.ALLOWED
        if key in self._warned:
            return Verdict.LIMITED_AGAIN
        self._warned.add(key)
        return Verdict.LIMITED

    def __len__(self) -> int:
        """Keys currently remembered."""
        return len(self._events)

    def _sweep(self, now: float) -> None:
        stale = [k for k, events in self._events.items() if not events or events[-1] <= now - self.window]
        for key in stale:
            del self._events[key]
            self._warned.discard(key)
