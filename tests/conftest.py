"""Every shared fixture: a real SQLite file per test (or, for modules marked `both_stores`, a
real SQLite file and a fresh PostgreSQL database), a `store` over it, the HTTP client, the
services the front ends get, the scripted LLM and embedding servers. Builders are in
tests/builders.py."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from hypothesis import settings as hypothesis_settings

from bot.app import Services
from bot.clients.databases import open_database
from bot.clients.db import SQLiteDatabase
from bot.memory.model import utcnow
from bot.memory.stores.memory_store import MemoryStore
from tests.builders import http_client, offline_services, settings_for
from tests.fakes import postgres_server
from tests.fakes.embedding_server import embedding_http, embedding_server  # noqa: F401  (fixtures)
from tests.fakes.llm_server import FakeLLMServer, llm_server, refused_url  # noqa: F401  (fixtures)
from tests.lanes import examples, mark_slow

# The property tests that do not set their number of examples: hypothesis's default in
# `make test`, a tenth of it in `make test-fast` (tests/lanes.py `examples`).
hypothesis_settings.register_profile("fast", max_examples=examples(hypothesis_settings.default.max_examples))
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


class Clock:
    """A settable clock for code that takes `clock=`: tests move time explicitly."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

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
    config.addinivalue_line("markers", "both_stores: the module's `db` fixture run on SQLite and on PostgreSQL")
    config.addinivalue_line(
        "markers", "slow: starts a process or needs the PostgreSQL cluster (found by tests/lanes.py)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_kind" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_stores"):
        params = [pytest.param(kind, marks=pytest.mark.slow) if kind == "postgresql" else kind for kind in STORES]
        metafunc.parametrize("store_kind", params, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_slow(items)


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


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file opened once, every migration applied, then closed: what a `db` on SQLite
    starts as. Copying it is what opening a new file leaves, without each test paying for
    the migrations (their own tests open new files: tests/clients/test_db.py)."""
    path = tmp_path_factory.mktemp("migrated") / "echo.sqlite3"

    async def migrate() -> None:
        await (await open_database(path)).close()

    asyncio.run(migrate())
    return path


@pytest_asyncio.fixture
async def db(database_url: str, store_kind: str, migrated_sqlite: Path) -> AsyncIterator[SQLiteDatabase]:
    if store_kind == "sqlite" and not Path(database_url).exists():
        shutil.copyfile(migrated_sqlite, database_url)
    database = await open_database(database_url)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def store(db: SQLiteDatabase, request: pytest.FixtureRequest) -> MemoryStore:
    """The memories of the test's database, read and seeded without going through an engine.
    On the `clock` fixture's time when the test uses it (its engine then does too)."""
    clock = request.getfixturevalue("clock") if "clock" in request.fixturenames else utcnow
    return MemoryStore(db, clock=clock)


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with http_client() as client:
        yield client


@pytest_asyncio.fixture
async def services(db: SQLiteDatabase, tmp_path, llm_server: FakeLLMServer) -> AsyncIterator[Services]:
    """What `open_services` builds over the test's database, minus the embedder (None: turns
    run without semantic recall) and the indexer and jobs the front ends never touch."""
    settings = settings_for(
        llm_server,
        tmp_path,
        llm_model="fake-llm",
        database_path=tmp_path / "echo.sqlite3",
        # The cog's streaming and bursts are tested through the fake Discord (tests/discord_e2e).
        stream_replies=False,
        burst_seconds=0,
    )
    opened = await offline_services(settings, db)
    try:
        yield opened
    finally:
        await opened.engine.close(timeout=5)
        await opened.http.aclose()


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Settings a test changes, by parametrizing this fixture's name."""
    return {}


@pytest.fixture
def services_with(settings_overrides: dict[str, Any], services: Services) -> Services:
    """The services, with `settings_overrides` applied (cogs read settings when created)."""
    if settings_overrides:
        services.settings = services.settings.replace(**settings_overrides)
        services.engine.settings = services.settings.engine
    return services


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    for reason in dict.fromkeys(_postgres_unavailable):
        terminalreporter.write_sep("=", "PostgreSQL tests skipped", yellow=True)
        terminalreporter.write_line(reason)
