"""One way to report a dependency that fails: a log line when it starts failing, one when it is
back, and a count in between (the LLM, the embedder, the indexer, the database's disk).

A dependency that flaps (a nearly full disk letting small writes through, an embedder that
answers one call in two) would otherwise write a line per flap: after a failure line, the next
one waits QUIET_SECONDS.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

QUIET_SECONDS = 600.0


class Outage:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        level: int = logging.WARNING,
        quiet_seconds: float = QUIET_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._level = level
        self._quiet = quiet_seconds
        self._clock = clock
        # Failures since start-up, and in the outage under way (0: none is).
        self.failures = 0
        self.current = 0
        self._logged_at: float | None = None
        self._announced = False

    @property
    def down(self) -> bool:
        return self.current > 0

    def failed(self, message: str, *args: object) -> None:
        """Count one failure; log `message % args` if no failure line was logged lately."""
        self.failures += 1
        self.current += 1
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= self._quiet:
            self._logged_at = now
            self._announced = True
            self._log.log(self._level, message, *args)

    def recovered(self, message: str) -> None:
        """End the outage under way, if any; `message` has one %d: its failures."""
        if self._announced:
            self._log.info(message, self.current)
        self.current = 0
        self._announced = False
