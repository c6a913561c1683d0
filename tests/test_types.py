"""The storage protocols hold: the type checker refuses a store that uses what only one
database driver has, and accepts the same store written with the shared interface."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]

STORE = """
from bot.clients.storage import Connection, Database


async def forget_all(db: Database, user_id: str) -> None:
    async with db.write() as conn:
        await wipe(conn, user_id)


async def wipe(conn: Connection, user_id: str) -> None:
    await conn.{call}
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module's checks: the store's imports (bot.clients.storage and what it
    reads) are checked once, not once per test."""
    return tmp_path_factory.mktemp("mypy-cache")


def check(tmp_path: Path, mypy_cache: Path, call: str) -> tuple[str, int]:
    module = tmp_path / "a_store.py"
    module.write_text(STORE.format(call=call), encoding="utf-8")
    out, err, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(mypy_cache),
            "--no-error-summary",
            str(module),
        ]
    )
    return out + err, status


@pytest.mark.parametrize(
    "call",
    [
        # aiosqlite only: PostgreSQL's connection has no script runner.
        'executescript("DELETE FROM memories WHERE user_id = 1")',
        # asyncpg only: SQLite's connection has no fetchval.
        'fetchval("SELECT count(*) FROM memories WHERE user_id = ?", (user_id,))',
    ],
)
def test_a_store_calling_what_one_driver_only_has_fails_the_type_check(
    tmp_path: Path, mypy_cache: Path, call: str
) -> None:
    said, status = check(tmp_path, mypy_cache, call)
    assert status == 1, said
    assert '"Connection" has no attribute' in said, said


def test_the_same_store_through_the_shared_interface_passes(tmp_path: Path, mypy_cache: Path) -> None:
    said, status = check(tmp_path, mypy_cache, 'execute("DELETE FROM memories WHERE user_id = ?", (user_id,))')
    assert status == 0, said


IDENTITIES = """
from bot.characters.cast import Cast
from bot.clients.storage import Sql
from bot.memory.model import PersonId, StoryId
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.turn import last_turn


async def f(store: MemoryStore, cast: Cast, person: PersonId, story: str) -> None:
    {line}
"""


def check_identities(tmp_path: Path, mypy_cache: Path, line: str) -> tuple[str, int]:
    module = tmp_path / "a_front_end.py"
    module.write_text(IDENTITIES.format(line=line), encoding="utf-8")
    out, err, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(mypy_cache),
            "--no-error-summary",
            str(module),
        ]
    )
    return out + err, status


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        # A person's id is not the key of their memories: a character of its own memory has another.
        ("await store.list(person)", '"PersonId"; expected "OwnerKey"'),
        # A channel id read from a front end is a story only once it says so.
        ("await last_turn(store.db, cast.memory_key(person, cast.default), story)", '"str"; expected "StoryId"'),
        # A string operation on a statement would lose its PostgreSQL text.
        ('Sql("SELECT 1", postgresql=None) + " LIMIT 1"', "Unsupported left operand"),
    ],
)
def test_the_type_check_tells_the_identities_and_statements_apart(
    tmp_path: Path, mypy_cache: Path, line: str, refusal: str
) -> None:
    said, status = check_identities(tmp_path, mypy_cache, line)
    assert status == 1 and refusal in said, said


def test_an_identity_said_once_passes(tmp_path: Path, mypy_cache: Path) -> None:
    said, status = check_identities(
        tmp_path, mypy_cache, "await last_turn(store.db, cast.memory_key(person, cast.default), StoryId(story))"
    )
    assert status == 0, said
