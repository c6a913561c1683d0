"""What the stores use of a database and of its connections: one typed interface that both
the SQLite database (bot.clients.db, aiosqlite) and the PostgreSQL one (bot.clients.postgres,
asyncpg) satisfy.

The stores and the engine are annotated with these protocols, never with a driver's class, so
the type checker refuses a store that calls a method only one driver has (aiosqlite's
`executescript`, asyncpg's `fetchval`): such a call would work on one store and fail on the
other at run time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bot.clients.outage import Outage

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

    async def close(self) -> None: ...


class Connection(Protocol):
    """A connection as the stores use it: inside `Database.write()`, or the shared reader."""

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

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]: ...

    async def checkpoint(self) -> bool: ...

    async def close(self) -> None: ...

