"""What the stores use of a database and of its connections: one typed interface that both
the SQLite database (bot.clients.db, aiosqlite) and the PostgreSQL one (bot.clients.postgres,
asyncpg) satisfy.

The stores and the engine are annotated with these protocols, never with a driver's class, so
the type checker refuses a store that calls a method only one driver has (aiosqlite's
`executescript`, asyncpg's `fetchval`): such a call would work on one store and fail on the
other at run time.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, overload

from bot.clients.outage import Outage
from bot.clients.values import as_utc

log = logging.getLogger(__name__)

# `?` placeholders take a sequence, `:name` ones a mapping.
Params = Sequence[Any] | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Sql:
    """A statement whose PostgreSQL text differs from its SQLite one, both written side by side.

    Only for what one text cannot say for both (FTS5 and tsvector, json_each and jsonb, index
    maintenance); everything else is one plain string. Each connection runs its own text;
    `postgresql=None`: the statement has no PostgreSQL counterpart and is skipped there.
    """

    sqlite: str
    postgresql: str | None = field(kw_only=True)


# What a connection runs: one text for both databases, or an `Sql` holding both.
Statement = str | Sql

# "No limit" as a number both SQLite and PostgreSQL take (PostgreSQL refuses LIMIT -1).
NO_LIMIT = 2**63 - 1


class Row(Protocol):
    """A result row, read by column position or name (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def keys(self) -> Any: ...


class Cursor(Protocol):
    """What a statement leaves for the stores: how many rows it changed, and its rows."""

    @property
    def rowcount(self) -> int: ...

    async def fetchall(self) -> Iterable[Row]: ...

    async def fetchone(self) -> Row | None: ...

    async def fetchmany(self, size: int) -> Iterable[Row]: ...

    async def close(self) -> None: ...


class Connection(Protocol):
    """A connection as the stores use it: inside `Database.write()`, the shared reader, or one
    of `Database.reading()`."""

    def execute(self, sql: Statement, parameters: Params = ..., /) -> Awaitable[Cursor]: ...

    async def execute_fetchall(self, sql: Statement, parameters: Params = ..., /) -> Iterable[Row]: ...


class Database(Protocol):
    """A database as the stores and the engine use it, whichever server holds it."""

    @property
    def dialect(self) -> str: ...

    @property
    def path(self) -> Path | str: ...

    @property
    def reader(self) -> Connection: ...

    @property
    def storage(self) -> Outage: ...

    def write(self) -> AbstractAsyncContextManager[Connection]: ...

    async def write_one(self, sql: Statement, params: Params = ()) -> int: ...

    def reading(self) -> AbstractAsyncContextManager[Connection]: ...

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]: ...

    async def checkpoint(self) -> bool: ...

    async def close(self) -> None: ...


# --- what both databases' statements share: reading rows, and dates as text ------------------


async def fetch_all(conn: Connection, sql: Statement, params: Params = ()) -> list[Row]:
    """Run a query and read all its rows in one step of the connection's thread.

    Never a cursor opened with `async with conn.execute` and read later: on the shared reader,
    a statement left open across an await holds its read snapshot, and every other coroutine's
    query on that connection then reads the database as it was before later commits
    (bench/load.py saw exchanges reflected twice that way).
    """
    return list(await conn.execute_fetchall(sql, params))


async def fetch_pages(conn: Connection, sql: Statement, params: Params, size: int) -> AsyncGenerator[list[Row], None]:
    """A query's rows, `size` at a time, from one statement (one sort, one pass, however many
    rows). Only on a connection of `Database.reading()`: the statement stays open between pages,
    which on the shared reader would hold every other coroutine's reads in its snapshot (see
    `fetch_all`). Read it inside `contextlib.aclosing`, so that its cursor closes before the
    connection does whatever stops the reading."""
    cursor = await conn.execute(sql, params)
    try:
        while True:
            page = list(await cursor.fetchmany(size))
            if page:
                yield page
            if len(page) < size:
                return
    finally:
        await cursor.close()


async def fetch_one(conn: Connection, sql: Statement, params: Params = ()) -> Row | None:
    """The first row of a query that returns at most one, read like fetch_all."""
    rows = await fetch_all(conn, sql, params)
    return rows[0] if rows else None


async def inserted_id(conn: Connection, sql: Statement, params: Params = ()) -> int | None:
    """The id an `INSERT … RETURNING id` gave its row; None when it inserted none."""
    row = await fetch_one(conn, sql, params)
    return int(row["id"]) if row is not None else None


@overload
def to_db(dt: datetime) -> str: ...


@overload
def to_db(dt: None) -> None: ...


@overload
def to_db(dt: datetime | None) -> str | None: ...


def to_db(dt: datetime | None) -> str | None:
    """Datetimes are stored as UTC ISO-8601 text of one fixed shape, so text order is time order.

    The year is always four digits (``strftime("%Y")`` writes year 999 as "999", which
    ``fromisoformat`` cannot read back). A date with no UTC instant in the years 1 to 9999
    ("0001-01-01T00:00+05:00") raises ValueError: the edges refuse such dates before they get
    here."""
    if dt is None:
        return None
    return as_utc(dt).isoformat(timespec="microseconds")


# What an unreadable stored date reads as: a creation date sorts oldest, an expiry has passed.
UNREADABLE_DATE = datetime(1970, 1, 1, tzinfo=UTC)
# Rows written before dates were padded hold years of 1 to 3 digits ("999-12-31T…").
_SHORT_YEAR = re.compile(r"(\d{1,3})(-\d{2}-\d{2}T.*)", re.DOTALL)
# One bad row must not lock a user out of their data: it is read, logged once and counted.
unreadable_dates = Outage(log)


@overload
def from_db(value: str) -> datetime: ...


@overload
def from_db(value: None) -> None: ...


@overload
def from_db(value: str | None) -> datetime | None: ...


def from_db(value: str | None) -> datetime | None:
    """The stored date, in UTC (None for none). Never raises: a value that is not a date is logged (once per
    quiet period), counted in ``unreadable_dates`` and read as ``UNREADABLE_DATE``."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            # Only then the old short years: every row written since parses at once.
            short = _SHORT_YEAR.fullmatch(value)
            dt = None
            if short:
                with contextlib.suppress(ValueError):
                    dt = datetime.fromisoformat(f"{int(short.group(1)):04d}{short.group(2)}")
        if dt is not None:
            with contextlib.suppress(OverflowError):
                return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC)
    unreadable_dates.failed(
        "a date stored in the database cannot be read (%.40r): read as %s; later ones are counted",
        value,
        UNREADABLE_DATE.date().isoformat(),
    )
    return UNREADABLE_DATE
