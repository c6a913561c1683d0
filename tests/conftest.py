"""Shared fixtures: a real SQLite file per test, the scripted LLM and embedding servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timezone

import pytest
import pytest_asyncio

from bot.clients.db import Database
from tests.fakes.embedding_server import embedding_http, embedding_server  # noqa: F401  (fixtures)
from tests.fakes.llm_server import llm_server, refused_url  # noqa: F401  (fixtures)


class Clock:
    """A settable clock for code that takes `clock=`: tests move time explicitly."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        from datetime import timedelta

        self.now = self.now + timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest_asyncio.fixture
async def db(tmp_path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "echo.sqlite3")
    try:
        yield database
    finally:
        await database.close()
