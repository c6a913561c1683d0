"""Long jobs on the event loop, cut so that turns go on between their slices."""

from __future__ import annotations

import asyncio
import gc
import time

# Long jobs on the event loop (filling an entry, filing a write index) return to it once they
# have run this long. Each of a turn's awaits (a read, each statement of a write, the embedding)
# may wait for one slice of each such job: at 5 ms, the 20 others' turns during a cold 100,000-
# memory user's start took tens of milliseconds more each.
SLICE_SECONDS = 0.002
# Rows an entry is filled by between two looks at the clock (well under a millisecond of work).
FILL_SLICE = 250


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic collector's reach (`gc.freeze`).

    A full collection walks every tracked object: with a user's 100,000 rows, vectors and write
    index alive, each one stopped the event loop for seconds (0.6 s already at 20,000 memories),
    however the work around it was sliced. What the cache holds lives until evicted and holds no
    reference cycle, so reference counting still frees it then; a garbage cycle of other code
    frozen along with it stays until exit.
    """
    gc.freeze()


class Slices:
    """Where a long job on the event loop gives it back: `tick` returns to the loop once the job
    has run SLICE_SECONDS since it last did, so that turns go on between its slices."""

    def __init__(self) -> None:
        self._started = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._started > SLICE_SECONDS:
            await asyncio.sleep(0)
            self._started = time.perf_counter()
