"""The migration runner and the connection set-up, on real SQLite files."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
from pathlib import Path

import pytest

from bot.clients.db import MIGRATIONS_DIR, SQLiteDatabase, list_migrations
from bot.clients.storage import Sql, fetch_all
from bot.errors import MigrationError, StorageError
from tests.reliability.process import REPO


def _version(path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


async def test_all_migrations_apply_and_version_is_the_last(tmp_path):
    db = await SQLiteDatabase.open(tmp_path / "a.db")
    await db.close()
    assert _version(tmp_path / "a.db") == len(list_migrations(MIGRATIONS_DIR))


async def test_reopening_applies_nothing_twice(tmp_path):
    db = await SQLiteDatabase.open(tmp_path / "a.db")
    await db.close()
    db = await SQLiteDatabase.open(tmp_path / "a.db")
    async with db.reader.execute("SELECT COUNT(*) FROM memories") as cur:
        assert (await cur.fetchone())[0] == 0
    await db.close()


async def test_connections_use_wal_foreign_keys_and_busy_timeout(db):
    for conn in (db.reader, db._writer):
        async with conn.execute("PRAGMA journal_mode") as cur:
            assert (await cur.fetchone())[0] == "wal"
        async with conn.execute("PRAGMA foreign_keys") as cur:
            assert (await cur.fetchone())[0] == 1
        async with conn.execute("PRAGMA busy_timeout") as cur:
            assert (await cur.fetchone())[0] >= 1000


async def test_failing_migration_leaves_previous_version_intact(tmp_path):
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "0001_first.sql").write_text("CREATE TABLE a (x INTEGER);")
    (migrations / "0002_broken.sql").write_text(
        "CREATE TABLE b (y INTEGER);\nINSERT INTO a VALUES (1);\nTHIS IS NOT SQL;"
    )
    with pytest.raises(MigrationError, match=r"0002_broken\.sql"):
        await SQLiteDatabase.open(tmp_path / "m.db", migrations)
    assert _version(tmp_path / "m.db") == 1
    with sqlite3.connect(tmp_path / "m.db") as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "b" not in tables
        assert conn.execute("SELECT COUNT(*) FROM a").fetchone()[0] == 0
    # Fixing the file lets the next start finish the job.
    (migrations / "0002_broken.sql").write_text("CREATE TABLE b (y INTEGER);")
    db = await SQLiteDatabase.open(tmp_path / "m.db", migrations)
    await db.close()
    assert _version(tmp_path / "m.db") == 2


def test_migration_numbers_must_not_have_gaps(tmp_path):
    (tmp_path / "0001_a.sql").write_text("")
    (tmp_path / "0003_c.sql").write_text("")
    with pytest.raises(MigrationError, match="without gaps"):
        list_migrations(tmp_path)


async def test_concurrent_write_transactions_do_not_lose_each_others_rows(db):
    """A rollback in one coroutine must not drop another coroutine's insert."""

    async def insert_then(fail: bool, n: int) -> None:
        async with db.write() as conn:
            await conn.execute(
                "INSERT INTO memories (user_id, text, type, created_at, updated_at, content_hash) "
                "VALUES (?, ?, 'fact', 'x', 'x', 'h')",
                ("u", f"row {n}"),
            )
            await asyncio.sleep(0)
            if fail:
                raise RuntimeError("boom")

    results = await asyncio.gather(*(insert_then(n % 2 == 1, n) for n in range(20)), return_exceptions=True)
    assert sum(isinstance(r, RuntimeError) for r in results) == 10
    async with db.reader.execute("SELECT text FROM memories ORDER BY id") as cur:
        texts = [r[0] for r in await cur.fetchall()]
    assert texts == [f"row {n}" for n in range(0, 20, 2)]


async def test_a_write_cancelled_mid_transaction_leaves_the_database_usable(db):
    started = asyncio.Event()

    async def slow_write() -> None:
        async with db.write() as conn:
            await conn.execute(
                "INSERT INTO memories (user_id, text, type, created_at, updated_at, content_hash) "
                "VALUES ('u', 'gone', 'fact', 'x', 'x', 'h')"
            )
            started.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(slow_write())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Cancelled at every point of BEGIN too: the next write must still get its own transaction.
    for _ in range(20):
        attempt = asyncio.create_task(slow_write())
        await asyncio.sleep(0)
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO memories (user_id, text, type, created_at, updated_at, content_hash) "
            "VALUES ('u', 'kept', 'fact', 'x', 'x', 'h')"
        )
    async with db.reader.execute("SELECT text FROM memories") as cur:
        assert [r[0] for r in await cur.fetchall()] == ["kept"]


async def test_an_in_memory_database_is_refused_clearly():
    with pytest.raises(ValueError, match="database file"):
        await SQLiteDatabase.open(":memory:")


async def test_a_bug_in_a_statement_is_not_reported_as_a_storage_failure(db):
    with pytest.raises(sqlite3.IntegrityError):
        async with db.write() as conn:
            await conn.execute("INSERT INTO memories (id, user_id) VALUES (NULL, NULL)")
    with pytest.raises(sqlite3.OperationalError):
        async with db.write() as conn:
            await conn.execute("SELEC 1")
    assert db.storage.failures == 0
    async with db.write() as conn:  # the writer is usable again: both were rolled back
        await conn.execute("INSERT INTO user_settings (user_id, share_memories) VALUES ('a', 1)")


async def test_a_full_database_rolls_the_whole_transaction_back_and_says_why(db):
    async with db.reader.execute("PRAGMA page_count") as cur:
        (pages,) = await cur.fetchone()
    async with db.write() as conn:
        await conn.execute("PRAGMA max_page_count = " + str(int(pages)))
    with pytest.raises(StorageError) as raised:
        async with db.write() as conn:
            await conn.execute("INSERT INTO user_settings (user_id, share_memories) VALUES ('small', 1)")
            await conn.execute(
                "INSERT INTO exchanges (user_id, user_name, story_id, place, user_message, created_at) "
                "VALUES ('a', 'A', 's', 'p', ?, '2026-01-01')",
                ("x" * 100_000,),
            )
    assert raised.value.reason == "the disk is full" and str(db.path) in str(raised.value)
    assert db.storage.failures == 1
    async with db.reader.execute("SELECT COUNT(*) FROM user_settings") as cur:
        assert (await cur.fetchone())[0] == 0


def test_no_code_keeps_a_statement_open_across_an_await():
    """`async with conn.execute(...)` holds the reader's snapshot while other coroutines read
    through it: they would miss later commits. Reads go through fetch_all / fetch_one."""
    root = Path(__file__).resolve().parents[2]
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("bot", "cogs")
        for path in sorted((root / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"async with [\w.]+\.execute\(", line)
    ]
    assert offenders == []


# One process opening the file, as `python -m bot` does at start-up.
_OPEN = (
    "import asyncio, sys\nfrom bot.clients.db import SQLiteDatabase\n"
    "async def main():\n    await (await SQLiteDatabase.open(sys.argv[1])).close()\nasyncio.run(main())"
)


async def test_processes_starting_together_on_a_new_file_migrate_it_once(tmp_path):
    """Three processes open one new file at once (three bot processes started together, or
    after an upgrade): every one starts, and the schema is whole. Before, each read version 0
    and applied 0001 again ("table memories already exists")."""
    import sys

    from tests.reliability.process import REPO

    for attempt in range(3):
        path = tmp_path / f"{attempt}.db"
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", _OPEN, str(path), cwd=REPO, stderr=asyncio.subprocess.PIPE
            )
            for _ in range(3)
        ]
        errors = [(await asyncio.wait_for(p.communicate(), 60))[1].decode()[-300:] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], errors
        assert _version(path) == len(list_migrations(MIGRATIONS_DIR))


# Holds exclusive("reflect:alice") on the file until its stdin closes.
_HOLD = (
    "import asyncio, sys\nfrom bot.clients.db import SQLiteDatabase\n"
    "async def main():\n"
    "    db = await SQLiteDatabase.open(sys.argv[1])\n"
    "    async with db.exclusive('reflect:alice') as mine:\n"
    "        print(mine, flush=True)\n"
    "        await asyncio.to_thread(sys.stdin.read)\n"
    "    await db.close()\n"
    "asyncio.run(main())"
)


async def test_exclusive_work_is_one_process_at_a_time_on_one_file(tmp_path):
    """What two bot processes on one file rely on to reflect a user once: another process holding
    the name gets False, a different name is free, the holder's own tasks still get True, and the
    name is free again once the holder ends."""
    import sys

    from tests.reliability.process import REPO

    path = tmp_path / "a.db"
    db = await SQLiteDatabase.open(path)
    try:
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _HOLD,
            str(path),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert await asyncio.wait_for(holder.stdout.readline(), 60) == b"True\n"
        async with db.exclusive("reflect:alice") as mine, db.exclusive("reflect:bob") as other:
            assert (mine, other) == (False, True)
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), 60)
        async with db.exclusive("reflect:alice") as mine, db.exclusive("reflect:alice") as again:
            assert (mine, again) == (True, True)
    finally:
        await db.close()


# A bot process starting on each file named on its stdin, as many seconds after the name comes as
# its argument says: it opens the file, then makes the first write of a start (`Engine.start`, `CharacterRules.sync`:
# the character's rules read, then written). Prints "ready" once imported, then "ok" or the error
# per file.
_START = """
import asyncio, sys
from datetime import datetime, timezone
from bot.clients.databases import open_database
from bot.memory.stores.memories import replace_rules
from bot.memory.stores.memory_store import MemoryStore
async def start(path, delay):
    await asyncio.sleep(delay)
    db = await open_database(path)
    try:
        await MemoryStore(db).list("character:Echo", types=["rule"], include_rules=True)
        async with db.write() as conn:
            await replace_rules(conn, "character:Echo", ["Stay kind."], now=datetime.now(timezone.utc))
    finally:
        await db.close()
async def main():
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            await start(line.strip(), float(sys.argv[1]))
            print("ok", flush=True)
        except Exception as exc:
            print(repr(exc.__cause__ or exc).replace(chr(10), " "), flush=True)
asyncio.run(main())
"""
STARTERS = 6
# Their starts spread over the ~40 ms the first one's migrations of a new file take: started all
# at once, the others mostly set up before the first migration and miss the window.
STAGGER_SECONDS = 0.008
NEW_FILES = 10


async def test_processes_starting_together_on_a_new_file_all_make_their_first_write(tmp_path):
    """Six processes start on one new file a few milliseconds apart, on ten files in turn, and
    each writes its character's rules. Before, a process that set its writer up while another
    was migrating kept a half-migrated schema, and its first DELETE FROM memories failed with
    "no such table: memories": on 97 files of 100 started this way."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _START,
            str(n * STAGGER_SECONDS),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for n in range(STARTERS)
    ]
    try:
        assert [await asyncio.wait_for(p.stdout.readline(), 60) for p in procs] == [b"ready\n"] * STARTERS
        for n in range(NEW_FILES):
            path = tmp_path / f"{n}.db"
            for p in procs:
                p.stdin.write(f"{path}\n".encode())
                await p.stdin.drain()
            results = [(await asyncio.wait_for(p.stdout.readline(), 60)).decode().strip() for p in procs]
            assert results == ["ok"] * STARTERS, f"{path.name}: {results}"
            with sqlite3.connect(path) as conn:
                rules = conn.execute("SELECT text FROM memories WHERE user_id = 'character:Echo'").fetchall()
            assert rules == [("Stay kind.",)]
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            await asyncio.wait_for(p.wait(), 60)


async def test_an_sql_statement_runs_its_sqlite_text_and_is_no_string(db) -> None:
    both = Sql("SELECT 'sqlite'", postgresql="SELECT 'postgresql'")
    assert [tuple(r) for r in await fetch_all(db.reader, both)] == [("sqlite",)]
    async with db.write() as conn:
        assert [tuple(r) for r in await (await conn.execute(both)).fetchall()] == [("sqlite",)]
    # Not a str: a string operation (a concatenation, a strip) cannot silently drop its
    # PostgreSQL text, mypy refuses it.
    assert not isinstance(both, str)


# --- one statement, a transaction of its own ---------------------------------------------------


async def test_write_one_commits_and_counts_the_rows_it_changed(db):
    async with db.write() as conn:
        for user in ("a", "b"):
            await conn.execute("INSERT INTO user_settings (user_id, share_memories) VALUES (?, 0)", (user,))

    assert await db.write_one("UPDATE user_settings SET share_memories = 1 WHERE user_id = ?", ("a",)) == 1
    assert await db.write_one("UPDATE user_settings SET share_memories = 1 WHERE user_id = ?", ("nobody",)) == 0
    rows = await fetch_all(db.reader, "SELECT user_id, share_memories FROM user_settings ORDER BY user_id")
    assert [tuple(r) for r in rows] == [("a", 1), ("b", 0)]


async def test_write_one_never_joins_another_coroutines_open_transaction(db):
    """A transaction open across an await, then rolled back: the statement sent meanwhile waits
    for it and stays; run on the writer at once, it would have been rolled back with it."""
    opened, release = asyncio.Event(), asyncio.Event()

    async def failing() -> None:
        async with db.write() as conn:
            await conn.execute("INSERT INTO user_settings (user_id, share_memories) VALUES ('rolled', 1)")
            opened.set()
            await release.wait()
            raise RuntimeError("boom")

    first = asyncio.create_task(failing())
    await opened.wait()
    one = asyncio.create_task(db.write_one("INSERT INTO user_settings (user_id, share_memories) VALUES ('kept', 1)"))
    await asyncio.sleep(0.05)
    assert not one.done()  # waiting for the open transaction
    release.set()
    with pytest.raises(RuntimeError):
        await first
    assert await one == 1
    rows = await fetch_all(db.reader, "SELECT user_id FROM user_settings")
    assert [r[0] for r in rows] == ["kept"]


async def test_write_one_on_a_full_disk_says_why_and_a_bug_is_no_storage_failure(db):
    with pytest.raises(sqlite3.OperationalError):
        await db.write_one("UPDAT user_settings SET share_memories = 1")
    assert db.storage.failures == 0
    async with db.reader.execute("PRAGMA page_count") as cur:
        (pages,) = await cur.fetchone()
    await db.write_one("PRAGMA max_page_count = " + str(int(pages)))
    with pytest.raises(StorageError) as raised:
        await db.write_one(
            "INSERT INTO exchanges (user_id, user_name, story_id, place, user_message, created_at) "
            "VALUES ('a', 'A', 's', 'p', ?, '2026-01-01')",
            ("x" * 100_000,),
        )
    assert raised.value.reason == "the disk is full" and db.storage.failures == 1
    rows = await fetch_all(db.reader, "SELECT COUNT(*) FROM exchanges")
    assert rows[0][0] == 0
    # The writer takes the next transaction.
    async with db.write() as conn:
        await conn.execute("PRAGMA max_page_count = 1000000")
    assert await db.write_one("INSERT INTO user_settings (user_id, share_memories) VALUES ('after', 1)") == 1
