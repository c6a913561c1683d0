"""Shared fixtures: a real SQLite file per test (or, for modules marked `both_stores`, a real
SQLite file and a fresh PostgreSQL database), the scripted LLM and embedding servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timezone

import pytest
import pytest_asyncio

from bot.clients.databases import open_database
from bot.clients.db import SQLiteDatabase
from tests.fakes import postgres_server

# The scripted servers' fixtures (llm_server, refused_url, embedding_server, embedding_http),
# for every test without an import.
pytest_plugins = ("tests.fakes.llm_server", "tests.fakes.embedding_server")


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


STORES = ("sqlite", "postgresql")
# Why the PostgreSQL half of the suite did not run, if it did not: shown by `pytest -rs` on
# each skipped test and once more in the terminal summary.
_postgres_unavailable: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_stores: the module's `db` fixture run on SQLite and on PostgreSQL"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_kind" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_stores"):
        metafunc.parametrize("store_kind", STORES, indirect=True)


@pytest.fixture(scope="session")
def postgres_cluster() -> object:
    """One throwaway PostgreSQL cluster for the whole run, started on first use."""
    started = postgres_server.start()
    if isinstance(started, str):
        _postgres_unavailable.append(started)
        pytest.skip(f"PostgreSQL tests skipped: {started}")
    yield started
    started.stop()


@pytest.fixture
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which store the test's database is: sqlite unless the module is marked both_stores."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
async def database_url(store_kind: str, request: pytest.FixtureRequest, tmp_path) -> str:
    """Where the test's database lives: an SQLite file's path or a fresh PostgreSQL database."""
    if store_kind == "postgresql":
        cluster = request.getfixturevalue("postgres_cluster")
        return await cluster.reset_database()
    return str(tmp_path / "echo.sqlite3")


@pytest_asyncio.fixture
async def db(database_url: str) -> AsyncIterator[SQLiteDatabase]:
    database = await open_database(database_url)
    try:
        yield database
    finally:
        await database.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    for reason in dict.fromkeys(_postgres_unavailable):
        terminalreporter.write_sep("=", "PostgreSQL tests skipped", yellow=True)
        terminalreporter.write_line(reason)
