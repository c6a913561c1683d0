"""What the engine tells the front ends that follow it: settled exchanges, memory receipts and
erasures.

The core knows no Discord: a front end registers its listeners (`Engine.listen`) and removes them (`Engine.unlisten`), and what
happened before any listened is kept, bounded, and delivered when one does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clients.erasures import Erasure
from bot.clients.tasks import BackgroundTasks
from bot.memory.model import OwnerKey, PersonId, StoryId
from bot.memory.stores.exchanges import SettledExchange

log = logging.getLogger(__name__)

# Settle and receipt events kept for a front end that is not listening yet (see Engine.listen).
MAX_UNHEARD_EVENTS = 1000


@dataclass(frozen=True, slots=True)
class Receipt:
    """A reflection changed the user's memories: the reply of `exchange_id` may say so."""

    user_id: OwnerKey
    exchange_id: int
    story_id: StoryId
    reply_message_id: str | None
    changes: int


class Events:
    def __init__(self, tasks: BackgroundTasks, *, ledger: Callable[[Erasure], None] | None = None) -> None:
        self.tasks = tasks
        self._settle_listeners: list[Callable[[SettledExchange], Awaitable[None]]] = []
        self._receipt_listeners: list[Callable[[Receipt], Awaitable[None]]] = []
        self._erase_listeners: list[Callable[[str], None]] = []
        # Where erasures are written outside the database (bot/clients/erasures.py), when the
        # composition root keeps a ledger: a restored backup never brings an erased person back.
        self._ledger = ledger
        self._unheard: list[tuple[Sequence[Callable[[Any], Awaitable[None]]], object]] = []

    def listen(
        self,
        *,
        settled: Callable[[SettledExchange], Awaitable[None]] | None = None,
        receipt: Callable[[Receipt], Awaitable[None]] | None = None,
        erasing: Callable[[str], None] | None = None,
    ) -> None:
        if erasing is not None:
            self._erase_listeners.append(erasing)
        if settled is not None:
            self._settle_listeners.append(settled)
        if receipt is not None:
            self._receipt_listeners.append(receipt)
        early, self._unheard = self._unheard, []
        for listeners, event in early:
            self.tasks.spawn(self._notify(listeners, event), name=f"early:{type(event).__name__}")

    def unlisten(
        self,
        *,
        settled: Callable[[SettledExchange], Awaitable[None]] | None = None,
        receipt: Callable[[Receipt], Awaitable[None]] | None = None,
        erasing: Callable[[str], None] | None = None,
    ) -> None:
        """What `listen` registered, removed (a cog unloaded); what was not registered is ignored."""
        if erasing is not None and erasing in self._erase_listeners:
            self._erase_listeners.remove(erasing)
        if settled is not None and settled in self._settle_listeners:
            self._settle_listeners.remove(settled)
        if receipt is not None and receipt in self._receipt_listeners:
            self._receipt_listeners.remove(receipt)

    def settled(self, ex: SettledExchange) -> None:
        # In the background: a turn settling the previous exchange must not wait for the front
        # end to update that old reply.
        self.tasks.spawn(self._notify(self._settle_listeners, ex), name=f"settled:{ex.user_id}")

    def erasing(self, person: PersonId) -> None:
        """A person is being erased: each front end drops, at once and before anything of the
        erase is awaited, what it holds of theirs that the engine does not know yet."""
        for listener in list(self._erase_listeners):
            try:
                listener(person)
            except Exception:
                log.exception("a front end failed to drop what it held of an erased person")

    async def record_erasure(self, person: PersonId, at: datetime) -> Erasure:
        """The erase of `person` at `at`, written to the ledger first (before the database's
        transaction, so that no crash leaves an erase the ledger does not know)."""
        erasure = Erasure.of(person, at)
        if self._ledger is not None:
            await asyncio.to_thread(self._ledger, erasure)
        return erasure

    async def receipt(self, receipt: Receipt) -> None:
        await self._notify(self._receipt_listeners, receipt)

    async def _notify(self, listeners: Sequence[Callable[[Any], Awaitable[None]]], event: object) -> None:
        if not listeners:
            # Bounded: a terminal chat never listens, and must not grow this forever.
            if len(self._unheard) < MAX_UNHEARD_EVENTS:
                self._unheard.append((listeners, event))
            return
        for listener in list(listeners):
            try:
                await listener(event)
            except Exception:
                log.exception("a front end failed to show %s", type(event).__name__)
