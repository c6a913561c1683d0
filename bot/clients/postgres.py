"""PostgreSQL access (asyncpg), satisfying the protocols of bot.clients.storage as the SQLite
database does.

The stores are written once: they call `conn.execute(sql, params)`, `fetch_all(conn, sql,
params)` and read `cursor.rowcount`. The dialect differences that a translation can carry live
here and nowhere else: `?` and `:name` placeholders become `$n`, and `INSERT OR IGNORE` becomes
`ON CONFLICT DO NOTHING`. An INSERT that needs the new row's id says `RETURNING id` itself (both
stores run it). A statement that truly differs is an `Sql` holding both texts; this connection
runs its `.postgresql` one.

Writes are serialised like SQLite's: one at a time in a process (an asyncio lock) and one at a
time across processes (a transaction-level advisory lock taken first, the equivalent of BEGIN
IMMEDIATE), so the memory logic above, which reads and then writes inside one transaction,
keeps the guarantees it has on SQLite whatever the number of bot processes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bot.clients.db import POSTGRES_MIGRATIONS_DIR, list_migrations, lock_key
from bot.clients.outage import Outage
from bot.clients.storage import Sql, Statement
from bot.errors import MigrationError, StorageError

log = logging.getLogger(__name__)

# Keys of the advisory locks taken by Écho (bigint space shared with nothing else of ours).
WRITER_LOCK = 0x4563686F  # "Echo": one write transaction at a time across processes
MIGRATION_LOCK = 0x45636D67

_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|(?<!:):([A-Za-z_]\w*)")
_INSERT_INTO = re.compile(r"^\s*INSERT\s+(OR\s+IGNORE\s+)?INTO\s+(\w+)", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Translated:
    text: str
    names: tuple[str, ...] | None  # the parameter names in $n order, for :name statements
    returns_rows: bool


@lru_cache(maxsize=2048)
def translate(sql: str) -> _Translated:
    """The PostgreSQL text of a statement written with SQLite's placeholders."""
    names: list[str] = []
    positional = 0

    def placeholder(match: re.Match[str]) -> str:
        nonlocal positional
        token = match.group(0)
        if token.startswith("'"):
            return token
        if token == "?":
            positional += 1
            return f"${positional}"
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    text = _TOKENS.sub(placeholder, sql).strip().rstrip(";")
    if positional and names:
        raise ValueError(f"a statement mixes ? and :name placeholders: {sql}")
    insert = _INSERT_INTO.match(text)
    if insert is not None and insert.group(1):
        text = _insert_or_ignore(text)
    returns_rows = bool(_RETURNING.search(text)) or text.upper().startswith(("SELECT", "WITH", "VALUES"))
    return _Translated(text, tuple(names) if names else None, returns_rows)


def _insert_or_ignore(text: str) -> str:
    """`INSERT OR IGNORE INTO t … [RETURNING …]` as `INSERT INTO t … ON CONFLICT DO NOTHING
    [RETURNING …]`: the conflict clause goes before RETURNING."""
    text = _INSERT_INTO.sub(r"INSERT INTO \2", text, count=1)
    returning = _RETURNING.search(text)
    if returning is None:
        return text + " ON CONFLICT DO NOTHING"
    return f"{text[: returning.start()].rstrip()} ON CONFLICT DO NOTHING {text[returning.start() :]}"


def _statement(sql: Statement) -> str | None:
    return sql.postgresql if isinstance(sql, Sql) else sql


def _arguments(translated: _Translated, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    if translated.names is not None:
        assert isinstance(params, Mapping), "a :name statement takes a mapping"
        return [params[name] for name in translated.names]
    return list(params)


class Cursor:
    """What aiosqlite's cursor offers the stores: rowcount and the rows."""

    def __init__(self, rows: list[asyncpg.Record], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount
        self._read = 0

    async def fetchall(self) -> list[asyncpg.Record]:
        return self.rows

    async def fetchone(self) -> asyncpg.Record | None:
        return self.rows[0] if self.rows else None

    async def fetchmany(self, size: int) -> list[asyncpg.Record]:
        """The next `size` rows (all of them arrived with the statement, decoded as they came)."""
        page = self.rows[self._read : self._read + size]
        self._read += len(page)
        return page

    async def close(self) -> None:
        return None


class _Pending:
    """What conn.execute() returns: awaited, or entered as a context manager, like aiosqlite."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self._cursor: Cursor | None = None

    def __await__(self) -> Any:
        return self._run.__await__()

    async def __aenter__(self) -> Cursor:
        self._cursor = await self._run
        return self._cursor

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _run(conn: asyncpg.Connection, sql: Statement, params: Sequence[Any] | Mapping[str, Any]) -> Cursor:
    text = _statement(sql)
    if text is None:
        return Cursor([], 0)
    translated = translate(text)
    args = _arguments(translated, params)
    if translated.returns_rows:
        rows = await conn.fetch(translated.text, *args)
        return Cursor(rows, len(rows))
    status = await conn.execute(translated.text, *args)
    last = status.rsplit(" ", 1)[-1]
    return Cursor([], int(last) if last.isdigit() else -1)


class Connection:
    """One asyncpg connection inside a transaction (a write, or a long read), spoken to like aiosqlite's."""

    dialect = "postgresql"

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.raw = conn

    def execute(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()) -> _Pending:
        return _Pending(_run(self.raw, sql, params))

    async def execute_fetchall(
        self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[asyncpg.Record]:
        return (await _run(self.raw, sql, params)).rows


class Reader:
    """Queries outside any write transaction, each on a pooled connection."""

    dialect = "postgresql"

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    def execute(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()) -> _Pending:
        return _Pending(self._fetch(sql, params))

    async def _fetch(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any]) -> Cursor:
        async with self._pool.acquire() as conn:
            return await _run(conn, sql, params)

    async def execute_fetchall(
        self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[asyncpg.Record]:
        return (await self._fetch(sql, params)).rows


# SQLSTATE classes that come from the server, its disk or the network, not from a statement.
_STORAGE_CLASSES = {
    "08": "the connection to the server was lost",
    "53": "the server is out of resources (disk full, out of memory or connections)",
    "57": "the server is shutting down or refuses connections now",
    "58": "the server reported a system or I/O error",
    "XX": "the server reported internal damage",
}
_STORAGE_STATES = {"53100": "the server's disk is full", "25006": "the server is read-only (a standby?)"}


def storage_failure(where: str, exc: BaseException) -> StorageError | None:
    """The StorageError a PostgreSQL failure stands for, or None when it is a bug in a statement."""
    reason: str | None = None
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        reason = _STORAGE_STATES.get(state) or _STORAGE_CLASSES.get(state[:2])
    elif isinstance(exc, (asyncpg.InterfaceError, ConnectionError, OSError)):
        reason = "the connection to the server was lost"
    if reason is None:
        return None
    return StorageError(
        f"Cannot write to the database {where}: {reason} ({exc}). The change was rolled back; "
        "the bot keeps answering what it can and retries the pending work later.",
        reason=reason,
    )


def describe(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost (Unix socket)"
    user = f"{parts.username}@" if parts.username else ""
    return f"postgresql://{user}{host}{':' + str(parts.port) if parts.port else ''}{parts.path}"


async def probe(url: str, *, timeout: float) -> tuple[bool, int]:
    """Whether the server at `url` is read-only, and the schema version its database holds (0
    before the first start): what `python -m bot doctor` reports, without migrating anything."""
    conn = await asyncpg.connect(url, timeout=timeout)
    try:
        read_only = await conn.fetchval("SHOW transaction_read_only")
        migrated = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
        version = int(await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")) if migrated else 0
    finally:
        await conn.close()
    return read_only == "on", version


def check_url(url: str) -> None:
    """ValueError with the reason when DATABASE_URL cannot name a PostgreSQL database."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"DATABASE_URL must start with postgresql://, got {parts.scheme or 'nothing'}://")
    try:
        _ = parts.port  # reading it checks it
    except ValueError:
        raise ValueError("DATABASE_URL has a port that is not a number from 1 to 65535") from None
    if not parts.path.strip("/"):
        raise ValueError("DATABASE_URL names no database: postgresql://user:password@host:5432/echo")


async def apply_migrations(conn: asyncpg.Connection, directory: Path = POSTGRES_MIGRATIONS_DIR) -> int:
    """Apply pending migrations, each in its own transaction with its version bump."""
    await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    version = 0
    for number, path in list_migrations(directory):
        body = path.read_text(encoding="utf-8")
        try:
            async with conn.transaction():
                # Two processes starting together: the second waits, then sees the new version.
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                version = int(await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version"))
                if number <= version:
                    continue
                await conn.execute(body)
                await conn.execute("DELETE FROM schema_version")
                await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", number)
        except asyncpg.PostgresError as exc:
            raise MigrationError(f"migration postgresql/{path.name} failed and was rolled back: {exc}") from exc
        log.info("applied migration postgresql/%s", path.name)
        version = number
    return version


class PostgresDatabase:
    """The bot's PostgreSQL database: `reader` for queries, `write()` for serialised transactions,
    `reading()` for a long read."""

    dialect = "postgresql"

    def __init__(self, url: str, pool: asyncpg.Pool) -> None:
        self.url = url
        self.path = describe(url)  # what messages name the database by
        self._pool = pool
        self.reader = Reader(pool)
        self._write_lock = asyncio.Lock()
        self.storage = Outage(log, level=logging.ERROR)

    @classmethod
    async def open(
        cls, url: str, migrations: Path = POSTGRES_MIGRATIONS_DIR, *, max_size: int = 10
    ) -> PostgresDatabase:
        check_url(url)
        pool = await asyncpg.create_pool(url, min_size=1, max_size=max_size, command_timeout=60)
        try:
            async with pool.acquire() as conn:
                await apply_migrations(conn, migrations)
        except BaseException:
            await pool.close()
            raise
        return cls(url, pool)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Connection]:
        """One write transaction at a time, in this process and across processes."""
        async with self._write_lock:
            try:
                async with self._pool.acquire() as raw, raw.transaction():
                    await raw.execute("SELECT pg_advisory_xact_lock($1)", WRITER_LOCK)
                    yield Connection(raw)
            except BaseException as exc:
                failure = storage_failure(self.path, exc)
                if failure is None:
                    raise
                self.storage.failed("%s", failure)
                raise failure from exc
            if self.storage.down:
                self.storage.recovered("the database accepts writes again after %d failed write(s)")

    async def write_one(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()) -> int:
        """One statement in a write transaction of its own: the number of rows it changed.
        Through `write()`: the writers of every process stay one at a time."""
        async with self.write() as conn:
            changed: int = (await conn.execute(sql, params)).rowcount
            return changed

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Connection]:
        """A pooled connection held for a read that takes seconds (one person's 100,000 memories),
        in one read-only snapshot; the other reads take the pool's other connections."""
        async with self._pool.acquire() as raw, raw.transaction(isolation="repeatable_read", readonly=True):
            yield Connection(raw)

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        """Whether this process may do the work called `name` now, i.e. no other process of
        this database is doing it: a transaction-level advisory lock, tried, not waited for,
        held until the block ends (or the process dies: the server drops it with the
        connection). Two processes seeing the same pending exchanges reflect them once, one
        after the other, never at the same time."""
        try:
            async with self._pool.acquire() as raw, raw.transaction():
                mine = await raw.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock_key(name))
                yield bool(mine)
        except BaseException as exc:
            failure = storage_failure(self.path, exc)
            if failure is None:
                raise
            raise failure from exc

    async def checkpoint(self) -> bool:
        """Nothing to truncate: PostgreSQL recycles its WAL itself (VACUUM reclaims the rows)."""
        return True

    async def close(self) -> None:
        await self._pool.close()


def open_failure(exc: BaseException) -> str | None:
    """What an operator is told when the database cannot be opened at start-up; None for a bug."""
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"the database does not exist: {exc}"
    if isinstance(exc, (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)):
        return f"the server refused the user or password: {exc}"
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return f"the user may not create Écho's tables: {exc}"
    if isinstance(exc, (OSError, asyncio.TimeoutError)):
        return f"no server answers there: {exc or type(exc).__name__}"
    if isinstance(exc, (asyncpg.PostgresError, asyncpg.InterfaceError, ValueError)):
        return str(exc)
    return None
