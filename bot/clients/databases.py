"""The one way to open Écho's database, whichever store a setting names, start-up errors
included: a `postgresql://` URL opens PostgreSQL, anything else is the SQLite file's path.

A database that cannot be opened for a reason of the operator's (a read-only folder, a wrong
password, no server there) raises StartupError with what to change; a bug still raises as it is.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from bot.clients.db import SQLiteDatabase, storage_failure
from bot.clients.storage import Database
from bot.errors import StartupError

if TYPE_CHECKING:
    from bot.clients.postgres import PostgresDatabase


def is_postgres_url(target: str | Path) -> bool:
    return str(target).startswith(("postgresql://", "postgres://"))


async def open_database(target: str | Path) -> Database:
    """The database `target` names, migrated to the current schema."""
    if is_postgres_url(target):
        return await open_postgres(str(target))
    return await open_sqlite(Path(target))


async def open_sqlite(path: Path) -> SQLiteDatabase:
    try:
        return await SQLiteDatabase.open(path)
    except (OSError, sqlite3.Error) as exc:
        raise StartupError(_unopenable(path, exc)) from exc


async def open_postgres(url: str) -> PostgresDatabase:
    # Imported here so that a deployment on SQLite never loads asyncpg.
    from bot.clients.postgres import PostgresDatabase, describe, open_failure

    try:
        return await PostgresDatabase.open(url)
    except Exception as exc:
        why = open_failure(exc)
        if why is None:
            raise
        raise StartupError(
            f"Cannot open the PostgreSQL database {describe(url)} ({why}). Check DATABASE_URL: the "
            "server must be running and reachable, the database must exist (createdb echo) and the "
            "user must be allowed to create tables in it."
        ) from exc


def _unopenable(path: Path, exc: BaseException) -> str:
    failure = storage_failure(path, exc)
    existing = _nearest_existing(path)
    if existing is not None and os.statvfs(existing).f_flag & os.ST_RDONLY:
        why = "it is on a read-only file system (a volume mounted read-only?)"
    elif existing is not None and not os.access(existing, os.W_OK):
        why = f"this user (uid {os.getuid()}) may not write to {existing}"
    elif failure is not None:
        why = f"{failure.reason}: {exc}"
    else:
        why = str(exc)
    return (
        f"Cannot open the database {path} ({why}). Check that the folder exists or can be "
        "created and that this user may write there (in Docker, a bind mount must belong to uid "
        "1000: chown 1000:1000 <folder>), or set DATABASE_PATH."
    )


def _nearest_existing(path: Path) -> Path | None:
    """The file, or the nearest folder above it that exists."""
    return next((p for p in (path, *path.parents) if p.exists()), None)
