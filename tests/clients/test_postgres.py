"""The PostgreSQL store's own layer: migrations kept in step with SQLite's, the translation of
statements, start-up errors and failures of the server, on a real throwaway cluster."""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg
import pytest

from bot.clients.databases import open_postgres
from bot.clients.db import MIGRATIONS_DIR, POSTGRES_MIGRATIONS_DIR, SQLiteDatabase, list_migrations
from bot.clients.postgres import PostgresDatabase, translate
from bot.config import load_settings
from bot.errors import ConfigError, MigrationError, StartupError, StorageError
from bot.memory.model import NewMemory
from bot.memory.stores.memory_store import MemoryStore


def test_both_migration_folders_carry_the_same_numbers() -> None:
    sqlite = [(n, p.name) for n, p in list_migrations(MIGRATIONS_DIR)]
    postgres = [(n, p.name) for n, p in list_migrations(POSTGRES_MIGRATIONS_DIR)]
    assert [n for n, _ in postgres] == [n for n, _ in sqlite]
    assert [name for _, name in postgres] == [name for _, name in sqlite]


async def _sqlite_columns(tmp_path) -> dict[str, set[str]]:
    db = await SQLiteDatabase.open(tmp_path / "schema.sqlite3")
    await db.close()
    with sqlite3.connect(tmp_path / "schema.sqlite3") as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE '%fts5%'")
            if not r[0].startswith(("sqlite_", "memories_fts"))
        ]
        return {t: {r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (t,))} for t in tables}


async def test_the_postgresql_schema_has_every_table_and_column_of_the_sqlite_one(tmp_path, postgres_cluster) -> None:
    expected = await _sqlite_columns(tmp_path)
    conn = await asyncpg.connect(await postgres_cluster.reset_database())
    try:
        rows = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    found: dict[str, set[str]] = {}
    for table, column in rows:
        found.setdefault(table, set()).add(column)
    # The version table replaces PRAGMA user_version; `search` replaces the FTS5 table.
    assert found.pop("schema_version") == {"version"}
    assert found.pop("memories") == expected.pop("memories") | {"search"}
    assert found == expected


async def test_migrations_apply_once_on_an_empty_database(postgres_cluster) -> None:
    url = await postgres_cluster.empty_database()
    db = await PostgresDatabase.open(url)
    await db.close()
    again = await PostgresDatabase.open(url)  # a restart applies nothing and loses nothing
    try:
        row = await again.reader.execute_fetchall("SELECT version FROM schema_version")
        assert [r[0] for r in row] == [len(list_migrations(POSTGRES_MIGRATIONS_DIR))]
    finally:
        await again.close()


async def test_a_failing_migration_is_rolled_back_whole(postgres_cluster, tmp_path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_ok.sql").write_text("CREATE TABLE kept (x INTEGER);")
    (folder / "0002_bad.sql").write_text("CREATE TABLE half (x INTEGER); SELECT no_such_function();")
    url = await postgres_cluster.empty_database()
    with pytest.raises(MigrationError, match=r"0002_bad\.sql failed and was rolled back"):
        await PostgresDatabase.open(url, folder)
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT version FROM schema_version") == 1
        assert await conn.fetchval("SELECT to_regclass('half')") is None
        assert await conn.fetchval("SELECT to_regclass('kept')") == "kept"
    finally:
        await conn.close()


def test_statements_are_translated_in_one_place() -> None:
    t = translate("SELECT id FROM memories WHERE user_id = ? AND text != '?' AND id = ?")
    assert t.text == "SELECT id FROM memories WHERE user_id = $1 AND text != '?' AND id = $2"
    t = translate("UPDATE memories SET x = :a WHERE user_id = :user_id AND y = :a AND z = :b::jsonb")
    assert t.text == "UPDATE memories SET x = $1 WHERE user_id = $2 AND y = $1 AND z = $3::jsonb"
    assert t.names == ("a", "user_id", "b")
    t = translate("INSERT OR IGNORE INTO memory_sources (memory_id, exchange_id, user_id) VALUES (?, ?, ?)")
    assert t.text == (
        "INSERT INTO memory_sources (memory_id, exchange_id, user_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
    )
    # The statement says what it returns: nothing is added behind its back.
    assert translate("INSERT INTO turns (user_id) VALUES (?)").text == "INSERT INTO turns (user_id) VALUES ($1)"
    t = translate("INSERT OR IGNORE INTO turns (user_id) VALUES (?) RETURNING id")
    assert t.text == "INSERT INTO turns (user_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING id"
    assert t.returns_rows


def test_a_database_url_that_is_not_postgresql_is_refused_by_the_settings() -> None:
    with pytest.raises(ConfigError, match="must start with postgresql://"):
        load_settings(_env_file=None, database_url="mysql://localhost/echo")
    with pytest.raises(ConfigError, match="names no database"):
        load_settings(_env_file=None, database_url="postgresql://localhost")


async def test_a_missing_database_is_a_clear_start_up_error(postgres_cluster) -> None:
    with pytest.raises(StartupError, match=r"database does not exist.*Check DATABASE_URL"):
        await open_postgres(postgres_cluster.url("no_such_database"))
    with pytest.raises(StartupError, match="no server answers there"):
        await open_postgres("postgresql://echo@/echo?host=/nonexistent-socket-folder")


async def test_a_lost_connection_is_a_storage_error_and_the_next_write_works(postgres_cluster) -> None:
    db = await PostgresDatabase.open(await postgres_cluster.reset_database())
    store = MemoryStore(db)
    admin = await asyncpg.connect(postgres_cluster.url("postgres"))
    try:
        with pytest.raises(StorageError, match="connection to the server was lost"):
            async with db.write() as conn:
                await conn.execute(
                    "INSERT INTO memories (user_id, text, type, created_at, updated_at, content_hash) "
                    "VALUES (?, ?, 'fact', '2026', '2026', 'h')",
                    ("alice", "perdu"),
                )
                pid = await conn.raw.fetchval("SELECT pg_backend_pid()")
                await admin.execute("SELECT pg_terminate_backend($1)", pid)
                await asyncio.sleep(0.1)
                await conn.execute("SELECT 1")
        assert db.storage.down
        memory_id = await store.add("alice", NewMemory(text="L'utilisateur aime le thé."))
        assert [m.id for m in await store.list("alice")] == [memory_id]  # the lost insert is not there
        assert not db.storage.down
    finally:
        await admin.close()
        await db.close()
