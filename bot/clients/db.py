"""SQLite access: connection set-up, numbered migrations, serialised write transactions.

One writer connection guarded by an asyncio lock, one reader connection. A shared aiosqlite
connection interleaves the statements of concurrent coroutines, so a rollback in one could drop
another's insert; every write therefore goes through `Database.write()`, one at a time.

PostgreSQL (bot.clients.postgres) offers the same surface, the protocols of bot.clients.storage
that the stores are typed with. The stores write one SQL text for
both where the two agree; where a statement truly differs, it is an `Sql` holding both texts.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import re
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from bot.clients.outage import Outage
from bot.clients.storage import Database, Params, Sql, Statement, fetch_one
from bot.errors import MigrationError, StartupError, StorageError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
POSTGRES_MIGRATIONS_DIR = MIGRATIONS_DIR / "postgresql"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[\w-]+\.sql$")
BUSY_TIMEOUT_MS = 5000
# How long a starting process waits for a restore under way to put the file in place.
RESTORE_WAIT_SECONDS = 30.0


def lock_key(name: str) -> int:
    """A stable lock key for a name (PostgreSQL's advisory locks, the byte an SQLite process
    locks beside its file). Two names may share a key (a 64-bit hash): the cost is one of them
    waiting a turn, never a wrong result. hash() differs per process."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


# Primary result codes of failures that come from where the file lives, not from the code.
_STORAGE_FAILURES = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_READONLY: "the file or its folder is read-only",
    sqlite3.SQLITE_IOERR: "the disk reported an I/O error",
    sqlite3.SQLITE_CANTOPEN: "a file beside the database (its -wal or -shm) cannot be created",
    sqlite3.SQLITE_BUSY: "another program holds a write lock on it",
    sqlite3.SQLITE_CORRUPT: "the file is damaged",
    sqlite3.SQLITE_NOTADB: "the file is not an SQLite database",
}


def storage_failure(path: Path, exc: BaseException) -> StorageError | None:
    """The StorageError an SQLite error stands for, or None when it is a bug in a statement."""
    if not isinstance(exc, sqlite3.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    reason = _STORAGE_FAILURES.get(code & 0xFF) if isinstance(code, int) else None
    if reason is None:
        return None
    return StorageError(
        f"Cannot write to the database {path}: {reason} ({exc}). The change was rolled back; "
        "the bot keeps answering what it can and retries the pending work later.",
        reason=reason,
    )


def list_migrations(directory: Path = MIGRATIONS_DIR) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        raise MigrationError(f"the migrations folder {directory} is missing: run Écho from a checkout")
    found: list[tuple[int, Path]] = []
    for path in sorted(directory.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append((int(match.group(1)), path))
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise MigrationError(f"migrations must be numbered 1..N without gaps, found {numbers}")
    return found


async def _configure(conn: aiosqlite.Connection) -> None:
    conn.row_factory = aiosqlite.Row
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA foreign_keys = ON")
    await conn.execute("PRAGMA synchronous = NORMAL")
    # Deleted rows are overwritten with zeros, not left in free pages: /erase-me is real on
    # disk whatever this SQLite build's default is.
    await conn.execute("PRAGMA secure_delete = ON")


async def apply_migrations(conn: aiosqlite.Connection, directory: Path = MIGRATIONS_DIR) -> int:
    """Apply pending migrations, each in its own transaction. Returns the schema version.

    A failing migration is rolled back whole and leaves the previous version in place.
    """
    row = await fetch_one(conn, "PRAGMA user_version")
    version = int(row[0]) if row else 0
    for number, path in list_migrations(directory):
        if number <= version:
            continue
        body = path.read_text(encoding="utf-8")
        # executescript() commits first, so the whole migration, its version bump included,
        # is one explicit transaction inside the script.
        script = f"BEGIN IMMEDIATE;\n{body}\nPRAGMA user_version = {number};\nCOMMIT;"
        try:
            await conn.executescript(script)
        except Exception as exc:
            if conn.in_transaction:
                await conn.rollback()
            raise MigrationError(f"migration {path.name} failed and was rolled back: {exc}") from exc
        log.info("applied migration %s", path.name)
        version = number
    return version


def schema_version(path: Path) -> int:
    """The migrations a SQLite file holds, read without writing (sqlite3.Error when it is not one)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


# Every memory and transcript is in the database: readable by this user only, whatever the
# umask. SQLite gives its -wal and -shm the database file's own mode.
PRIVATE_MODE = 0o600


def create_private(path: Path) -> None:
    """Create the database file empty and private (SQLite reads an empty file as a new
    database) unless it exists: an existing file keeps the mode its owner gave it (`python -m
    bot doctor` says when others may read it)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, PRIVATE_MODE)  # the umask may have taken bits away; none is added
    finally:
        os.close(fd)


def lock_file(path: Path) -> Path:
    """The file whose lock says who uses the database: "<database>.lock", beside it."""
    return path.with_name(path.name + ".lock")


def hold_database(path: Path, *, exclusive: bool) -> int | None:
    """A descriptor holding the database's lock, shared (every process that opens the file) or
    exclusive (a restore); None when another process holds it the other way. Released when
    the descriptor is closed, or by the kernel when the process dies, kill -9 included.

    A lock of its own file, not of the database: closing any other descriptor of the database
    file would release SQLite's own POSIX locks on it in this process."""
    fd = os.open(lock_file(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


async def _hold_while_open(path: Path) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RESTORE_WAIT_SECONDS
    while (fd := hold_database(path, exclusive=False)) is None:
        if loop.time() >= deadline:
            raise StartupError(
                f"A backup is being restored into {path} (python -m bot restore holds {lock_file(path)}). "
                "Start the bot once the restore has finished."
            )
        await asyncio.sleep(0.2)
    return fd


def _sqlite_text(sql: Statement) -> str:
    return sql.sqlite if isinstance(sql, Sql) else sql


class SQLiteConnection:
    """An aiosqlite connection that runs an `Sql` statement's SQLite text; the rest is
    aiosqlite's own (its cursors as context managers, `executemany`…)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.raw = conn

    def execute(self, sql: Statement, parameters: Params = ()) -> aiosqlite.context.Result[aiosqlite.Cursor]:
        return self.raw.execute(_sqlite_text(sql), parameters)

    async def execute_fetchall(self, sql: Statement, parameters: Params = ()) -> Iterable[sqlite3.Row]:
        return await self.raw.execute_fetchall(_sqlite_text(sql), parameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class SQLiteDatabase:
    """The bot's SQLite database: `reader` for queries, `write()` for serialised transactions,
    `reading()` for a long read."""

    dialect = "sqlite"

    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection, lock: int | None = None):
        self.path = path
        self._lock = lock
        self._writer = writer
        self._writes = SQLiteConnection(writer)
        self.reader = SQLiteConnection(reader)
        self._write_lock = asyncio.Lock()
        self.storage = Outage(log, level=logging.ERROR)
        # The names this process holds through `exclusive` (bytes of the lock file).
        self._held: Counter[int] = Counter()
        self.locking = Outage(log)

    @classmethod
    async def open(cls, path: str | Path, migrations: Path = MIGRATIONS_DIR) -> SQLiteDatabase:
        if str(path) == ":memory:":
            # The reader would open a second, empty in-memory database.
            raise ValueError("Écho needs a database file: the reader and writer share it")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = await _hold_while_open(path)
        create_private(path)
        try:
            writer = await aiosqlite.connect(path, isolation_level=None)
        except BaseException:
            os.close(lock)
            raise
        reader: aiosqlite.Connection | None = None
        try:
            # Processes starting together on a new or older file: one migrates, the others
            # wait, then find the version it left (each would otherwise apply 0001 again).
            # The writer's set-up waits too, as it runs SQL. Its first statement reads the
            # schema, which the connection keeps: read between two of another process's
            # migrations, it is not always read again once they are done (SQLite 3.40, foreign
            # keys on: the first DELETE FROM memories failed with "no such table: memories").
            # And when two processes switched a new file to WAL at once, one could fail with
            # "database is locked", busy_timeout set first or not.
            await asyncio.to_thread(fcntl.lockf, lock, fcntl.LOCK_EX, 1, _MIGRATING)
            try:
                await _configure(writer)
                await apply_migrations(writer, migrations)
            finally:
                fcntl.lockf(lock, fcntl.LOCK_UN, 1, _MIGRATING)
            reader = await aiosqlite.connect(path, isolation_level=None)
            await _configure(reader)
            await reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await writer.close()
            if reader is not None:
                await reader.close()
            os.close(lock)
            raise
        return cls(path, writer, reader, lock)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[SQLiteConnection]:
        """One write transaction at a time: all of it commits, or none of it.

        A failure of the file or its disk surfaces as StorageError, after the rollback.
        """
        async with self._writing(rollback=True):
            # Inside: a task cancelled while BEGIN is pending must not leave the shared writer
            # in an open transaction for every later write to trip over.
            await self._writer.execute("BEGIN IMMEDIATE")
            yield self._writes
            # Inside too: a COMMIT refused by a full disk must be rolled back.
            await self._writer.commit()

    async def write_one(self, sql: Statement, parameters: Params = ()) -> int:
        """One statement, a write transaction on its own: the number of rows it changed.

        For the writes a person waits for: one step of the writer's thread, where `write()`
        takes three more (BEGIN, COMMIT and any check in between). Under the same lock as
        `write()`, so it never joins another coroutine's open transaction.
        """
        # Autocommit: the statement is atomic, and one cancelled here still runs whole in
        # aiosqlite's thread before the next transaction's BEGIN.
        async with self._writing(rollback=False):
            cursor = await self._writer.execute(_sqlite_text(sql), parameters)
        return int(cursor.rowcount)

    @asynccontextmanager
    async def _writing(self, *, rollback: bool) -> AsyncIterator[None]:
        """The write lock held; a failure of the file or its disk raised as StorageError and
        counted (after the rollback, with `rollback`), a bug in a statement as itself."""
        async with self._write_lock:
            try:
                yield
            except BaseException as exc:
                if rollback:
                    # Unconditional: a BEGIN whose await was cancelled still runs in aiosqlite's
                    # thread, after this check would have looked. The rollback is queued behind
                    # it (a no-op when no transaction is open).
                    await asyncio.shield(self._rollback())
                failure = storage_failure(self.path, exc)
                if failure is None:
                    raise
                self.storage.failed("%s", failure)
                raise failure from exc
            if self.storage.down:
                self.storage.recovered("the database accepts writes again after %d failed write(s)")

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[SQLiteConnection]:
        """A read-only connection of its own, in one read transaction (one snapshot), for a read
        that takes seconds (one person's 100,000 memories and vectors). On the shared reader its
        statements held everyone's: the reader runs one statement at a time, and others' turns
        queued behind its pages for seconds. This one has its own thread and is closed after."""
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await conn.execute("PRAGMA query_only = ON")
            await conn.execute("BEGIN")
            yield SQLiteConnection(conn)
        finally:
            await conn.close()

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        """Whether this process may do the work called `name` now (reflect one user, index),
        i.e. no other task or process of this file is doing it: one byte of the file beside the
        database (`<file>.lock`, empty) locked with fcntl, tried, never waited for, held until
        the block ends or the process dies (the kernel drops it). Two processes on one file
        reflect a pending exchange once, like PostgreSQL's advisory locks. Inside one process it
        answers True as it always did: the byte stays locked while any of its holders runs."""
        key = lock_key(name)
        offset = key & _OFFSETS
        if not self._held[key]:
            if self._lock is None:
                # A folder this user cannot create files in: the work is still done, maybe twice.
                self.locking.failed("no lock file beside %s: processes sharing the database may repeat work", self.path)
            else:
                try:
                    fcntl.lockf(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
                except OSError:  # EAGAIN or EACCES: another process holds it
                    taken = False
                else:
                    taken = True
                if not taken:
                    yield False
                    return
        self._held[key] += 1
        try:
            yield True
        finally:
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]
                if self._lock is not None:
                    fcntl.lockf(self._lock, fcntl.LOCK_UN, 1, offset)

    async def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to nothing, so that rows just
        deleted leave no copy in the -wal file. True when done; False (logged) when another
        connection's open read kept part of it, in which case SQLite's own checkpoints finish
        the work later. Never raises: what it follows is already committed."""
        async with self._write_lock:
            try:
                row = await fetch_one(self._writes, "PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                log.warning("the WAL could not be checkpointed after an erase: %s", exc)
                return False
        if row is None or row[0]:
            log.warning(
                "the WAL could not be truncated after an erase (another process is reading); "
                "the erased rows' old copies leave it at a later checkpoint"
            )
            return False
        return True

    async def _rollback(self) -> None:
        try:
            await self._writer.rollback()
        except sqlite3.Error as exc:
            # SQLite has already rolled back when the disk fails under it.
            log.debug("rollback after a failed write: %s", exc)

    async def close(self) -> None:
        await self.reader.close()
        await self._writer.close()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


# Bytes of the lock file (`lock_file`) that `exclusive` and the migrations lock, one per name
# (lock_key): fcntl's byte locks, beside the whole-file flock that says the database is open.
_OFFSETS = 2**62 - 1
_MIGRATING = lock_key("migrations") & _OFFSETS


async def ping(db: Database) -> None:
    """One trivial read: raises if the database does not answer."""
    await fetch_one(db.reader, "SELECT 1")
