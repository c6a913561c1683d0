"""The owner's page's read-only view of the memory, handed out by the engine (`Engine.operator.report`).

The page reaches the data through this object only: it never opens the database or a store.
"""

from __future__ import annotations

from datetime import datetime

from bot.clients.storage import Database
from bot.memory.choice import TurnSelection
from bot.memory.model import Memory, OwnerKey
from bot.memory.stores import reports as report_store
from bot.memory.stores.reports import Backlog, SetAside, TurnHeader, TurnLogEntry, UserSummary

__all__ = ["Backlog", "Report", "SetAside", "TurnHeader", "TurnLogEntry", "UserSummary"]


class Report:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def bot_turn_log(self, since: datetime) -> list[TurnLogEntry]:
        return await report_store.bot_turn_log(self._db, since)

    async def user_summaries(self) -> list[UserSummary]:
        return await report_store.user_summaries(self._db)

    async def bot_memory_types(self) -> dict[str, int]:
        return await report_store.bot_memory_types(self._db)

    async def bot_backlog(self) -> Backlog:
        return await report_store.bot_backlog(self._db)

    async def bot_never_surfaced(self, min_candidate: int, limit: int) -> list[Memory]:
        return await report_store.bot_never_surfaced(self._db, min_candidate, limit)

    async def bot_recent_turns(self, limit: int) -> list[TurnHeader]:
        return await report_store.bot_recent_turns(self._db, limit)

    async def user_turn_log(self, user_id: OwnerKey, since: datetime) -> list[TurnLogEntry]:
        return await report_store.user_turn_log(self._db, user_id, since)

    async def user_backlog(self, user_id: OwnerKey) -> Backlog:
        return await report_store.user_backlog(self._db, user_id)

    async def user_set_aside(self, user_id: OwnerKey, limit: int) -> list[SetAside]:
        return await report_store.user_set_aside(self._db, user_id, limit)

    async def user_recent_turns(self, user_id: OwnerKey, limit: int) -> list[TurnHeader]:
        return await report_store.user_recent_turns(self._db, user_id, limit)

    async def user_turn(self, user_id: OwnerKey, turn_id: int) -> TurnSelection | None:
        return await report_store.user_turn(self._db, user_id, turn_id)
