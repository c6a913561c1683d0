"""At start-up, the memories of the people who spoke lately are read into the cache ahead of them.

A process starts with an empty memory cache. The first turn of a user then reads all their
memories (3-9 s at 100,000) and their first reflection builds the write index (20-70 s at
100,000, in slices on the event loop): a cold start that, with a large user among others talking, ran
inside everyone's turns. Warming does that work right after start, in the background, for the
people who spoke in the last WARM_DAYS, the most recent first, and stops before the cache would
have to evict what it warmed. Turns are served meanwhile; one that arrives for a user being
warmed waits for that user's load, which it would have done itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.clients.storage import Database
from bot.errors import StorageError
from bot.memory.cache.entry import UserMemories
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.model import OwnerKey
from bot.memory.stores.exchanges import recent_speakers

log = logging.getLogger(__name__)

WARM_DAYS = 7
# (user, place) pairs looked at, at most: the most recent ones.
WARM_LIMIT = 1_000
# Warming stops once the cache holds this share of its budget: it must not evict what it warmed.
WARM_SHARE = 0.8


@dataclass(slots=True)
class WarmUp:
    users: int = 0
    memories: int = 0
    seconds: float = 0.0
    stopped: str = ""


# What warming does for one person and place once their memories are loaded (the engine builds
# their write index there), returning the entry it read.
Prepare = Callable[[OwnerKey, str | None, datetime], Awaitable[UserMemories]]


async def warm_up(db: Database, cache: MemoryCache, clock: Callable[[], datetime], prepare: Prepare) -> WarmUp:
    """Load the recent speakers' memories and `prepare` each (user, place), until the budget share."""
    started = time.perf_counter()
    done = WarmUp()
    now = clock()
    try:
        speakers = await recent_speakers(db, now - timedelta(days=WARM_DAYS), WARM_LIMIT)
        seen: set[str] = set()
        for user_id, place in speakers:
            if cache.nbytes >= WARM_SHARE * cache.max_bytes:
                done.stopped = f"the cache holds {WARM_SHARE:.0%} of its budget"
                break
            entry = await prepare(user_id, place, clock())
            if user_id not in seen:
                seen.add(user_id)
                done.users += 1
                done.memories += len(entry)
    except StorageError as exc:
        # Nothing is lost: each user's first turn and reflection read what was not warmed.
        done.stopped = f"storage: {exc}"
    done.seconds = time.perf_counter() - started
    log.info(
        "warmed the memory cache: %d people, %d memories in %.1f s%s",
        done.users, done.memories, done.seconds, f" (stopped: {done.stopped})" if done.stopped else "",
    )  # fmt: skip
    return done
