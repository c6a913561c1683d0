"""The one way to lock per key (a user, a user and place, a message, a channel).

A key's lock lives while someone holds it or waits for it, and goes with the last of them: the
table never grows with the number of keys ever seen, and two holders of one key never run
together (a newcomer finds the lock that is held, never a fresh one beside it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holding or waiting


class KeyedLocks(Generic[K]):
    def __init__(self) -> None:
        self._held: dict[K, _Held] = {}

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        """The key's lock, held for the block."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._held[key]

    def locked(self, key: K) -> bool:
        held = self._held.get(key)
        return held is not None and held.lock.locked()

    def __len__(self) -> int:
        """Keys held or waited for now."""
        return len(self._held)
