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
from pathlib import Path
from typing import Any, Protocol

from bot.clients.outage import Outage

# `?` placeholders take a sequence, `:name` ones a mapping.
Params = Sequence[Any] | Mapping[str, Any]


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

    def execute(self, sql: str, parameters: Params = ..., /) -> Awaitable[Cursor]: ...

    async def execute_fetchall(self, sql: str, parameters: Params = ..., /) -> Iterable[Row]: ...


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

    def reading(self) -> AbstractAsyncContextManager[Connection]: ...

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]: ...

    async def checkpoint(self) -> bool: ...

    async def close(self) -> None: ...

